"""The simulated controller process: production's ``QuorumController`` behind the network.

Theory of operation. ``SimController`` is ``server/controller_server.py`` without
asyncio. It owns the metadata log — an ``InMemoryMetadataLog`` standing for the
controller's disk, so it survives a controller restart — and a
``QuorumController`` built on it at every process start (a restart replays the
log and gives every registered broker a fresh session, as the real one does).

Requests: ``BrokerRegistration``, ``BrokerHeartbeat``, ``AlterPartition`` and
``CreateTopics`` (a broker creating ``__consumer_offsets``) go straight to the
controller's methods; ``MetadataFetch`` answers with the committed offset at
once when there is news, otherwise it waits (long poll, as the Fetch of
``__cluster_metadata`` does) until the next write or ``max_wait``.
The stale-broker check fires at ``next_deadline_ms()`` on the controller's own
(possibly skewed) clock.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from tidelog.controller.messages import CreatableTopic
from tidelog.controller.quorum_controller import QuorumController
from tidelog.core.errors import ErrorCode
from tidelog.metadata.log import InMemoryMetadataLog
from tidelog.sim.loop import NodeClock
from tidelog.sim.network import NetworkNode

if TYPE_CHECKING:
    from tidelog.sim.world import World

CLUSTER_ID = "tidelog-sim"


class SimController(NetworkNode):
    def __init__(self, sim: "World", drift_ppm: int = 0):
        super().__init__("ctl", sim.loop, sim.network)
        self.sim = sim
        self.clock = NodeClock(sim.loop, drift_ppm=drift_ppm)
        self.log = InMemoryMetadataLog()
        self.controller: QuorumController | None = None
        self._parked: list = []
        self._deadline_event = None
        self.starts = 0

    def start(self) -> None:
        self.process_started()
        self.starts += 1
        self.controller = QuorumController(
            clock=self.clock, log=self.log, cluster_id=CLUSTER_ID,
            rng=random.Random(f"{self.sim.config.seed}-controller-{self.starts}"),
            session_timeout_ms=self.sim.config.session_timeout_ms)
        self._parked = []
        self._deadline_event = None
        self._after_write()

    def kill(self) -> None:
        self.process_ended()
        self._parked = []

    @property
    def image(self):
        return self.controller.image

    # ------------------------------------------------------------ admin (the operator)

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict,
                     assignments=None) -> None:
        if assignments is not None:
            partitions = replication_factor = -1
        result = self.controller.create_topics([CreatableTopic(name, partitions, replication_factor,
                                                               assignments, configs=configs)])[0]
        assert result.error_code == ErrorCode.NONE, result
        self._after_write()

    # ------------------------------------------------------------ requests

    def on_request(self, message) -> None:
        kind, body = message.kind, message.body
        controller = self.controller
        if kind == "BrokerRegistration":
            self.reply(message, controller.register_broker(body))
        elif kind == "BrokerHeartbeat":
            self.reply(message, controller.process_broker_heartbeat(body))
        elif kind == "AlterPartition":
            self.reply(message, controller.alter_partition(body))
        elif kind == "CreateTopics":
            self.reply(message, controller.create_topics([body])[0].error_code)
        elif kind == "MetadataFetch":
            if body["from_offset"] > controller.committed_offset and body["max_wait_ms"] > 0:
                entry = [message, None]
                entry[1] = self.after(self.clock.to_global_delay(body["max_wait_ms"]),
                                      lambda: self._answer_parked(entry))
                self._parked.append(entry)
            else:
                self.reply(message, {"committed_offset": controller.committed_offset})
            return
        else:
            raise AssertionError(f"controller: no handler for {kind}")
        self._after_write()

    def _answer_parked(self, entry) -> None:
        if entry in self._parked:
            self._parked.remove(entry)
            self.reply(entry[0], {"committed_offset": self.controller.committed_offset})

    def _after_write(self) -> None:
        """Wake the metadata fetches waiting for news; re-arm the stale-broker check."""
        committed = self.controller.committed_offset
        still = []
        for entry in self._parked:
            if entry[0].body["from_offset"] <= committed:
                entry[1].cancel()
                self.reply(entry[0], {"committed_offset": committed})
            else:
                still.append(entry)
        self._parked = still
        deadline = self.controller.next_deadline_ms()
        if self._deadline_event is not None:
            self._deadline_event.cancel()
            self._deadline_event = None
        if deadline is not None:
            delay = self.clock.to_global_delay(max(0, deadline - self.clock.monotonic_ms()))
            self._deadline_event = self.after(delay, self._on_deadline)

    def _on_deadline(self) -> None:
        self._deadline_event = None
        fenced = self.controller.fire_due_deadlines()
        for broker_id in fenced:
            self.loop.trace.add(self.loop.now_ms, self.name, f"fenced broker {broker_id}: session expired")
        self._after_write()
