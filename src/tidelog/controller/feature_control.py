"""FeatureControlManager and ProducerIdControlManager: two small pieces of hard state.

Finalized features (``FeatureLevelRecord``) are the levels the whole cluster runs
at, e.g. ``metadata.version``; a broker may register only if it supports every
finalized level (checked in ``cluster_control``), and a level may be raised only
if every registered broker supports it.

Producer ids are handed to brokers in blocks; ``ProducerIdsRecord`` remembers the
first id not yet handed out, so ids are never reused across controller failovers.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import FeatureLevelRecord, ProducerIdsRecord
from tidelog.metadata.registrations import BrokerRegistration
from tidelog.controller.messages import AllocateProducerIdsReply
from tidelog.controller.result import NO_ERROR, ApiError, ControllerResult

PRODUCER_ID_BLOCK_SIZE = 1000   # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


def supported_range(broker: BrokerRegistration, name: str) -> tuple[int, int]:
    """The levels of feature ``name`` the broker supports; (0, 0) if it does not list it."""
    for feature in broker.features:
        if feature.name == name:
            return feature.min_supported_version, feature.max_supported_version
    return 0, 0


class FeatureControlManager:
    def __init__(self) -> None:
        self.finalized: dict[str, int] = {}

    def update_features(self, updates: Mapping[str, int],
                        brokers: Iterable[BrokerRegistration]) -> ControllerResult[ApiError]:
        brokers = list(brokers)
        for name, level in sorted(updates.items()):
            if level < 0:
                return ControllerResult([], ApiError(ErrorCode.INVALID_UPDATE_VERSION,
                                                     f"Invalid level {level} for feature {name}."))
            for broker in brokers:
                low, high = supported_range(broker, name)
                if level != 0 and not low <= level <= high:
                    return ControllerResult([], ApiError(
                        ErrorCode.INVALID_UPDATE_VERSION,
                        f"Invalid update version {level} for feature {name}. Broker "
                        f"{broker.broker_id} only supports versions {low}-{high}."))
        records = [FeatureLevelRecord(name, level) for name, level in sorted(updates.items())
                   if self.finalized.get(name, 0) != level]
        return ControllerResult(records, NO_ERROR)

    def replay(self, record: FeatureLevelRecord) -> None:
        if record.feature_level == 0:
            self.finalized.pop(record.name, None)
        else:
            self.finalized[record.name] = record.feature_level


class ProducerIdControlManager:
    def __init__(self) -> None:
        self.next_producer_id = 0

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int
                              ) -> ControllerResult[AllocateProducerIdsReply]:
        start = self.next_producer_id
        record = ProducerIdsRecord(broker_id, broker_epoch, start + PRODUCER_ID_BLOCK_SIZE)
        return ControllerResult([record], AllocateProducerIdsReply(
            producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE))

    def replay(self, record: ProducerIdsRecord) -> None:
        assert record.next_producer_id >= self.next_producer_id, record
        self.next_producer_id = record.next_producer_id
