"""The broker's live state as JSON (``GET /state``) and its state-change log
(``state-change.log``, ``GET /state-changes``).

Theory of operation. Two views for people (and ``tidelog ui``), next to the
numbers Prometheus reads from ``/metrics``:

* ``broker_state(server)`` is computed when ``/state`` is asked, on the node's
  event loop like a scrape: the broker's id, lifecycle state and epoch, what its
  metadata image says of every registered broker (fenced, in controlled
  shutdown), and per hosted partition the committed registration (leader, leader
  epoch, partition epoch, ISR, replicas) next to this replica's own log start
  offset, high watermark, last stable offset and log end offset — and, on the
  leader, what it knows of each follower's log end offset. Nothing is kept.

* ``StateChangeLog`` is Kafka's ``state-change.log`` as JSON lines. The runtime
  hands it every metadata image it publishes; ``diff_images(old, new)`` — a pure
  function — turns the difference into events: leader elections, ISR shrinks
  and expands, replica set changes, partitions created and deleted, brokers
  registered, fenced, unfenced, in controlled shutdown and unregistered. A
  broker logs the partition events of partitions it is (or was) a replica of,
  and the broker events of every broker; the same change seen by several
  brokers carries the same epochs (``leader_epoch``, ``partition_epoch``,
  ``broker_epoch``), which is how a reader merging the logs of a cluster tells
  one change from another. Its own lifecycle changes (``broker_state``) come from
  the node's ``StateChanged`` effects, and truncations of its logs from
  ``Log.truncations`` changing, looked at about once a second (a follower
  truncates while fetching, not while metadata is published).

  Every event gets the next ``seq`` (continued across restarts from the file's
  last line) and goes to ``<first log dir>/state-change.log``, one JSON object a
  line, and to an in-memory ring that ``/state-changes?since=SEQ`` answers from.
  The file is bounded: past ``max_bytes`` it is renamed ``state-change.log.1``
  (replacing the previous one) and a new one begins, so the two never hold more
  than twice ``max_bytes``. A failing write is logged once and the broker serves
  on — this is a diagnostic, never a reason to stop.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from typing import Iterable, Iterator

from tidelog.core.ids import TopicPartition
from tidelog.metadata.image import MetadataImage
from tidelog.replication.partition import Partition

logger = logging.getLogger("tidelog.state")

STATE_CHANGE_LOG = "state-change.log"
STATE_CHANGE_LOG_MAX_BYTES = 10 * 1024 * 1024     # then rotated to state-change.log.1
RECENT_EVENTS = 2000                                # kept in memory for /state-changes
TRUNCATION_SCAN_INTERVAL_S = 1.0
_TAIL_BYTES = 256 * 1024                            # read back at start: seq and recent events

# Event kinds and the fields each has besides seq, time_ms, broker (docs/observability.md).
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "metadata_loaded": ("metadata_offset", "brokers", "partitions"),
    "broker_state": ("old_state", "new_state", "reason"),
    "broker_registered": ("broker_id", "broker_epoch", "fenced"),
    "broker_unregistered": ("broker_id", "broker_epoch"),
    "broker_fenced": ("broker_id", "broker_epoch"),
    "broker_unfenced": ("broker_id", "broker_epoch"),
    "broker_controlled_shutdown": ("broker_id", "broker_epoch"),
    "partition_created": ("topic", "partition", "leader", "leader_epoch", "partition_epoch", "isr", "replicas"),
    "partition_deleted": ("topic", "partition"),
    "leader_election": ("topic", "partition", "old_leader", "new_leader", "leader_epoch", "partition_epoch", "isr"),
    "isr_shrink": ("topic", "partition", "old_isr", "new_isr", "removed", "leader", "leader_epoch",
                   "partition_epoch"),
    "isr_expand": ("topic", "partition", "old_isr", "new_isr", "added", "leader", "leader_epoch",
                   "partition_epoch"),
    "replicas_changed": ("topic", "partition", "old_replicas", "new_replicas", "partition_epoch"),
    "truncation": ("topic", "partition", "log_end_offset", "high_watermark", "truncations"),
}


# ------------------------------------------------------------------ /state

def _quorum_controller_id(server) -> int:
    """The active controller as this node knows it (not the alive broker Metadata names
    as one): the quorum leader on a controller, the voter a broker talks to otherwise."""
    if server.controller_server is not None and server.controller_server.raft.replica.leader_id >= 0:
        return server.controller_server.raft.replica.leader_id
    channel = getattr(server, "channel", None)
    if hasattr(channel, "leader_guess"):
        return channel.leader_guess
    return server.node_id


def broker_state(server) -> dict:
    """``GET /state`` of a ``runtime.Server``: read now, from the live node."""
    node = server.node
    state: dict = {
        "node_id": server.node_id,
        "roles": [r for r, on in (("broker", server.is_broker), ("controller", server.is_controller)) if on],
        "cluster_id": server.cluster_id,
        "controller_id": _quorum_controller_id(server),
        "is_controller": server.is_controller,
        "time_ms": int(time.time() * 1000),
    }
    image = server.image if (node is not None or server.controller_server is not None) else MetadataImage()
    state["metadata_offset"] = image.offset
    state["brokers"] = [{
        "id": b.broker_id, "broker_epoch": b.broker_epoch, "fenced": b.fenced,
        "in_controlled_shutdown": b.in_controlled_shutdown,
        "endpoints": [{"listener": e.name, "host": e.host, "port": e.port} for e in b.endpoints],
    } for _, b in sorted(image.brokers.items())]
    if node is None:     # a controller-only node
        state.update(state="RUNNING", state_value=3, broker_epoch=-1, fenced=None,
                     in_controlled_shutdown=None, partitions=[])
        return state
    own = image.brokers.get(server.node_id)
    state.update(state=node.state.name, state_value=node.state.value, broker_epoch=node.broker_epoch,
                 fenced=own.fenced if own is not None else None,
                 in_controlled_shutdown=own.in_controlled_shutdown if own is not None else None)
    partitions = []
    for tp, hosted in sorted(node.replica_manager.partitions.items()):
        registration = image.partition(tp)
        entry: dict = {"topic": tp.topic, "partition": tp.partition}
        if registration is not None:
            entry.update(leader=registration.leader, leader_epoch=registration.leader_epoch,
                         partition_epoch=registration.partition_epoch, isr=list(registration.isr),
                         replicas=list(registration.replicas))
        if not isinstance(hosted, Partition):
            entry["role"] = "offline"
            partitions.append(entry)
            continue
        if registration is None:
            entry.update(leader=hosted.leader, leader_epoch=hosted.leader_epoch,
                         partition_epoch=hosted.partition_epoch, isr=list(hosted.isr),
                         replicas=list(hosted.replicas))
        log_ = hosted.log
        entry.update(role="leader" if hosted.is_leader else "follower",
                     log_start_offset=log_.log_start_offset, high_watermark=log_.high_watermark,
                     last_stable_offset=log_.last_stable_offset, log_end_offset=log_.log_end_offset)
        if hosted.is_leader:
            entry["follower_log_end_offsets"] = {
                str(r): s.log_end_offset for r, s in sorted(hosted.replica_states.items())}
        partitions.append(entry)
    state["partitions"] = partitions
    return state


# ------------------------------------------------------- the state diff

def _replicas_of(registration) -> tuple[int, ...]:
    return tuple(registration.replicas) if registration is not None else ()


def _changed_partitions(old: MetadataImage, new: MetadataImage):
    """(tp, before, after) of each partition whose registration is not the same object in
    both images, in TopicPartition order. An image shares what a delta left alone (its
    TopicImage, each PartitionRegistration), so this is O(topics + what changed), not
    O(partitions): a publish during the creation of 10,000 partitions diffed every one."""
    empty: dict = {}
    for name in sorted(set(old.topics_by_name) | set(new.topics_by_name)):
        old_topic, new_topic = old.topics_by_name.get(name), new.topics_by_name.get(name)
        if old_topic is new_topic:
            continue
        before_of = old_topic.partitions if old_topic is not None else empty
        after_of = new_topic.partitions if new_topic is not None else empty
        for index in sorted(set(before_of) | set(after_of)):
            before, after = before_of.get(index), after_of.get(index)
            if before is not after:
                yield TopicPartition(name, index), before, after


def diff_images(old: MetadataImage, new: MetadataImage, local_broker_id: int | None = None) -> list[dict]:
    """The state changes from ``old`` to ``new``, as events without seq/time/broker.
    Partition events only for partitions ``local_broker_id`` is or was a replica of
    (every partition when it is None); broker events for every broker."""
    events: list[dict] = []
    for broker_id in sorted(set(old.brokers) | set(new.brokers)):
        before, after = old.brokers.get(broker_id), new.brokers.get(broker_id)
        if after is None:
            events.append({"kind": "broker_unregistered", "broker_id": broker_id,
                           "broker_epoch": before.broker_epoch})
            continue
        if before is None or before.broker_epoch != after.broker_epoch:
            events.append({"kind": "broker_registered", "broker_id": broker_id,
                           "broker_epoch": after.broker_epoch, "fenced": after.fenced})
            continue
        if before.fenced != after.fenced:
            events.append({"kind": "broker_fenced" if after.fenced else "broker_unfenced", "broker_id": broker_id,
                           "broker_epoch": after.broker_epoch})
        if after.in_controlled_shutdown and not before.in_controlled_shutdown:
            events.append({"kind": "broker_controlled_shutdown", "broker_id": broker_id,
                           "broker_epoch": after.broker_epoch})

    for tp, before, after in _changed_partitions(old, new):
        if local_broker_id is not None and local_broker_id not in _replicas_of(before) + _replicas_of(after):
            continue
        where = {"topic": tp.topic, "partition": tp.partition}
        if after is None:
            events.append({"kind": "partition_deleted", **where})
            continue
        if before is None:
            events.append({"kind": "partition_created", **where, "leader": after.leader,
                           "leader_epoch": after.leader_epoch, "partition_epoch": after.partition_epoch,
                           "isr": list(after.isr), "replicas": list(after.replicas)})
            continue
        if before.partition_epoch == after.partition_epoch and before.leader_epoch == after.leader_epoch:
            continue
        if after.leader != before.leader or after.leader_epoch != before.leader_epoch:
            events.append({"kind": "leader_election", **where, "old_leader": before.leader,
                           "new_leader": after.leader, "leader_epoch": after.leader_epoch,
                           "partition_epoch": after.partition_epoch, "isr": list(after.isr)})
        removed = [r for r in before.isr if r not in after.isr]
        added = [r for r in after.isr if r not in before.isr]
        common = {"old_isr": list(before.isr), "new_isr": list(after.isr), "leader": after.leader,
                  "leader_epoch": after.leader_epoch, "partition_epoch": after.partition_epoch}
        if removed:
            events.append({"kind": "isr_shrink", **where, **common, "removed": removed})
        if added:
            events.append({"kind": "isr_expand", **where, **common, "added": added})
        if tuple(before.replicas) != tuple(after.replicas):
            events.append({"kind": "replicas_changed", **where, "old_replicas": list(before.replicas),
                           "new_replicas": list(after.replicas), "partition_epoch": after.partition_epoch})
    return events


# ------------------------------------------------------- the log itself

class StateChangeLog:
    """Events to ``<log dir>/state-change.log`` (JSON lines, rotated) and a ring in memory."""

    def __init__(self, log_dir: str, broker_id: int, max_bytes: int = STATE_CHANGE_LOG_MAX_BYTES,
                 recent: int = RECENT_EVENTS):
        self.path = os.path.join(log_dir, STATE_CHANGE_LOG)
        self.broker_id = broker_id
        self.max_bytes = max_bytes
        self.recent: deque[dict] = deque(maxlen=recent)
        self.seq = 0
        self._image: MetadataImage | None = None
        self._truncations: dict = {}
        self._next_scan = 0.0
        self._write_failed = False
        self._read_back()

    def _read_back(self) -> None:
        """Continue the seq of the file a previous run left, and serve its last events."""
        lines: list[str] = []
        for path in (self.path + ".1", self.path):
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - _TAIL_BYTES))
                    lines += f.read().decode("utf-8", "replace").splitlines()
            except OSError:
                continue
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:      # a line cut by the tail read, or by a crash mid-write
                continue
            if isinstance(event, dict) and isinstance(event.get("seq"), int) and event["seq"] > self.seq:
                self.seq = event["seq"]
                self.recent.append(event)

    # ------------------------------------------------------------- inputs

    def on_metadata_published(self, image: MetadataImage) -> list[dict]:
        """The node published ``image``: log what changed since the last one."""
        old, self._image = self._image, image
        if old is None:
            return self.append([{"kind": "metadata_loaded", "metadata_offset": image.offset,
                                 "brokers": sorted(image.brokers),
                                 "partitions": sum(1 for _ in image.all_partitions())}])
        return self.append(diff_images(old, image, self.broker_id))

    def on_broker_state(self, old, new, reason: str) -> list[dict]:
        return self.append([{"kind": "broker_state", "old_state": old.name, "new_state": new.name,
                             "reason": reason}])

    def maybe_scan_truncations(self, logs: Iterable, force: bool = False) -> list[dict]:
        """About once a second: a log whose ``truncations`` count rose was truncated."""
        now = time.monotonic()
        if not force and now < self._next_scan:
            return []
        self._next_scan = now + TRUNCATION_SCAN_INTERVAL_S
        events, seen = [], {}
        for log_ in logs:
            tp = log_.topic_partition
            count = seen[tp] = log_.truncations
            before = self._truncations.get(tp)      # a log seen for the first time is the baseline
            if before is not None and count > before:
                events.append({"kind": "truncation", "topic": tp.topic, "partition": tp.partition,
                               "log_end_offset": log_.log_end_offset, "high_watermark": log_.high_watermark,
                               "truncations": count})
        self._truncations = seen
        return self.append(events)

    # ------------------------------------------------------------ outputs

    def append(self, events: list[dict]) -> list[dict]:
        if not events:
            return events
        now_ms = int(time.time() * 1000)
        lines = []
        for event in events:
            self.seq += 1
            event = {"seq": self.seq, "time_ms": now_ms, "broker": self.broker_id, **event}
            self.recent.append(event)
            lines.append(json.dumps(event, separators=(",", ":")))
        self._write("\n".join(lines) + "\n")
        return list(self.recent)[-len(events):]

    def _write(self, text: str) -> None:
        try:
            try:
                if os.path.getsize(self.path) + len(text) > self.max_bytes:
                    os.replace(self.path, self.path + ".1")
            except FileNotFoundError:
                pass
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
            self._write_failed = False
        except OSError as e:
            if not self._write_failed:
                logger.warning("cannot write %s: %s (state changes are kept in memory only)", self.path, e)
            self._write_failed = True

    def since(self, seq: int, limit: int = 1000) -> dict:
        """``GET /state-changes?since=SEQ``: the events after ``seq`` still held (oldest first)."""
        events = [e for e in self.recent if e["seq"] > seq][:limit]
        return {"broker": self.broker_id, "first_seq": self.recent[0]["seq"] if self.recent else self.seq + 1,
                "last_seq": self.seq, "events": events}


def events_of(lines: Iterable[str]) -> Iterator[dict]:
    """The events of state-change.log lines (for tools reading the file)."""
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:
            continue
