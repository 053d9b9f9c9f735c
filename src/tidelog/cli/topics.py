"""``tidelog topics create|list|describe|delete|alter-config`` over the wire protocol.

Works against any Kafka broker: it uses only Metadata, CreateTopics,
DeleteTopics, IncrementalAlterConfigs and ListOffsets. ``describe`` shows, per
partition, leader, leader epoch, replicas, ISR and the leader's log start
offset, high watermark (ListOffsets latest as a consumer) and log end offset
(ListOffsets latest with Kafka's debugging replica id -2, which skips the
isolation bound).
"""

from __future__ import annotations

import sys

from tidelog.core.errors import ErrorCode
from tidelog.protocol.client import KafkaConnection

METADATA, CREATE_TOPICS, DELETE_TOPICS, LIST_OFFSETS, INCREMENTAL_ALTER_CONFIGS = 3, 19, 20, 2, 44
EARLIEST, LATEST = -2, -1
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


def add_parser(commands) -> None:
    topics = commands.add_parser("topics", help="manage topics on any Kafka-compatible broker")
    topics.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
    verbs = topics.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--validate-only", action="store_true")
    verbs.add_parser("list")
    describe = verbs.add_parser("describe")
    describe.add_argument("topic", nargs="*")
    delete = verbs.add_parser("delete")
    delete.add_argument("topic", nargs="+")
    alter = verbs.add_parser("alter-config")
    alter.add_argument("topic")
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY")


def _error(code) -> ErrorCode:
    return ErrorCode(int(getattr(code, "value", code)))


async def _connect(bootstrap: str) -> KafkaConnection:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return await KafkaConnection.connect(host or "127.0.0.1", int(port), client_id="tidelog-topics")


async def run(args) -> int:
    try:
        connection = await _connect(args.bootstrap_server)
    except OSError as e:
        print(f"cannot connect to {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    try:
        return await globals()[f"_{args.verb.replace('-', '_')}"](connection, args)
    finally:
        connection.close()


def _parse_pairs(pairs: list[str]) -> list[tuple[str, str]]:
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {pair!r}")
        out.append((key.strip(), value.strip()))
    return out


async def _create(connection: KafkaConnection, args) -> int:
    response = await connection.request(CREATE_TOPICS, {
        "topics": [{"name": args.topic, "num_partitions": args.partitions,
                    "replication_factor": args.replication_factor, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in _parse_pairs(args.config)]}],
        "timeout": 30_000, "validate_only": args.validate_only})
    result = response.topics[0]
    error = _error(result.error_code)
    if error != ErrorCode.NONE:
        print(f"error creating {args.topic}: {error.name}: {result.error_message or ''}", file=sys.stderr)
        return 1
    verb = "would be created" if args.validate_only else "created"
    print(f"topic {args.topic} {verb}")
    return 0


async def _metadata(connection: KafkaConnection, topics: list[str] | None):
    body = {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False}
    return await connection.request(METADATA, body)


async def _list(connection: KafkaConnection, args) -> int:
    response = await _metadata(connection, None)
    for topic in sorted(t.name for t in response.topics if not t.is_internal):
        print(topic)
    return 0


async def _offsets(connection: KafkaConnection, topic: str, partitions: list[int],
                   replica_id: int, timestamp: int) -> dict[int, int]:
    response = await connection.request(LIST_OFFSETS, {
        "replica_id": replica_id, "isolation_level": 0, "timeout": 30_000,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
            for p in partitions]}]})
    out = {}
    for topic_response in response.topics:
        for p in topic_response.partitions:
            out[int(p.partition_index)] = (int(p.offset) if _error(p.error_code) == ErrorCode.NONE else None)
    return out


async def _describe(connection: KafkaConnection, args) -> int:
    response = await _metadata(connection, args.topic or None)
    brokers = {int(b.node_id): b for b in response.brokers}
    status = 0
    for topic in sorted(response.topics, key=lambda t: t.name or ""):
        error = _error(topic.error_code)
        if error != ErrorCode.NONE:
            print(f"{topic.name}: {error.name}", file=sys.stderr)
            status = 1
            continue
        partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
        print(f"Topic: {topic.name}\tTopicId: {topic.topic_id}\tPartitionCount: {len(partitions)}\t"
              f"ReplicationFactor: {len(partitions[0].replica_nodes) if partitions else 0}")
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            by_leader.setdefault(int(p.leader_id), []).append(int(p.partition_index))
        offsets: dict[int, tuple] = {}
        for leader, ids in by_leader.items():
            if leader not in brokers:
                continue
            b = brokers[leader]
            try:
                peer = await KafkaConnection.connect(b.host, int(b.port), client_id="tidelog-topics")
            except OSError:
                continue
            try:
                start = await _offsets(peer, topic.name, ids, CONSUMER_REPLICA_ID, EARLIEST)
                high = await _offsets(peer, topic.name, ids, CONSUMER_REPLICA_ID, LATEST)
                end = await _offsets(peer, topic.name, ids, DEBUGGING_REPLICA_ID, LATEST)
            finally:
                peer.close()
            for i in ids:
                offsets[i] = (start.get(i), high.get(i), end.get(i))
        for p in partitions:
            start, high, end = offsets.get(int(p.partition_index), (None, None, None))
            show = lambda v: "?" if v is None else str(v)
            print(f"\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                  f"LeaderEpoch: {p.leader_epoch}\tReplicas: {','.join(map(str, p.replica_nodes))}\t"
                  f"Isr: {','.join(map(str, p.isr_nodes))}\tLogStartOffset: {show(start)}\t"
                  f"HighWatermark: {show(high)}\tLogEndOffset: {show(end)}")
    return status


async def _delete(connection: KafkaConnection, args) -> int:
    response = await connection.request(DELETE_TOPICS, {
        "topics": [{"name": t} for t in args.topic], "topic_names": list(args.topic), "timeout": 30_000})
    status = 0
    for result in response.responses:
        error = _error(result.error_code)
        if error == ErrorCode.NONE:
            print(f"topic {result.name} deleted")
        else:
            print(f"error deleting {result.name}: {error.name}", file=sys.stderr)
            status = 1
    return status


async def _alter_config(connection: KafkaConnection, args) -> int:
    SET, DELETE, TOPIC = 0, 1, 2
    configs = [{"name": k, "config_operation": SET, "value": v} for k, v in _parse_pairs(args.set)]
    configs += [{"name": k, "config_operation": DELETE, "value": None} for k in args.delete]
    response = await connection.request(INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{"resource_type": TOPIC, "resource_name": args.topic, "configs": configs}],
        "validate_only": False})
    result = response.responses[0]
    error = _error(result.error_code)
    if error != ErrorCode.NONE:
        print(f"error altering {args.topic}: {error.name}: {result.error_message or ''}", file=sys.stderr)
        return 1
    print(f"configs of {args.topic} altered")
    return 0
