"""``tidelog transactions list|describe|describe-producers|find-hanging|abort`` over the wire protocol.

Theory of operation. Like ``tidelog groups``, this speaks only the Kafka
protocol (KIP-664's APIs), so it works against any Kafka broker from 3.0; its
verbs, options and output columns are those of Kafka's
``kafka-transactions.sh``. Connections, ``--command-config`` and the
coordinator retries are ``tidelog.cli.groups.Session``'s, asking FindCoordinator
for key type 1 (a transactional id) instead of 0.

* ``list`` asks every broker of the cluster for ListTransactions (each knows
  only the transactional ids whose ``__transaction_state`` partition it leads)
  and merges the answers; the Coordinator column is the broker that answered.
* ``describe`` finds the id's coordinator (FindCoordinator, key type 1) and
  asks it DescribeTransactions; NOT_COORDINATOR and the like are retried until
  ``--timeout``, as for groups.
* ``describe-producers`` asks the partition's leader (from Metadata)
  DescribeProducers: every producer the partition remembers, with the first
  offset of its open transaction (-1: none).
* ``find-hanging`` is Kafka's algorithm. DescribeProducers at each leader of
  the partitions searched gives the open transactions; those whose producer
  last wrote more than ``--max-transaction-timeout`` minutes ago (no
  coordinator lets a transaction live longer: ``transaction.max.timeout.ms``)
  are candidates. ListTransactions on every broker, filtered by the
  candidates' producer ids, names their transactional ids, and
  DescribeTransactions their coordinator's view. A candidate is hanging when
  no coordinator knows its producer id, or the coordinator's state of that id
  does not list the partition (no marker will ever come for it). Both
  conditions must hold, as in Kafka: a long transaction the coordinator still
  tracks will be ended by it (its timeout aborts it), and a young one may be
  a race with a commit in flight.
* ``abort`` writes the ABORT marker the coordinator never will: WriteTxnMarkers
  to the partition's leader with the producer id and epoch and a coordinator
  epoch, taken from DescribeProducers for the open transaction starting at
  ``--start-offset``, or given with ``--producer-id``, ``--producer-epoch``
  and ``--coordinator-epoch`` (a negative coordinator epoch becomes 0, as in
  Kafka). The leader appends the marker like a coordinator's: the transaction's
  records become aborted and the last stable offset moves past them.

Requests to a partition's leader are retried, with Metadata read again, while
the leader is unknown, moving (NOT_LEADER_OR_FOLLOWER) or unreachable, until
``--timeout``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from tidelog.cli.groups import RETRY_BACKOFF_S, CommandError, Session, _table, run_verb
from tidelog.cli.topics import _error, _metadata
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import millis

TRANSACTION_KEY = 1                      # FindCoordinator key type of a transactional id
MAX_BATCH_PARTITIONS = 500               # partitions per DescribeProducers request, as Kafka's tool
NO_OFFSET = -1
LEADER_RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                              ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REQUEST_TIMED_OUT})
ABORT_ERRORS = {
    ErrorCode.INVALID_PRODUCER_EPOCH: "the partition knows this producer at a newer epoch",
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: "the partition has a marker from a newer coordinator epoch; "
                                              "use --start-offset (or its LatestCoordinatorEpoch)",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "aborting needs the ClusterAction permission on the cluster",
    ErrorCode.NOT_ENOUGH_REPLICAS: "the partition has fewer in-sync replicas than min.insync.replicas",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "the marker was written but not replicated in time; "
                                                "check describe-producers before trying again",
}
HANGING_HEADER = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                  "LastTimestamp", "Duration(min)"]


async def run(args) -> int:
    return await run_verb(args, globals(), key_type=TRANSACTION_KEY, noun="transactional id")


# ================================================================== the cluster

@dataclass(frozen=True)
class Layout:
    """What Metadata says about some topics: their partitions' leaders and the brokers."""
    brokers: dict[int, tuple[str, int]]
    leaders: dict[TopicPartition, int]


async def layout(session: Session, topics: list[str] | None) -> Layout:
    """Metadata of ``topics`` (None: every topic); a topic that does not exist is an error."""
    response = await _metadata(await session.bootstrap(), topics)
    leaders = {}
    for topic in response.topics:
        error = _error(topic.error_code)
        if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise CommandError(f"topic {topic.name!r} does not exist (UNKNOWN_TOPIC_OR_PARTITION)")
        if error not in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE):
            raise CommandError(f"cannot read the metadata of topic {topic.name!r}: {error.name}")
        leaders.update((TopicPartition(topic.name, int(p.partition_index)), int(p.leader_id))
                       for p in topic.partitions)
    return Layout({int(b.node_id): (b.host, int(b.port)) for b in response.brokers}, leaders)


def check_partition(found: Layout, tp: TopicPartition) -> None:
    if tp not in found.leaders:
        count = sum(1 for known in found.leaders if known.topic == tp.topic)
        has = f"partitions 0-{count - 1}" if count else "no partitions"
        raise CommandError(f"topic {tp.topic!r} has no partition {tp.partition} (it has {has})")


async def at_leaders(session: Session, partitions: list[TopicPartition],
                     ask: Callable[[KafkaConnection, list[TopicPartition]], Awaitable[dict]]
                     ) -> dict[TopicPartition, tuple[ErrorCode, object]]:
    """``ask(connection, partitions)`` → {partition: (error, value)} at each partition's leader,
    at most ``MAX_BATCH_PARTITIONS`` at a time. Partitions without a leader, whose leader moved
    or could not be reached are asked again, with Metadata read again, until the timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + session.timeout_s
    answers: dict[TopicPartition, tuple[ErrorCode, object]] = {}
    pending = sorted(set(partitions))
    while True:
        found = await layout(session, sorted({tp.topic for tp in pending}))
        for tp in pending:
            check_partition(found, tp)
        retry: dict[TopicPartition, str] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            leader = found.leaders[tp]
            if leader in found.brokers:
                by_leader.setdefault(leader, []).append(tp)
            else:
                retry[tp] = "no leader"
        for leader, led in sorted(by_leader.items()):
            for start in range(0, len(led), MAX_BATCH_PARTITIONS):
                batch = led[start:start + MAX_BATCH_PARTITIONS]
                try:
                    answered = await ask(await session.connection(*found.brokers[leader]), batch)
                except OSError as e:
                    retry.update((tp, f"broker {leader}: connection failed: {e}") for tp in batch)
                    continue
                for tp in batch:
                    error, value = answered.get(tp, (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer"))
                    if error in LEADER_RETRIABLE:
                        retry[tp] = f"broker {leader}: {error.name}"
                    else:
                        answers[tp] = (error, value)
        if not retry:
            return answers
        if loop.time() + RETRY_BACKOFF_S > deadline:
            problems = "; ".join(f"{tp}: {reason}" for tp, reason in sorted(retry.items())[:5])
            raise CommandError(f"the leaders of {len(retry)} partition(s) are not available after "
                               f"{session.timeout_s:g} s ({problems})")
        await asyncio.sleep(RETRY_BACKOFF_S)
        pending = sorted(retry)


# ================================================================== the answers

@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int          # of the last marker; -1 before any
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int           # first offset of its open transaction; -1: none

    @property
    def in_transaction(self) -> bool:
        return self.txn_start_offset >= 0


@dataclass(frozen=True)
class Transaction:
    transactional_id: str
    coordinator_id: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int                   # -1: no transaction started
    partitions: tuple[TopicPartition, ...]


async def describe_producers(session: Session, partitions: list[TopicPartition]
                             ) -> dict[TopicPartition, list[ProducerState]]:
    """DescribeProducers at each partition's leader."""
    async def ask(connection: KafkaConnection, batch: list[TopicPartition]) -> dict:
        by_topic: dict[str, list[int]] = {}
        for tp in batch:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        response = await connection.request(ApiKey.DESCRIBE_PRODUCERS, {
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]})
        answers = {}
        for topic in response.topics:
            for p in topic.partitions:
                error = _error(p.error_code)
                answers[TopicPartition(topic.name, int(p.partition_index))] = (error, p.error_message) \
                    if error != ErrorCode.NONE else (error, [
                        ProducerState(int(s.producer_id), int(s.producer_epoch), int(s.coordinator_epoch),
                                      int(s.last_sequence), int(s.last_timestamp), int(s.current_txn_start_offset))
                        for s in p.active_producers])
        return answers
    out = {}
    for tp, (error, value) in (await at_leaders(session, partitions, ask)).items():
        if error != ErrorCode.NONE:
            raise CommandError(f"cannot describe the producers of {tp}: {error.name}"
                               f"{f' ({value})' if value else ''}")
        out[tp] = sorted(value, key=lambda s: s.producer_id)
    return out


async def list_transactions(session: Session, producer_ids: list[int] | None = None
                            ) -> tuple[list[tuple[str, int, int, str]], list[str]]:
    """ListTransactions at every broker: (transactional id, coordinator, producer id, state)
    rows, and what went wrong at the brokers that could not answer."""
    loop = asyncio.get_running_loop()
    rows, problems = [], []
    for node_id, (host, port) in sorted((await session.brokers()).items()):
        deadline = loop.time() + session.timeout_s
        try:
            connection = await session.connection(host, port)
            while True:
                response = await connection.request(ApiKey.LIST_TRANSACTIONS, {
                    "state_filters": [], "producer_id_filters": producer_ids or [], "duration_filter": -1})
                error = _error(response.error_code)
                if error != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or loop.time() + RETRY_BACKOFF_S > deadline:
                    break
                await asyncio.sleep(RETRY_BACKOFF_S)
        except OSError as e:
            problems.append(f"cannot list the transactions of broker {node_id} at {host}:{port}: {e}")
            continue
        if error != ErrorCode.NONE:
            problems.append(f"broker {node_id} could not list its transactions: {error.name}")
        rows += [(t.transactional_id, node_id, int(t.producer_id), t.transaction_state)
                 for t in response.transaction_states]
    return sorted(rows), problems


async def describe_transaction(session: Session, transactional_id: str) -> Transaction | None:
    """DescribeTransactions at the id's coordinator; None if it does not know the id."""
    async def call(connection: KafkaConnection):
        response = await connection.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
        state = response.transaction_states[0]
        return _error(state.error_code), state
    coordinator, error, state = await session.at_coordinator(transactional_id, call)
    if error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        return None
    if error != ErrorCode.NONE:
        raise CommandError(f"cannot describe transactional id {transactional_id!r}: {error.name}")
    return Transaction(transactional_id, coordinator.node_id, int(state.producer_id), int(state.producer_epoch),
                       state.transaction_state, millis(state.transaction_timeout),
                       millis(state.transaction_start_time),
                       tuple(TopicPartition(t.topic, int(p)) for t in state.topics for p in t.partitions))


def _now_ms() -> int:
    return int(time.time() * 1000)


# ================================================================== the verbs

async def _list(session: Session, args) -> int:
    rows, problems = await list_transactions(session)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], [list(row) for row in rows])
    return 1 if problems else 0


async def _describe(session: Session, args) -> int:
    txn = await describe_transaction(session, args.transactional_id)
    if txn is None:
        raise CommandError(f"transactional id {args.transactional_id!r} does not exist: its coordinator does not "
                           f"know it (TRANSACTIONAL_ID_NOT_FOUND)")
    started = txn.start_ms >= 0
    _table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
           [[txn.coordinator_id, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.state,
             txn.timeout_ms, txn.start_ms if started else "None", _now_ms() - txn.start_ms if started else "None",
             ",".join(map(str, txn.partitions))]])
    return 0


async def _describe_producers(session: Session, args) -> int:
    tp = TopicPartition(args.topic, args.partition)
    producers = (await describe_producers(session, [tp]))[tp]
    _table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
            "CurrentTransactionStartOffset"],
           [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
             p.txn_start_offset] for p in producers])
    return 0


async def _find_hanging(session: Session, args) -> int:
    if args.partition is not None and args.topic is None:
        raise CommandError("--partition needs --topic")
    if args.max_transaction_timeout < 0:
        raise CommandError(f"--max-transaction-timeout is in minutes and cannot be negative, "
                           f"got {args.max_transaction_timeout}")
    if args.topic is not None and args.partition is not None:
        partitions = [TopicPartition(args.topic, args.partition)]
    else:
        partitions = sorted((await layout(session, None if args.topic is None else [args.topic])).leaders)
    producers = await describe_producers(session, partitions) if partitions else {}
    now_ms = _now_ms()
    max_ms = args.max_transaction_timeout * 60_000
    candidates = [(tp, p) for tp, states in sorted(producers.items()) for p in states
                  if p.in_transaction and now_ms - p.last_timestamp > max_ms]
    hanging = []
    if candidates:
        listed, problems = await list_transactions(session, sorted({p.producer_id for _, p in candidates}))
        if problems:
            raise CommandError("cannot tell which open transactions hang without every coordinator's answer: "
                               + "; ".join(problems))
        ids = {producer_id: transactional_id for transactional_id, _, producer_id, _ in listed}
        described = {transactional_id: await describe_transaction(session, transactional_id)
                     for transactional_id in sorted(set(ids.values()))}
        for tp, p in candidates:
            txn = described.get(ids.get(p.producer_id))
            if txn is None or tp not in txn.partitions:
                hanging.append((tp, p))
    _table(HANGING_HEADER, [[tp.topic, tp.partition, p.producer_id, p.producer_epoch, p.coordinator_epoch,
                             p.txn_start_offset, p.last_timestamp, (now_ms - p.last_timestamp) // 60_000]
                            for tp, p in hanging])
    return 0


async def _abort(session: Session, args) -> int:
    tp = TopicPartition(args.topic, args.partition)
    explicit = {"--producer-id": args.producer_id, "--producer-epoch": args.producer_epoch,
                "--coordinator-epoch": args.coordinator_epoch}
    given = [name for name, value in explicit.items() if value is not None]
    if args.start_offset is not None and given:
        raise CommandError(f"name the transaction either with --start-offset or with --producer-id, "
                           f"--producer-epoch and --coordinator-epoch, not both (got --start-offset and "
                           f"{', '.join(given)})")
    if args.start_offset is None:
        if not given:
            raise CommandError("name the transaction to abort with --start-offset (see describe-producers or "
                               "find-hanging) or with --producer-id, --producer-epoch and --coordinator-epoch")
        missing = [name for name, value in explicit.items() if value is None]
        if missing:
            raise CommandError(f"--producer-id, --producer-epoch and --coordinator-epoch go together; "
                               f"missing {', '.join(missing)}")
        # A producer's first transaction has no coordinator epoch at the partition yet (-1):
        # 0 is no newer than any coordinator epoch, as Kafka's tool does.
        producer_id, producer_epoch, coordinator_epoch = args.producer_id, args.producer_epoch, \
            max(args.coordinator_epoch, 0)
        where = ""
    else:
        producers = (await describe_producers(session, [tp]))[tp]
        match = next((p for p in producers if p.txn_start_offset == args.start_offset), None)
        if match is None:
            starts = sorted(p.txn_start_offset for p in producers if p.in_transaction)
            raise CommandError(f"no open transaction starts at offset {args.start_offset} in {tp} ("
                               + (f"open transactions there start at {', '.join(map(str, starts))})" if starts
                                  else "it has no open transaction)"))
        producer_id, producer_epoch, coordinator_epoch = match.producer_id, match.producer_epoch, \
            max(match.coordinator_epoch, 0)
        where = f" starting at offset {args.start_offset}"
    if not 0 <= producer_id < 1 << 63 or not 0 <= producer_epoch < 1 << 15 or coordinator_epoch >= 1 << 31:
        raise CommandError(f"producer id {producer_id}, epoch {producer_epoch} or coordinator epoch "
                           f"{coordinator_epoch} is out of range")

    async def ask(connection: KafkaConnection, batch: list[TopicPartition]) -> dict:
        response = await connection.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]} for tp in batch]}]})
        return {TopicPartition(t.name, int(p.partition_index)): (_error(p.error_code), None)
                for marker in response.markers for t in marker.topics for p in t.partitions}
    error, _ = (await at_leaders(session, [tp], ask))[tp]
    if error != ErrorCode.NONE:
        reason = ABORT_ERRORS.get(error)
        raise CommandError(f"cannot abort the transaction of producer {producer_id} (epoch {producer_epoch}) "
                           f"in {tp}: {f'{reason} ({error.name})' if reason else error.name}")
    print(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) in {tp}{where}: "
          f"ABORT marker written with coordinator epoch {coordinator_epoch}.")
    return 0
