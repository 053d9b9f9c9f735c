"""ClusterControlManager: broker registrations and their sessions.

Theory of operation. Hard state — one ``BrokerRegistration`` per broker id, and
the offset of the record that last registered it — changes only in ``replay``.
Soft state — heartbeat sessions — lives in the ``BrokerHeartbeatManager`` and is
touched while deciding, as Kafka does.

Registration rules (Kafka's ``ClusterControlManager.registerBroker``):

* a wrong cluster id → ``INCONSISTENT_CLUSTER_ID``;
* a registration for the id with a *valid session* and a different incarnation
  id → ``DUPLICATE_BROKER_REGISTRATION`` (another process holds the id);
* every finalized feature level must be in the broker's supported range →
  otherwise ``UNSUPPORTED_VERSION``;
* log directory ids (KIP-858) must be real ones (not Kafka's reserved 0-99) and
  distinct → otherwise ``INVALID_REGISTRATION``;
* the same incarnation id → an amendment: epoch, fenced and controlled-shutdown
  flags are kept;
* a new incarnation → the old session is dropped, ``broker_epoch`` = the offset
  of the new ``RegisterBrokerRecord`` and the broker registers **fenced**. First
  the ``unclean_shutdown_handler`` (KIP-966's hook, ``replication_control.
  handle_broker_restarted``) is told whether the broker shut down cleanly — its
  ``previous_broker_epoch`` (the epoch its clean-shutdown marker holds) is the
  registered one: if the old incarnation was still unfenced (its session expired
  but the stale check has not run yet) it is fenced out of every ISR and
  leadership, so a restarted process never keeps leadership it held before; with
  ELR on, an unclean shutdown also takes it out of every ISR and ELR.

Invariant: ``broker_epoch`` of a registration equals the offset of the record
that created that incarnation's registration, so epochs grow with every restart.

``default_dir(broker)`` is the directory a new replica on that broker is assigned
to when the controller creates it (Kafka's ``ClusterControlManager.defaultDir``):
the broker's only directory, or ``UNASSIGNED_DIR`` when it has several (the broker
then says where it put the replica, AssignReplicasToDirs) or none.
"""

from __future__ import annotations

from typing import Callable, Iterator

from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tidelog.metadata.delta import MetadataReplayError
from tidelog.metadata.registrations import UNASSIGNED_DIR, BrokerRegistration, is_reserved_dir
from tidelog.controller.feature_control import FeatureControlManager
from tidelog.controller.heartbeat import BrokerControlState, BrokerHeartbeatManager
from tidelog.controller.messages import BrokerRegistrationReply, BrokerRegistrationRequest
from tidelog.controller.result import NO_ERROR, ApiError, ControllerResult

UncleanShutdownHandler = Callable[[int, bool], list[MetadataRecord]]   # (broker id, clean shutdown)


class ClusterControlManager:
    def __init__(self, cluster_id: str, heartbeat: BrokerHeartbeatManager,
                 features: FeatureControlManager):
        self.cluster_id = cluster_id
        self.heartbeat = heartbeat
        self.features = features
        self.brokers: dict[int, BrokerRegistration] = {}
        self.registration_offsets: dict[int, int] = {}
        # Set by the QuorumController: fences an old incarnation out of its partitions.
        self.unclean_shutdown_handler: UncleanShutdownHandler = lambda broker_id, clean: []

    # ------------------------------------------------------------ queries

    def registration(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def is_unfenced(self, broker_id: int) -> bool:
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced

    def is_active(self, broker_id: int) -> bool:
        """Unfenced and not in controlled shutdown: may lead and be in ISRs."""
        broker = self.brokers.get(broker_id)
        return broker is not None and broker.is_active

    def default_dir(self, broker_id: int):
        """Where a new replica on ``broker_id`` goes (module docstring)."""
        broker = self.brokers.get(broker_id)
        if broker is None or len(broker.log_dirs) != 1:
            return UNASSIGNED_DIR
        return broker.log_dirs[0]

    def active_brokers(self) -> Iterator[BrokerRegistration]:
        return (self.brokers[b] for b in sorted(self.brokers) if self.brokers[b].is_active)

    def broker_state(self, broker_id: int) -> BrokerControlState:
        """The state the table starts from, read from the registration.

        A registration both fenced and in controlled shutdown was told to shut down
        (or went stale while shutting down): that incarnation never runs again, it
        can only be replaced by a new registration (Kafka keeps this in the
        heartbeat soft state; here the log holds it, so it survives failover).
        """
        broker = self.brokers[broker_id]
        if broker.fenced:
            return (BrokerControlState.SHUTDOWN_NOW if broker.in_controlled_shutdown
                    else BrokerControlState.FENCED)
        if broker.in_controlled_shutdown:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.UNFENCED

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> ApiError:
        broker = self.brokers.get(broker_id)
        if broker is None:
            return ApiError(ErrorCode.STALE_BROKER_EPOCH,
                            f"No broker registration found for broker id {broker_id}")
        if broker.broker_epoch != broker_epoch:
            return ApiError(ErrorCode.STALE_BROKER_EPOCH, f"Expected broker epoch "
                            f"{broker.broker_epoch}, but got broker epoch {broker_epoch}")
        return NO_ERROR

    # ------------------------------------------------------------ operations

    def register_broker(self, request: BrokerRegistrationRequest, next_offset: int
                        ) -> ControllerResult[BrokerRegistrationReply]:
        """Decide a registration; ``next_offset`` is where the next record will land."""
        error = self._validate_registration(request)
        if not error.is_success:
            return ControllerResult([], BrokerRegistrationReply(error.error_code, error.message))
        broker_id = request.broker_id
        log_dirs = tuple(sorted(request.log_dirs))
        existing = self.brokers.get(broker_id)
        records: list[MetadataRecord] = []
        if (existing is not None and existing.incarnation_id == request.incarnation_id
                and existing.log_dirs == log_dirs):
            # A retry of the registration this incarnation made: the same epoch and state.
            # (The same incarnation with other directories is a new registration: its
            # replicas in a directory it no longer lists must not stay leaders.)
            broker_epoch, fenced = existing.broker_epoch, existing.fenced
            in_controlled_shutdown = existing.in_controlled_shutdown
        else:
            if existing is not None:
                self.heartbeat.remove(broker_id)
                clean = request.previous_broker_epoch == existing.broker_epoch
                records += self.unclean_shutdown_handler(broker_id, clean)
            broker_epoch, fenced, in_controlled_shutdown = next_offset + len(records), True, False
        records.append(RegisterBrokerRecord(
            broker_id, request.incarnation_id, broker_epoch, tuple(request.listeners),
            tuple(request.features), request.rack, fenced, in_controlled_shutdown, log_dirs))
        self.heartbeat.touch(broker_id, fenced, -1)
        self.heartbeat.registered(broker_id)
        return ControllerResult(records, BrokerRegistrationReply(broker_epoch=broker_epoch))

    def _validate_registration(self, request: BrokerRegistrationRequest) -> ApiError:
        if request.cluster_id != self.cluster_id:
            return ApiError(ErrorCode.INCONSISTENT_CLUSTER_ID, f"Expected cluster ID "
                            f"{self.cluster_id}, but got cluster ID {request.cluster_id}")
        existing = self.brokers.get(request.broker_id)
        if existing is not None and existing.incarnation_id != request.incarnation_id \
                and self.heartbeat.has_valid_session(request.broker_id):
            return ApiError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                            f"Another broker is registered with broker id {request.broker_id}.")
        if len(set(request.log_dirs)) != len(request.log_dirs) or any(map(is_reserved_dir, request.log_dirs)):
            return ApiError(ErrorCode.INVALID_REGISTRATION, f"Invalid log directory ids: "
                            f"{sorted(map(str, request.log_dirs))} (duplicates or reserved ids).")
        offered = {f.name: f for f in request.features}
        for name, level in sorted(self.features.finalized.items()):
            feature = offered.get(name)
            low, high = ((feature.min_supported_version, feature.max_supported_version)
                         if feature is not None else (0, 0))
            if not low <= level <= high:
                return ApiError(ErrorCode.UNSUPPORTED_VERSION, f"Unable to register because the "
                                f"broker does not support finalized version {level} of {name}; "
                                f"it supports {low}-{high}.")
        return NO_ERROR

    def activate(self) -> None:
        """Become the active controller: every registered broker gets a fresh session."""
        for broker_id in sorted(self.brokers):
            self.heartbeat.touch(broker_id, self.brokers[broker_id].fenced, -1)

    # ------------------------------------------------------------ replay

    def replay(self, record: MetadataRecord, offset: int) -> None:
        if isinstance(record, RegisterBrokerRecord):
            self.brokers[record.broker_id] = BrokerRegistration.from_record(record)
            self.registration_offsets[record.broker_id] = offset
            return
        broker = self.brokers.get(record.broker_id)
        if broker is None or broker.broker_epoch != record.broker_epoch:
            raise MetadataReplayError(f"{record} does not match the registration {broker}")
        if isinstance(record, UnregisterBrokerRecord):
            del self.brokers[record.broker_id]
            del self.registration_offsets[record.broker_id]
            self.heartbeat.remove(record.broker_id)
        elif isinstance(record, FenceBrokerRecord):
            self.brokers[record.broker_id] = broker.with_fenced(True)
        elif isinstance(record, UnfenceBrokerRecord):
            self.brokers[record.broker_id] = broker.with_fenced(False)
        elif isinstance(record, BrokerRegistrationChangeRecord):
            self.brokers[record.broker_id] = broker.merge(record)
        else:
            raise AssertionError(f"not a broker record: {record}")
