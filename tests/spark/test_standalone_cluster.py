"""The README's streaming pipeline on a real Spark standalone cluster.

A master and two workers (1 core each) run as separate processes; the counts
job (examples/clickstream_counts.py, as the README runs it) is submitted with
``spark-submit --master spark://…`` in client mode, so its tasks run in executor
JVMs on the workers, whose Python workers import tidelog from this interpreter
(``spark.pyspark.python``). The driver is SIGKILLed in the middle of a
micro-batch, clicks arrive while it is down, and the job is submitted again on
the same checkpoints: the page counts in the output topic and in Parquet are
exactly once (``check_page_counts``, the checker of the local-mode example test).
"""

import os
import time

import pytest

from .spark_processes import StandaloneCluster, java_missing
from .test_examples import START_MS, check_page_counts, load

pytestmark = pytest.mark.skipif(java_missing() is not None, reason=java_missing() or "")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
FIRST_CLICKS, LATER_CLICKS, SPACING_MS, PER_TRIGGER = 1200, 400, 400, 100
# The restarted job replays the killed micro-batch with the offsets its checkpoint logged,
# then goes on in bigger micro-batches: a few instead of a dozen (each one is Spark jobs
# on the executors), so the rest of the clicks take a fraction of the time.
RESTARTED_PER_TRIGGER = 1000


@pytest.fixture(scope="module")
def cluster():
    with StandaloneCluster(workers=2, worker_memory="1g") as running:
        yield running


def _batch_ids(directory: str) -> list[int]:
    if not os.path.isdir(directory):
        return []
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def in_flight(checkpoint: str) -> int | None:
    """The micro-batch whose offsets are in the checkpoint but whose commit is not, if any."""
    offsets, commits = _batch_ids(os.path.join(checkpoint, "offsets")), _batch_ids(os.path.join(checkpoint, "commits"))
    if offsets and (not commits or commits[-1] < offsets[-1]):
        return offsets[-1]
    return None


def overloaded(driver) -> bool:
    """Whether the driver died because a Python worker it started did not connect back
    within Spark's fixed 10 s: on a machine this overloaded the job is submitted again,
    on the same checkpoints (one more restart for the exactly-once check)."""
    return "Python worker failed to connect back" in driver.log(200_000)


def submit_counts_job(cluster, bootstrap, output, state, name, per_trigger=PER_TRIGGER):
    app = [os.path.join(ROOT, "examples", "clickstream_counts.py"), "--bootstrap", bootstrap, "--output", output,
           "--state", state, "--max-offsets-per-trigger", str(per_trigger)]
    return cluster.submit(app, name, conf={"spark.sql.shuffle.partitions": "2"}, cwd=ROOT)


def test_the_readme_pipeline_on_a_standalone_cluster_is_exactly_once_across_a_driver_kill(
        cluster, broker, admin, tmp_path, request):
    generator = load("clickstream_generator")
    # The clicks are from 2023 (fixed event times): keep them past the 7-day default retention.
    admin.create("clicks", partitions=3, retention_ms="-1")
    events = generator.generate(broker.bootstrap, "clicks", count=FIRST_CLICKS, rate=0, seed=11, start_ms=START_MS,
                                spacing_ms=SPACING_MS)
    output, state = str(tmp_path / "page-counts"), str(tmp_path / "state")
    to_topic = os.path.join(state, "to-topic")

    # Kill the driver while a micro-batch of the topic query runs (offsets written,
    # commit not). Should the commit land between looking and killing, submit again.
    killed_in, submissions = None, 0
    while killed_in is None:
        assert submissions < 4, "the driver was never killed inside a micro-batch"
        driver = submit_counts_job(cluster, broker.bootstrap, output, state, f"driver-{submissions}")
        submissions += 1
        deadline = time.monotonic() + 600
        while driver.running and time.monotonic() < deadline:
            batch = in_flight(to_topic)
            if batch is not None and batch >= 2 + submissions:
                break
            time.sleep(0.05)
        if not driver.running and overloaded(driver):
            continue
        assert driver.running, \
            f"the job ended before it could be killed:\n{driver.failure()}\nexecutors:\n{cluster.executor_errors()}"
        driver.kill()
        killed_in = in_flight(to_topic)

    more = generator.generate(broker.bootstrap, "clicks", count=LATER_CLICKS, rate=0, seed=12,
                              start_ms=START_MS + FIRST_CLICKS * SPACING_MS, spacing_ms=SPACING_MS)
    for attempt in range(3):
        again = submit_counts_job(cluster, broker.bootstrap, output, state, f"driver-restarted-{attempt}",
                                  per_trigger=RESTARTED_PER_TRIGGER)
        code = again.wait(900)
        if code == 0 or not overloaded(again):
            break
    assert code == 0, f"the restarted job failed:\n{again.failure()}\nexecutors:\n{cluster.executor_errors()}"
    assert in_flight(to_topic) is None and _batch_ids(os.path.join(to_topic, "commits"))[-1] > killed_in

    # The shared session only now: its JVM would compete with the cluster's for the CPU.
    counts = check_page_counts(request.getfixturevalue("spark"), broker.bootstrap, events + more, output)
    minutes = sorted({minute for minute, _ in counts})
    assert minutes[0] == START_MS - 60_000
    assert minutes[-1] >= START_MS + (FIRST_CLICKS + LATER_CLICKS - 1) * SPACING_MS - 4 * 60_000, \
        "the clicks that arrived while the driver was down are counted"

    # It ran on the cluster: both workers ran executors of the killed and of the restarted application.
    apps = cluster.status().get("completedapps", [])
    assert len(apps) >= 2, apps
    for worker in range(2):
        work_dir = os.path.join(cluster.directory, f"worker-{worker}")
        assert len(os.listdir(work_dir)) >= 2, f"worker {worker} ran executors of {os.listdir(work_dir)}"
