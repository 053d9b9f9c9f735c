"""KIP-848 consumer groups on one shard: server-side assignment, reconciliation
without double ownership, epochs and fencing, static members, commits by epoch."""

import uuid

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.shard import ConsumerHeartbeat, GroupConfig, GroupShard, OffsetToCommit

E = ErrorCode
TOPIC_ID = uuid.UUID(int=7)
CONFIG = GroupConfig(consumer_session_timeout_ms=10_000)


class Harness:
    def __init__(self, partitions=6):
        self.now = 1_000
        self.partitions = partitions
        self.log = []                                       # every record written, in order
        self.shard = GroupShard(0, CONFIG, self._write, lambda p: f"{p}-id", lambda: self.now)
        self.shard.loaded(self.now)
        self.owned: dict[str, frozenset] = {}               # what each client owns
        self.epochs: dict[str, int] = {}

    def _write(self, records, on_done):
        self.log.extend(records)
        on_done(E.NONE)

    def load_elsewhere(self) -> GroupShard:
        """A new coordinator: a shard that replays every record written, then serves."""
        shard = GroupShard(0, CONFIG, self._write, lambda p: f"{p}-id2", lambda: self.now)
        for key, value in self.log:
            shard.replay(key, value, self.now)
        shard.loaded(self.now)
        return shard

    def lookup(self, name):
        return (TOPIC_ID, self.partitions) if name == "t" else None

    def beat(self, member, epoch=None, topics=("t",), instance=None, report=True):
        epoch = self.epochs.get(member, 0) if epoch is None else epoch
        request = ConsumerHeartbeat("g", member, epoch, instance, None, 30_000,
                                    topics if epoch == 0 else None, None, None,
                                    self.owned.get(member, frozenset()) if report else None, member, "/h")
        answers = []
        self.shard.consumer_group_heartbeat(request, self.lookup, ["t"], self.now, answers.append)
        (answer,) = answers
        if answer["error_code"] == 0 and epoch >= 0:
            self.epochs[member] = answer["member_epoch"]
            if answer["assignment"] is not None:
                # The client takes its new assignment (revoking what is gone first).
                self.owned[member] = frozenset(
                    (tp["topic_id"], p) for tp in answer["assignment"]["topic_partitions"] for p in tp["partitions"])
        self.check_single_owner()
        return answer

    def check_single_owner(self):
        group = self.shard.consumer_groups.get("g")
        if group is None:
            return
        seen = {}
        for member in group.members.values():
            for tp in member.assigned | member.pending_revocation:
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {member.member_id}"
                seen[tp] = member.member_id
        clients = [p for owned in self.owned.values() for p in owned]
        assert len(clients) == len(set(clients)), f"two clients own a partition: {self.owned}"

    def settle(self, members, rounds=6):
        for _ in range(rounds):
            for member in members:
                self.beat(member)


def test_members_get_balanced_assignments_and_a_newcomer_waits_for_revocation():
    h = Harness()
    h.beat("a")
    assert len(h.owned["a"]) == 6
    first_epoch = h.epochs["a"]
    answer = h.beat("b")
    assert answer["member_epoch"] == first_epoch + 1                       # one change: b joined
    assert h.owned.get("b", frozenset()) == frozenset()                    # a still owns them all
    h.beat("a")                                   # told to give three up, keeps its epoch
    assert len(h.owned["a"]) == 3 and h.epochs["a"] == first_epoch
    h.beat("a")                                   # reports it let go: the new epoch
    assert h.epochs["a"] == first_epoch + 1
    h.beat("b")
    assert len(h.owned["b"]) == 3
    h.beat("c")
    h.settle(["a", "b", "c"])
    assert sorted(len(h.owned[m]) for m in "abc") == [2, 2, 2]
    state = h.shard.consumer_groups["g"].state
    assert state == "Stable", state


def test_assignments_are_sticky_when_members_come_and_go():
    h = Harness(partitions=12)
    for member in "abc":
        h.beat(member)
    h.settle(list("abc"))
    before = dict(h.owned)
    h.beat("d")
    h.settle(list("abcd"))
    assert sorted(len(h.owned[m]) for m in "abcd") == [3, 3, 3, 3]
    for member in "abc":
        assert h.owned[member] <= before[member], "a member lost a partition it could have kept"
    assert h.beat("d", epoch=-1)["error_code"] == 0
    del h.owned["d"]
    h.settle(list("abc"))
    assert sorted(len(h.owned[m]) for m in "abc") == [4, 4, 4]


def test_epochs_fence_stale_members_and_unknown_members_are_refused():
    h = Harness()
    h.beat("a")
    h.beat("b")
    h.settle(["a", "b"])
    assert h.beat("a", epoch=h.epochs["a"] + 5)["error_code"] == E.FENCED_MEMBER_EPOCH
    assert h.beat("zed", epoch=3)["error_code"] == E.UNKNOWN_MEMBER_ID
    # A member silent for its session timeout (it crashed) is removed; its partitions move on.
    del h.owned["b"]
    for _ in range(6):
        h.now += 2_000
        h.beat("a")
        h.shard.on_tick(h.now)
    assert set(h.shard.consumer_groups["g"].members) == {"a"}
    h.settle(["a"])
    assert len(h.owned["a"]) == 6


def test_a_static_member_restarting_keeps_its_partitions():
    h = Harness()
    h.beat("a", instance="i-a")
    h.beat("b", instance="i-b")
    h.settle(["a", "b"])
    kept = h.owned["b"]
    assert h.beat("b", epoch=-2)["error_code"] == 0          # leaving to restart
    h.settle(["a"])
    assert len(h.owned["a"]) == 3, "the absent static member's partitions were given away"
    del h.owned["b"]
    answer = h.beat("b2", instance="i-b")                    # back under a new member id
    assert answer["error_code"] == 0
    assert h.owned["b2"] == kept


def test_offset_commits_carry_the_member_epoch():
    h = Harness()
    h.beat("a")
    tp = TopicPartition("t", 0)
    out = {}
    h.shard.commit_offsets("g", "a", None, h.epochs["a"] + 1, [OffsetToCommit(tp, 5, -1, None)], h.now, out.update)
    assert out == {tp: E.STALE_MEMBER_EPOCH}
    h.shard.commit_offsets("g", "nobody", None, 1, [OffsetToCommit(tp, 5, -1, None)], h.now, out.update)
    assert out == {tp: E.UNKNOWN_MEMBER_ID}
    h.shard.commit_offsets("g", "a", None, h.epochs["a"], [OffsetToCommit(tp, 5, -1, None)], h.now, out.update)
    assert out == {tp: E.NONE}


def test_a_classic_group_with_members_refuses_the_new_protocol():
    h = Harness()
    from tidelog.group.shard import JoinRequest
    h.shard.join_group(JoinRequest("g", "", None, 10_000, 30_000, "consumer", [("range", b"")], "c", "/h", 3),
                       h.now, lambda answer: None)
    assert h.beat("a")["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL


def group_state(shard):
    group = shard.consumer_groups["g"]
    return (group.group_epoch, group.assignment_epoch, dict(group.target),
            {m.member_id: (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation,
                           m.instance_id, m.client_id, m.client_host, m.subscribed_topic_names,
                           m.rebalance_timeout_ms, m.server_assignor)
             for m in group.members.values()})


def test_a_new_coordinator_loads_the_group_and_its_members_go_on_with_their_epochs():
    """Kafka 4's coordinator keeps a KIP-848 group in __consumer_offsets: after the
    coordinator moves, members keep their epochs and partitions (no rejoin, nothing read
    again). Loaded mid-rebalance: a member still revoking, one waiting for partitions."""
    h = Harness(partitions=12)
    for member in "abc":
        h.beat(member, instance="i-c" if member == "c" else None)
    h.settle(list("abc"))
    h.beat("d")                                               # a newcomer: the others must revoke
    h.beat("a")                                               # a is told to revoke, keeps its epoch
    before = group_state(h.shard)
    assert h.shard.consumer_groups["g"].state == "Reconciling"
    moved = h.load_elsewhere()
    assert group_state(moved) == before
    assert moved.consumer_groups["g"].state == "Reconciling"
    epochs = dict(h.epochs)
    h.shard = moved
    for member in "abcd":                                     # the next heartbeats: no fencing
        answer = h.beat(member)
        assert answer["error_code"] == 0 and answer["member_epoch"] >= epochs[member], (member, answer)
    h.settle(list("abcd"))
    assert sorted(len(h.owned[m]) for m in "abcd") == [3, 3, 3, 3]
    # A member that leaves is gone for the next coordinator too; an unchanged heartbeat
    # writes nothing.
    assert h.beat("d", epoch=-1)["error_code"] == 0
    del h.owned["d"]
    h.settle(list("abc"))
    written = len(h.log)
    h.beat("a")
    assert len(h.log) == written
    again = h.load_elsewhere()
    assert set(again.consumer_groups["g"].members) == {"a", "b", "c"}
    assert group_state(again) == group_state(h.shard)


def test_a_member_silent_after_the_move_is_removed_after_its_session():
    """The loaded members' sessions start when the new coordinator has loaded the group."""
    h = Harness()
    h.beat("a")
    h.beat("b")
    h.settle(["a", "b"])
    h.now += 9_000                                            # within the 10 s session, before the move
    moved = h.load_elsewhere()
    h.shard = moved
    h.now += 9_000                                            # 18 s since b's last heartbeat
    moved.on_tick(h.now)
    assert set(moved.consumer_groups["g"].members) == {"a", "b"}
    h.beat("a")
    h.now += 2_000
    moved.on_tick(h.now)
    assert set(moved.consumer_groups["g"].members) == {"a"}
    assert set(h.load_elsewhere().consumer_groups["g"].members) == {"a"}      # its removal was written


def test_a_heartbeat_is_answered_after_its_records_are_written_and_a_failed_write_is_an_error():
    held = []
    shard = GroupShard(0, CONFIG, lambda records, on_done: held.append((records, on_done)), lambda p: f"{p}-id",
                       lambda: 0)
    shard.loaded(0)
    answers = []
    request = ConsumerHeartbeat("g", "", 0, None, None, 30_000, ("t",), None, None, frozenset(), "a", "/h")
    shard.consumer_group_heartbeat(request, lambda name: (TOPIC_ID, 2), ["t"], 0, answers.append)
    assert answers == [] and len(held) == 1                   # held until the records are committed
    held.pop()[1](E.NOT_LEADER_OR_FOLLOWER)
    assert answers[0]["error_code"] == E.NOT_COORDINATOR      # Kafka's mapping of a failed append
    shard.consumer_group_heartbeat(request, lambda name: (TOPIC_ID, 2), ["t"], 0, answers.append)
    records, on_done = held.pop()
    assert len(records) == 5                                  # everything again after the failure
    on_done(E.NONE)
    assert answers[1]["error_code"] == 0 and answers[1]["assignment"] is not None


def test_strings_kafkas_records_cannot_hold_are_refused_and_the_group_goes_on():
    """An attacker's 40 KB regex (or rack, instance id, topic name) cannot be written in
    Kafka's records (int16 lengths): refused with INVALID_REQUEST, naming the field,
    before it touches the group — whose other members carry on."""
    h = Harness()
    h.beat("a")
    long = "x" * 40_000
    for field in ("instance", "rack", "regex", "topic"):
        request = ConsumerHeartbeat("g", "evil", 0, long if field == "instance" else None,
                                    long if field == "rack" else None, 30_000,
                                    (long,) if field == "topic" else ("t",), long if field == "regex" else None,
                                    None, frozenset(), "evil", "/h")
        answers = []
        h.shard.consumer_group_heartbeat(request, h.lookup, ["t"], h.now, answers.append)
        assert answers[0]["error_code"] == E.INVALID_REQUEST and "32767" in answers[0]["error_message"]
    assert set(h.shard.consumer_groups["g"].members) == {"a"}
    assert h.beat("a")["error_code"] == 0
    # Counted in UTF-8 bytes: 16,000 two-byte characters fit, 17,000 do not.
    assert h.beat("b", instance="é" * 16_000)["error_code"] == 0
    assert h.beat("c", instance="é" * 17_000)["error_code"] == E.INVALID_REQUEST


def test_a_steady_heartbeat_compares_only_its_own_members_records():
    """In a settled group a heartbeat encodes the group's records and its member's, not
    every member's (a group of 1,000 would otherwise encode 3,000 records per heartbeat)."""
    h = Harness(partitions=60)
    members = [f"m{i:02d}" for i in range(30)]
    for member in members:
        h.beat(member)
    h.settle(members, rounds=8)
    group = h.shard.consumer_groups["g"]
    asked = []
    real = group.records
    group.records = lambda chosen=None: asked.append(chosen) or real(chosen)
    h.beat("m07")
    assert asked == [["m07"]]
    h.beat("new")                                             # a join: everything compared again
    assert asked[-1] is None
    group.records = real
    h.settle(members + ["new"], rounds=8)
    assert group_state(h.load_elsewhere()) == group_state(h.shard)


def test_a_subscription_too_large_for_a_record_is_refused_and_the_group_goes_on():
    """An attacker (any client allowed to READ the group) subscribing to 40,000 names,
    1.3 MB, more than a batch of ``__consumer_offsets`` may hold: before, the member
    joined in memory, its write failed, and every later change of the group wrote its
    record again and failed too — nobody could join or move. Refused before it joins
    (UNKNOWN_SERVER_ERROR, what Kafka answers when its write fails), with a message; an
    existing member asking for it keeps its subscription."""
    h = Harness()
    h.beat("a")
    h.settle(["a"])
    names = tuple(f"topic-{i:024d}" for i in range(40_000))
    answer = h.beat("evil", topics=names)
    assert answer["error_code"] == E.UNKNOWN_SERVER_ERROR
    assert "more than the 262147" in answer["error_message"]
    assert set(h.shard.consumer_groups["g"].members) == {"a"}
    request = ConsumerHeartbeat("g", "a", h.epochs["a"], None, None, 30_000, names, None, None,
                                h.owned["a"], "a", "/h")
    answers = []
    h.shard.consumer_group_heartbeat(request, h.lookup, ["t"], h.now, answers.append)
    assert answers[0]["error_code"] == E.UNKNOWN_SERVER_ERROR
    assert h.shard.consumer_groups["g"].members["a"].subscribed_topic_names == ("t",)
    assert h.beat("b")["error_code"] == 0
    h.settle(["a", "b"])
    assert sorted(len(h.owned[m]) for m in "ab") == [3, 3]
    assert group_state(h.load_elsewhere()) == group_state(h.shard)
    # 7,000 names of 30 characters fit.
    assert h.beat("c", topics=tuple(f"topic-{i:024d}" for i in range(7_000)))["error_code"] == 0


def test_after_a_failed_write_only_its_records_are_written_again():
    """A failed write (a timeout, a leader change) leaves the log holding the old values
    of its keys or the new ones. Writing the whole group again at its next change, as
    before, needs a batch as large as the group: a group whose records outgrow one batch
    (here 600 bytes; at Kafka's 1 MiB, a couple of thousand members) failed every change
    after the first failed write, for ever. Only the failed write's keys are written
    again, with what changed since, and a new coordinator loads the same group."""
    h = Harness(partitions=12)
    members = [f"m{i}" for i in range(6)]
    for member in members:
        h.beat(member)
    h.settle(members, rounds=8)
    whole = sum(len(k) + len(v or b"") for k, v in h.shard.consumer_groups["g"].records().items())
    limit, failures = 600, []
    assert whole > limit

    def write(records, on_done):
        size = sum(len(k) + len(v or b"") for k, v in records)
        if failures:
            failures.pop()
            return on_done(E.REQUEST_TIMED_OUT)
        if size > limit:
            return on_done(E.MESSAGE_TOO_LARGE)
        h._write(records, on_done)
    h.shard._write = write
    failures.append(1)
    assert h.beat("m3", epoch=-1)["error_code"] == E.COORDINATOR_NOT_AVAILABLE      # its leave timed out
    assert h.beat("m3", epoch=-1)["error_code"] in (0, E.UNKNOWN_MEMBER_ID)
    h.owned.pop("m3", None)
    rest = [m for m in members if m != "m3"]
    h.settle(rest, rounds=8)
    for member in rest:
        assert h.beat(member)["error_code"] == 0
    assert group_state(h.load_elsewhere()) == group_state(h.shard)
