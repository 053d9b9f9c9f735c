"""``tidelog leader-election`` — Kafka's ``kafka-leader-election.sh``: ElectLeaders on any
Kafka-compatible broker::

    tidelog leader-election --election-type PREFERRED --topic orders --partition 0
    tidelog leader-election --election-type PREFERRED --all-topic-partitions
    tidelog leader-election --election-type UNCLEAN --path-to-json-file partitions.json

PREFERRED gives each partition back to its preferred replica (the first of its
replicas) when that replica is in the ISR; UNCLEAN elects a replica outside the ISR
for a partition left without a leader. ``--all-topic-partitions`` sends no partition
list (null): the controller picks the partitions that need an election. ``--topic``
without ``--partition`` names every partition of the topic (read from Metadata);
Kafka's tool insists on ``--partition``. The output is Kafka's: the partitions
elected, those whose leader was already the right one (ELECTION_NOT_NEEDED), and one
line per failure, with exit status 1 if any failed.
"""

from __future__ import annotations

import json
import sys

from tidelog.cli.options import connect
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.protocol.api_keys import ApiKey

ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}


def _partitions_from_file(path: str) -> list[tuple[str, int]]:
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f'{path}: expected {{"partitions": [{{"topic": ..., "partition": ...}}, ...]}}')
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) \
                or not isinstance(entry.get("partition"), int):
            raise ValueError(f"{path}: each partition needs a topic (string) and a partition (number): {entry!r}")
        out.append((entry["topic"], entry["partition"]))
    if len(set(out)) != len(out):
        raise ValueError(f"{path}: a partition is named twice")
    return out


async def run(args) -> int:
    if args.partition is not None and args.topic is None:
        print("error: --partition needs --topic", file=sys.stderr)
        return 1
    try:
        wanted = _partitions_from_file(args.path_to_json_file) if args.path_to_json_file else None
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    connection = await connect(args, "tidelog-leader-election")
    if connection is None:
        return 1
    try:
        if args.topic is not None:
            if args.partition is not None:
                wanted = [(args.topic, args.partition)]
            else:
                metadata = await connection.request(ApiKey.METADATA, {
                    "topics": [{"name": args.topic}], "allow_auto_topic_creation": False})
                topic = metadata.topics[0]
                error = ErrorCode(int(topic.error_code.value))
                if error != ErrorCode.NONE:
                    print(f"error: topic {args.topic}: {error.name}", file=sys.stderr)
                    return 1
                wanted = [(args.topic, int(p.partition_index)) for p in topic.partitions]
        by_topic: dict[str, list[int]] = {}
        for topic, partition in wanted or ():
            by_topic.setdefault(topic, []).append(partition)
        answer = await connection.request(ApiKey.ELECT_LEADERS, {
            "election_type": ELECTION_TYPES[args.election_type],
            "topic_partitions": None if wanted is None else [
                {"topic": t, "partitions": sorted(ps)} for t, ps in by_topic.items()],
            "timeout_ms": args.timeout}, timeout_s=args.timeout / 1000 + 5)
    except (OSError, KafkaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        connection.close()
    code = getattr(answer, "error_code", None)              # v0 has none
    top = ErrorCode(int(code.value)) if code is not None else ErrorCode.NONE
    if top != ErrorCode.NONE:
        print(f"error: {top.name}", file=sys.stderr)
        return 1
    elected, not_needed, failed = [], [], []
    for result in answer.replica_election_results:
        for p in result.partition_result:
            name = f"{result.topic}-{int(p.partition_id)}"
            code = ErrorCode(int(p.error_code.value))
            if code == ErrorCode.NONE:
                elected.append(name)
            elif code == ErrorCode.ELECTION_NOT_NEEDED:
                not_needed.append(name)
            else:
                failed.append((name, code, p.error_message))
    if elected:
        print(f"Successfully completed leader election ({args.election_type}) for partitions {', '.join(elected)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    if not (elected or not_needed or failed):
        print("No partition needed an election")
    for name, code, message in failed:
        print(f"Error completing leader election ({args.election_type}) for partition: {name}: {code.name}"
              + (f": {message}" if message else ""), file=sys.stderr)
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
