"""The machinery of the differential conformance test (test_differential.py).

The same request bodies go to Apache Kafka and to tidelog through tidelog's own wire
client (``KafkaConnection`` and the kio codec), at a version both serve; each answer is
turned into plain data (``plain``), with what must differ between two servers replaced by
placeholders (``Side.normalize``: topic and directory ids, producer and member ids,
timestamps, host names and ports, throttle times), and the two are compared field by field
(``compare``): lists of named things (topics, partitions, configs, API keys) are matched by
name, so an entry only one side has is reported as such.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import ClientSecurity, KafkaConnection
from tidelog.protocol.codec import kio_versions
from tidelog.records.batch import SimpleRecord, build_batch, iter_batches, iter_records

HOST = "127.0.0.1"
ABSENT = "(absent)"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
ZERO_UUID = uuid.UUID(int=0)

# Fields whose values must differ between two servers (or two runs), anywhere in a response.
IGNORED_FIELDS = {"throttle_time", "host", "port", "cluster_id", "session_id"}
# Fields holding ids a server makes up: the first one seen becomes <member-1>, and so on.
ALIASED_FIELDS = {"member_id": "member", "leader": "member", "producer_id": "pid",
                  "coordinator_epoch": "coordinator-epoch"}
# Broker settings that name this run's directories, ports, ids or the node's roles and
# listeners (set for the Kafka node, left to their defaults by a lone tidelog serve): such
# an entry of DescribeConfigs is compared by its name only.
ENVIRONMENT_CONFIGS = {"listeners", "advertised.listeners", "log.dirs", "log.dir", "controller.quorum.voters",
                       "controller.quorum.bootstrap.servers", "node.id", "broker.id", "metadata.log.dir",
                       "process.roles", "controller.listener.names", "inter.broker.listener.name",
                       "listener.security.protocol.map"}
# Keys that name the entries of a list (first present wins), to match entries by name.
ENTRY_KEYS = ("api_key", "name", "topic", "resource_name", "partition_index", "partition", "index", "group_id",
              "transactional_id", "key", "member_id", "topic_id")


def plain(value: Any) -> Any:
    """A decoded kio entity as JSON-like data: dicts, lists, ints, strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name.upper() if type(value).__name__ == "ErrorCode" else value.value
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH) / datetime.timedelta(milliseconds=1))
    if isinstance(value, uuid.UUID):
        return "<zero-uuid>" if value == ZERO_UUID else "<uuid>"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return value


def decode_records(raw: bytes) -> list[dict]:
    """A Fetch response's records as comparable data (no timestamps, no CRCs)."""
    out = []
    for pos, header in iter_batches(raw):
        for record in iter_records(raw, pos):
            out.append({"offset": record.offset, "key": record.key, "value": record.value,
                        "headers": [list(h) for h in record.headers],
                        "transactional": header.is_transactional, "control": header.is_control})
    return out


class Side:
    """One server under test: a connection, and the aliases of the ids it made up."""

    def __init__(self, name: str, port: int, versions: dict[int, tuple[int, int]],
                 users: dict[str, str] | None = None, user: str | None = None):
        self.name = name
        self.port = port
        self.versions = versions            # the versions both servers (and kio) serve
        self.users = users or {}            # SASL/PLAIN name -> password, on a secure listener
        self.user = user                    # who this side logs in as (None: no SASL)
        self.conn: KafkaConnection | None = None
        self._aliases: dict[tuple[str, Any], str] = {}
        self._alias_counts: dict[str, int] = {}
        self._others: list[Side] = []

    async def open(self) -> None:
        security = None
        if self.user is not None:
            security = ClientSecurity(None, "PLAIN", self.user, self.users[self.user])
        self.conn = await KafkaConnection.connect(HOST, self.port, client_id="conformance", security=security)

    async def login(self, user: str | None = None) -> "Side":
        """The same server on a connection of its own (as ``user``, or as this side's),
        sharing the aliases: Kafka answers one request of a connection at a time, so a
        request the broker holds (a JoinGroup in a rebalance) needs another."""
        other = Side(self.name, self.port, self.versions, self.users, user or self.user)
        other._aliases, other._alias_counts = self._aliases, self._alias_counts
        await other.open()
        self._others.append(other)
        return other

    async def on(self, port: int, timeout_s: float = 30.0) -> "Side":
        """Another broker of the same cluster (a connection of its own, sharing the aliases).

        A broker just started may be named leader a moment before its listener accepts
        (seen once in CI): refused connections are retried, as every Kafka client does,
        for up to ``timeout_s``."""
        other = Side(self.name, port, self.versions, self.users, self.user)
        other._aliases, other._alias_counts = self._aliases, self._alias_counts
        other.cluster = getattr(self, "cluster", None)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await other.open()
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        self._others.append(other)
        return other

    def close(self) -> None:
        for other in self._others:
            other.close()
        if self.conn is not None:
            self.conn.close()

    def version(self, api: int, mode: str) -> int:
        low, high = self.versions[api]
        return low if mode == "low" else high

    async def raw(self, api: int, body: dict, version: int):
        return await self.conn.request(api, body, version=version, timeout_s=30)

    async def call(self, api: int, body: dict, mode: str = "high", version: int | None = None) -> dict:
        version = self.version(api, mode) if version is None else version
        response = await self.raw(api, body, version)
        return {"version": version, **self.normalize(plain(response))}

    # -- normalization --------------------------------------------------------------------

    def alias(self, kind: str, value: Any) -> str:
        key = (kind, value)
        if key not in self._aliases:
            self._alias_counts[kind] = self._alias_counts.get(kind, 0) + 1
            self._aliases[key] = f"<{kind}-{self._alias_counts[kind]}>"
        return self._aliases[key]

    def normalize(self, data: Any, name: str = "") -> Any:
        if isinstance(data, dict):
            if data.get("name") in ENVIRONMENT_CONFIGS and "config_source" in data:
                return {"name": data["name"], "value": "<environment>"}
            out = {}
            for key, value in data.items():
                if key in IGNORED_FIELDS:
                    continue
                out[key] = self.normalize(value, key)
            return out
        if isinstance(data, list):
            return [self.normalize(v, name) for v in data]
        if name == "finalized_features_epoch" and isinstance(data, int) and data >= 0:
            return "<metadata-offset>"          # where the features were last set: differs by run
        if name in ALIASED_FIELDS and data not in ("", None, -1):
            return self.alias(ALIASED_FIELDS[name], data)
        if isinstance(data, int) and not isinstance(data, bool) and data > 10**12 and (
                name.endswith("time") or "timestamp" in name or name.endswith("_ms")):
            return "<time>"
        if name == "records" and isinstance(data, str):
            return decode_records(bytes.fromhex(data)) if data else []
        return data


# -- comparison ---------------------------------------------------------------------------


@dataclass
class Difference:
    scenario: str
    mode: str
    label: str            # which answer of the scenario
    path: str             # the field, e.g. ".topics[t].partitions[0].error_code"
    kafka: Any
    tidelog: Any
    reason: str | None = None    # the allow-list's, when allowed

    @property
    def key(self) -> str:
        """What the allow-list's patterns match: ``scenario@mode label path``, with
        `` (only Kafka)`` or `` (only tidelog)`` for an entry one side lacks."""
        suffix = " (only Kafka)" if self.tidelog == ABSENT else " (only tidelog)" if self.kafka == ABSENT else ""
        return f"{self.scenario}@{self.mode} {self.label}{self.path}{suffix}"


def _entry_key(*sides: list) -> str | None:
    """The first of ENTRY_KEYS that names every entry of each side uniquely (None: none does)."""
    entries = [e for side in sides for e in side]
    if not entries or not all(isinstance(e, dict) for e in entries):
        return None
    for key in ENTRY_KEYS:
        if all(key in e for e in entries) and all(len({repr(e[key]) for e in side}) == len(side) for side in sides):
            return key
    return None


def compare(kafka: Any, tidelog: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Every (path, Kafka's value, tidelog's value) where the two differ."""
    if isinstance(kafka, dict) and isinstance(tidelog, dict):
        out = []
        for key in list(kafka) + [k for k in tidelog if k not in kafka]:
            out += compare(kafka.get(key, ABSENT), tidelog.get(key, ABSENT), f"{path}.{key}")
        return out
    if isinstance(kafka, list) and isinstance(tidelog, list):
        key = _entry_key(kafka, tidelog)
        if key is not None:
            mine = {repr(e[key]): e for e in kafka}
            theirs = {repr(e[key]): e for e in tidelog}
            out = []
            for name in list(mine) + [n for n in theirs if n not in mine]:
                label = f"{path}[{name.strip(chr(39))}]"
                if name not in theirs:
                    out.append((label, _summary(mine[name]), ABSENT))
                elif name not in mine:
                    out.append((label, ABSENT, _summary(theirs[name])))
                else:
                    out += compare(mine[name], theirs[name], label)
            return out
        if len(kafka) == len(tidelog):
            out = []
            for i, (a, b) in enumerate(zip(kafka, tidelog)):
                out += compare(a, b, f"{path}[{i}]")
            return out
    return [] if kafka == tidelog else [(path, kafka, tidelog)]


def _summary(entry: dict) -> Any:
    """What a report shows of an entry only one side has."""
    if isinstance(entry, dict):
        shown = {k: v for k, v in entry.items() if k in ("value", "error_code", "min_version", "max_version",
                                                         "config_source", "read_only", "is_sensitive")}
        return shown or "present"
    return entry


# -- request helpers ----------------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(values: list[bytes], *, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
          transactional: bool = False, key: bytes | None = b"k", timestamp_ms: int | None = None) -> bytes:
    return build_batch([SimpleRecord(v, key) for v in values], timestamp_ms=timestamp_ms or now_ms() - 1000,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                       is_transactional=transactional)


def subscription(topics: list[str]) -> bytes:
    """A ConsumerProtocolSubscription v0, as a classic consumer sends in JoinGroup."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """A ConsumerProtocolAssignment v0."""
    return (struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
            + struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
            + struct.pack(">i", -1))


async def wait_for(probe, what: str, timeout_s: float = 30.0, interval_s: float = 0.05):
    """Await ``probe()`` until it returns something true; returns it."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval_s)


def common_versions(kafka: dict[int, tuple[int, int]], tidelog: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    out = {}
    for api in kafka.keys() & tidelog.keys():
        ours = kio_versions(api)
        if ours is None:
            continue
        low = max(kafka[api][0], tidelog[api][0], ours[0])
        high = min(kafka[api][1], tidelog[api][1], ours[1])
        if low <= high:
            out[api] = (low, high)
    # AddPartitionsToTxn v4+ is the brokers' batched verification call, not a client's.
    if ApiKey.ADD_PARTITIONS_TO_TXN in out:
        low, high = out[ApiKey.ADD_PARTITIONS_TO_TXN]
        out[ApiKey.ADD_PARTITIONS_TO_TXN] = (low, min(high, 3))
    return out


@dataclass
class Outcome:
    """What one scenario at one version mode gave on both sides."""
    scenario: str
    mode: str
    versions: dict[str, int] = field(default_factory=dict)     # API name -> version used
    differences: list[Difference] = field(default_factory=list)
