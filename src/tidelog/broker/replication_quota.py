"""Replication throttles (Kafka's ``ReplicationQuotaManager``, KIP-73; docs/reassignment.md).

Theory of operation. A reassignment copies whole partitions to new replicas; left
alone, that copy takes the leaders' disks and network from the clients. An operator
bounds it with two broker settings and two topic settings:

* ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``
  (bytes/s, dynamic: this broker's own value, else the cluster-wide default, else
  server.properties; unset: no bound, Kafka's ``Long.MAX_VALUE``);
* ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``
  (topic settings: ``partition:broker`` items, or ``*`` for every replica). A broker
  throttles a partition on the leader side when the leader list names that partition
  with *this* broker, and on the follower side when the follower list does.

This broker has one ``ReplicationQuotaManager`` per side. It decides, at a time the
caller gives (an injected clock; nothing here reads a clock):

* ``is_throttled(tp)`` — the topic's list names ``tp`` on this broker;
* ``is_quota_exceeded(now_ms)`` — the bytes recorded against this side, as a rate
  (Kafka's ``SimpleRate``: ``replication.quota.window.num`` samples of
  ``replication.quota.window.size.seconds``, over at least one window), are above the
  side's rate.

and the fetch paths use them as Kafka does:

* leader (broker/requests/fetch.py, ``ReplicaManager._read``): a follower's Fetch
  answers a throttled partition with no records (its offsets, no error) while the
  leader quota is exceeded — unless that follower is in the ISR (a caught-up replica
  is never held back: Kafka's ``shouldLeaderThrottle``); a throttled partition's bytes
  do not count toward the fetch's ``min_bytes``; the bytes sent for throttled
  partitions are recorded against the leader quota;
* follower (replication/fetcher.py): while the follower quota is exceeded, the fetcher
  leaves its throttled partitions that are not caught up (lag > 0 or unknown) out of
  its Fetch, and records the bytes it appends for throttled partitions.

The rates (``LeaderReplication`` / ``FollowerReplication`` ``byte-rate``) and the
number of partitions left out (``throttled_partitions``) are in /metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from tidelog.broker.quotas import Rate
from tidelog.core.ids import TopicPartition
from tidelog.metadata.image import ConfigResource
from tidelog.metadata.records import ConfigResourceType

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
RATE_UNBOUNDED = (1 << 63) - 1            # Kafka's default: Long.MAX_VALUE, no throttle
ALL_REPLICAS = "*"


class SimpleRate(Rate):
    """Kafka's ``SimpleRate``: a ``Rate`` taken over at least one window (not
    ``window.num - 1``), so a replication burst is noticed within a second."""

    __slots__ = ()

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        return max(now_ms - min(self._starts), self.window_ms)

    def ms_until_at_most(self, bound: float, now_ms: int) -> int:
        """How long, with nothing more recorded, until the rate is at most ``bound`` (> 0):
        until the time since the oldest sample's start holds the samples' sum at that rate."""
        self._purge(now_ms)
        return max(0, math.ceil(min(self._starts) + sum(self._values) * 1000 / bound - now_ms))


@dataclass
class ReplicationQuotaManager:
    """One side's (leader or follower) rate and throttled partitions."""

    replication_type: str                               # "LeaderReplication" / "FollowerReplication"
    window_num: int = 11                                # replication.quota.window.num
    window_size_ms: int = 1000                          # replication.quota.window.size.seconds × 1000
    rate_bytes_per_second: int = RATE_UNBOUNDED
    # topic → throttled partition numbers on this broker, or ALL_REPLICAS.
    throttled_partitions: dict[str, frozenset[int] | str] = field(default_factory=dict)
    rate: SimpleRate | None = None
    throttled_total: int = 0                            # partitions left out of a fetch, ever

    def update_quota(self, rate_bytes_per_second: int) -> None:
        assert rate_bytes_per_second >= 0, rate_bytes_per_second
        self.rate_bytes_per_second = rate_bytes_per_second

    def mark_throttled(self, topic: str, partitions: frozenset[int] | str) -> None:
        self.throttled_partitions[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self.throttled_partitions.pop(topic, None)

    def is_throttled(self, tp: TopicPartition) -> bool:
        partitions = self.throttled_partitions.get(tp.topic)
        return partitions is not None and (partitions == ALL_REPLICAS or tp.partition in partitions)

    def _rate(self, now_ms: int) -> SimpleRate:
        if self.rate is None:
            self.rate = SimpleRate(self.window_num, self.window_size_ms, now_ms)
        return self.rate

    def record(self, value: int, now_ms: int) -> None:
        """Bytes replicated for throttled partitions (not checked against the quota here)."""
        self._rate(now_ms).record(value, now_ms)

    def byte_rate(self, now_ms: int) -> float:
        return self._rate(now_ms).measure(now_ms)

    def quota_exceeded_for_ms(self, now_ms: int) -> int:
        """How long until the rate is back to the bound if nothing more is recorded (0: it is
        not exceeded): the recorded bytes over the bound, from the oldest sample's start."""
        if not self.is_quota_exceeded(now_ms):
            return 0
        return max(1, self._rate(now_ms).ms_until_at_most(self.rate_bytes_per_second, now_ms))

    def is_quota_exceeded(self, now_ms: int) -> bool:
        if self.rate_bytes_per_second >= RATE_UNBOUNDED:
            return False
        return self.byte_rate(now_ms) > self.rate_bytes_per_second


def parse_throttled_replicas(value: str, broker_id: int) -> frozenset[int] | str:
    """The partitions a validated ``*.replication.throttled.replicas`` value throttles on
    ``broker_id`` (Kafka's ``parseThrottledPartitions``)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if items == [ALL_REPLICAS]:
        return ALL_REPLICAS
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuotas:
    """This broker's two replication quota managers (Kafka's ``QuotaFactory`` leader and
    follower quotas), kept up to date from the metadata image."""

    SETTINGS = (LEADER_RATE, FOLLOWER_RATE, "replication.quota.window.num", "replication.quota.window.size.seconds")

    def __init__(self, broker_id: int, config):
        """``config``: the broker's static settings (a ``BrokerConfig`` or a mapping)."""
        self.broker_id = broker_id
        static = {name: config[name] for name in self.SETTINGS if _has(config, name)}
        window_num = int(static.get("replication.quota.window.num", 11))
        window_ms = int(static.get("replication.quota.window.size.seconds", 1)) * 1000
        self.leader = ReplicationQuotaManager("LeaderReplication", window_num, window_ms)
        self.follower = ReplicationQuotaManager("FollowerReplication", window_num, window_ms)
        self._static = static
        self._configs = None
        self.on_configs({})

    def on_configs(self, configs: Mapping) -> None:
        """Take the settings of a metadata image's ``configs`` (``{ConfigResource: {name:
        value}}``) if they changed (images share an unchanged map)."""
        if configs is self._configs:
            return
        self._configs = configs
        own = configs.get(ConfigResource(int(ConfigResourceType.BROKER), str(self.broker_id)), {})
        cluster = configs.get(ConfigResource(int(ConfigResourceType.BROKER), ""), {})
        for manager, name in ((self.leader, LEADER_RATE), (self.follower, FOLLOWER_RATE)):
            value = own.get(name, cluster.get(name, self._static.get(name)))
            manager.update_quota(RATE_UNBOUNDED if value is None else int(value))
        topic_type = int(ConfigResourceType.TOPIC)
        for manager, name in ((self.leader, LEADER_REPLICAS), (self.follower, FOLLOWER_REPLICAS)):
            manager.throttled_partitions = {
                resource.name: parse_throttled_replicas(values[name], self.broker_id)
                for resource, values in configs.items()
                if resource.type == topic_type and values.get(name)}


def _has(config, name: str) -> bool:
    try:
        config[name]
    except KeyError:
        return False
    return True
