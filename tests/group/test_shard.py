"""The classic group protocol of one coordinator shard, driven with a manual clock.

The writer stands in for the replica manager: ``commit()`` replays the pending
records into the shard (as the coordinator does once the high watermark passes
them) and then answers the write, so the tests see exactly what a client would.
"""

import pytest

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.classic import GroupState
from tidelog.group.shard import GroupConfig, GroupShard, JoinRequest, OffsetToCommit

E = ErrorCode
TP0 = TopicPartition("t", 0)
CONFIG = GroupConfig(initial_rebalance_delay_ms=100, offsets_retention_ms=60_000,
                     offsets_retention_check_interval_ms=1_000)


class Harness:
    def __init__(self, config: GroupConfig = CONFIG):
        self.now = 1_000_000                               # the coordinator's timer (monotonic) clock
        self.wall_step_ms = 0                              # how far the wall clock stepped from it
        self.pending = []
        self.log = []                                      # every committed record, in order
        self.ids = 0
        self.shard = GroupShard(0, config, self._write, self._new_id, lambda: self.now + self.wall_step_ms)
        self.shard.loaded(self.now)
        self.answers = {}

    def _new_id(self, prefix):
        self.ids += 1
        return f"{prefix}-{self.ids}"

    def _write(self, records, on_done):
        self.pending.append((records, on_done))

    def commit(self, error=E.NONE):
        pending, self.pending = self.pending, []
        for records, on_done in pending:
            if error == E.NONE:
                for key, value in records:
                    self.log.append((key, value))
                    self.shard.replay(key, value, self.now)
            on_done(error)

    def tick(self, ms):
        self.now += ms
        self.shard.on_tick(self.now)

    def join(self, name, member_id="", instance=None, protocols=(("range", b"sub"),), version=9,
             session_ms=10_000, rebalance_ms=30_000, group="g"):
        request = JoinRequest(group, member_id, instance, session_ms, rebalance_ms, "consumer",
                              list(protocols), name, "/127.0.0.1", version)
        self.shard.join_group(request, self.now, lambda r: self.answers.__setitem__(("join", name), r))
        return self.answers.pop(("join", name), None)

    def sync(self, name, member_id, generation, assignments=None, instance=None, group="g"):
        self.shard.sync_group(group, generation, member_id, instance, "consumer", None,
                              assignments or {}, self.now,
                              lambda r: self.answers.__setitem__(("sync", name), r))
        return self.answers.pop(("sync", name), None)

    def commit_offsets(self, member_id, generation, offset, instance=None, group="g"):
        out = {}
        self.shard.commit_offsets(group, member_id, instance, generation,
                                  [OffsetToCommit(TP0, offset, 3, "meta")], self.now, out.update)
        return out

    def group(self, group_id="g"):
        return self.shard.groups[group_id]


def join_three(h):
    """Three members through MEMBER_ID_REQUIRED and the initial delay: generation 1."""
    ids = {}
    for name in ("a", "b", "c"):
        answer = h.join(name)
        assert answer["error_code"] == E.MEMBER_ID_REQUIRED
        ids[name] = answer["member_id"]
        assert h.join(name, ids[name]) is None            # waits for the rebalance
    assert h.group().state == GroupState.PREPARING_REBALANCE
    h.tick(100)                                            # group.initial.rebalance.delay.ms
    answers = {name: h.answers.pop(("join", name)) for name in ids}
    assert {a["generation_id"] for a in answers.values()} == {1}
    return ids, answers


def test_members_join_sync_and_the_leader_assigns():
    h = Harness()
    ids, answers = join_three(h)
    leader = answers["a"]["leader"]
    assert leader == ids["a"]
    assert [m["member_id"] for m in answers["a"]["members"]] == [ids["a"], ids["b"], ids["c"]]
    assert answers["b"]["members"] == [] and answers["b"]["protocol_name"] == "range"
    assert h.group().state == GroupState.COMPLETING_REBALANCE
    assert h.sync("b", ids["b"], 1) is None                 # waits for the leader
    assert h.sync("a", ids["a"], 1, {ids["a"]: b"A", ids["b"]: b"B", ids["c"]: b"C"}) is None
    assert h.group().state == GroupState.COMPLETING_REBALANCE   # until the record commits
    h.commit()
    assert h.group().state == GroupState.STABLE
    assert h.answers.pop(("sync", "a"))["assignment"] == b"A"
    assert h.answers.pop(("sync", "b"))["assignment"] == b"B"
    assert h.sync("c", ids["c"], 1)["assignment"] == b"C"   # Stable: answered at once
    assert h.sync("c", ids["c"], 0)["error_code"] == E.ILLEGAL_GENERATION


def test_a_leaving_member_rebalances_the_others_into_a_new_generation():
    h = Harness()
    ids, _ = join_three(h)
    h.sync("a", ids["a"], 1, {})
    h.commit()
    error, results = h.shard.leave_group("g", [(ids["c"], None)], h.now)
    assert error == E.NONE and results == [(ids["c"], None, E.NONE)]
    assert h.shard.heartbeat("g", 1, ids["a"], None, h.now) == E.REBALANCE_IN_PROGRESS
    h.join("a", ids["a"])
    assert h.join("b", ids["b"])["generation_id"] == 2    # the last one completes the join
    assert h.answers.pop(("join", "a"))["generation_id"] == 2
    assert set(h.group().members) == {ids["a"], ids["b"]}
    assert h.shard.heartbeat("g", 2, ids["c"], None, h.now) == E.UNKNOWN_MEMBER_ID


def test_an_expired_session_removes_the_member_and_members_not_rejoining_are_dropped():
    h = Harness()
    ids, _ = join_three(h)
    h.sync("a", ids["a"], 1, {})
    h.commit()
    for _ in range(4):
        h.tick(2_000)
        for name in ("a", "b"):
            assert h.shard.heartbeat("g", 1, ids[name], None, h.now) == E.NONE
    h.tick(2_000)                                         # c was silent for its 10 s session
    assert ids["c"] not in h.group().members
    assert h.group().state == GroupState.PREPARING_REBALANCE
    h.join("a", ids["a"])                                 # b never rejoins
    h.tick(30_000)                                        # the rebalance timeout
    assert h.answers.pop(("join", "a"))["generation_id"] == 2
    assert list(h.group().members) == [ids["a"]]


def test_a_wall_clock_step_neither_holds_a_rebalance_nor_expires_sessions():
    """Deadlines run on the timer clock (``now_ms``, monotonic), as Kafka's DelayedJoin and
    heartbeat timers; only the timestamps written to records are wall time. Simulator seed
    1023: the wall clock stepped back an hour while the group was PreparingRebalance, and
    the group stayed there, its members' JoinGroups resent and timing out, until the end."""
    h = Harness()
    ids, _ = join_three(h)
    h.sync("a", ids["a"], 1, {})
    h.commit()
    h.wall_step_ms = 3_600_000                            # an hour forward: no session expires early
    h.tick(1)
    assert set(h.group().members) == set(ids.values()) and h.group().state == GroupState.STABLE
    assert h.join("a", ids["a"]) is None                  # the leader rejoins: a rebalance
    assert h.group().state == GroupState.PREPARING_REBALANCE
    h.wall_step_ms = 0                                    # ... and back an hour: the rebalance still ends on time
    for step in range(14):                                # c stays alive but never rejoins
        h.tick(2_000)
        assert h.shard.heartbeat("g", 1, ids["c"], None, h.now) == E.REBALANCE_IN_PROGRESS
        answer = h.join("b", ids["b"])                    # b's client timed out and sends JoinGroup again:
        assert answer is None if step == 0 else answer["error_code"] == E.REBALANCE_IN_PROGRESS   # (the old one's)
    assert h.group().state == GroupState.PREPARING_REBALANCE
    h.tick(2_000)                                         # 30 s, the rebalance timeout, since it began
    assert h.answers.pop(("join", "a"))["generation_id"] == 2
    assert h.answers.pop(("join", "b"))["generation_id"] == 2
    assert set(h.group().members) == {ids["a"], ids["b"]}
    assert h.shard.heartbeat("g", 2, ids["c"], None, h.now) == E.UNKNOWN_MEMBER_ID
    h.wall_step_ms = -5_000
    h.sync("a", ids["a"], 2, {})
    h.commit()
    out = {}
    h.shard.commit_offsets("g", ids["a"], None, 2, [OffsetToCommit(TP0, 5, 3, None)], h.now, out.update)
    h.commit()
    assert out == {TP0: E.NONE}
    assert h.shard.fetch_offsets("g", [TP0])[TP0].commit_timestamp_ms == h.now - 5_000   # wall time


def test_offset_commits_are_fenced_by_generation_and_visible_only_once_committed():
    h = Harness()
    ids, _ = join_three(h)
    assert h.commit_offsets(ids["a"], 1, 5) == {TP0: E.REBALANCE_IN_PROGRESS}   # CompletingRebalance
    h.sync("a", ids["a"], 1, {})
    h.commit()
    assert h.commit_offsets(ids["a"], 0, 5) == {TP0: E.ILLEGAL_GENERATION}
    assert h.commit_offsets("stranger", 1, 5) == {TP0: E.UNKNOWN_MEMBER_ID}
    assert h.commit_offsets("", -1, 5) == {TP0: E.UNKNOWN_MEMBER_ID}             # the group has members
    assert h.commit_offsets(ids["a"], 1, 5) == {}                                # waits for the write
    assert h.shard.fetch_offsets("g", [TP0]) == {TP0: None}
    out = {}
    h.shard.commit_offsets("g", ids["a"], None, 1, [OffsetToCommit(TP0, 5, 3, "meta")], h.now, out.update)
    h.commit()
    assert out == {TP0: E.NONE}
    committed = h.shard.fetch_offsets("g", [TP0])[TP0]
    assert (committed.offset, committed.leader_epoch, committed.metadata) == (5, 3, "meta")


def test_a_failed_write_is_reported_and_changes_nothing():
    h = Harness()
    out = {}
    h.shard.commit_offsets("simple", "", None, -1, [OffsetToCommit(TP0, 7, -1, None)], h.now, out.update)
    h.commit(E.NOT_LEADER_OR_FOLLOWER)
    assert out == {TP0: E.NOT_COORDINATOR}
    assert h.shard.fetch_offsets("simple", None) == {}


def test_simple_consumer_commits_and_metadata_limit():
    h = Harness(GroupConfig(offset_metadata_max_bytes=4))
    out = {}
    h.shard.commit_offsets("simple", "", None, -1, [OffsetToCommit(TP0, 7, -1, "toolong")], h.now, out.update)
    assert out == {TP0: E.OFFSET_METADATA_TOO_LARGE}
    h.shard.commit_offsets("simple", "", None, -1, [OffsetToCommit(TP0, 7, -1, None)], h.now, out.update)
    h.commit()
    assert out == {TP0: E.NONE}
    assert h.shard.fetch_offsets("simple", None)[TP0].offset == 7
    assert h.group("simple").state == GroupState.EMPTY


def test_a_static_member_rejoining_unchanged_keeps_the_generation_and_fences_its_old_id():
    h = Harness()
    first = h.join("s1", instance="i1")
    assert first is None                                   # static members need no member id round
    h.tick(100)
    old_id = h.answers.pop(("join", "s1"))["member_id"]
    h.sync("s1", old_id, 1, {old_id: b"P"}, instance="i1")
    h.commit()
    rejoin = h.join("s1", instance="i1")                  # restarted: no member id
    assert rejoin is None                                  # the new id is stored first
    h.commit()
    answer = h.answers.pop(("join", "s1"))
    assert answer["generation_id"] == 1 and answer["member_id"] != old_id
    assert h.group().state == GroupState.STABLE
    assert h.sync("s1", answer["member_id"], 1, instance="i1")["assignment"] == b"P"
    assert h.shard.heartbeat("g", 1, old_id, "i1", h.now) == E.FENCED_INSTANCE_ID


def test_replaying_the_written_records_rebuilds_groups_and_offsets():
    """What a new coordinator loads after a failover: the same groups, the same offsets."""
    h = Harness()
    ids, _ = join_three(h)
    h.sync("a", ids["a"], 1, {ids["a"]: b"A", ids["b"]: b"B", ids["c"]: b"C"})
    h.commit()
    h.commit_offsets(ids["a"], 1, 42)
    h.commit_offsets(ids["b"], 1, 43)
    h.commit()
    loaded = GroupShard(0, CONFIG, lambda records, on_done: None, lambda prefix: prefix, lambda: h.now)
    for key, value in h.log:
        loaded.replay(key, value, h.now)
    loaded.loaded(h.now)
    group = loaded.groups["g"]
    assert group.state == GroupState.STABLE and group.generation_id == 1 and group.leader_id == ids["a"]
    assert {m.member_id: m.assignment for m in group.members.values()} == {
        ids["a"]: b"A", ids["b"]: b"B", ids["c"]: b"C"}
    assert loaded.fetch_offsets("g", [TP0])[TP0].offset == 43


def test_offsets_of_an_empty_group_expire_after_the_retention():
    h = Harness()
    h.shard.commit_offsets("simple", "", None, -1, [OffsetToCommit(TP0, 7, -1, None)], h.now, lambda r: None)
    h.commit()
    h.tick(59_000)
    h.commit()
    assert TP0 in h.shard.fetch_offsets("simple", None)
    h.tick(2_000)
    h.commit()
    assert h.shard.fetch_offsets("simple", None) == {}
    assert "simple" not in h.shard.groups                 # empty, and no offsets left: deleted


def test_delete_group_needs_an_empty_group_and_removes_its_offsets():
    h = Harness()
    ids, _ = join_three(h)
    h.sync("a", ids["a"], 1, {})
    h.commit()
    h.commit_offsets(ids["a"], 1, 9)
    h.commit()
    out = []
    h.shard.delete_group("g", h.now, out.append)
    assert out == [E.NON_EMPTY_GROUP]
    h.shard.leave_group("g", [(ids[n], None) for n in "abc"], h.now)
    h.commit()
    assert h.group().state == GroupState.EMPTY
    h.shard.delete_group("g", h.now, out.append)
    h.commit()
    assert out[-1] == E.NONE
    assert "g" not in h.shard.groups and h.shard.fetch_offsets("g", None) == {}
    h.shard.delete_group("g", h.now, out.append)
    assert out[-1] == E.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("protocol_type, protocols, error", [
    ("other", [("range", b"")], E.INCONSISTENT_GROUP_PROTOCOL),
    ("consumer", [("cooperative-sticky", b"")], E.INCONSISTENT_GROUP_PROTOCOL),
    ("consumer", [("cooperative-sticky", b""), ("range", b"")], E.NONE),
])
def test_a_joining_member_must_share_the_protocol(protocol_type, protocols, error):
    h = Harness()
    ids, _ = join_three(h)
    request = JoinRequest("g", "", None, 10_000, 30_000, protocol_type, protocols, "d", "/h", 3)
    answers = []
    h.shard.join_group(request, h.now, answers.append)
    if error == E.NONE:
        assert answers == [] and h.group().state == GroupState.PREPARING_REBALANCE
    else:
        assert answers[0]["error_code"] == error


def test_session_timeout_bounds():
    h = Harness()
    assert h.join("x", session_ms=1_000)["error_code"] == E.INVALID_SESSION_TIMEOUT
    assert h.join("x", group="")["error_code"] == E.INVALID_GROUP_ID


def test_a_client_id_of_32767_bytes_still_gets_a_member_id_its_group_record_can_hold():
    """The header's client id may be 32767 bytes; the member id made from it (client id,
    "-", a UUID) is cut to fit the group's record, which is then written and read back."""
    h = Harness(GroupConfig(initial_rebalance_delay_ms=0))
    h.join("é" * 16_383 + "x", version=3)                     # 32,767 bytes, two-byte characters
    h.tick(1)
    answer = h.answers.pop(("join", "é" * 16_383 + "x"))
    assert answer["error_code"] == E.NONE and len(answer["member_id"].encode()) <= 0x7FFF
    h.sync("é" * 16_383 + "x", answer["member_id"], answer["generation_id"], {answer["member_id"]: b"A"})
    h.commit()
    assert h.shard.groups["g"].state == GroupState.STABLE and any(key for key, _ in h.log)
