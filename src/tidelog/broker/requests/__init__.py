"""What a client or broker request *means*, written once for both drivers.

Theory of operation. The request layer sits between a driver's translation of
the wire (``server/``: kio requests decoded and responses encoded; ``sim/``:
domain requests carried as message bodies) and the broker's core
(``BrokerNode``: its image, replica manager and coordinators). It takes domain
requests (``ProduceRequest``, ``FetchRequest``, ``AddPartitionsToTxn``,
``WriteTxnMarkers`` …), decides what they mean — KIP-890 verification,
transaction markers, client fetch parameters, FindCoordinator and the
consumer-group requests (``group.py``) — and answers
through a callback, at once or later (an acks=all append, a long-poll fetch).

It does no I/O and reads no clock: work that needs another broker comes out as
an effect (``SendAddPartitionsToTxn``, ``SendMarkers``) handed to the driver's
``send``; the driver carries it out (asyncio connection, simulated network)
and feeds the answer — or ``None`` when there was none — to the effect's
``on_done``. So the simulator runs exactly the semantics production runs
(docs/broker.md, "The request layer").
"""

from tidelog.broker.requests.effects import (
    AddPartitionsToTxn,
    SendAddPartitionsToTxn,
    SendMarkers,
    WriteTxnMarkers,
)
from tidelog.broker.requests.fetch import FetchRequest, FetchRequests, fetch_params
from tidelog.broker.requests.group import (
    DescribeGroups,
    GroupRequests,
    Heartbeat,
    LeaveGroup,
    ListGroups,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    SyncGroup,
)
from tidelog.broker.requests.produce import ProduceRequest, ProduceRequests
from tidelog.broker.requests.txn import TxnRequests

__all__ = [
    "AddPartitionsToTxn", "DescribeGroups", "FetchRequest", "FetchRequests", "GroupRequests", "Heartbeat",
    "LeaveGroup", "ListGroups", "OffsetCommit", "OffsetDelete", "OffsetFetch", "ProduceRequest",
    "ProduceRequests", "SendAddPartitionsToTxn", "SendMarkers", "SyncGroup", "TxnRequests", "WriteTxnMarkers",
    "fetch_params",
]
