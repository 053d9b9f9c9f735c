"""Simulated consumer-group members: Kafka's classic protocol, eager rebalancing.

Theory of operation. A ``SimGroupMember`` is a ``SimConsumer`` whose partitions
come from its group. It finds the coordinator by asking a random broker
(``FindCoordinator``: the broker answers from its own image, and asks the
controller to create ``__consumer_offsets`` on first use), then runs the
classic protocol against that broker:

    JoinGroup (no member id → MEMBER_ID_REQUIRED → again with the id it got)
      → the leader computes a range or round-robin assignment of the topic's
        partitions over the members (the protocol the group chose) → SyncGroup
      → OffsetFetch of its partitions → fetch from their leaders (checked by
        ``10.6``), OffsetCommit of its positions every ``COMMIT_INTERVAL_MS``
      → Heartbeat every session/3 from the JoinGroup answer on.

REBALANCE_IN_PROGRESS revokes everything (commit the positions, then JoinGroup
again); ILLEGAL_GENERATION rejoins; UNKNOWN_MEMBER_ID rejoins as a new member.
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and
timeouts forget the coordinator: JoinGroup, SyncGroup and OffsetFetch are
retried after finding it again, a heartbeat or a commit waits for the next one.
Every (re)join starts a new *round*; answers of an earlier round are ignored.

During the fault phase each member also has mishaps (``MISHAPS``): it leaves
(commit, LeaveGroup, back later as a new member), crashes (no LeaveGroup: the
coordinator must expire its session; back later as a new member), pauses (a
long GC pause: heartbeats and commits stall, then arrive late with an old
generation) or rejoins on its own. And when a new generation is stable, the
last commit of an earlier one sometimes arrives again (``LATE_COMMITS``: an
async commit the network delayed), which the coordinator must fence.
Assignments are the partition numbers as ASCII (``b"0,2"``); only the
simulator reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.broker.requests.group import (
    Heartbeat,
    JoinRequest,
    LeaveGroup,
    OffsetCommit,
    OffsetFetch,
    OffsetToCommit,
    SyncGroup,
)
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.classic import GroupState
from tidelog.group.coordinator import OFFSETS_TOPIC
from tidelog.group.records import partition_for
from tidelog.sim.clients import RETRY_BACKOFF_MS, SimConsumer

if TYPE_CHECKING:
    from tidelog.group.shard import GroupShard
    from tidelog.sim.config import GroupSpec
    from tidelog.sim.world import World

RANGE, ROUND_ROBIN = "range", "roundrobin"
COMMIT_INTERVAL_MS = 300          # auto.commit.interval.ms
MISHAP_MEAN_MS = 10_000           # per member, during the fault phase
MISHAPS = ("leave", "crash", "pause", "rejoin")
LATE_COMMITS = 0.3                # of new generations: an old commit arrives again (fenced)
JOIN_GROUP_VERSION = 5            # >= 4: MEMBER_ID_REQUIRED first (KIP-394)
COORDINATOR_ERRORS = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
JOINING, SYNCING, STABLE, AWAY = "joining", "syncing", "stable", "away"


def assign(protocol: str, member_ids: list[str], partitions: int) -> dict[str, list[int]]:
    """Kafka's range (consecutive runs, the first members one more) or round-robin assignor."""
    members = sorted(member_ids)
    owned: dict[str, list[int]] = {m: [] for m in members}
    if protocol == RANGE:
        share, extra = divmod(partitions, len(members))
        start = 0
        for i, member in enumerate(members):
            count = share + (1 if i < extra else 0)
            owned[member] = list(range(start, start + count))
            start += count
    else:
        for partition in range(partitions):
            owned[members[partition % len(members)]].append(partition)
    return owned


def encode_assignment(partitions: list[int]) -> bytes:
    return ",".join(str(p) for p in partitions).encode()


def decode_assignment(topic: str, data: bytes) -> list[TopicPartition]:
    return [TopicPartition(topic, int(p)) for p in data.decode().split(",") if p]


def offsets_partition(sim: "World", group_id: str) -> int | None:
    """The group's ``__consumer_offsets`` partition, once the topic exists."""
    image = sim.checker.controller_image
    topic = image.topic(OFFSETS_TOPIC) if image is not None else None
    if topic is None:
        return None
    key = (group_id, len(topic.partitions))
    index = _OFFSETS_PARTITIONS.get(key)
    if index is None:          # the checker asks after every event: hash each group once
        index = _OFFSETS_PARTITIONS[key] = partition_for(group_id, key[1])
    return index


_OFFSETS_PARTITIONS: dict[tuple[str, int], int] = {}   # (group, partition count) -> partition


def serving_coordinator(sim: "World", group_id: str) -> tuple[int, "GroupShard"] | None:
    """The broker the controller names leader of the group's ``__consumer_offsets``
    partition, with its shard, if it has applied that leadership and finished loading."""
    index = offsets_partition(sim, group_id)
    if index is None:
        return None
    registration = sim.checker.controller_image.topic(OFFSETS_TOPIC).partitions[index]
    broker = sim.brokers.get(registration.leader)
    if broker is None or not broker.up:
        return None
    loaded = broker.node.group_coordinator.loaded.get(index)
    if loaded is None or loaded.shard.loading or loaded.leader_epoch != registration.leader_epoch:
        return None
    return registration.leader, loaded.shard


def _error(answer: dict) -> ErrorCode:
    """The error of an answer (OffsetCommit's {partition: error}: the first partition error)."""
    if "error_code" not in answer:
        return next((ErrorCode(code) for code in answer.values() if code), ErrorCode.NONE)
    return ErrorCode(answer["error_code"])


class SimGroupMember(SimConsumer):
    def __init__(self, sim: "World", name: str, group: "GroupSpec"):
        super().__init__(sim, name, group.topic)
        self.group_id = group.name
        order = [RANGE, ROUND_ROBIN]
        sim.rng.shuffle(order)
        self.protocols = [(protocol, group.topic.encode()) for protocol in order]
        self.session_timeout_ms = sim.config.group_session_timeout_ms
        self.rebalance_timeout_ms = 2 * self.session_timeout_ms
        self._reset()

    def _reset(self) -> None:
        """A new process: no coordinator, no member id, nothing owned."""
        self.coordinator: int | None = None
        self.waiting: list = []                        # what waits for the coordinator lookup
        self.member_id = ""
        self.generation = -1
        self.phase = AWAY
        self.round = 0
        self.assigned: list[TopicPartition] = []
        self.fetched: set[TopicPartition] = set()      # owned partitions whose committed offset is known
        self.fetching: set[TopicPartition] = set()     # partitions with a live fetch loop
        self.committed: dict[TopicPartition, int] = {}  # acknowledged to this member in this round
        self.commits = 0
        self.last_commit: OffsetCommit | None = None    # the last OffsetCommit sent

    def start(self) -> None:
        self.process_started()
        self.active = True
        self._reset()
        self.after(self.sim.rng.randrange(1, 50), self._join)
        self._schedule_mishap()

    # ================================================================ requests

    def _call(self, kind: str, body, on_answer, retry: bool, timeout_ms: int | None = None) -> None:
        """Send to the coordinator (found first when unknown). A coordinator error or
        a timeout forgets it; then the call is retried, or ``on_answer(None)``."""
        round_ = self.round

        def again() -> None:
            if self.round == round_ and self.active:
                self._call(kind, body, on_answer, retry, timeout_ms)

        def failed(_why=None) -> None:
            self.coordinator = None
            if self.round != round_:
                return
            if retry:
                self.after(RETRY_BACKOFF_MS, again)
            else:
                on_answer(None)

        def on_reply(answer: dict) -> None:
            if self.round != round_:
                return
            if _error(answer) in COORDINATOR_ERRORS:
                failed()
            else:
                on_answer(answer)

        if self.coordinator is None:
            self._find_coordinator(again)
            return
        self.rpc.request(f"b{self.coordinator}", kind, body,
                         timeout_ms or self.sim.config.request_timeout_ms + 500, on_reply, failed)

    def _find_coordinator(self, then) -> None:
        """``then()`` once a broker names the coordinator (one lookup at a time)."""
        self.waiting.append(then)
        if len(self.waiting) == 1:
            self._lookup()

    def _lookup(self) -> None:
        broker = self.sim.rng.choice(self.sim.broker_ids)

        def retry(_why=None) -> None:
            self.after(RETRY_BACKOFF_MS, self._lookup)

        def on_reply(answer: dict) -> None:
            if answer["error_code"] != ErrorCode.NONE:
                return retry()
            self.coordinator = answer["node_id"]
            waiting, self.waiting = self.waiting, []
            for then in waiting:
                then()

        self.rpc.request(f"b{broker}", "FindCoordinator", {"group_id": self.group_id},
                         self.sim.config.request_timeout_ms, on_reply, retry)

    # ================================================================ join, sync

    def _join(self) -> None:
        """(Re)join: a new round; nothing is owned until SyncGroup answers."""
        if not self.active:
            return
        self.round += 1
        self.phase = JOINING
        self.assigned, self.fetched = [], set()
        body = JoinRequest(self.group_id, self.member_id, None, self.session_timeout_ms, self.rebalance_timeout_ms,
                           "consumer", self.protocols, self.name, self.name, JOIN_GROUP_VERSION)
        self._call("JoinGroup", body, self._on_join, retry=True,
                   timeout_ms=self.rebalance_timeout_ms + self.sim.config.request_timeout_ms)

    def _rejoin_later(self) -> None:
        round_ = self.round
        self.after(RETRY_BACKOFF_MS, lambda: self.round == round_ and self._join())

    def _on_join(self, answer: dict) -> None:
        error = ErrorCode(answer["error_code"])
        if error == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = answer["member_id"]
            return self._join()
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if error != ErrorCode.NONE:
            return self._rejoin_later()
        self.member_id, self.generation = answer["member_id"], answer["generation_id"]
        assignments = {}
        if answer["leader"] == self.member_id:
            owned = assign(answer["protocol_name"], [m["member_id"] for m in answer["members"]],
                           len(self.partitions))
            assignments = {member: encode_assignment(partitions) for member, partitions in owned.items()}
        self.phase = SYNCING
        self._heartbeat_later(self.round)
        self._call("SyncGroup", SyncGroup(self.group_id, self.generation, self.member_id, None, "consumer",
                                          answer["protocol_name"], assignments), self._on_sync, retry=True)

    def _on_sync(self, answer: dict) -> None:
        error = ErrorCode(answer["error_code"])
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if error != ErrorCode.NONE:
            return self._rejoin_later()
        self.phase = STABLE
        self.assigned = decode_assignment(self.topic, answer["assignment"])
        self.committed = {}
        self.loop.trace.add(self.loop.now_ms, self.name, f"{self.group_id} generation {self.generation}: owns "
                            f"[{' '.join(str(tp) for tp in self.assigned)}]")
        self._call("OffsetFetch", OffsetFetch(self.group_id, tuple(self.assigned)), self._on_offsets, retry=True)
        self._commit_later(self.round)
        self._late_commit()

    def _on_offsets(self, answer: dict) -> None:
        offsets = {TopicPartition(t["name"], p["partition_index"]): p["committed_offset"]
                   for t in answer["topics"] for p in t["partitions"]}
        for tp in self.assigned:
            offset = offsets[tp]
            self.positions[tp] = max(0, offset)
            if offset >= 0:
                self.committed[tp] = offset
            self.fetched.add(tp)
            if tp not in self.fetching:
                self.fetching.add(tp)
                self._poll(tp)

    # ================================================================ consuming

    def _poll(self, tp: TopicPartition) -> None:
        """One fetch loop per partition, alive while the partition is owned."""
        if not self.active or self.phase != STABLE or tp not in self.fetched:
            self.fetching.discard(tp)
            return
        super()._poll(tp)

    # ================================================================ heartbeat, commit

    def _heartbeat_later(self, round_: int) -> None:
        self.after(self.session_timeout_ms // 3, lambda: self._heartbeat(round_))

    def _heartbeat(self, round_: int) -> None:
        if self.round != round_ or not self.active:
            return
        self._call("Heartbeat", Heartbeat(self.group_id, self.generation, self.member_id), self._on_heartbeat,
                   retry=False)
        self._heartbeat_later(round_)

    def _on_heartbeat(self, answer: dict | None) -> None:
        error = ErrorCode.NONE if answer is None else _error(answer)
        if error == ErrorCode.NONE or self.phase not in (SYNCING, STABLE):
            return
        if error == ErrorCode.REBALANCE_IN_PROGRESS and self.phase == STABLE:
            return self._revoke_then_join()
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self._join()

    def _revoke_then_join(self) -> None:
        """Eager rebalancing: stop fetching, commit the positions, then JoinGroup."""
        owned = self.assigned
        self.phase, self.assigned = JOINING, []
        self._commit(owned, self._join)

    def _commit_later(self, round_: int) -> None:
        def commit() -> None:
            if self.round == round_ and self.phase == STABLE:
                self._commit(self.assigned, lambda: self._commit_later(round_))
        self.after(COMMIT_INTERVAL_MS, commit)

    def _commit(self, partitions: list[TopicPartition], then) -> None:
        """OffsetCommit of the positions that moved since the last acknowledged commit; then ``then()``."""
        offsets = {tp: self.positions[tp] for tp in partitions
                   if tp in self.fetched and self.positions[tp] != self.committed.get(tp)}
        if not offsets or not self.active:
            then()
            return
        self.commits += 1

        def answered(answer: dict | None) -> None:
            if answer is not None:
                for tp, code in answer.items():
                    if code == ErrorCode.NONE:
                        self.committed[tp] = offsets[tp]
                error = _error(answer)
                if error == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                    return self._join()
            then()

        metadata = f"{self.name}#{self.commits}"
        self.last_commit = OffsetCommit(self.group_id, self.member_id, None, self.generation, tuple(
            OffsetToCommit(tp, offset, -1, metadata) for tp, offset in sorted(offsets.items())))
        self._call("OffsetCommit", self.last_commit, answered, retry=False)

    def _late_commit(self) -> None:
        """Now and then, once a new generation is stable, the last commit of an earlier one
        arrives again (an async commit the network delayed): the coordinator must fence it."""
        late = self.last_commit
        if late is None or late.generation_id == self.generation or self.coordinator is None \
                or self.sim.rng.random() >= LATE_COMMITS:
            return
        self.loop.trace.add(self.loop.now_ms, self.name, f"late commit {late.offsets[0].metadata} of generation "
                            f"{late.generation_id} (now {self.generation})")
        self.rpc.request(f"b{self.coordinator}", "OffsetCommit", late, self.sim.config.request_timeout_ms,
                         lambda answer: None, lambda error: None)

    # ================================================================ mishaps

    def _schedule_mishap(self) -> None:
        self.after(max(1, int(self.sim.rng.expovariate(1 / MISHAP_MEAN_MS))), self._mishap)

    def _mishap(self) -> None:
        if self.sim.healed or not self.active:
            return
        kind = self.sim.rng.choice(MISHAPS)
        if kind == "rejoin" and self.phase != STABLE:
            return self._schedule_mishap()
        self.sim.stats.member_faults[kind] = self.sim.stats.member_faults.get(kind, 0) + 1
        if kind == "crash":
            restart_ms = self.sim.rng.randint(300, 3000)
            self.loop.trace.add(self.loop.now_ms, self.name, f"mishap: crashes, restarts in {restart_ms} ms")
            self.process_ended()
            self.active = False
            self.loop.after(restart_ms, self.start)       # no owner: the dead process cannot schedule
            return
        if kind == "pause":
            pause_ms = self.sim.rng.randint(self.session_timeout_ms // 2, 2 * self.session_timeout_ms)
            self.loop.trace.add(self.loop.now_ms, self.name, f"mishap: paused for {pause_ms} ms")
            self._pause(pause_ms)
        elif kind == "leave":
            self.loop.trace.add(self.loop.now_ms, self.name, "mishap: leaves the group")
            self._leave()
        else:
            self.loop.trace.add(self.loop.now_ms, self.name, "mishap: rejoins")
            self._revoke_then_join()
        self._schedule_mishap()

    def _pause(self, pause_ms: int) -> None:
        """SIGSTOP for ``pause_ms``: timers and answers wait, then all fire at once."""
        self.owned.paused = True
        self.loop.after(pause_ms, lambda: self.loop.resume(self.owned))   # no owner: runs while paused

    def _leave(self) -> None:
        """Close: commit, LeaveGroup, stay away a while, come back as a new member."""
        owned = self.assigned if self.phase == STABLE else []
        self.round += 1
        self.phase, self.assigned = AWAY, []

        def leave() -> None:
            if self.member_id:
                self._call("LeaveGroup", LeaveGroup(self.group_id, ((self.member_id, None),)),
                           lambda answer: None, retry=False)
            self.member_id, self.generation = "", -1
            round_ = self.round
            self.after(self.sim.rng.randint(200, 2000), lambda: self.round == round_ and self._join())

        self._commit(owned, leave)

    # ================================================================ the end

    def unsettled(self, shard: "GroupShard", ends: dict[TopicPartition, int]) -> list[str]:
        """Why this member is not done yet after healing (nothing: it is)."""
        group = shard.groups[self.group_id]
        if not self.up or self.phase != STABLE or self.generation != group.generation_id:
            return [f"{self.name} is {self.phase if self.up else 'down'} at generation {self.generation} of "
                    f"{self.group_id}'s {group.generation_id}"]
        committed = shard.fetch_offsets(self.group_id, self.assigned)
        for tp in self.assigned:
            end = ends.get(tp)
            if end is None:
                continue
            if tp not in self.fetched or self.positions[tp] < end:
                return [f"{self.name} at {tp} offset {self.positions[tp]} of {end}"]
            if committed[tp] is None or committed[tp].offset != end:
                return [f"{self.group_id} committed {tp} offset "
                        f"{None if committed[tp] is None else committed[tp].offset} of {end}"]
        return []


def group_unsettled(sim: "World", spec: "GroupSpec", members: list[SimGroupMember],
                    ends: dict[TopicPartition, int]) -> list[str]:
    """Why a group is not done after healing: it must be Stable on its coordinator with
    exactly the live members, every partition assigned, read and committed to the end."""
    where = serving_coordinator(sim, spec.name)
    if where is None:
        return [f"{spec.name}: no coordinator serving"]
    broker_id, shard = where
    group = shard.groups.get(spec.name)
    if group is None or not group.is_in(GroupState.STABLE):
        return [f"{spec.name} is {'unknown' if group is None else group.state.value} on b{broker_id}"]
    ids = sorted(m.member_id for m in members)
    if sorted(group.members) != ids:
        return [f"{spec.name} on b{broker_id} has members {sorted(group.members)}, the members are {ids}"]
    assigned = sorted(tp for m in members for tp in m.assigned)
    if assigned != [TopicPartition(spec.topic, p) for p in range(sim.config.topic(spec.topic).partitions)]:
        return [f"{spec.name}: assigned {[str(tp) for tp in assigned]}"]
    return [reason for m in members for reason in m.unsettled(shard, ends)]
