"""Client quotas on the broker (KIP-13, KIP-55, KIP-124, KIP-219; Kafka's ClientQuotaManager).

Theory of operation. The metadata image holds the quotas (``client_quotas``:
entity → {key: value}, metadata/client_quotas.py). ``ClientQuotas.on_image``
hands each quota type its map; nothing else changes them. Per request the server
driver (server/quotas.py) records what the client used —

* ``produce``: a Produce request's size in bytes, against ``producer_byte_rate``;
* ``fetch``: a consumer's Fetch response size in bytes, against ``consumer_byte_rate``;
* ``request``: the time spent handling the request, as a percentage of one
  thread for one second (1 ms = 0.1), against ``request_percentage``;
* ``controller_mutation``: partitions created or deleted (CreateTopics,
  CreatePartitions, DeleteTopics), against ``controller_mutation_rate`` — a token
  bucket rather than a rate (KIP-599, ``ControllerMutationQuotaManager``) —

and gets back the *throttle time*: how long the client must pause so that its
rate falls back to the quota. The driver puts it in the response's
``throttle_time_ms`` and stops reading that connection for that long (Kafka
mutes the channel), so a client that ignores the field is held back all the same.

Which quota applies (Kafka's DefaultQuotaCallback), the first configured of:
user+client-id, user+default client-id, user, default user+client-id, default
user+default client-id, default user, client-id, default client-id. The entity
found also says who shares the usage: a quota on ``user=alice`` is shared by all
of alice's clients, one on ``<default> user`` is each user's own. No quota: no
throttling; a quota type with no quota set anywhere measures nothing (Kafka's
``quotasEnabled``), so a broker without quotas pays nothing per request.

The rate (Kafka's ``Rate`` over a ``SampledStat``): ``quota.window.num`` samples
of ``quota.window.size.seconds`` each (11 × 1 s by default, one extra slot kept
for the sample overlapping the window's start). The rate is the samples' sum
over the time since the oldest sample started, but never less than
``window.num - 1`` whole windows (so a new client is not judged on its first
millisecond). Over the quota Q at rate R, the throttle time is
``(R - Q) / Q × window`` — the pause after which R would be Q. Everything here
takes ``now_ms`` from the caller (an injected clock); nothing reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tidelog.metadata.client_quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
)

QUOTA_WINDOW_NUM_DEFAULT = 11               # quota.window.num
QUOTA_WINDOW_SIZE_SECONDS_DEFAULT = 1       # quota.window.size.seconds
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000   # Kafka drops a client's sensors after an hour idle
SENSORS_MAX = 100_000                       # a bound on the clients measured at once (STYLE: limits)


class Rate:
    """A windowed rate (per second) of recorded values (Kafka's Rate + SampledStat)."""

    __slots__ = ("samples_num", "window_ms", "_starts", "_last_events", "_values", "_current")

    def __init__(self, samples_num: int, window_ms: int, now_ms: int):
        self.samples_num = samples_num
        self.window_ms = window_ms
        # The samples, a ring of samples_num + 1 slots (one for the overlapping sample).
        self._starts = [now_ms]
        self._last_events = [now_ms]
        self._values = [0.0]
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        i = self._current
        if now_ms - self._starts[i] >= self.window_ms:
            i = self._current = (i + 1) % (self.samples_num + 1)
            if i == len(self._starts):
                self._starts.append(now_ms)
                self._last_events.append(now_ms)
                self._values.append(0.0)
            else:
                self._reset(i, now_ms)
        self._values[i] += value
        self._last_events[i] = now_ms

    def _reset(self, i: int, now_ms: int) -> None:
        self._starts[i] = self._last_events[i] = now_ms
        self._values[i] = 0.0

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples_num * self.window_ms
        for i in range(len(self._starts)):
            if now_ms - self._last_events[i] >= expire_ms:
                self._reset(i, now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is taken over (purges obsolete samples first)."""
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts)
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples_num - 1:
            elapsed += (self.samples_num - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        window = self.window_size_ms(now_ms)
        return sum(self._values) / (window / 1000)

    def last_event_ms(self) -> int:
        return max(self._last_events)


@dataclass
class ClientSensors:
    """One quota's usage by one client (or by the clients sharing a quota entity)."""

    user: str                       # the metric tags ("" = not part of the quota entity)
    client_id: str
    rate: Rate
    throttle_time_ms_total: int = 0     # Kafka's throttle-time is an average; tidelog keeps sum and count
    throttled: int = 0
    tokens: float | None = None         # controller_mutation_rate's token bucket (None: not started)
    tokens_at_ms: int = 0


@dataclass
class ClientQuotaManager:
    """One quota type's quotas and its clients' usage (Kafka's ClientQuotaManager)."""

    quota_key: str                  # producer_byte_rate, consumer_byte_rate or request_percentage
    window_num: int = QUOTA_WINDOW_NUM_DEFAULT
    window_size_ms: int = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT * 1000
    # (user, client-id) entity → quota; None for a default part. Only this key's values.
    quotas: dict[tuple[str | None, str | None], float] = field(default_factory=dict)
    sensors: dict[tuple[str, str], ClientSensors] = field(default_factory=dict)
    _defaults: frozenset = frozenset()

    def update_quotas(self, client_quotas: Mapping[tuple, Mapping[str, float]]) -> None:
        """Take this key's quotas from the image's ``client_quotas`` (the usage is kept)."""
        quotas: dict[tuple[str | None, str | None], float] = {}
        for entity, values in client_quotas.items():
            if self.quota_key not in values:
                continue
            parts = dict(entity)
            if set(parts) - {USER, CLIENT_ID}:
                continue                # an ``ip`` entity: not a client quota
            quotas[(_part(parts, USER), _part(parts, CLIENT_ID))] = values[self.quota_key]
        self.quotas = quotas

    def quota_metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """Who shares the usage with (user, client_id): Kafka's quotaMetricTags."""
        q = self.quotas
        if (user, client_id) in q or (user, None) in q:
            return user, client_id
        if (user, _NO) in q:
            return user, ""
        if (None, client_id) in q or (None, None) in q:
            return user, client_id
        if (None, _NO) in q:
            return user, ""
        return "", client_id

    def quota_limit(self, user_tag: str, client_id_tag: str) -> float | None:
        """The quota of a client's metric tags, None if none applies (Kafka's quotaLimit)."""
        q = self.quotas
        if user_tag and client_id_tag:
            for key in ((user_tag, client_id_tag), (user_tag, None), (None, client_id_tag), (None, None)):
                if key in q:
                    return q[key]
        elif user_tag:
            for key in ((user_tag, _NO), (None, _NO)):
                if key in q:
                    return q[key]
        elif client_id_tag:
            for key in ((_NO, client_id_tag), (_NO, None)):
                if key in q:
                    return q[key]
        return None

    def _sensors(self, user: str, client_id: str, now_ms: int) -> ClientSensors:
        tags = self.quota_metric_tags(user, client_id)
        sensors = self.sensors.get(tags)
        if sensors is None:
            if len(self.sensors) >= SENSORS_MAX:
                self.expire_sensors(now_ms, force=True)
            sensors = self.sensors[tags] = ClientSensors(
                tags[0], tags[1], Rate(self.window_num, self.window_size_ms, now_ms))
        return sensors

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` used by the client; the throttle time (ms) it has earned, 0 if none."""
        sensors = self._sensors(user, client_id, now_ms)
        sensors.rate.record(value, now_ms)
        bound = self.quota_limit(sensors.user, sensors.client_id)
        if bound is None:
            return 0
        rate = sensors.rate.measure(now_ms)
        if rate <= bound:
            return 0
        return round((rate - bound) / bound * sensors.rate.window_size_ms(now_ms))

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a Fetch answered empty because it was throttled)."""
        self._sensors(user, client_id, now_ms).rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may use without being throttled on its own (Kafka caps a
        consumer's fetch size with it): quota × (window.num - 1) windows; None: no quota."""
        bound = self.quota_limit(*self.quota_metric_tags(user, client_id))
        if bound is None:
            return None
        return bound * (self.window_num - 1) * self.window_size_ms / 1000

    def record_throttle(self, user: str, client_id: str, throttle_time_ms: int, now_ms: int) -> None:
        sensors = self._sensors(user, client_id, now_ms)
        sensors.throttle_time_ms_total += throttle_time_ms
        sensors.throttled += 1

    def expire_sensors(self, now_ms: int, force: bool = False) -> None:
        """Forget clients idle for an hour (all idle ones past the bound, ``force``)."""
        horizon = now_ms - (0 if force else INACTIVE_SENSOR_EXPIRATION_MS)
        for tags in [t for t, s in self.sensors.items() if s.rate.last_event_ms() <= horizon]:
            del self.sensors[tags]


class ControllerMutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate`` (KIP-599): partitions created or deleted per second,
    kept as a token bucket (Kafka's TokenBucket). A client has ``quota × window.num ×
    window.size`` tokens at most; each partition it creates or deletes takes one, and
    tokens come back at ``quota`` per second. While its tokens are below zero the client
    is over its quota: the throttle time is the time the deficit takes to refill."""

    def _bucket(self, user: str, client_id: str, now_ms: int) -> tuple[ClientSensors, float | None]:
        sensors = self._sensors(user, client_id, now_ms)
        quota = self.quota_limit(sensors.user, sensors.client_id)
        if quota is None:
            return sensors, None
        burst = quota * self.window_num * self.window_size_ms / 1000
        if sensors.tokens is None:
            sensors.tokens, sensors.tokens_at_ms = burst, now_ms
        elapsed_s = max(0, now_ms - sensors.tokens_at_ms) / 1000
        sensors.tokens = min(burst, sensors.tokens + quota * elapsed_s)
        sensors.tokens_at_ms = now_ms
        return sensors, quota

    def throttle_time_ms(self, user: str, client_id: str, now_ms: int) -> int:
        """How long until the client's tokens are back to zero; 0 if it is not over its quota."""
        sensors, quota = self._bucket(user, client_id, now_ms)
        if quota is None or sensors.tokens >= 0:
            return 0
        return round(-sensors.tokens / quota * 1000)

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Take ``value`` tokens (partitions); the throttle time the client is left with."""
        sensors, quota = self._bucket(user, client_id, now_ms)
        sensors.rate.record(value, now_ms)          # the mutation rate, for the metrics
        if quota is None:
            return 0
        sensors.tokens -= value
        return self.throttle_time_ms(user, client_id, now_ms)


_NO = ""        # in ``quotas`` keys: this part is not in the entity (None is the default entity)


def _part(parts: Mapping[str, str | None], entity_type: str) -> str | None:
    return parts[entity_type] if entity_type in parts else _NO


class ClientQuotas:
    """The broker's quota managers, one per quota type (Kafka's QuotaFactory)."""

    def __init__(self, window_num: int = QUOTA_WINDOW_NUM_DEFAULT,
                 window_size_seconds: int = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT):
        window_ms = window_size_seconds * 1000
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, window_num, window_ms)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, window_num, window_ms)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, window_num, window_ms)
        self.controller_mutation = ControllerMutationQuotaManager(CONTROLLER_MUTATION_RATE, window_num, window_ms)
        self._image_quotas: Mapping | None = None
        self.enabled = False            # any quota of any type set (Kafka measures nothing otherwise)

    @property
    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request, self.controller_mutation

    def on_image(self, client_quotas: Mapping[tuple, Mapping[str, float]]) -> None:
        """A new metadata image: take its quotas if they changed (images share unchanged maps)."""
        if client_quotas is self._image_quotas:
            return
        self._image_quotas = client_quotas
        for manager in self.managers:
            manager.update_quotas(client_quotas)
        self.enabled = any(manager.quotas for manager in self.managers)
