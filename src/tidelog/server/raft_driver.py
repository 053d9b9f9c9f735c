"""The controller quorum on the wire: a ``RaftReplica`` carried over Kafka's KRaft RPCs.

Theory of operation. ``RaftDriver`` is the thin asyncio layer around the sans-I/O
``tidelog.raft.RaftReplica`` (docs/raft.md). It owns nothing the replica decides:

* **inputs** — a request from another voter (Vote, BeginQuorumEpoch,
  EndQuorumEpoch, and Fetch of ``__cluster_metadata-0`` with the voter's id as
  ``replica_id``) becomes the replica's message; the replica's answer to that
  voter, found in its outbox, becomes the response. An answer to a request this
  node sent becomes a message too. A timer fires ``on_tick`` at the replica's
  ``next_wakeup_ms``.
* **effects** — after every input: the ``quorum-state`` file is written when the
  vote or epoch changed (before anything is sent), the metadata log's high
  watermark is set to the quorum's, the outbox's requests go out (one connection
  per voter for fetches and one for the rest, since a connection answers in
  order and a held fetch must not delay a vote), and ``on_change`` tells the
  controller that leadership or the high watermark may have moved.
* **long polling** — a voter's Fetch that would bring nothing new (no records,
  the same high watermark as last sent to it) is held until the log or the high
  watermark changes, or ``FETCH_WAIT_MAX_MS`` passes, then answered afresh; so a
  write is committed two round trips after it is appended, without busy fetching.

Brokers are observers that never vote: they fetch the *committed* metadata log
from the active controller through the controller's own Fetch handler
(``controller_server``), so they never need to truncate.

Input validation (docs/raft.md, "Input validation"): before a request reaches the
replica, a cluster id other than this cluster's (absent included) is refused with
INCONSISTENT_CLUSTER_ID and anything but the one partition ``__cluster_metadata-0``
with INVALID_REQUEST, both top-level as Kafka's ``KafkaRaftClient`` does; the
replica's own checks (``RaftReplica.check_request``: voters only, epochs in bounds)
answer the partition's error. A refused request changes nothing and writes nothing.
A ``quorum-state`` file the replica cannot have written is reported and replaced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import uuid
from typing import Callable

from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode
from tidelog.metadata.file_log import FileMetadataLog, QuorumStateFile
from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import ZERO_UUID, ProtocolError, millis
from tidelog.records.batch import iter_batches
from tidelog.raft.replica import (
    BeginQuorumEpoch,
    EndQuorumEpoch,
    Envelope,
    QuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    QuorumStateRecord,
    RaftConfig,
    RaftReplica,
    Voter,
    VoteRequest,
    VoteResponse,
)

logger = logging.getLogger("tidelog.raft")

FETCH_WAIT_MAX_MS = 500            # how long a caught-up voter's Fetch is held
FETCH_MAX_BYTES = 8 * 1024 * 1024
_PEER_ERRORS = (OSError, ConnectionError, asyncio.TimeoutError, ProtocolError)
# Vote v2 carries KIP-996 pre-votes; Fetch v17 the fetcher's directory id (KIP-853) and
# the leader's endpoint in its answer (NodeEndpoints), how an observer finds the leader.
_VOTE_VERSION, _QUORUM_EPOCH_VERSION, _FETCH_VERSION = 2, 0, 17
METADATA_TOPIC_ID = uuid.UUID(int=1)      # Kafka's Uuid.METADATA_TOPIC_ID (Fetch v13+ names topics by id)


def _code(value) -> int:
    return int(getattr(value, "value", value))


class RaftDriver:
    def __init__(self, node_id: int, voters: list[tuple[int, str, int]], metadata_log: FileMetadataLog,
                 clock: Clock, config: RaftConfig, cluster_id: str,
                 on_change: Callable[[], None], rng: random.Random | None = None, security=None,
                 directory_id: str = "", bootstrap: list[tuple[str, int]] | None = None,
                 listener_name: str = "CONTROLLER"):
        """``voters`` are the static ``controller.quorum.voters``; with none and
        ``bootstrap`` addresses (``controller.quorum.bootstrap.servers``) the quorum is
        dynamic (KIP-853, kraft.version 1): the voter set is the log's latest
        VotersRecord (``tidelog format --standalone`` / ``--initial-controllers``
        writes the first), the addresses of voters come from its endpoints on
        ``listener_name``, and a controller that is in no set yet is an observer
        that finds the leader through the bootstrap servers (ids -1, -2, …)."""
        self.node_id = node_id
        self.security = security          # TLS / SASL towards the controller listener
        self.listener_name = listener_name
        self.addresses = {voter: (host, port) for voter, host, port in voters}
        dynamic = not voters and bootstrap is not None
        bootstrap_ids = tuple(-1 - i for i in range(len(bootstrap or ())))
        if dynamic:
            self.addresses.update(zip(bootstrap_ids, bootstrap))
        self.own_endpoint: Callable[[], tuple[str, str, int] | None] = lambda: None   # set by the server
        self._voters_seen = None
        self._voter_waiters: dict[object, asyncio.Future] = {}     # AddRaftVoter & co. awaiting the commit
        self.metadata_log = metadata_log
        self.clock = clock
        self.cluster_id = cluster_id
        self.on_change = on_change
        self.replica = RaftReplica(node_id, () if dynamic else tuple(sorted(self.addresses)), metadata_log,
                                   rng or random.Random(), config, kraft_version=int(dynamic),
                                   directory_id=directory_id, bootstrap_servers=bootstrap_ids)
        self._learn_voter_addresses()
        self.state_file = QuorumStateFile(metadata_log.directory, metadata_log.fs)
        self._connections: dict[tuple[int, str], KafkaConnection] = {}
        self._connecting: dict[tuple[int, str], asyncio.Lock] = {}
        self._changed = asyncio.Event()       # log end or high watermark moved (held fetches)
        self._wake = asyncio.Event()          # the next wake-up may have moved
        self._sent_high_watermark: dict[int, int] = {}
        self._tasks: set[asyncio.Task] = set()
        self._timer: asyncio.Task | None = None
        self._last = (None, None, None, None)

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        record, problem = self._read_quorum_state()

        def start(now: int) -> None:
            self.replica.start(now, record)
            if problem is not None:
                self.replica.quorum_state_changed = True      # replace the unreadable record now
        self._step(start)
        problem = problem or self.replica.discarded_quorum_state
        if problem is not None:
            logger.error("quorum: %s cannot be a state this quorum was in (%s): discarded; node %d starts "
                      "unattached in epoch %d (its log's last), with no vote, as with no file",
                      self.state_file.path, problem, self.node_id, self.replica.epoch)
        self._timer = asyncio.get_running_loop().create_task(self._timer_loop())

    def _read_quorum_state(self) -> tuple[QuorumStateRecord | None, str | None]:
        """The persisted record, or (None, why) when its fields are not integers at all."""
        persisted = self.state_file.read()
        if persisted is None:
            return None, None
        try:
            fields = [persisted[name] for name in ("leaderEpoch", "votedId", "leaderId")]
        except (KeyError, TypeError):
            return None, "a field is missing"
        if any(type(value) is not int for value in fields):
            return None, f"leaderEpoch, votedId, leaderId {fields} are not all integers"
        return QuorumStateRecord(*fields), None      # its values are the replica's to judge

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        for connection in self._connections.values():
            connection.close()

    async def _timer_loop(self) -> None:
        while True:
            wakeup = self.replica.next_wakeup_ms()
            delay_ms = 1000 if wakeup is None else max(0, wakeup - self.clock.monotonic_ms())
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)
                continue
            except asyncio.TimeoutError:
                pass
            self._step(lambda now: self.replica.on_tick(now))

    # ------------------------------------------------------------ one input

    def appended(self) -> None:
        """The leader appended (inside a controller write): move the high watermark and
        wake held fetches now; tell the controller once the write has returned."""
        self._step(lambda now: None, defer_notify=True)
        self._changed.set()                 # the log grew before this step began: wake held fetches
        self._changed = asyncio.Event()

    def _step(self, feed: Callable[[int], None], answer_to: int | None = None,
              answer_type: type | None = None, defer_notify: bool = False):
        """Feed the replica one input, carry out its effects; return the message it
        addressed to ``answer_to`` of ``answer_type`` (the response to a request)."""
        replica = self.replica
        before = (replica.log.end_offset, replica.high_watermark)
        feed(self.clock.monotonic_ms())
        if replica.quorum_state_changed:
            state = replica.quorum_state()
            self.state_file.write(state.epoch, state.voted_for, state.leader_id, replica.voters)
        log_ = self.metadata_log.log
        log_.update_high_watermark(min(replica.high_watermark, log_.log_end_offset))
        self._learn_voter_addresses()
        for token, error in replica.take_voter_change_results():
            waiter = self._voter_waiters.pop(token, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(error)
        answer = None
        for envelope in replica.take_outbox():
            if answer is None and envelope.destination == answer_to and isinstance(envelope.message, answer_type):
                answer = envelope.message
            else:
                self._send(envelope)
        if (replica.log.end_offset, replica.high_watermark) != before:
            self._changed.set()
            self._changed = asyncio.Event()
        if defer_notify:
            asyncio.get_running_loop().call_soon(self._notify)
        else:
            self._notify()
        self._wake.set()
        return answer

    def _learn_voter_addresses(self) -> None:
        """A dynamic quorum's voters are reached at their VotersRecord endpoints (the
        controller listener's, else the first): learned whenever the set in force
        changes. Addresses of voters that left stay known (a removed voter may still
        lead, or be named as leader, until its removal commits)."""
        replica = self.replica
        if replica.voters_offset == self._voters_seen:
            return
        self._voters_seen = replica.voters_offset
        for voter in replica.voter_set:
            endpoints = [e for e in voter.endpoints if e[0] == self.listener_name] or list(voter.endpoints)
            if endpoints and voter.voter_id != self.node_id:
                self.addresses[voter.voter_id] = (endpoints[0][1], endpoints[0][2])

    async def change_voters(self, kind: str, voter: Voter, timeout_ms: int) -> ErrorCode:
        """AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter on this replica (``kind``
        "add", "remove", "update"): the replica's refusal at once, or its answer once the
        VotersRecord is committed (or REQUEST_TIMED_OUT after ``timeout_ms``, or
        NOT_LEADER_OR_FOLLOWER when leadership is lost first)."""
        token = object()
        errors = []
        replica = self.replica

        def feed(now: int) -> None:
            if kind == "add":
                errors.append(replica.add_voter(voter, now, timeout_ms, token))
            elif kind == "remove":
                errors.append(replica.remove_voter(voter.voter_id, voter.directory_id, now, timeout_ms, token))
            else:
                errors.append(replica.update_voter(voter, now, timeout_ms, token))
            if errors[0] == ErrorCode.NONE:
                self._voter_waiters[token] = asyncio.get_running_loop().create_future()
        self._step(feed)
        if errors[0] != ErrorCode.NONE:
            return errors[0]
        waiter = self._voter_waiters.get(token)
        if waiter is None:                    # settled inside the step itself
            return ErrorCode.NONE
        return await waiter

    def _notify(self) -> None:
        replica = self.replica
        now_state = (replica.state, replica.epoch, replica.leader_id, replica.high_watermark)
        if now_state[:3] != self._last[:3]:
            logger.info("quorum: node %d is %s in epoch %d (leader %d)", self.node_id, replica.state,
                     replica.epoch, replica.leader_id)
            if replica.epoch_exhausted:
                logger.error("quorum: node %d is at epoch %d, the last an election can use: it cannot "
                          "start another", self.node_id, replica.epoch)
        if now_state != self._last:
            self._last = now_state
            self.on_change()

    # ------------------------------------------------------------ outgoing

    def _send(self, envelope: Envelope) -> None:
        if envelope.destination not in self.addresses:
            return
        task = asyncio.get_running_loop().create_task(self._exchange(envelope.destination, envelope.message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, voter: int, lane: str) -> KafkaConnection:
        key = (voter, lane)
        lock = self._connecting.setdefault(key, asyncio.Lock())
        async with lock:
            connection = self._connections.get(key)
            if connection is None or connection.closed:
                host, port = self.addresses[voter]
                connection = await KafkaConnection.connect(host, port, f"raft-{self.node_id}", timeout_s=2,
                                                           security=self.security)
                self._connections[key] = connection
            return connection

    async def _exchange(self, voter: int, message) -> None:
        """Send one request to ``voter``; feed its answer to the replica. A lost
        request is the replica's to retry (its timers), never ours."""
        timeout_s = self.replica.config.fetch_timeout_ms / 1000
        try:
            if isinstance(message, FetchRequest):
                connection = await self._connection(voter, "fetch")
                response = await connection.request(ApiKey.FETCH, self._fetch_body(message),
                                                    version=_FETCH_VERSION, timeout_s=timeout_s)
                reply = self._fetch_reply(response)
                if reply is not None:             # Kafka's Fetch does not echo what it answers: we know
                    reply = dataclasses.replace(reply, for_fetch=(message.fetch_offset, message.last_fetched_epoch))
            elif isinstance(message, FetchSnapshotRequest):
                connection = await self._connection(voter, "fetch")
                reply = await self._fetch_snapshot(connection, message, timeout_s)
            elif isinstance(message, VoteRequest):
                connection = await self._connection(voter, "control")
                response = await connection.request(ApiKey.VOTE, self._vote_body(voter, message),
                                                    version=_VOTE_VERSION, timeout_s=timeout_s)
                reply = self._vote_reply(response, message.pre_vote)
            elif isinstance(message, (BeginQuorumEpoch, EndQuorumEpoch)):
                connection = await self._connection(voter, "control")
                api_key = ApiKey.BEGIN_QUORUM_EPOCH if isinstance(message, BeginQuorumEpoch) \
                    else ApiKey.END_QUORUM_EPOCH
                response = await connection.request(api_key, self._quorum_epoch_body(voter, message),
                                                    version=_QUORUM_EPOCH_VERSION, timeout_s=timeout_s)
                reply = self._quorum_epoch_reply(response)
            else:
                raise AssertionError(f"the replica sent a message the driver cannot carry: {message}")
        except _PEER_ERRORS as e:
            logger.debug("quorum: %s to voter %d failed: %s", type(message).__name__, voter, e)
            if isinstance(message, FetchRequest) and not isinstance(e, asyncio.TimeoutError):
                self._step(lambda now: self.replica.on_leader_unreachable(now))
            connection = self._connections.pop((voter, "fetch" if isinstance(message, (FetchRequest,
                                                FetchSnapshotRequest)) else "control"), None)
            if connection is not None:
                connection.close()
            return
        if reply is not None:
            self._step(lambda now: self.replica.on_message(voter, reply, now))

    @staticmethod
    def _quorum_epoch_reply(response) -> QuorumEpochResponse | None:
        """What a voter's BeginQuorumEpoch / EndQuorumEpoch answer says of its epoch and
        leader (its partition entry), or None if it has none (a top-level refusal)."""
        if int(response.error_code) != 0 or not response.topics or not response.topics[0].partitions:
            return None
        p = response.topics[0].partitions[0]
        try:
            error = ErrorCode(int(p.error_code))
        except ValueError:
            return None
        return QuorumEpochResponse(int(p.leader_epoch), int(p.leader_id), error)

    def _partition(self, **fields) -> dict:
        return {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0, **fields}]}]}

    def _vote_body(self, voter: int, request: VoteRequest) -> dict:
        body = self._partition(replica_epoch=request.epoch, replica_id=request.candidate_id,
                               last_offset_epoch=request.last_epoch, last_offset=request.end_offset,
                               pre_vote=request.pre_vote)
        body.update(cluster_id=self.cluster_id, voter_id=voter)
        return body

    def _vote_reply(self, response, pre_vote: bool) -> VoteResponse | None:
        if _code(response.error_code) != 0 or not response.topics or not response.topics[0].partitions:
            return None
        p = response.topics[0].partitions[0]
        if _code(p.error_code) not in (0, ErrorCode.FENCED_LEADER_EPOCH):
            return None
        return VoteResponse(int(p.leader_epoch), bool(p.vote_granted), int(p.leader_id), pre_vote=pre_vote)

    def _quorum_epoch_body(self, voter: int, message) -> dict:
        body = self._partition(leader_id=message.leader_id, leader_epoch=message.epoch, preferred_successors=[])
        body.update(cluster_id=self.cluster_id)
        return body

    def _fetch_body(self, request: FetchRequest) -> dict:
        directory = uuid.UUID(request.replica_directory_id) if request.replica_directory_id else ZERO_UUID
        return {"cluster_id": self.cluster_id, "replica_id": request.replica_id,
                "replica_state": {"replica_id": request.replica_id, "replica_epoch": -1},
                "max_wait": FETCH_WAIT_MAX_MS, "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [{
                    "partition": 0, "current_leader_epoch": request.epoch, "fetch_offset": request.fetch_offset,
                    "last_fetched_epoch": request.last_fetched_epoch, "log_start_offset": -1,
                    "partition_max_bytes": FETCH_MAX_BYTES, "replica_directory_id": directory}]}],
                "forgotten_topics_data": [], "rack_id": ""}

    def _fetch_reply(self, response) -> FetchResponse | None:
        if _code(response.error_code) != 0 or not response.responses or not response.responses[0].partitions:
            return None
        for node in getattr(response, "node_endpoints", None) or ():
            # The leader's endpoint (Fetch v17): how an observer that knows only the
            # bootstrap servers reaches it. Positive ids and ports only.
            if int(node.node_id) >= 0 and int(node.node_id) != self.node_id and 0 < int(node.port) < 65536:
                self.addresses.setdefault(int(node.node_id), (str(node.host), int(node.port)))
        p = response.responses[0].partitions[0]
        epoch, leader = int(p.current_leader.leader_epoch), int(p.current_leader.leader_id)
        error = _code(p.error_code)
        if error != 0:
            return FetchResponse(epoch, leader, fenced=True)
        diverging = None
        if int(p.diverging_epoch.epoch) >= 0:
            diverging = (int(p.diverging_epoch.epoch), int(p.diverging_epoch.end_offset))
        if int(p.snapshot_id.end_offset) >= 0:
            return FetchResponse(epoch, leader, int(p.high_watermark),
                                 snapshot_id=(int(p.snapshot_id.end_offset), int(p.snapshot_id.epoch)))
        entries, start = (), -1
        records = p.records or b""
        if records:
            batches = [(max(h.partition_leader_epoch, 0), h.base_offset, bytes(records[pos:pos + h.size_bytes]))
                       for pos, h in iter_batches(records) if pos + h.size_bytes <= len(records)]
            if batches:
                start = batches[0][1]
                entries = tuple((epoch, batch) for epoch, _, batch in batches)
        if start < 0:
            start = self.replica.log.end_offset
        return FetchResponse(epoch, leader, int(p.high_watermark), start, entries, diverging)

    # ------------------------------------------------------------ incoming

    def _refusal(self, request, topic_field: str, index_field: str) -> ErrorCode:
        """Kafka's top-level checks of a quorum request, before anything is believed:
        the cluster id must be this cluster's (a request without one is refused too:
        every voter sends it), and the request must be about ``__cluster_metadata-0``
        alone (one topic, one partition)."""
        if getattr(request, "cluster_id", None) != self.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        topics = request.topics
        if len(topics) != 1 or len(topics[0].partitions) != 1 or \
                getattr(topics[0], topic_field, None) not in (METADATA_TOPIC, None) or \
                int(getattr(topics[0].partitions[0], index_field)) != 0:
            return ErrorCode.INVALID_REQUEST
        return ErrorCode.NONE

    def _log_refusal(self, api: str, error: ErrorCode, detail: str) -> None:
        logger.debug("quorum: node %d refused %s (%s): %s", self.node_id, api, error.name, detail)

    def handle_vote(self, header, request):
        refusal = self._refusal(request, "topic_name", "partition_index")
        if refusal != ErrorCode.NONE:
            self._log_refusal("Vote", refusal, f"cluster id {request.cluster_id!r}")
            return {"error_code": int(refusal), "topics": [], "node_endpoints": []}
        p = request.topics[0].partitions[0]
        pre_vote = bool(getattr(p, "pre_vote", False))
        epoch = p.replica_epoch if hasattr(p, "replica_epoch") else p.candidate_epoch    # v2 renamed them
        candidate = p.replica_id if hasattr(p, "replica_id") else p.candidate_id
        message = VoteRequest(int(epoch), int(candidate), int(p.last_offset_epoch), int(p.last_offset),
                              pre_vote=pre_vote)
        voter_id = int(getattr(request, "voter_id", -1))
        if voter_id >= 0 and voter_id != self.node_id:
            # Meant for another voter (Kafka answers INVALID_VOTER_KEY, a code this
            # server does not know; INVALID_REQUEST is the nearest).
            answer = VoteResponse(self.replica.epoch, False, self.replica.leader_id, pre_vote=pre_vote,
                                  error=ErrorCode.INVALID_REQUEST)
        else:
            answer = self._step(lambda now: self.replica.on_message(message.candidate_id, message, now),
                                message.candidate_id, VoteResponse)
        if answer is None:
            answer = VoteResponse(self.replica.epoch, False, self.replica.leader_id)
        if answer.error != ErrorCode.NONE:
            self._log_refusal("Vote", answer.error, str(message))
        return {"error_code": 0, "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
            "partition_index": 0, "error_code": int(answer.error), "leader_id": answer.leader_id,
            "leader_epoch": answer.epoch, "vote_granted": answer.granted}]}], "node_endpoints": []}

    def _quorum_epoch_answer(self, error: ErrorCode = ErrorCode.NONE) -> dict:
        return {"error_code": 0, "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
            "partition_index": 0, "error_code": int(error), "leader_id": self.replica.leader_id,
            "leader_epoch": self.replica.epoch}]}], "node_endpoints": []}

    def _handle_quorum_epoch(self, request, message_type) -> dict:
        refusal = self._refusal(request, "topic_name", "partition_index")
        if refusal != ErrorCode.NONE:
            self._log_refusal(message_type.__name__, refusal, f"cluster id {request.cluster_id!r}")
            return {"error_code": int(refusal), "topics": [], "node_endpoints": []}
        p = request.topics[0].partitions[0]
        message = message_type(int(p.leader_epoch), int(p.leader_id))
        errors = []
        self._step(lambda now: errors.append(self.replica.on_message(message.leader_id, message, now)))
        error = errors[0] if errors else ErrorCode.NONE
        if error != ErrorCode.NONE:
            self._log_refusal(message_type.__name__, error, str(message))
        return self._quorum_epoch_answer(error)

    def handle_begin_quorum_epoch(self, header, request):
        return self._handle_quorum_epoch(request, BeginQuorumEpoch)

    def handle_end_quorum_epoch(self, header, request):
        return self._handle_quorum_epoch(request, EndQuorumEpoch)

    def is_voter_fetch(self, request) -> bool:
        """A Fetch for the quorum's replica (rather than a broker's, which reads only the
        committed log): from a voter this node knows, or from any controller that names
        its directory id (Fetch v17: a KIP-853 observer, maybe about to be added)."""
        replica_id = int(getattr(getattr(request, "replica_state", None), "replica_id", -1))
        if replica_id < 0:
            replica_id = int(getattr(request, "replica_id", -1))
        if replica_id < 0 or replica_id == self.node_id:
            return False
        if replica_id in self.addresses:
            return True
        return any(getattr(p, "replica_directory_id", None) not in (None, ZERO_UUID)
                   for topic in request.topics for p in topic.partitions)

    def handle_fetch(self, header, request):
        """A voter's Fetch: answered at once, or held while there is nothing new."""
        replica_id = int(request.replica_state.replica_id) if getattr(request, "replica_state", None) \
            else int(request.replica_id)
        refusal = self._refusal(request, "topic", "partition")
        if refusal == ErrorCode.NONE and millis(request.max_wait) < 0:
            refusal = ErrorCode.INVALID_REQUEST
        if refusal != ErrorCode.NONE:
            self._log_refusal("Fetch", refusal, f"from replica {replica_id}")
            return {"throttle_time": 0, "error_code": int(refusal), "session_id": 0, "responses": []}
        p = request.topics[0].partitions[0]
        directory = getattr(p, "replica_directory_id", None)
        message = FetchRequest(int(p.current_leader_epoch), replica_id, int(p.fetch_offset),
                               int(p.last_fetched_epoch), "" if directory in (None, ZERO_UUID) else str(directory))
        answer = self._answer_fetch(message)
        if self._nothing_new(replica_id, answer):
            # The event is taken now, so a change before the coroutine first runs wakes it.
            return self._answer_fetch_later(message, min(millis(request.max_wait), FETCH_WAIT_MAX_MS),
                                            self._changed)
        return self._fetch_body_of(replica_id, answer)

    def _answer_fetch(self, message: FetchRequest) -> FetchResponse:
        answer = self._step(lambda now: self.replica.on_message(message.replica_id, message, now),
                            message.replica_id, FetchResponse)
        return answer or FetchResponse(self.replica.epoch, self.replica.leader_id, fenced=True)

    def _nothing_new(self, replica_id: int, answer: FetchResponse) -> bool:
        return (not answer.fenced and not answer.entries and answer.diverging is None
                and answer.snapshot_id is None
                and self._sent_high_watermark.get(replica_id) == answer.high_watermark)

    async def _answer_fetch_later(self, message: FetchRequest, max_wait_ms: int, changed: asyncio.Event):
        deadline = self.clock.monotonic_ms() + max_wait_ms
        while True:
            remaining = deadline - self.clock.monotonic_ms()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(changed.wait(), remaining / 1000)
            except asyncio.TimeoutError:
                break
            changed = self._changed
            answer = self._answer_fetch(message)
            if not self._nothing_new(message.replica_id, answer):
                return self._fetch_body_of(message.replica_id, answer)
        answer = self._answer_fetch(message)
        return self._fetch_body_of(message.replica_id, answer)

    def _fetch_body_of(self, replica_id: int, answer: FetchResponse) -> dict:
        entry = {"partition_index": 0, "error_code": 0, "high_watermark": answer.high_watermark,
                 "last_stable_offset": answer.high_watermark, "log_start_offset": self.metadata_log.log_start_offset,
                 "diverging_epoch": {"epoch": -1, "end_offset": -1},
                 "current_leader": {"leader_id": answer.leader_id, "leader_epoch": answer.epoch},
                 "snapshot_id": {"end_offset": -1, "epoch": -1},
                 "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
        if answer.error != ErrorCode.NONE:
            entry["error_code"] = int(answer.error)
            entry["current_leader"] = {"leader_id": self.replica.leader_id, "leader_epoch": self.replica.epoch}
        elif answer.fenced:
            entry["error_code"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER if self.replica.leader_id != self.node_id
                                      else ErrorCode.FENCED_LEADER_EPOCH)
            entry["current_leader"] = {"leader_id": self.replica.leader_id, "leader_epoch": self.replica.epoch}
        elif answer.diverging is not None:
            entry["diverging_epoch"] = {"epoch": answer.diverging[0], "end_offset": answer.diverging[1]}
        elif answer.snapshot_id is not None:
            entry["snapshot_id"] = {"end_offset": answer.snapshot_id[0], "epoch": answer.snapshot_id[1]}
        else:
            entry["records"] = b"".join(batch for _, batch in answer.entries)
            self._sent_high_watermark[replica_id] = answer.high_watermark
        return {"throttle_time": 0, "error_code": 0, "session_id": 0, "node_endpoints": self._leader_endpoint(),
                "responses": [{"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [entry]}]}

    def _leader_endpoint(self) -> list[dict]:
        """Fetch v17's NodeEndpoints: where the leader this node knows is reached."""
        leader = self.replica.leader_id
        if leader == self.node_id:
            own = self.own_endpoint()
            return [{"node_id": leader, "host": own[1], "port": own[2], "rack": None}] if own and own[2] else []
        if leader >= 0 and leader in self.addresses:
            host, port = self.addresses[leader]
            return [{"node_id": leader, "host": host, "port": port, "rack": None}]
        return []

    # ------------------------------------------------------------ FetchSnapshot (KIP-630)

    async def _fetch_snapshot(self, connection: KafkaConnection, request: FetchSnapshotRequest,
                              timeout_s: float) -> FetchSnapshotResponse:
        """The whole snapshot, in FETCH_MAX_BYTES chunks (its ``position``); one message
        for the replica once it is complete."""
        data = bytearray()
        end, epoch = request.snapshot_id
        while True:
            response = await connection.request(ApiKey.FETCH_SNAPSHOT, {
                "cluster_id": self.cluster_id, "replica_id": request.replica_id, "max_bytes": FETCH_MAX_BYTES,
                "topics": [{"name": METADATA_TOPIC, "partitions": [{
                    "partition": 0, "current_leader_epoch": request.epoch,
                    "snapshot_id": {"end_offset": end, "epoch": epoch}, "position": len(data)}]}]},
                version=0, timeout_s=timeout_s)
            p = response.topics[0].partitions[0] if response.topics and response.topics[0].partitions else None
            if p is None or _code(p.error_code) != 0 or int(p.position) != len(data):
                leader = int(p.current_leader.leader_id) if p is not None else self.replica.leader_id
                epoch_now = int(p.current_leader.leader_epoch) if p is not None else self.replica.epoch
                return FetchSnapshotResponse(epoch_now, leader, request.snapshot_id, None)
            data += bytes(p.unaligned_records or b"")
            if len(data) >= int(p.size):
                return FetchSnapshotResponse(int(p.current_leader.leader_epoch), int(p.current_leader.leader_id),
                                             request.snapshot_id, bytes(data))

    def handle_fetch_snapshot(self, header, request, observer_data=None):
        """A voter's FetchSnapshot goes through the replica (leader and epoch checks);
        ``observer_data`` is the snapshot a broker asked for, already looked up."""
        voter = observer_data is None and int(request.replica_id) in self.addresses
        refusal = self._refusal(request, "name", "partition") if voter else ErrorCode.NONE
        if refusal != ErrorCode.NONE:
            self._log_refusal("FetchSnapshot", refusal, f"from replica {request.replica_id}")
            return {"throttle_time": 0, "error_code": int(refusal), "topics": []}
        p = request.topics[0].partitions[0]
        snapshot_id = (int(p.snapshot_id.end_offset), int(p.snapshot_id.epoch))
        error = ErrorCode.NONE
        if voter:
            message = FetchSnapshotRequest(int(p.current_leader_epoch), int(request.replica_id), snapshot_id)
            answer = self._step(lambda now: self.replica.on_message(message.replica_id, message, now),
                                message.replica_id, FetchSnapshotResponse)
            data = answer.data if answer is not None else None
            error = answer.error if answer is not None else ErrorCode.NONE
        else:
            data = observer_data
        entry = {"index": 0, "error_code": 0, "snapshot_id": {"end_offset": snapshot_id[0], "epoch": snapshot_id[1]},
                 "current_leader": {"leader_id": self.replica.leader_id, "leader_epoch": self.replica.epoch},
                 "size": 0, "position": int(p.position), "unaligned_records": b""}
        if error != ErrorCode.NONE:
            self._log_refusal("FetchSnapshot", error, f"from replica {request.replica_id}")
            entry["error_code"] = int(error)
        elif data is not None and not 0 <= int(p.position) <= len(data):
            entry["error_code"] = int(ErrorCode.POSITION_OUT_OF_RANGE)      # Kafka's answer
        elif data is None:
            entry["error_code"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER if self.replica.leader_id != self.node_id
                                      else ErrorCode.SNAPSHOT_NOT_FOUND)
        else:
            position = int(p.position)
            entry["size"] = len(data)
            entry["unaligned_records"] = data[position:position + min(int(request.max_bytes), FETCH_MAX_BYTES)]
        return {"throttle_time": 0, "error_code": 0, "topics": [{"name": METADATA_TOPIC, "partitions": [entry]}]}

    # ------------------------------------------------------------ DescribeQuorum

    def describe(self) -> dict:
        """Kafka's DescribeQuorum partition: the leader's view of every replica."""
        replica = self.replica
        now_ms = self.clock.monotonic_ms()
        wall_ms = self.clock.now_ms()
        progress = replica.voter_progress()
        directories = {v.voter_id: v.directory_id for v in replica.voter_set}

        def state(replica_id: int) -> dict:
            if replica_id == self.node_id:
                end, fetched = replica.log.end_offset, now_ms
            else:
                end, fetched = progress.get(replica_id, (-1, -1))
            last_fetch = wall_ms - (now_ms - fetched) if fetched >= 0 else -1
            # A voter's directory id is its VotersRecord entry's (none in a static quorum, as
            # Kafka's); an observer's is the one its fetches name.
            directory = directories.get(replica_id, "") if replica_id in replica.voters \
                else replica.fetcher_directory(replica_id)
            return {"replica_id": replica_id, "replica_directory_id": uuid.UUID(directory) if directory else ZERO_UUID,
                    "log_end_offset": end, "last_fetch_timestamp": last_fetch,
                    "last_caught_up_timestamp": last_fetch if end >= replica.high_watermark else -1}
        return {"partition_index": 0, "error_code": 0, "leader_id": replica.leader_id,
                "leader_epoch": replica.epoch, "high_watermark": replica.high_watermark,
                "current_voters": [state(v) for v in replica.voters],
                "observers": [state(o) for o in sorted(progress) if o not in replica.voters]}
