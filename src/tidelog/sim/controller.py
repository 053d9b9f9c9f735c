"""The simulated controllers: production's KRaft quorum behind the simulated network.

Theory of operation. A ``SimController`` is one voter of the controller quorum
(``controller.quorum.voters``; one to five of them). It is
``server/raft_driver.py`` plus ``server/controller_server.py`` without asyncio,
driving the production pieces:

* ``RaftReplica`` (KIP-595 Raft with KIP-996 pre-vote), over a
  ``MemoryMetadataLog`` (``raft/memory_log.py``: real record batches) that, with
  the replica's ``quorum_state()``, is this controller's *disk*: both outlive a
  kill (everything is "fsynced" before it counts, as the file log flushes each
  append), so a restart finds its log and its vote;
* ``QuorumController`` on a ``RaftMetadataLog`` (appends only on the leader;
  committed = the quorum's high watermark), built anew at every process start;
* ``QuorumMember``: activation (the leader's LeaderChange entry committed →
  rebuild from the committed log, fresh broker sessions), deactivation (writes
  waiting for their commit answered NOT_CONTROLLER, uncommitted state dropped)
  and the commit waits.

Raft messages travel as simulated RPCs between controllers (with the network's
delays, losses, cuts and clogs): a request's answer is the replica's message
addressed back to the sender of the answer's type (as ``RaftDriver`` finds it in
the outbox). As over ``RaftDriver``'s connections (one per voter for fetches,
one for the rest), answers reach the replica in request order, and a request
that times out or is refused closes its connection (``_Connection``). A Fetch
from a caught-up voter is held until the log end, the high watermark or the
leadership moves, or ``FETCH_WAIT_MAX_MS`` passes (long poll). A Fetch refused
because the leader is down is ``on_leader_unreachable``. After
every input the vote is persisted before anything is sent, the replica's timer
is re-armed at ``next_wakeup_ms`` and the member is told (``on_quorum_change``).

Brokers' requests: ``BrokerRegistration``, ``BrokerHeartbeat``,
``AlterPartition``, ``AssignReplicasToDirs`` and ``CreateTopics`` are writes — answered NOT_CONTROLLER by
a controller that is not active, otherwise handed to the controller and answered
once the records written are committed (``QuorumMember.after_commit``), or
NOT_CONTROLLER if leadership is lost first. ``MetadataFetch`` returns the
committed batches from the broker's offset, from the active controller only (a
standby answers NOT_LEADER_OR_FOLLOWER naming the leader it knows); with nothing
new it waits (long poll) until the high watermark moves or ``max_wait``.

``ControllerChannel`` is a broker's side: production's ``RemoteController``
(try the voter believed active; on NOT_CONTROLLER, NOT_LEADER_OR_FOLLOWER or no
answer move to the leader named, else the next voter, and retry with backoff
until the call's deadline).
"""

from __future__ import annotations

import random
import uuid
from typing import TYPE_CHECKING, Callable

from tidelog.controller.messages import (
    AlterPartitionResponse,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatReply,
    BrokerRegistrationReply,
    CreatableTopic,
)
from tidelog.controller.feature_control import BOOTSTRAP_FEATURES, ELIGIBLE_LEADER_REPLICAS_VERSION
from tidelog.controller.quorum_controller import QuorumController
from tidelog.controller.reassignment import ReassignmentTarget
from tidelog.controller.quorum_member import ACTIVATED, DEACTIVATED, QuorumMember
from tidelog.core.errors import ErrorCode
from tidelog.raft import replica as raft
from tidelog.raft.memory_log import MemoryMetadataLog
from tidelog.raft.metadata_log import RaftMetadataLog
from tidelog.raft.replica import (BeginQuorumEpoch, EndQuorumEpoch, FetchRequest, FetchResponse,
                                  QuorumEpochResponse, RaftConfig, RaftReplica, VoteResponse)
from tidelog.sim.loop import NodeClock
from tidelog.sim.network import NetworkNode

if TYPE_CHECKING:
    from tidelog.sim.world import World

CLUSTER_ID = "tidelog-sim"
CONTROLLER_ID_BASE = 1000            # voters 1000, 1001, … (docs/controller.md's numbering)
FETCH_WAIT_MAX_MS = 500              # RaftDriver's: how long a caught-up voter's Fetch is held
WRITES = ("BrokerRegistration", "BrokerHeartbeat", "AlterPartition", "AssignReplicasToDirs", "CreateTopics")
NOT_CONTROLLER_ANSWERS = {
    "BrokerRegistration": BrokerRegistrationReply(ErrorCode.NOT_CONTROLLER, None, -1),
    "BrokerHeartbeat": BrokerHeartbeatReply(ErrorCode.NOT_CONTROLLER, None, False, True, False, False),
    "AlterPartition": AlterPartitionResponse(ErrorCode.NOT_CONTROLLER, None, ()),
    "AssignReplicasToDirs": AssignReplicasToDirsResponse(ErrorCode.NOT_CONTROLLER, None, ()),
    "CreateTopics": ErrorCode.NOT_CONTROLLER,
}


def sim_directory_id(node_id: int) -> str:
    """A controller's metadata directory id (meta.properties' directory.id), fixed per node."""
    return str(uuid.UUID(int=node_id))


def controller_name(node_id: int) -> str:
    return f"c{node_id}"


def _answer_type(request) -> type | None:
    """The message a request is answered with (VoteRequest → VoteResponse …;
    BeginQuorumEpoch / EndQuorumEpoch → QuorumEpochResponse, built by the driver)."""
    if isinstance(request, (BeginQuorumEpoch, EndQuorumEpoch)):
        return QuorumEpochResponse
    name = type(request).__name__
    return getattr(raft, name[:-len("Request")] + "Response", None) if name.endswith("Request") else None


class _Connection:
    """One of RaftDriver's connections to a voter, as TCP keeps it: answers reach the
    replica in the order the requests were sent (an answer that overtook an earlier
    one on the simulated network waits for it). ``RaftReplica`` itself also ignores
    the answer to a superseded Fetch (``FetchResponse.for_fetch``): before it did, a
    late diverging answer cut entries the follower had since fetched and committed
    (found here: seed 21 with 5 controllers). The network still reorders everything else."""

    _WAITING = object()

    def __init__(self):
        self._sent = 0
        self._next = 0
        self._answers: dict[int, object] = {}

    def send(self) -> int:
        self._sent += 1
        self._answers[self._sent - 1] = self._WAITING
        return self._sent - 1

    def answered(self, seq: int, answer) -> list:
        """The answers now due, in request order."""
        self._answers[seq] = answer
        due = []
        while self._answers.get(self._next, self._WAITING) is not self._WAITING:
            due.append(self._answers.pop(self._next))
            self._next += 1
        return due


class SimController(NetworkNode):
    def __init__(self, sim: "World", node_id: int, voters: tuple[int, ...], drift_ppm: int = 0):
        super().__init__(controller_name(node_id), sim.loop, sim.network)
        self.sim = sim
        self.node_id = node_id
        self.voters = tuple(voters)
        self.clock = NodeClock(sim.loop, drift_ppm=drift_ppm)
        # The disk: the Raft log and quorum-state survive restarts.
        self.log = MemoryMetadataLog(clock_ms=self.clock.now_ms)
        self.quorum_state: raft.QuorumStateRecord | None = None
        self.replica: RaftReplica | None = None
        self.controller: QuorumController | None = None
        self.member: QuorumMember | None = None
        self.starts = 0
        self.voter_change_answers: dict[int, ErrorCode] = {}   # request number → AddRaftVoter/… answer
        self._voter_changes = 0
        self._names = {voter: controller_name(voter) for voter in self.voters}
        self._ids = {name: voter for voter, name in self._names.items()}

    # ================================================================ process

    def start(self) -> None:
        assert not self.up, f"{self.name} is already running"
        self.process_started()
        self.starts += 1
        config = self.sim.config
        static, dynamic = self.voters, {}
        if config.initial_voters:                    # a dynamic quorum (KIP-853)
            initial = self.voters[:config.initial_voters]
            if self.starts == 1 and self.node_id in initial and self.log.end_offset == 0:
                # Formatted with --initial-controllers: the same first entry on each.
                self.log.append_voters(0, tuple(raft.Voter(v, sim_directory_id(v)) for v in initial),
                                       timestamp_ms=0)
            static, dynamic = (), dict(kraft_version=1, directory_id=sim_directory_id(self.node_id),
                                       bootstrap_servers=initial)
        self.replica = RaftReplica(
            self.node_id, static, self.log, random.Random(f"{config.seed}-raft-{self.node_id}-{self.starts}"),
            RaftConfig(election_timeout_ms=config.raft_election_timeout_ms,
                       fetch_timeout_ms=config.raft_fetch_timeout_ms), **dynamic)
        self.controller = QuorumController(
            clock=self.clock, log=RaftMetadataLog(self.replica, self.log), cluster_id=CLUSTER_ID,
            rng=random.Random(f"{config.seed}-controller-{self.node_id}-{self.starts}"),
            session_timeout_ms=config.session_timeout_ms, node_id=self.node_id,
            bootstrap_features={**BOOTSTRAP_FEATURES,
                                ELIGIBLE_LEADER_REPLICAS_VERSION: int(config.eligible_leader_replicas)})
        self.member = QuorumMember(self.controller, self.replica)
        self._parked: list[list] = []         # brokers' metadata fetches waiting for news
        self._held: list[list] = []           # voters' Raft fetches waiting for news
        self._sent_high_watermark: dict[int, int] = {}
        self._connections: dict[tuple[int, str], _Connection] = {}
        self._wakeup_event = self._deadline_event = None
        self._wakeup_at = self._deadline_at = None
        self._mark = None
        self._settling = False
        self._input(lambda now: self.replica.start(now, self.quorum_state))

    def kill(self) -> None:
        """kill -9: the process and its timers, held requests and waiting writes are
        gone; the log and the quorum state stay (they were written before use)."""
        self.process_ended()

    @property
    def active(self) -> bool:
        """The active controller: up, the quorum's leader, its epoch's first entry committed."""
        return self.up and self.member is not None and self.member.active

    @property
    def image(self):
        return self.controller.image

    # ================================================================ one input

    def _input(self, feed: Callable[[int], None], answer_to: int | None = None,
               answer_type: type | None = None):
        """Feed the replica one input and carry out its effects (RaftDriver._step): the
        vote persisted first, then the messages sent; return the one addressed to
        ``answer_to`` of ``answer_type`` (the answer to a request)."""
        replica = self.replica
        feed(self.clock.monotonic_ms())
        self.voter_change_answers.update(replica.take_voter_change_results())
        if replica.quorum_state_changed:
            self.quorum_state = replica.quorum_state()
        self.log.high_watermark = min(replica.high_watermark, self.log.end_offset)
        answer = None
        for envelope in replica.take_outbox():
            if answer is None and answer_type is not None and envelope.destination == answer_to \
                    and isinstance(envelope.message, answer_type):
                answer = envelope.message
            else:
                self._send(envelope)
        if not self._settling:
            self._settle()
        return answer

    def _settle(self) -> None:
        """Follow every change of the replica: the member (activation, publishing,
        commit waits), held fetches, parked metadata fetches; then the timers."""
        self._settling = True
        try:
            while True:
                replica = self.replica
                mark = (self.log.end_offset, replica.high_watermark, replica.epoch, replica.state,
                        replica.leader_id)
                if mark == self._mark:
                    break
                previous, self._mark = self._mark, mark
                self._on_quorum_change(previous, mark)
                self._retry_held_fetches()
        finally:
            self._settling = False
        self._arm_wakeup()
        self._arm_deadline()

    def _on_quorum_change(self, previous, mark) -> None:
        if previous is None or previous[2:] != mark[2:]:
            self.loop.trace.add(self.loop.now_ms, self.name, f"raft {mark[3]} epoch {mark[2]} leader {mark[4]}")
        change = self.member.on_quorum_change()
        if change == ACTIVATED:
            self.sim.stats.controller_activations += 1
            self.loop.trace.add(self.loop.now_ms, self.name, f"active controller (epoch {self.replica.epoch})")
        elif change == DEACTIVATED:
            self.loop.trace.add(self.loop.now_ms, self.name, "no longer the active controller")
        self._wake_metadata_fetches()

    # ================================================================ timers

    def _arm_wakeup(self) -> None:
        """One timer at the replica's next wake-up (RaftDriver's timer loop: 1 s when none)."""
        now = self.clock.monotonic_ms()
        wakeup = self.replica.next_wakeup_ms()
        target = now + 1000 if wakeup is None else max(now, wakeup)
        if self._wakeup_event is not None and not self._wakeup_event.cancelled and self._wakeup_at == target:
            return
        if self._wakeup_event is not None:
            self._wakeup_event.cancel()
        self._wakeup_at = target
        self._wakeup_event = self.after(self.clock.to_global_delay(target - now), self._on_wakeup)

    def _on_wakeup(self) -> None:
        self._wakeup_event = None
        self._input(lambda now: self.replica.on_tick(now))

    def _arm_deadline(self) -> None:
        """The stale-broker check at ``next_deadline_ms`` — on the active controller only."""
        deadline = self.controller.next_deadline_ms() if self.member.active else None
        if deadline == self._deadline_at and (deadline is None or not self._deadline_event.cancelled):
            return
        if self._deadline_event is not None:
            self._deadline_event.cancel()
            self._deadline_event = None
        self._deadline_at = deadline
        if deadline is not None:
            delay = self.clock.to_global_delay(max(0, deadline - self.clock.monotonic_ms()))
            self._deadline_event = self.after(delay, self._on_deadline)

    def _on_deadline(self) -> None:
        self._deadline_event, self._deadline_at = None, None
        if not self.member.active:
            return
        for broker_id in self.controller.fire_due_deadlines():
            self.loop.trace.add(self.loop.now_ms, self.name, f"fenced broker {broker_id}: session expired")
        self._input(lambda now: None)

    # ================================================================ the quorum's messages

    def _send(self, envelope) -> None:
        """A request to another voter, over the connection RaftDriver would use (one per
        voter for fetches, one for the rest): its answer is fed to the replica in the
        order the requests went out, and a failed request closes the connection."""
        destination = self._names.get(envelope.destination)
        if destination is None:
            return
        message, voter = envelope.message, envelope.destination
        key = (voter, "fetch" if isinstance(message, FetchRequest) else "control")
        connection = self._connections.setdefault(key, _Connection())
        seq = connection.send()

        def answered(answer) -> None:
            if self._connections.get(key) is connection:
                for ready in connection.answered(seq, answer):
                    if ready is not None and _answer_type(message) is not None:
                        self._input(lambda now, ready=ready: self.replica.on_message(voter, ready, now))

        def failed(error: str) -> None:
            if self._connections.get(key) is not connection:
                return
            del self._connections[key]            # closed: what still waits on it is lost
            # A connection refused (the leader is down): pre-vote soon (RaftDriver).
            if isinstance(message, FetchRequest) and error == "refused":
                self._input(lambda now: self.replica.on_leader_unreachable(now))

        self.rpc.request(destination, type(message).__name__, message, self.sim.config.raft_fetch_timeout_ms,
                         answered, failed)

    def _on_raft_request(self, message) -> None:
        request, source = message.body, self._ids.get(message.src)
        if source is None:
            return
        if isinstance(request, FetchRequest):
            answer = self._answer_fetch(request)
            if self._nothing_new(request.replica_id, answer):
                entry = [message, request, None]
                entry[2] = self.after(self.clock.to_global_delay(FETCH_WAIT_MAX_MS),
                                      lambda: self._held_fetch_due(entry))
                self._held.append(entry)
            else:
                self._reply_fetch(message, request.replica_id, answer)
            return
        answer_type = _answer_type(request)
        if answer_type is QuorumEpochResponse:          # RaftDriver._handle_quorum_epoch
            errors = []
            self._input(lambda now: errors.append(self.replica.on_message(source, request, now)))
            self.reply(message, QuorumEpochResponse(self.replica.epoch, self.replica.leader_id, errors[0]))
            return
        answer = self._input(lambda now: self.replica.on_message(source, request, now), source, answer_type)
        if answer is None and answer_type is VoteResponse:
            answer = VoteResponse(self.replica.epoch, False, self.replica.leader_id, pre_vote=request.pre_vote)
        self.reply(message, answer)

    def _answer_fetch(self, request: FetchRequest) -> FetchResponse:
        answer = self._input(lambda now: self.replica.on_message(request.replica_id, request, now),
                             request.replica_id, FetchResponse)
        return answer or FetchResponse(self.replica.epoch, self.replica.leader_id, fenced=True)

    def _nothing_new(self, replica_id: int, answer: FetchResponse) -> bool:
        return (not answer.fenced and not answer.entries and answer.diverging is None
                and getattr(answer, "snapshot_id", None) is None
                and self._sent_high_watermark.get(replica_id) == answer.high_watermark)

    def _reply_fetch(self, message, replica_id: int, answer: FetchResponse) -> None:
        if not answer.fenced and answer.diverging is None:
            self._sent_high_watermark[replica_id] = answer.high_watermark
        self.reply(message, answer)

    def _retry_held_fetches(self) -> None:
        for entry in list(self._held):
            message, request, event = entry
            answer = self._answer_fetch(request)
            if not self._nothing_new(request.replica_id, answer):
                self._held.remove(entry)
                event.cancel()
                self._reply_fetch(message, request.replica_id, answer)

    def _held_fetch_due(self, entry) -> None:
        if entry in self._held:
            self._held.remove(entry)
            message, request, _ = entry
            self._reply_fetch(message, request.replica_id, self._answer_fetch(request))

    # ================================================================ brokers' requests

    def on_request(self, message) -> None:
        if type(message.body).__module__ == raft.__name__:
            self._on_raft_request(message)
        elif message.kind == "MetadataFetch":
            self._on_metadata_fetch(message)
        elif message.kind in WRITES:
            self._on_write(message)
        else:
            raise AssertionError(f"{self.name}: no handler for {message.kind}")

    def _on_write(self, message) -> None:
        """A write: refused unless active; answered once its records are committed."""
        kind, body = message.kind, message.body
        if not self.member.active:
            self.reply(message, NOT_CONTROLLER_ANSWERS[kind])
            return
        controller = self.controller
        if kind == "BrokerRegistration":
            result = controller.register_broker(body)
        elif kind == "BrokerHeartbeat":
            result = controller.process_broker_heartbeat(body)
        elif kind == "AlterPartition":
            result = controller.alter_partition(body)
        elif kind == "AssignReplicasToDirs":
            result = controller.assign_replicas_to_dirs(body)
        else:
            result = controller.create_topics([body])[0].error_code
        incarnation = self.owned.incarnation

        def done(committed: bool) -> None:
            if self.up and self.owned.incarnation == incarnation:
                self.reply(message, result if committed else NOT_CONTROLLER_ANSWERS[kind])
        self.member.after_commit(controller.last_write_offset, done)
        self._input(lambda now: None)       # the write appended (RaftDriver.appended)

    def _on_metadata_fetch(self, message) -> None:
        body = message.body
        if self.member.active and body["from_offset"] == self.replica.high_watermark and body["max_wait_ms"] > 0:
            entry = [message, None]
            entry[1] = self.after(self.clock.to_global_delay(body["max_wait_ms"]),
                                  lambda: self._answer_parked(entry))
            self._parked.append(entry)
            return
        self.reply(message, self._metadata_answer(body["from_offset"]))

    def _metadata_answer(self, from_offset: int) -> dict:
        replica = self.replica
        answer = {"error": ErrorCode.NONE, "records": b"", "high_watermark": replica.high_watermark,
                  "leader_id": replica.leader_id, "leader_epoch": replica.epoch}
        if not self.member.active:
            answer["error"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif not self.log.log_start_offset <= from_offset <= replica.high_watermark:
            answer["error"] = ErrorCode.OFFSET_OUT_OF_RANGE
        else:
            answer["records"] = self.log.read_bytes(from_offset, replica.high_watermark)
        return answer

    def _answer_parked(self, entry) -> None:
        if entry in self._parked:
            self._parked.remove(entry)
            self.reply(entry[0], self._metadata_answer(entry[0].body["from_offset"]))

    def _wake_metadata_fetches(self) -> None:
        still = []
        for entry in self._parked:
            if entry[0].body["from_offset"] < self.replica.high_watermark or not self.member.active:
                entry[1].cancel()
                self.reply(entry[0], self._metadata_answer(entry[0].body["from_offset"]))
            else:
                still.append(entry)
        self._parked = still

    # ================================================================ admin (the operator)

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict,
                     assignments=None) -> None:
        assert self.active, f"{self.name} is not the active controller"
        if assignments is not None:
            partitions = replication_factor = -1
        result = self.controller.create_topics([CreatableTopic(name, partitions, replication_factor,
                                                               assignments, configs=configs)])[0]
        assert result.error_code == ErrorCode.NONE, result
        self._input(lambda now: None)

    def change_voters(self, kind: str, voter_id: int, directory_id: str | None = None,
                      timeout_ms: int = 20_000) -> tuple[int, ErrorCode]:
        """An operator's AddRaftVoter / RemoveRaftVoter to this controller (Kafka's
        kafka-metadata-quorum add-controller / remove-controller): (request number,
        the refusal or NONE); an accepted request's answer comes into
        ``voter_change_answers`` under its number once committed (or timed out)."""
        self._voter_changes += 1
        number, directory_id = self._voter_changes, directory_id or sim_directory_id(voter_id)
        errors = []
        if kind == "add":
            self._input(lambda now: errors.append(self.replica.add_voter(
                raft.Voter(voter_id, directory_id), now, timeout_ms, number)))
        else:
            self._input(lambda now: errors.append(self.replica.remove_voter(
                voter_id, directory_id, now, timeout_ms, number)))
        return number, errors[0]

    def alter_configs(self, resources) -> list:
        """IncrementalAlterConfigs (``AlterConfigsResource``s); the results."""
        assert self.active, f"{self.name} is not the active controller"
        results = self.controller.incremental_alter_configs(resources)
        self._input(lambda now: None)
        return results

    def reassign(self, topic: str, partition: int, replicas: tuple[int, ...] | None) -> ErrorCode:
        """AlterPartitionReassignments for one partition (None cancels); its error code."""
        assert self.active, f"{self.name} is not the active controller"
        result = self.controller.alter_partition_reassignments(
            [ReassignmentTarget(topic, partition, replicas)])[0]
        self._input(lambda now: None)
        return result.error_code


# ==================================================================== the broker's side


def not_active_hint(kind: str, answer) -> int | None:
    """None if ``answer`` is the active controller's; else the leader it names (-1 for
    none): NOT_CONTROLLER to a write, NOT_LEADER_OR_FOLLOWER to a metadata fetch
    (controller_channel.not_active_hint)."""
    if kind == "MetadataFetch":
        return answer["leader_id"] if answer["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER else None
    code = answer if isinstance(answer, ErrorCode) else answer.error_code
    return -1 if code == ErrorCode.NOT_CONTROLLER else None


class ControllerChannel:
    """A broker process's way to the active controller: production's ``RemoteController``.

    A call goes to the voter believed active. NOT_CONTROLLER (or NOT_LEADER_OR_FOLLOWER
    to a metadata fetch) or no answer within ``attempt_ms`` moves on — to the leader the
    answer names, else to the next voter — and the call is sent again after a backoff
    (50 ms doubling to 250 ms) until its deadline, one attempt per voter; then the last
    answer is the caller's, or the failure. With a single voter a failed attempt is the
    caller's at once."""

    BACKOFF_MS_MIN, BACKOFF_MS_MAX = 50, 250

    def __init__(self, node: NetworkNode, voters: list[int]):
        self.node = node
        self.voters = list(voters)
        self.index = 0

    @property
    def leader_guess(self) -> int:
        return self.voters[self.index]

    def _move_on(self, index: int, hint: int) -> None:
        if hint in self.voters and self.voters.index(hint) != index:
            self.index = self.voters.index(hint)
        elif self.index == index:
            self.index = (index + 1) % len(self.voters)

    def request(self, kind: str, body, attempt_ms: int, on_reply: Callable[[object], None],
                on_failed: Callable[[str], None]) -> None:
        loop, single = self.node.loop, len(self.voters) == 1
        deadline = loop.now_ms + attempt_ms * len(self.voters)
        backoff = [self.BACKOFF_MS_MIN]

        def again(index: int, hint: int) -> None:
            self._move_on(index, hint)
            delay, backoff[0] = backoff[0], min(backoff[0] * 2, self.BACKOFF_MS_MAX)
            self.node.after(delay, attempt)

        def attempt() -> None:
            index = self.index

            def replied(answer) -> None:
                hint = not_active_hint(kind, answer)
                if hint is None or loop.now_ms + backoff[0] >= deadline:
                    on_reply(answer)
                else:
                    again(index, hint)

            def failed(error: str) -> None:
                if single or loop.now_ms + backoff[0] >= deadline:
                    on_failed(error)
                else:
                    again(index, -1)
            remaining = max(1, deadline - loop.now_ms)
            self.node.rpc.request(controller_name(self.voters[index]), kind, body,
                                  remaining if single else min(remaining, attempt_ms), replied, failed)
        attempt()
