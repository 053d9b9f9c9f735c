"""server/exposition.py writes what prometheus_client's encoders write, byte for byte."""

import pytest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from tidelog.server.exposition import Family, NotRendered, render_metrics


class _Registry:
    def __init__(self, metrics):
        self.metrics = metrics

    def collect(self):
        return list(self.metrics)


def _families():
    plain = Family("tidelog_test_plain", "gauge", "A gauge \\ with a backslash\nand a newline", ())
    plain.add_metric((), 7)
    values = Family("tidelog_test_values", "gauge", "Values", ("n",))
    for i, v in enumerate((0, -3, 999_999, 1_000_000, 123_456_789, 10 ** 17, -10 ** 17, 1.5, -2.25, 1e-9,
                           float("inf"), float("-inf"), float("nan"), True)):
        values.add_metric((str(i),), v)
    families = [plain, values]
    for i, text in enumerate(('a "quote"', "a \\ backslash", "a\nnewline", "plain", "", "ünïcode")):
        one = Family(f"tidelog_test_escape_{i}", "counter", "Counter", ("zeta", "alpha"))
        one.add_metric((text, "x"), 1)
        one.add_metric(("y", text), 2)
        families.append(one)
    histogram = HistogramMetricFamily("tidelog_test_ms", "A histogram", labels=("request",))
    histogram.add_metric(["Produce"], [("1", 3), ("5", 4), ("+Inf", 6)], 12.5)
    gauge = GaugeMetricFamily("tidelog_test_theirs", "prometheus_client's own family", labels=("b", "a"))
    gauge.add_metric(["2", 'x"y'], 2_000_000)
    return families + [histogram, gauge]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_render_is_prometheus_clients_output(openmetrics):
    registry = _Registry(_families())
    expected = (generate_openmetrics if openmetrics else generate_latest)(registry)
    assert render_metrics(registry.collect(), om=openmetrics) == expected


def test_what_it_does_not_write_is_left_to_prometheus_client():
    stamped = GaugeMetricFamily("tidelog_test_stamped", "A timestamped gauge")
    stamped.add_metric([], 1, timestamp=12.0)
    with pytest.raises(NotRendered):
        render_metrics([stamped], om=False)
    with pytest.raises(ValueError):
        Family("tidelog_test_summary", "summary", "No", ())
