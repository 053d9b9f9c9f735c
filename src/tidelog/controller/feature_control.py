"""FeatureControlManager and ProducerIdControlManager: two small pieces of hard state.

Finalized features (``FeatureLevelRecord``) are the levels the whole cluster runs
at, e.g. ``metadata.version``; a broker may register only if it supports every
finalized level (checked in ``cluster_control``), and a level may be changed only
if this controller and every registered broker support it (Kafka's
``FeatureControlManager.updateFeature``).

What tidelog implements (``SUPPORTED_FEATURES``, the range every tidelog broker
registers and ApiVersions advertises) and what a new cluster finalizes
(``BOOTSTRAP_FEATURES``, written as the metadata log's first records): Kafka
4.4.0's defaults for a freshly formatted cluster, capped at what tidelog does::

    feature                            Kafka 4.4 finalizes   tidelog supports   tidelog finalizes
    metadata.version                   33 (4.4-IV2)          7-33               33
    kraft.version                      0                     0-0                0 (not a record)
    group.version                      1                     0-1                1
    transaction.version                2                     0-2                2  (KIP-890 part 2)
    eligible.leader.replicas.version   1                     0-1                1  (KIP-966)
    share.version                      2                     0-0                0  (no share groups)
    streams.version                    1                     0-0                0  (no KIP-1071)

``transaction.version`` 2 is what Kafka 4 Java producers look for to switch to
KIP-890 part 2 (EndTxn v5: an epoch bump with every transaction; the partition
leaders add partitions for them); clients on older request versions keep the
old rules, decided per request (docs/transactions.md).

The finalized epoch ApiVersions reports is the metadata offset of the last
``FeatureLevelRecord`` (kept by the metadata image). Every accepted update writes
its record, even one that changes nothing (as Kafka does), so the epoch moves.

Producer ids are handed to brokers in blocks; ``ProducerIdsRecord`` remembers the
first id not yet handed out, so ids are never reused across controller failovers.
"""

from __future__ import annotations

import enum
from typing import Iterable, Mapping

from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import BrokerFeature, FeatureLevelRecord, ProducerIdsRecord
from tidelog.metadata.registrations import BrokerRegistration
from tidelog.controller.messages import AllocateProducerIdsReply
from tidelog.controller.result import NO_ERROR, ApiError, ControllerResult

PRODUCER_ID_BLOCK_SIZE = 1000   # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"

# name -> (lowest, highest) level tidelog implements (module docstring).
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {
    ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1),
    "group.version": (0, 1),
    KRAFT_VERSION: (0, 0),
    METADATA_VERSION: (7, 33),          # 3.3-IV3 .. 4.4-IV2
    "share.version": (0, 0),
    "streams.version": (0, 0),
    "transaction.version": (0, 2),
}
# What a new cluster finalizes (level 0 = not finalized; kraft.version lives in the Raft log).
BOOTSTRAP_FEATURES: Mapping[str, int] = {
    ELIGIBLE_LEADER_REPLICAS_VERSION: 1,
    "group.version": 1,
    METADATA_VERSION: 33,
    "transaction.version": 2,
}


def broker_features() -> tuple[BrokerFeature, ...]:
    """What a tidelog broker registers it supports (BrokerRegistration features)."""
    return tuple(BrokerFeature(name, low, high) for name, (low, high) in sorted(SUPPORTED_FEATURES.items()))


class UpgradeType(enum.IntEnum):
    """Kafka's ``FeatureUpdate.UpgradeType`` (UpdateFeatures v1+)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def supported_range(broker: BrokerRegistration, name: str) -> tuple[int, int]:
    """The levels of feature ``name`` the broker supports; (0, 0) if it does not list it."""
    for feature in broker.features:
        if feature.name == name:
            return feature.min_supported_version, feature.max_supported_version
    return 0, 0


class FeatureControlManager:
    def __init__(self, node_id: int = -1) -> None:
        self.node_id = node_id
        self.finalized: dict[str, int] = {}
        self.bootstrapped = False       # a FeatureLevelRecord was replayed (the log is not new)

    @property
    def elr_enabled(self) -> bool:
        """KIP-966 eligible leader replicas are on (Kafka's ``isElrFeatureEnabled``)."""
        return self.finalized.get(ELIGIBLE_LEADER_REPLICAS_VERSION, 0) >= 1

    def update_features(self, updates: Mapping[str, int],
                        brokers: Iterable[BrokerRegistration],
                        upgrade_types: Mapping[str, int] | None = None,
                        validate_only: bool = False) -> ControllerResult[ApiError]:
        """All or nothing: the first refused feature refuses the request (Kafka 4)."""
        brokers = list(brokers)
        records = []
        for name, level in sorted(updates.items()):
            upgrade_type = (upgrade_types or {}).get(name, UpgradeType.UPGRADE)
            error = self._validate(name, level, upgrade_type, brokers)
            if not error.is_success:
                return ControllerResult([], error)
            records.append(FeatureLevelRecord(name, level))
        return ControllerResult([] if validate_only else records, NO_ERROR)

    def _validate(self, name: str, level: int, upgrade_type: int,
                  brokers: list[BrokerRegistration]) -> ApiError:
        def invalid(message: str) -> ApiError:
            return ApiError(ErrorCode.INVALID_UPDATE_VERSION,
                            f"Invalid update version {level} for feature {name}. {message}")
        if upgrade_type not in (UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE):
            return invalid("The controller does not support the given upgrade type.")
        if level < 0:
            return invalid("A feature version cannot be less than 0.")
        low, high = SUPPORTED_FEATURES.get(name, (0, 0))
        if not (low <= level <= high or (level == 0 and name != METADATA_VERSION)):
            return invalid(f"Local controller {self.node_id} only supports versions {low}-{high}")
        for broker in brokers:
            low, high = supported_range(broker, name)
            if level != 0 and not low <= level <= high:
                return invalid(f"Broker {broker.broker_id} only supports versions {low}-{high}")
        current = self.finalized.get(name, 0)
        if level < current and upgrade_type == UpgradeType.UPGRADE:
            return invalid("Can't downgrade the version of this feature without setting the "
                           "upgrade type to either safe or unsafe downgrade.")
        if level > current and upgrade_type != UpgradeType.UPGRADE:
            return invalid("Can't downgrade to a newer version.")
        if name == KRAFT_VERSION and level != current:
            return invalid("Can't change the version of this feature: tidelog's quorum has static voters.")
        if name == METADATA_VERSION and level < current:
            return ApiError(ErrorCode.INVALID_UPDATE_VERSION, f"Unsupported metadata.version downgrade from "
                            f"{current} to {level}. Refusing to perform the requested downgrade because it "
                            "might delete metadata information.")
        return NO_ERROR

    def replay(self, record: FeatureLevelRecord) -> None:
        self.bootstrapped = True
        if record.name == KRAFT_VERSION:
            return          # the quorum's own; never a finalized level here (Kafka's KAFKA-18979)
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
