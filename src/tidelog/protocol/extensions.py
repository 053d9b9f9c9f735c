"""tidelog's own tagged fields in Kafka messages, and nothing else.

Theory of operation. A flexible Kafka message carries a tagged-field section; a
reader skips the tags it does not know (KIP-482), so a field added under a tag
Kafka does not use is invisible to every Kafka implementation and costs nothing
when empty (an empty tagged field is not written at all). tidelog adds one:

* BrokerHeartbeatRequest v1-v2, tag ``REPLICA_LOG_ENDS_TAG``: where the broker's
  replicas of partitions with no leader end (topic id, partition,
  epoch of the last batch, log end offset). Kafka's KIP-966 unclean recovery has
  the controller ask for the same thing with its GetReplicaLogInfo request;
  tidelog's controller never connects to brokers, so the broker says it in the
  heartbeat it sends anyway (docs/controller.md, "Unclean recovery").

Each extended message is kio's generated class for that (API, version) with the
extra field; ``codec`` reads and writes these classes in place of kio's
(``EXTENDED_REQUESTS``). The tag is far from Kafka's (0-1 so far in this message).
"""

import uuid
from dataclasses import dataclass, field, make_dataclass
from typing import ClassVar

from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import BrokerId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

from tidelog.protocol.api_keys import ApiKey

REPLICA_LOG_ENDS_TAG = 10_000


def _log_end(version: int):
    @dataclass(frozen=True, slots=True, kw_only=True)
    class ReplicaLogEnd:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = True
        __api_key__: ClassVar[i16] = i16(ApiKey.BROKER_HEARTBEAT)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        last_epoch: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
        log_end_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    return ReplicaLogEnd


def _heartbeat_request(version: int):
    """kio's BrokerHeartbeatRequest of ``version`` (1 or 2), plus ``replica_log_ends``
    (declared last: tagged fields are written in declaration order, tags ascending)."""
    fields = [
        ("broker_id", BrokerId, field(metadata={"kafka_type": "int32"})),
        ("broker_epoch", i64, field(metadata={"kafka_type": "int64"}, default=i64(-1))),
        ("current_metadata_offset", i64, field(metadata={"kafka_type": "int64"})),
        ("want_fence", bool, field(metadata={"kafka_type": "bool"})),
        ("want_shut_down", bool, field(metadata={"kafka_type": "bool"})),
        ("offline_log_dirs", tuple[uuid.UUID | None, ...], field(metadata={"kafka_type": "uuid", "tag": 0},
                                                                 default=())),
    ]
    if version >= 2:
        fields.append(("cordoned_log_dirs", tuple[uuid.UUID | None, ...] | None,
                       field(metadata={"kafka_type": "uuid", "tag": 1}, default=None)))
    fields.append(("replica_log_ends", tuple[_log_end(version), ...] | None,
                   field(metadata={"tag": REPLICA_LOG_ENDS_TAG}, default=None)))
    return make_dataclass(f"BrokerHeartbeatRequestV{version}", fields, frozen=True, slots=True, kw_only=True,
                          namespace={"__type__": EntityType.request, "__version__": i16(version),
                                     "__flexible__": True, "__api_key__": i16(ApiKey.BROKER_HEARTBEAT),
                                     "__header_schema__": RequestHeader})


BrokerHeartbeatRequestV1, BrokerHeartbeatRequestV2 = _heartbeat_request(1), _heartbeat_request(2)


EXTENDED_REQUESTS = {
    (ApiKey.BROKER_HEARTBEAT, 1): BrokerHeartbeatRequestV1,
    (ApiKey.BROKER_HEARTBEAT, 2): BrokerHeartbeatRequestV2,
}
