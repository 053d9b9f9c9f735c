"""The text ``/metrics`` answers with, written without prometheus_client's per-sample work.

prometheus_client's encoders validate and escape every metric and label name of
every sample and build a ``Sample`` and a labels dictionary per value: about 11 µs
a line, so a broker hosting 5,000 partitions (30,000 lines, six per partition)
held its event loop about 340 ms per scrape. tidelog's names are fixed and valid
(``metrics.METRICS``), so only label *values* need escaping, and the families a
broker fills per partition are gauge and counter rows: ``Family`` keeps each as a
tuple of label values and a value, and ``render_metrics`` writes the lines from a
per-family template.

What is written is byte for byte what prometheus_client writes for the same
families, in both formats ``choose_encoder`` negotiates — the classic text format
0.0.4 and OpenMetrics 1.0 (Prometheus's default) — which tests/server checks on a
broker with escaped label values, values past a million and every family type.
The ``# HELP``/``# TYPE`` lines come from prometheus_client itself (once per family
and format, cached). A family with anything this module does not write (a
timestamp, an exemplar, a native histogram, an OpenMetrics-only ``_created``
sample) raises ``NotRendered`` and the scrape falls back to prometheus_client.

    collectors ─▶ Family rows ─┐                    (per partition: 6 rows)
                 Metric samples ┴─▶ render_metrics ─▶ header (cached) + lines ─▶ bytes
"""

from __future__ import annotations

from functools import lru_cache
from itertools import chain
from typing import Iterable

from prometheus_client import exposition
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics_exposition
from prometheus_client.utils import floatToGoString


class NotRendered(Exception):
    """A family this module does not write: the caller uses prometheus_client's encoder."""


class Family:
    """A gauge or counter family as a collector fills it: rows of (label values in
    ``label_names`` order, value). ``samples`` builds prometheus_client's samples on
    demand, so ``registry.collect()`` and its encoders still read it as a ``Metric``."""

    __slots__ = ("name", "type", "documentation", "unit", "label_names", "rows")

    def __init__(self, name: str, kind: str, documentation: str, label_names: tuple[str, ...]):
        if kind not in ("gauge", "counter"):
            raise ValueError(f"Family holds gauges and counters, not {kind}")
        self.name, self.type, self.documentation, self.unit = name, kind, documentation, ""
        self.label_names, self.rows = label_names, []

    def add_metric(self, labels, value) -> None:
        """As prometheus_client's ``add_metric``: the label values in ``label_names`` order."""
        self.rows.append((tuple(labels), value))

    @property
    def samples(self) -> list:
        metric = Metric(self.name, self.documentation, self.type)
        suffix = "_total" if self.type == "counter" else ""
        for labels, value in self.rows:
            metric.add_sample(self.name + suffix, dict(zip(self.label_names, labels)), value)
        return metric.samples


def go_float(value) -> str:
    """``floatToGoString``, without its float conversion for a small int (most values)."""
    if type(value) is int and -10 ** 15 < value < 1_000_000:
        return f"{value}.0"
    return floatToGoString(value)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _needs_escape(rows: list) -> bool:
    """Whether any label value of ``rows`` holds a backslash, a newline or a quote (one
    pass in C over them all: topic names, most of the values, never do)."""
    joined = "".join(chain.from_iterable(labels for labels, _ in rows))
    return "\\" in joined or "\n" in joined or '"' in joined


class _One:
    def __init__(self, metric: Metric):
        self.metric = metric

    def collect(self):
        return [self.metric]


@lru_cache(maxsize=1024)
def _header(name: str, kind: str, documentation: str, unit: str, om: bool) -> str:
    """The ``# HELP``/``# TYPE`` (``# UNIT``) lines prometheus_client writes for a family."""
    metric = Metric(name, documentation, kind, unit)
    if om:
        text = openmetrics_exposition.generate_latest(_One(metric)).decode()
        return text[:-len("# EOF\n")]
    return exposition.generate_latest(_One(metric)).decode()


@lru_cache(maxsize=1024)
def _template(name: str, label_names: tuple[str, ...]) -> str:
    """``name{a="{0}",b="{1}"} {2}\\n`` with the labels sorted by name, as both encoders."""
    if not label_names:
        return name + " {0}\n"
    order = sorted(range(len(label_names)), key=label_names.__getitem__)
    labels = ",".join(f'{label_names[i]}="{{{i}}}"' for i in order)
    return f"{name}{{{{{labels}}}}} {{{len(label_names)}}}\n"


def _family_lines(family: Family, out: list[str]) -> None:
    fill = _template(family.name + ("_total" if family.type == "counter" else ""), family.label_names).format
    rows = family.rows
    if family.label_names and _needs_escape(rows):
        rows = [(tuple(map(_escape, labels)), value) for labels, value in rows]
    out.extend([fill(*labels, go_float(value)) for labels, value in rows])


def _sample_lines(metric: Metric, out: list[str]) -> None:
    for s in metric.samples:
        if (s.timestamp is not None or s.exemplar is not None or getattr(s, "native_histogram", None)
                or s.name.endswith(("_created", "_gsum", "_gcount"))):
            raise NotRendered(metric.name)
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
        out.append(f"{s.name}{{{labels}}} {go_float(s.value)}\n" if labels else f"{s.name} {go_float(s.value)}\n")


def render_metrics(metrics: Iterable, om: bool) -> bytes:
    """The exposition of ``metrics``: OpenMetrics 1.0 if ``om``, else the text format 0.0.4.
    Raises ``NotRendered`` for a family it does not write."""
    out: list[str] = []
    for metric in metrics:
        if metric.type not in ("gauge", "counter", "histogram"):
            raise NotRendered(metric.name)
        out.append(_header(metric.name, metric.type, metric.documentation, metric.unit, om))
        if type(metric) is Family:
            _family_lines(metric, out)
        else:
            _sample_lines(metric, out)
    if om:
        out.append("# EOF\n")
    return "".join(out).encode()
