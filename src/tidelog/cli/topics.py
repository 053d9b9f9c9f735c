"""``tidelog topics create|list|describe|delete|alter-config`` over the wire protocol.

Works against any Kafka broker: it uses only Metadata, CreateTopics,
DeleteTopics, IncrementalAlterConfigs and ListOffsets. ``describe`` shows, per
partition, leader, leader epoch, replicas, ISR and the log start offset, and
the last stable offset (what read_committed consumers read up to; below the
high watermark while a transaction is open), and per replica its log end
offset, high watermark and lag behind the leader: it
asks each replica's broker with ListOffsets under Kafka's debugging replica id
-2 (latest = that replica's log end offset; with read_committed, tidelog
answers that replica's own high watermark).
"""

from __future__ import annotations

import asyncio
import sys

from tidelog.cli.progress import Progress
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client_config import load_command_config
from tidelog.protocol.client import KafkaConnection

EARLIEST, LATEST = -2, -1
LEADER_WAIT_S = 30
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


def _error(code) -> ErrorCode:
    return ErrorCode(int(getattr(code, "value", code)))


_SECURITY: list = [None]      # --command-config, for every connection of this command


async def _connect(bootstrap: str) -> KafkaConnection:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return await KafkaConnection.connect(host or "127.0.0.1", int(port), client_id="tidelog-topics",
                                         security=_SECURITY[0])


async def run(args) -> int:
    try:
        _SECURITY[0] = load_command_config(args.command_config)
    except (OSError, KafkaError) as e:
        print(f"error: cannot use --command-config {args.command_config}: {e}", file=sys.stderr)
        return 1
    try:
        connection = await _connect(args.bootstrap_server)
    except (OSError, KafkaError) as e:
        print(f"cannot connect to {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    try:
        return await globals()[f"_{args.verb.replace('-', '_')}"](connection, args)
    except (OSError, KafkaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
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
    response = await connection.request(ApiKey.CREATE_TOPICS, {
        "topics": [{"name": args.topic, "num_partitions": args.partitions,
                    "replication_factor": args.replication_factor, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in _parse_pairs(args.config)]}],
        "timeout": 30_000, "validate_only": args.validate_only})
    result = response.topics[0]
    error = _error(result.error_code)
    if error != ErrorCode.NONE:
        print(f"error creating {args.topic}: {error.name}: {result.error_message or ''}", file=sys.stderr)
        return 1
    if args.validate_only:
        print(f"topic {args.topic} would be created")
        return 0
    # As a user expects before producing: wait (up to 30 s) until every partition has a leader.
    deadline = asyncio.get_running_loop().time() + LEADER_WAIT_S
    with Progress(f"waiting for the leaders of {args.topic}", total=args.partitions if args.partitions > 0 else None
                  ) as progress:
        led = 0
        while True:
            metadata = await _metadata(connection, [args.topic])
            partitions = metadata.topics[0].partitions if metadata.topics else ()
            now_led = sum(1 for p in partitions if _error(p.error_code) == ErrorCode.NONE and int(p.leader_id) >= 0)
            progress.advance(now_led - led)
            led = now_led
            if partitions and led == len(partitions):
                break
            if asyncio.get_running_loop().time() > deadline:
                print(f"topic {args.topic} created; {led} of {len(partitions)} partitions have a leader so far",
                      file=sys.stderr)
                return 0
            await asyncio.sleep(0.1)
    print(f"topic {args.topic} created")
    return 0


async def _metadata(connection: KafkaConnection, topics: list[str] | None):
    body = {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False}
    return await connection.request(ApiKey.METADATA, body)


async def _list(connection: KafkaConnection, args) -> int:
    response = await _metadata(connection, None)
    for topic in sorted(t.name for t in response.topics if not t.is_internal):
        print(topic)
    return 0


async def _offsets(connection: KafkaConnection, topic: str, partitions: list[int],
                   replica_id: int, timestamp: int, isolation_level: int = 0) -> dict[int, int]:
    response = await connection.request(ApiKey.LIST_OFFSETS, {
        "replica_id": replica_id, "isolation_level": isolation_level, "timeout": 30_000,
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
        # Ask every replica's broker for its own log end offset and high watermark.
        by_broker: dict[int, list[int]] = {}
        for p in partitions:
            for replica in p.replica_nodes:
                by_broker.setdefault(int(replica), []).append(int(p.partition_index))
        replica_offsets: dict[tuple[int, int], tuple] = {}
        log_start: dict[int, int | None] = {}
        stable: dict[int, int | None] = {}
        for broker_id, ids in by_broker.items():
            if broker_id not in brokers:
                continue
            b = brokers[broker_id]
            try:
                peer = await KafkaConnection.connect(b.host, int(b.port), client_id="tidelog-topics",
                                                     security=_SECURITY[0])
            except OSError:
                continue
            try:
                end = await _offsets(peer, topic.name, ids, DEBUGGING_REPLICA_ID, LATEST)
                high = await _offsets(peer, topic.name, ids, DEBUGGING_REPLICA_ID, LATEST, isolation_level=1)
                start = await _offsets(peer, topic.name, ids, DEBUGGING_REPLICA_ID, EARLIEST)
                led = [i for i in ids for p in partitions
                       if int(p.partition_index) == i and int(p.leader_id) == broker_id]
                # A consumer's read_committed "latest" from the leader: the last stable offset.
                if led:
                    stable.update(await _offsets(peer, topic.name, led, CONSUMER_REPLICA_ID, LATEST,
                                                 isolation_level=1))
            finally:
                peer.close()
            for i in ids:
                replica_offsets[(i, broker_id)] = (end.get(i), high.get(i))
                for p in partitions:
                    if int(p.partition_index) == i and int(p.leader_id) == broker_id:
                        log_start[i] = start.get(i)
        show = lambda v: "?" if v is None else str(v)
        for p in partitions:
            index, leader = int(p.partition_index), int(p.leader_id)
            leader_end = replica_offsets.get((index, leader), (None, None))[0]
            print(f"\tPartition: {index}\tLeader: {leader}\tLeaderEpoch: {p.leader_epoch}\t"
                  f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}\t"
                  f"LogStartOffset: {show(log_start.get(index))}\tLastStableOffset: {show(stable.get(index))}")
            for replica in p.replica_nodes:
                end, high = replica_offsets.get((index, int(replica)), (None, None))
                lag = None if end is None or leader_end is None else max(0, leader_end - end)
                role = "leader" if int(replica) == leader else "follower"
                print(f"\t\tReplica: {replica} ({role})\tLogEndOffset: {show(end)}\t"
                      f"HighWatermark: {show(high)}\tLag: {show(lag)}")
    return status


async def _delete(connection: KafkaConnection, args) -> int:
    response = await connection.request(ApiKey.DELETE_TOPICS, {
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
    response = await connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{"resource_type": TOPIC, "resource_name": args.topic, "configs": configs}],
        "validate_only": False})
    result = response.responses[0]
    error = _error(result.error_code)
    if error != ErrorCode.NONE:
        print(f"error altering {args.topic}: {error.name}: {result.error_message or ''}", file=sys.stderr)
        return 1
    print(f"configs of {args.topic} altered")
    return 0
