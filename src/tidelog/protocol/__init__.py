"""The Kafka wire protocol: a thin, version-agnostic wrapper over ``kio``.

kio is imported only through this package (``codec``, ``extensions``), so this is
the one place that decides how it is imported: kio registers strategies for its
types with Hypothesis whenever Hypothesis can be imported, as it can wherever the
test extras are installed, and importing Hypothesis (with pytest, trio and attrs)
costs about 0.15 s of CPU in every process that speaks the protocol — each broker,
each command, each Spark Python worker — for strategies nothing here uses. kio is
imported while ``hypothesis`` reads as absent, then that is forgotten, so a later
``import hypothesis`` works as usual (a process that already has Hypothesis, such
as a test run, keeps kio's hooks)."""

import sys


def _import_kio_without_hypothesis() -> None:
    if "hypothesis" in sys.modules or "kio.static._phantom" in sys.modules:
        return
    sys.modules["hypothesis"] = None   # type: ignore[assignment]
    try:
        import kio.static._phantom  # noqa: F401  (the one kio module that looks for hypothesis)
    except ImportError:
        pass
    finally:
        if sys.modules.get("hypothesis", 0) is None:
            del sys.modules["hypothesis"]


_import_kio_without_hypothesis()
