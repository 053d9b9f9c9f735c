"""FindCoordinator: which broker coordinates a group or a transactional id.

Theory of operation. The coordinator of a key is the leader of its partition of
``__consumer_offsets`` (groups) or ``__transaction_state`` (transactional ids),
as the metadata image names it, alive and with the client's listener. The first
lookup of a kind creates its topic through the controller (``create_topic``:
``offsets.topic.*`` / ``transaction.state.log.*`` settings, replication capped
to the brokers alive) and answers COORDINATOR_NOT_AVAILABLE; the client asks
again. A broker whose metadata is not loaded yet sees no broker alive: it does
not create an internal topic with replication factor 1.
"""

from __future__ import annotations

from typing import Callable

from tidelog.controller.messages import CreatableTopic
from tidelog.core.errors import ErrorCode
from tidelog.group.coordinator import offsets_topic
from tidelog.txn.coordinator import transaction_state_topic

GROUP_KEY, TRANSACTION_KEY = 0, 1


class GroupRequests:
    def __init__(self, node, listener_name: str, create_topic: Callable[[CreatableTopic], ErrorCode]):
        self.node = node                              # a BrokerNode: its image and coordinators
        self.listener_name = listener_name
        self._create_topic = create_topic

    def find_coordinator(self, key: str, key_type: int) -> dict:
        """One key's coordinator: node_id, host, port, error_code, error_message."""
        def error(code: ErrorCode, message: str | None = None) -> dict:
            return {"node_id": -1, "host": "", "port": -1, "error_code": int(code), "error_message": message}
        if key_type == TRANSACTION_KEY:
            coordinator, internal_topic, what = self.node.txn_coordinator, transaction_state_topic, "transactional id"
        elif key_type == GROUP_KEY:
            coordinator, internal_topic, what = self.node.group_coordinator, offsets_topic, "group id"
        else:
            return error(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
        if not key:
            return error(ErrorCode.INVALID_REQUEST, f"the {what} is empty")
        image = self.node.image
        topic = image.topic(coordinator.topic)
        if topic is None:
            alive = sum(1 for b in image.brokers.values() if not b.fenced)
            if alive:
                self._create_topic(internal_topic(self.node.config, alive))
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{coordinator.topic} is being created")
        registration = topic.partitions.get(coordinator.partition_for(key))
        leader = registration.leader if registration is not None else -1
        broker = image.brokers.get(leader)
        if leader < 0 or broker is None or not image.is_alive(leader):
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the {what}'s partition has no leader")
        for endpoint in broker.endpoints:
            if endpoint.name == self.listener_name:
                return {"node_id": leader, "host": endpoint.host, "port": endpoint.port,
                        "error_code": 0, "error_message": ""}       # Kafka's: empty, not null
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker {leader} has no {self.listener_name} listener")
