"""The state diff (metadata image → state-change events) and the bounded
state-change.log, without processes."""

import json
import uuid

from tidelog.metadata.image import MetadataImage, TopicImage
from tidelog.metadata.registrations import BrokerRegistration, PartitionRegistration
from tidelog.server.state import EVENT_FIELDS, STATE_CHANGE_LOG, StateChangeLog, diff_images

TOPIC_ID = uuid.UUID(int=7)


def broker(broker_id, epoch, fenced=False, shutting_down=False):
    return BrokerRegistration(broker_id, uuid.UUID(int=broker_id), epoch, (), (), None, fenced, shutting_down)


def image(brokers, partitions, offset=10):
    """``partitions``: {index: (replicas, isr, leader, leader_epoch, partition_epoch)} of topic "t"."""
    topics = {}
    if partitions is not None:
        topic = TopicImage("t", TOPIC_ID, {i: PartitionRegistration(*p) for i, p in partitions.items()})
        topics = {"t": topic}
    return MetadataImage(offset=offset, brokers={b.broker_id: b for b in brokers},
                         topics_by_name=topics, topics_by_id={t.topic_id: t for t in topics.values()})


BROKERS = [broker(1, 5), broker(2, 6), broker(3, 7)]


def kinds(events):
    return [e["kind"] for e in events]


def test_nothing_changed_is_no_event():
    same = image(BROKERS, {0: ((1, 2, 3), (1, 2, 3), 1, 0, 0)})
    assert diff_images(same, same) == []


def test_a_killed_leader_fenced_gives_fencing_election_and_isr_shrinks():
    before = image(BROKERS, {0: ((1, 2, 3), (1, 2, 3), 1, 0, 0), 1: ((2, 3, 1), (2, 3, 1), 2, 0, 0)})
    after = image([broker(1, 5, fenced=True), *BROKERS[1:]],
                  {0: ((1, 2, 3), (2, 3), 2, 1, 1), 1: ((2, 3, 1), (2, 3), 2, 0, 1)}, offset=12)
    events = diff_images(before, after)
    assert kinds(events) == ["broker_fenced", "leader_election", "isr_shrink", "isr_shrink"]
    fenced, election, shrink0, shrink1 = events
    assert fenced == {"kind": "broker_fenced", "broker_id": 1, "broker_epoch": 5}
    assert election == {"kind": "leader_election", "topic": "t", "partition": 0, "old_leader": 1, "new_leader": 2,
                        "leader_epoch": 1, "partition_epoch": 1, "isr": [2, 3]}
    assert shrink0["old_isr"] == [1, 2, 3] and shrink0["new_isr"] == [2, 3] and shrink0["removed"] == [1]
    assert (shrink1["partition"], shrink1["leader"], shrink1["leader_epoch"], shrink1["partition_epoch"]) == (1, 2, 0, 1)
    for event in events:    # every event has exactly the fields the docs' table lists
        assert set(event) - {"kind"} == set(EVENT_FIELDS[event["kind"]]), event


def test_a_restarted_broker_registers_unfences_and_rejoins_the_isr():
    before = image([broker(1, 5, fenced=True), *BROKERS[1:]], {0: ((1, 2, 3), (2, 3), 2, 1, 1)})
    registered = image([broker(1, 9, fenced=True), *BROKERS[1:]], {0: ((1, 2, 3), (2, 3), 2, 1, 1)})
    unfenced = image([broker(1, 9), *BROKERS[1:]], {0: ((1, 2, 3), (2, 3, 1), 2, 1, 2)})
    assert diff_images(before, registered) == [
        {"kind": "broker_registered", "broker_id": 1, "broker_epoch": 9, "fenced": True}]
    events = diff_images(registered, unfenced)
    assert kinds(events) == ["broker_unfenced", "isr_expand"]
    assert events[1]["added"] == [1] and events[1]["new_isr"] == [2, 3, 1]


def test_controlled_shutdown_creation_deletion_and_reassignment():
    base = image(BROKERS, None)
    created = image([broker(1, 5, shutting_down=True), *BROKERS[1:]], {0: ((1, 2), (1, 2), 1, 0, 0)})
    assert kinds(diff_images(base, created)) == ["broker_controlled_shutdown", "partition_created"]
    moved = image(BROKERS, {0: ((1, 2, 3), (1, 2), 1, 0, 1)})
    assert kinds(diff_images(created, moved)) == ["replicas_changed"]
    assert kinds(diff_images(moved, base)) == ["partition_deleted"]
    gone = image(BROKERS[:2], None)
    assert diff_images(base, gone) == [{"kind": "broker_unregistered", "broker_id": 3, "broker_epoch": 7}]


def test_a_broker_logs_partition_events_only_for_its_own_replicas():
    before = image(BROKERS, {0: ((1, 2), (1, 2), 1, 0, 0), 1: ((2, 3), (2, 3), 2, 0, 0)})
    after = image([broker(2, 6, fenced=True), broker(1, 5), broker(3, 7)],
                  {0: ((1, 2), (1,), 1, 0, 1), 1: ((2, 3), (3,), 3, 1, 1)})
    on_broker_1 = diff_images(before, after, local_broker_id=1)
    assert [(e["kind"], e.get("partition")) for e in on_broker_1] == [("broker_fenced", None), ("isr_shrink", 0)]


def test_the_log_appends_json_lines_continues_its_seq_and_stays_bounded(tmp_path):
    changes = StateChangeLog(str(tmp_path), broker_id=1, max_bytes=2000)
    first = image(BROKERS, {0: ((1, 2, 3), (1, 2, 3), 1, 0, 0)})
    assert kinds(changes.on_metadata_published(first)) == ["metadata_loaded"]
    shrunk = image(BROKERS, {0: ((1, 2, 3), (1, 2), 1, 0, 1)})
    [event] = changes.on_metadata_published(shrunk)
    assert event["kind"] == "isr_shrink" and event["seq"] == 2 and event["broker"] == 1
    lines = (tmp_path / STATE_CHANGE_LOG).read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2]
    assert changes.since(1)["events"] == [event]
    assert changes.since(2) == {"broker": 1, "first_seq": 1, "last_seq": 2, "events": []}

    for i in range(100):     # flapping: far past max_bytes
        changes.on_metadata_published(image(BROKERS, {0: ((1, 2, 3), (1, 2, 3) if i % 2 else (1, 2), 1, 0, 2 + i)}))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [STATE_CHANGE_LOG, STATE_CHANGE_LOG + ".1"]
    assert all(p.stat().st_size <= 2000 for p in tmp_path.iterdir())
    last = changes.seq
    assert last == 101      # the first round changes nothing but the partition epoch

    again = StateChangeLog(str(tmp_path), broker_id=1, max_bytes=2000)   # a restart
    assert again.seq == last and again.since(last - 1)["events"][0]["seq"] == last
    assert again.on_broker_state(type("S", (), {"name": "A"}), type("S", (), {"name": "B"}), "why")[0]["seq"] == last + 1


class FakeLog:
    def __init__(self, name):
        from tidelog.core.ids import TopicPartition
        self.topic_partition = TopicPartition(name, 0)
        self.truncations, self.log_end_offset, self.high_watermark = 0, 10, 8


def test_a_truncation_is_logged_when_the_count_rises(tmp_path):
    changes = StateChangeLog(str(tmp_path), broker_id=2)
    logs = [FakeLog("a"), FakeLog("b")]
    assert changes.maybe_scan_truncations(logs, force=True) == []   # the baseline
    logs[1].truncations, logs[1].log_end_offset = 1, 8
    assert changes.maybe_scan_truncations(logs) == []                # within the second: not looked at
    [event] = changes.maybe_scan_truncations(logs, force=True)
    assert {k: event[k] for k in ("kind", "topic", "partition", "log_end_offset", "truncations")} == {
        "kind": "truncation", "topic": "b", "partition": 0, "log_end_offset": 8, "truncations": 1}
    assert changes.maybe_scan_truncations(logs, force=True) == []
