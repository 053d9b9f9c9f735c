"""Broker lifecycle decisions: heartbeats, stale sessions, unregistration.

Theory of operation. These operations need both the registrations
(``ClusterControlManager``) and the partitions (``ReplicationControlManager``), so
they live here, between the two, as Kafka keeps them in its replication manager.
Like every controller operation they only *decide*: they return the records and
the reply; state changes when the records are replayed. The one exception is the
heartbeat soft state (``BrokerHeartbeatManager``), which is not in the log and is
updated as the heartbeat is handled, as in Kafka.

A heartbeat computes the broker's next state from the table in ``heartbeat.py``;
on a change it emits the matching records:

    FENCED, SHUTDOWN_NOW → handle_broker_fenced (ISR removal, FenceBrokerRecord)
    UNFENCED             → handle_broker_unfenced (UnfenceBrokerRecord, elections)
    CONTROLLED_SHUTDOWN  → handle_broker_in_controlled_shutdown (move leaders away)

then, as Kafka's ``processBrokerHeartbeat`` does, the log directories the
heartbeat reports offline (``offline_log_dirs``, KIP-858) that were online:
``handle_directories_offline`` moves the broker out of those directories'
partitions and writes the directories still online. A broker that reports every
one of its directories offline counts as asking to be fenced (tidelog's rule;
Kafka's broker halts instead, and is fenced only when its session expires): the
same heartbeat fences it, and it stays fenced while it reports them, so its
partitions move at once and it is never unfenced without a working directory.

Before any of that, the heartbeat's ``replica_log_ends`` (where the broker's
replicas of partitions with no leader end) replace what the broker reported
before, in the heartbeat soft state; after it, the elections waiting for such
reports are tried again. An election of the last known leader elects the longest
of the reported logs instead (``partition_change.py``, KIP-966 unclean recovery).

Stale sessions are fenced **one broker per call** (the oldest contact only), so
each fencing's partition changes are visible before the next broker is judged.
"""

from __future__ import annotations

from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import MetadataRecord
from tidelog.controller.cluster_control import ClusterControlManager
from tidelog.controller.heartbeat import BrokerControlState, next_broker_state
from tidelog.controller.messages import BrokerHeartbeatReply, BrokerHeartbeatRequest
from tidelog.controller.replication_control import ReplicationControlManager
from tidelog.controller.result import NO_ERROR, ApiError, ControllerResult


def process_broker_heartbeat(cluster: ClusterControlManager,
                             replication: ReplicationControlManager,
                             request: BrokerHeartbeatRequest, last_committed_offset: int
                             ) -> ControllerResult[BrokerHeartbeatReply]:
    error = cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
    if not error.is_success:
        return ControllerResult([], BrokerHeartbeatReply(error.error_code, error.message))
    broker_id = request.broker_id
    heartbeat_state = cluster.heartbeat.state(broker_id)
    current = cluster.broker_state(broker_id)
    offline_dirs = tuple(request.offline_log_dirs)
    no_online_dir = bool(offline_dirs) and not cluster.registration(broker_id).directory_difference(offline_dirs)
    next_state = next_broker_state(
        current,
        want_fence=request.want_fence or no_online_dir,
        want_shut_down=request.want_shut_down,
        current_metadata_offset=request.current_metadata_offset,
        registration_offset=cluster.registration_offsets[broker_id],
        has_leaderships=lambda: replication.has_leaderships(broker_id),
        controlled_shutdown_offset=(heartbeat_state.controlled_shutdown_offset
                                    if heartbeat_state is not None else -1),
        lowest_active_offset=cluster.heartbeat.lowest_active_offset(),
    )
    cluster.heartbeat.report_log_ends(broker_id, None if request.replica_log_ends is None
                                      else replication.leaderless_log_ends(broker_id, request.replica_log_ends))
    records: list[MetadataRecord] = []
    overlay: dict = {}     # partitions as the state change leaves them, for the directories' records
    if next_state != current:
        if next_state in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
            records = replication.handle_broker_fenced(broker_id, overlay)
        elif next_state == BrokerControlState.UNFENCED:
            records = replication.handle_broker_unfenced(broker_id, overlay, offline_dirs)
        else:
            records = replication.handle_broker_in_controlled_shutdown(broker_id, overlay)
    records += replication.handle_directories_offline(broker_id, offline_dirs, overlay)
    leaving = next_state != BrokerControlState.UNFENCED
    records += replication.elect_awaiting(overlay, broker_to_remove=broker_id if leaving else -1,
                                          broker_to_add=-1 if leaving else broker_id,
                                          offline_dirs=frozenset(offline_dirs))
    cluster.heartbeat.touch(broker_id, next_state.fenced, request.current_metadata_offset)
    return ControllerResult(records, BrokerHeartbeatReply(
        is_caught_up=request.current_metadata_offset >= last_committed_offset,
        is_fenced=next_state.fenced,
        in_controlled_shutdown=next_state.in_controlled_shutdown,
        should_shut_down=next_state.should_shut_down,
    ))


def maybe_fence_one_stale_broker(cluster: ClusterControlManager,
                                 replication: ReplicationControlManager
                                 ) -> ControllerResult[int | None]:
    """Fence the broker with the oldest contact if its session expired; reply its id."""
    broker_id = cluster.heartbeat.find_one_stale_broker()
    if broker_id is None:
        return ControllerResult([], None)
    records = replication.handle_broker_fenced(broker_id)
    cluster.heartbeat.fence(broker_id)
    return ControllerResult(records, broker_id)


def unregister_broker(cluster: ClusterControlManager, replication: ReplicationControlManager,
                      broker_id: int) -> ControllerResult[ApiError]:
    if cluster.registration(broker_id) is None:
        return ControllerResult([], ApiError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                             f"Broker ID {broker_id} is not registered."))
    return ControllerResult(replication.handle_broker_unregistered(broker_id), NO_ERROR)
