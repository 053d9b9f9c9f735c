"""The domain requests brokers send each other for transactions, and the effects
that ask a driver to send them (docs/broker.md, "The request layer")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition

# {partition: error}, or None when no answer came (a timeout, a dead connection).
Answer = dict[TopicPartition, ErrorCode] | None


@dataclass(frozen=True)
class AddPartitionsToTxn:
    """One transaction of an AddPartitionsToTxn v4+ request (KIP-890), a broker's call
    to a transaction coordinator: with ``verify_only``, whether each partition is in
    the producer's open transaction (part 1); without, add them (part 2, and v3's
    client request). ``client_transaction_version`` is the transaction.version the
    producer runs: 2 when a partition leader adds a partition for a Produce v12+ or
    TxnOffsetCommit v5 client, 0 for a client's own AddPartitionsToTxn."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    verify_only: bool = True
    client_transaction_version: int = 0


@dataclass(frozen=True)
class WriteTxnMarkers:
    """One marker of a WriteTxnMarkers request: the COMMIT or ABORT control batch the
    coordinator asks a partition leader to append to each of ``partitions``."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, eq=False)
class SendAddPartitionsToTxn:
    """Send ``request`` to the coordinator on ``broker_id``; its per-partition answer
    (or None) goes to ``on_done``."""

    broker_id: int
    request: AddPartitionsToTxn
    timeout_ms: int
    on_done: Callable[[Answer], None]


@dataclass(frozen=True, eq=False)
class SendMarkers:
    """Send ``request`` to the partitions' leader ``broker_id`` (Kafka's
    ``TransactionMarkerChannelManager``); its per-partition answer (or None) goes to
    ``on_done``."""

    broker_id: int
    request: WriteTxnMarkers
    timeout_ms: int
    on_done: Callable[[Answer], None]


@dataclass(frozen=True, eq=False)
class SendListTransactions:
    """ListTransactions (KIP-664) filtered by ``producer_id`` to ``broker_id``: the
    ``(transactional id, producer id, state name)`` of each id it coordinates with that
    producer id, or None (no answer, or an error such as COORDINATOR_LOAD_IN_PROGRESS),
    to ``on_done``. An uncleanly elected leader's question about a transaction in doubt."""

    broker_id: int
    producer_id: int
    timeout_ms: int
    on_done: Callable[[list | None], None]


@dataclass(frozen=True, eq=False)
class SendTopicLeaders:
    """Metadata of ``topic`` at ``broker_id``: ``{partition index: (leader id, leader
    epoch)}`` as that broker's metadata has them, or None (no answer, a topic error) to
    ``on_done``. Before an in-doubt question trusts "no coordinator lists the producer
    id", each broker that answered must name itself leader of the ``__transaction_state``
    partitions it was asked for, at the leader epochs the asking broker knows."""

    broker_id: int
    topic: str
    timeout_ms: int
    on_done: Callable[[dict | None], None]


@dataclass(frozen=True, eq=False)
class SendDescribeTransactions:
    """DescribeTransactions of ``transactional_id`` to its coordinator ``broker_id``: its
    ``(state name, producer id, producer epoch)``, "unknown" (TRANSACTIONAL_ID_NOT_FOUND)
    or None (no answer, another error) to ``on_done``."""

    broker_id: int
    transactional_id: str
    timeout_ms: int
    on_done: Callable[[tuple | str | None], None]
