"""``tidelog reassign`` — Kafka's ``kafka-reassign-partitions.sh``: move partitions between
brokers (KIP-455) on any Kafka-compatible cluster, with the tool's JSON files::

    tidelog reassign generate --topics-to-move-json-file topics.json --broker-list 2,3,4
    tidelog reassign execute --reassignment-json-file plan.json
    tidelog reassign verify --reassignment-json-file plan.json
    tidelog reassign cancel --reassignment-json-file plan.json
    tidelog reassign list

The files are Kafka's: ``{"version": 1, "topics": [{"topic": "orders"}]}`` names the
topics to move; a plan is ``{"version": 1, "partitions": [{"topic": "orders",
"partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]}]}`` (``log_dirs``
optional: ``any``, or the absolute log directory the replica on that broker is to
live in). ``generate`` prints the
current assignment (keep it: it is the plan that undoes the move) and a proposal
that stripes each topic's partitions over the given brokers at its present
replication factor, leaders spread round-robin; it changes nothing. ``execute``
prints the current assignment, then starts the moves (AlterPartitionReassignments)
and, as Kafka's tool, asks each broker named with a directory to move its replica
there (AlterReplicaLogDirs, sent to that broker; a replica the broker does not host
yet — it is being added — is asked again until ``--timeout``);
``verify`` says per partition whether its move completed, and per replica with a
directory whether it lives there alone (DescribeLogDirs); ``cancel`` reverts the
moves still running (null replicas); ``list`` shows the moves under way
(ListPartitionReassignments).

Throttles (KIP-73, docs/reassignment.md), as Kafka's tool: ``execute --throttle RATE``
(bytes/s) sets ``leader.replication.throttled.replicas`` (the moving partitions' current
replicas) and ``follower.replication.throttled.replicas`` (the replicas being added) on
the topics, and ``leader.``/``follower.replication.throttled.rate`` on every broker a move
involves; ``verify``, once every move completed, deletes the rates on every broker and
the lists on the plan's topics (unless ``--preserve-throttles``). Output lines are Kafka's; a refused partition is one
line on standard error with its error code, and the exit status is 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from tidelog.broker.replication_quota import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS
from tidelog.cli.options import connect
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.client_config import load_command_config

LOG_DIR_RETRY_MS = 100        # AlterReplicaLogDirs asked again while a replica is being added (Kafka's)
# The throttles execute --throttle sets and verify clears (Kafka's BROKER_LEVEL_THROTTLES, TOPIC_LEVEL_THROTTLES).
BROKER_LEVEL_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, "replica.alter.log.dirs.io.max.bytes.per.second")
TOPIC_LEVEL_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
SET, DELETE = 0, 1                         # IncrementalAlterConfigs operations
BROKER, TOPIC = 4, 2                       # config resource types


class PlanError(ValueError):
    """A JSON file that is not what the tool reads; the message names the problem."""


def _load(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise PlanError(f"{path}: not JSON: {e}") from None


def read_topics(path: str) -> list[str]:
    document = _load(path)
    entries = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PlanError(f'{path}: expected {{"version": 1, "topics": [{{"topic": "name"}}, ...]}}')
    names = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise PlanError(f"{path}: each entry needs a topic (string): {entry!r}")
        names.append(entry["topic"])
    if len(set(names)) != len(names):
        raise PlanError(f"{path}: a topic is named twice")
    return names


def read_plan(path: str) -> list[tuple[str, int, list[int]]]:
    """``(topic, partition, replicas)`` of a reassignment JSON file, checked as Kafka's tool does."""
    document = _load(path)
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PlanError(f'{path}: expected {{"version": 1, "partitions": [{{"topic": ..., "partition": ..., '
                        '"replicas": [...]}}, ...]}}')
    plan, seen = [], set()
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) \
                or not isinstance(entry.get("partition"), int) or not isinstance(entry.get("replicas"), list) \
                or not all(isinstance(r, int) for r in entry["replicas"]):
            raise PlanError(f"{path}: each partition needs a topic, a partition and replicas (broker ids): "
                            f"{entry!r}")
        key = (entry["topic"], entry["partition"])
        if key in seen:
            raise PlanError(f"{path}: partition {key[0]}-{key[1]} appears more than once")
        seen.add(key)
        if not entry["replicas"]:
            raise PlanError(f"{path}: partition {key[0]}-{key[1]} has an empty replica list")
        if len(set(entry["replicas"])) != len(entry["replicas"]):
            raise PlanError(f"{path}: partition {key[0]}-{key[1]} has duplicate replicas {entry['replicas']}")
        log_dirs = entry.get("log_dirs", ["any"] * len(entry["replicas"]))
        if not isinstance(log_dirs, list) or len(log_dirs) != len(entry["replicas"]):
            raise PlanError(f"{path}: partition {key[0]}-{key[1]}: log_dirs must name one directory per replica")
        for log_dir in log_dirs:
            if log_dir != "any" and (not isinstance(log_dir, str) or not log_dir.startswith("/")):
                raise PlanError(f"{path}: partition {key[0]}-{key[1]}: log_dirs entry {log_dir!r} is neither "
                                "\"any\" nor an absolute directory")
        plan.append((key[0], key[1], list(entry["replicas"])))
    return plan


def read_log_dirs(path: str) -> dict[tuple[str, int, int], str]:
    """The plan's directories other than ``any``: (topic, partition, broker) → directory."""
    read_plan(path)                                     # checked there
    return {(entry["topic"], entry["partition"], broker): log_dir
            for entry in _load(path)["partitions"]
            for broker, log_dir in zip(entry["replicas"], entry.get("log_dirs") or ())
            if log_dir != "any"}


def plan_json(assignment: list[tuple[str, int, list[int]]]) -> str:
    """Kafka's compact plan JSON, partitions in (topic, partition) order."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for t, p, r in sorted(assignment)]}, separators=(",", ":"))


def propose(current: list[tuple[str, int, list[int]]], brokers: list[int]) -> list[tuple[str, int, list[int]]]:
    """Each topic's partitions striped over ``brokers`` at their replication factor:
    partition p gets brokers[(p + i) % n] for i < RF, so leaders go round-robin."""
    out = []
    for topic, partition, replicas in sorted(current):
        if len(replicas) > len(brokers):
            raise PlanError(f"{topic}-{partition} has {len(replicas)} replicas but only {len(brokers)} "
                            "brokers were given")
        out.append((topic, partition, [brokers[(partition + i) % len(brokers)] for i in range(len(replicas))]))
    return out


async def _current(connection, topics) -> list[tuple[str, int, list[int]]]:
    answer = await connection.request(ApiKey.METADATA, {
        "topics": [{"name": t} for t in sorted(set(topics))], "allow_auto_topic_creation": False})
    out = []
    for topic in answer.topics:
        error = ErrorCode(int(topic.error_code.value))
        if error != ErrorCode.NONE:
            raise PlanError(f"topic {topic.name}: {error.name}")
        out += [(topic.name, int(p.partition_index), [int(b) for b in p.replica_nodes]) for p in topic.partitions]
    return sorted(out)


async def _ongoing(connection, partitions=None) -> dict[tuple[str, int], Any]:
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        topics = [{"name": t, "partition_indexes": sorted(ps)} for t, ps in sorted(by_topic.items())]
    answer = await connection.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, {"topics": topics, "timeout": 30_000})
    _check_top(answer)
    return {(t.name, int(p.partition_index)): p for t in answer.topics for p in t.partitions}


def _check_top(answer) -> None:
    error = ErrorCode(int(answer.error_code.value))
    if error != ErrorCode.NONE:
        raise KafkaError(answer.error_message or error.name, error)


async def _alter(connection, moves: list[tuple[str, int, list[int] | None]], allow_rf_change: bool = True):
    by_topic: dict[str, list[dict]] = {}
    for topic, partition, replicas in moves:
        by_topic.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas})
    answer = await connection.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
        "timeout": 30_000, "allow_replication_factor_change": allow_rf_change,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    _check_top(answer)
    failed = [(f"{t.name}-{int(p.partition_index)}", ErrorCode(int(p.error_code.value)), p.error_message)
              for t in answer.responses for p in t.partitions if int(p.error_code.value) != 0]
    done = [f"{t.name}-{int(p.partition_index)}" for t in answer.responses for p in t.partitions
            if int(p.error_code.value) == 0]
    return done, failed


def _report_failures(what: str, failed) -> int:
    if not failed:
        return 0
    print(f"Error {what} partition(s):", file=sys.stderr)
    for name, code, message in failed:
        print(f"{name}: {code.name}" + (f": {message}" if message else ""), file=sys.stderr)
    return 1


async def _generate(connection, args) -> int:
    brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    if not brokers or len(set(brokers)) != len(brokers):
        raise PlanError(f"--broker-list {args.broker_list!r}: name each broker once")
    current = await _current(connection, read_topics(args.topics_to_move_json_file))
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(propose(current, brokers)))
    return 0


async def _execute(connection, args) -> int:
    plan = read_plan(args.reassignment_json_file)
    current = await _current(connection, [t for t, _, _ in plan])
    known = {(t, p) for t, p, _ in current}
    print("Current partition replica assignment")
    print()
    print(plan_json([c for c in current if (c[0], c[1]) in {(t, p) for t, p, _ in plan}]))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    missing = [f"{t}-{p}" for t, p, _ in plan if (t, p) not in known]
    if missing:
        raise PlanError(f"partitions not found: {', '.join(missing)}")
    log_dirs = read_log_dirs(args.reassignment_json_file)
    brokers = await _brokers(connection) if log_dirs else {}
    unknown = sorted({b for _, _, b in log_dirs if b not in brokers})
    if unknown:
        raise PlanError(f"log_dirs name replicas on brokers that are not alive: {', '.join(map(str, unknown))}")
    if args.throttle >= 0:
        print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              "throttle is removed.")
        await _set_throttles(connection, args, plan, {(t, p): r for t, p, r in current}, args.throttle)
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    done, failed = await _alter(connection, plan, not args.disallow_replication_factor_change)
    if done:
        print(f"Successfully started partition reassignment{'s' if len(done) > 1 else ''} for {','.join(done)}")
    status = _report_failures("reassigning", failed)
    if log_dirs:
        status |= await _move_log_dirs(args, brokers, log_dirs)
    return status


def throttled_replicas(plan: list[tuple[str, int, list[int]]], current: dict[tuple[str, int], list[int]]
                       ) -> dict[str, tuple[str, str]]:
    """Per topic, the ``leader.replication.throttled.replicas`` (every current replica of a
    moving partition: any may lead the copy) and ``follower.replication.throttled.replicas``
    (the replicas being added) values of a plan, as Kafka's tool computes them."""
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    for topic, partition, target in plan:
        sources = current[(topic, partition)]
        leaders.setdefault(topic, set()).update(f"{partition}:{b}" for b in sources)
        followers.setdefault(topic, set()).update(f"{partition}:{b}" for b in target if b not in sources)
    return {topic: (",".join(sorted(leaders[topic])), ",".join(sorted(followers[topic]))) for topic in leaders}


async def _alter_configs(connection, resources: list[tuple[int, str, list[tuple[str, str | None]]]],
                         at_broker=None) -> None:
    """IncrementalAlterConfigs (a value None: DELETE); a refused resource raises. One
    broker's own settings go to that broker (``at_broker``: its request sender), as
    Kafka's admin client sends them."""
    body = {"validate_only": False, "resources": [
        {"resource_type": kind, "resource_name": name, "configs": [
            {"name": key, "config_operation": SET if value is not None else DELETE, "value": value}
            for key, value in configs]} for kind, name, configs in resources]}
    answer = await (connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, body) if at_broker is None
                    else at_broker(ApiKey.INCREMENTAL_ALTER_CONFIGS, body))
    for result in answer.responses:
        error = ErrorCode(int(result.error_code.value))
        if error != ErrorCode.NONE:
            raise KafkaError(f"configs of {result.resource_name}: {error.name}: {result.error_message or ''}", error)


async def _broker_configs(args, brokers, settings: list[tuple[str, str | None]], broker_ids) -> None:
    for broker in broker_ids:
        await _alter_configs(None, [(BROKER, str(broker), settings)],
                             lambda key, body, broker=broker: _at_broker(args, brokers, broker, key, body))


async def _set_throttles(connection, args, plan, current: dict[tuple[str, int], list[int]], rate: int) -> None:
    """Kafka's ``modifyReassignmentThrottle``: the topics' throttled replica lists, then the
    rate on every broker a move reads from or writes to."""
    lists = throttled_replicas(plan, current)
    await _alter_configs(connection, [(TOPIC, topic, [(LEADER_REPLICAS, leader), (FOLLOWER_REPLICAS, follower)])
                                      for topic, (leader, follower) in sorted(lists.items())])
    involved = sorted({b for t, p, target in plan for b in (*target, *current[(t, p)])})
    brokers = await _brokers(connection)
    missing = [b for b in involved if b not in brokers]
    if missing:
        raise PlanError(f"the plan names brokers that are not alive: {', '.join(map(str, missing))}")
    await _broker_configs(args, brokers, [(LEADER_RATE, str(rate)), (FOLLOWER_RATE, str(rate))], involved)


async def _clear_throttles(connection, args, plan) -> None:
    """Kafka's ``clearAllThrottles``, once every move of the plan completed: the rates on every
    broker (alive, or named by the plan) and the replica lists of the plan's topics."""
    alive = await _brokers(connection)
    brokers = sorted(set(alive) | {b for _, _, target in plan for b in target})
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          f"{','.join(map(str, brokers))}")
    await _broker_configs(args, alive, [(name, None) for name in BROKER_LEVEL_THROTTLES],
                          [b for b in brokers if b in alive])
    topics = sorted({t for t, _, _ in plan})
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}")
    await _alter_configs(connection, [(TOPIC, t, [(name, None) for name in TOPIC_LEVEL_THROTTLES]) for t in topics])


async def _brokers(connection) -> dict[int, tuple[str, int]]:
    answer = await connection.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
    return {int(b.node_id): (b.host, int(b.port)) for b in answer.brokers}


async def _at_broker(args, brokers, broker: int, api_key: ApiKey, body: dict):
    """One request to ``broker`` itself (log directories are each broker's own)."""
    host, port = brokers[broker]
    peer = await KafkaConnection.connect(host, port, client_id="tidelog-reassign",
                                         security=load_command_config(args.command_config))
    try:
        return await peer.request(api_key, body)
    finally:
        peer.close()


async def _move_log_dirs(args, brokers, log_dirs: dict[tuple[str, int, int], str]) -> int:
    """AlterReplicaLogDirs to each broker, as Kafka's tool: REPLICA_NOT_AVAILABLE (a replica
    being added) is asked again every ``LOG_DIR_RETRY_MS`` until ``--timeout``; other
    errors are reported."""
    pending, failed = dict(log_dirs), []
    deadline = time.monotonic() + args.timeout / 1000
    while pending:
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (topic, partition, broker), log_dir in sorted(pending.items()):
            by_broker.setdefault(broker, {}).setdefault(log_dir, {}).setdefault(topic, []).append(partition)
        for broker, dirs in by_broker.items():
            answer = await _at_broker(args, brokers, broker, ApiKey.ALTER_REPLICA_LOG_DIRS, {"dirs": [
                {"path": log_dir, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                for log_dir, topics in dirs.items()]})
            for result in answer.results:
                for p in result.partitions:
                    key = (result.topic_name, int(p.partition_index), broker)
                    code = ErrorCode(int(p.error_code.value))
                    if code == ErrorCode.NONE:
                        print(f"Successfully started moving log directory to {pending.pop(key)} for replica "
                              f"{key[0]}-{key[1]} with broker {broker}")
                    elif code != ErrorCode.REPLICA_NOT_AVAILABLE or time.monotonic() >= deadline:
                        failed.append((f"{key[0]}-{key[1]} on broker {broker} to {pending.pop(key)}", code, None))
        if pending:
            await asyncio.sleep(LOG_DIR_RETRY_MS / 1000)
    return _report_failures("moving log directories of", failed)


async def _verify(connection, args) -> int:
    plan = read_plan(args.reassignment_json_file)
    log_dirs = read_log_dirs(args.reassignment_json_file)
    ongoing = await _ongoing(connection, [(t, p) for t, p, _ in plan])
    current = {(t, p): r for t, p, r in await _current(connection, [t for t, _, _ in plan])}
    print("Status of partition reassignment:")
    unfinished = 0
    for topic, partition, replicas in plan:
        name = f"{topic}-{partition}"
        if (topic, partition) in ongoing:
            print(f"Reassignment of partition {name} is still in progress.")
            unfinished += 1
        elif current.get((topic, partition)) == replicas:
            print(f"Reassignment of partition {name} is completed.")
        else:
            print(f"There is no active reassignment of partition {name}, but replica set is "
                  f"{current.get((topic, partition))} rather than {replicas}.")
            unfinished += 1
    if log_dirs:
        unfinished += await _verify_log_dirs(args, await _brokers(connection), log_dirs)
    if not unfinished and not args.preserve_throttles:
        await _clear_throttles(connection, args, plan)
    return 1 if unfinished else 0


async def _verify_log_dirs(args, brokers, log_dirs: dict[tuple[str, int, int], str]) -> int:
    """Per replica given a directory: where DescribeLogDirs finds it (Kafka's lines)."""
    print()
    print("Reassignment of replica log directories:")
    unfinished = 0
    for broker in sorted({b for _, _, b in log_dirs}):
        found: dict[tuple[str, int], tuple[str | None, str | None]] = {}     # (current dir, future dir)
        if broker in brokers:
            asked = sorted({(t, p) for t, p, b in log_dirs if b == broker})
            answer = await _at_broker(args, brokers, broker, ApiKey.DESCRIBE_LOG_DIRS, {"topics": [
                {"topic": t, "partitions": [p for t2, p in asked if t2 == t]} for t in sorted({t for t, _ in asked})]})
            for result in answer.results:
                for topic in result.topics:
                    for p in topic.partitions:
                        current, future = found.get((topic.name, int(p.partition_index)), (None, None))
                        if p.is_future_key:
                            future = result.log_dir
                        else:
                            current = result.log_dir
                        found[(topic.name, int(p.partition_index))] = (current, future)
        for (topic, partition, b), wanted in sorted(log_dirs.items()):
            if b != broker:
                continue
            current, future = found.get((topic, partition), (None, None))
            name = f"{topic}-{partition}-{broker}"
            if current == wanted and future is None:
                print(f"Reassignment of replica {name} completed successfully.")
                continue
            unfinished += 1
            if future == wanted:
                print(f"Reassignment of replica {name} is still in progress.")
            elif current is None:
                print(f"Partition {topic}-{partition} is not found in any live log dir on broker {broker}. "
                      "There is likely an offline log directory on the broker.")
            else:
                print(f"Partition {topic}-{partition} on broker {broker} is not being moved from log dir "
                      f"{current} to {wanted}.")
    return unfinished


async def _cancel(connection, args) -> int:
    plan = read_plan(args.reassignment_json_file)
    ongoing = await _ongoing(connection, [(t, p) for t, p, _ in plan])
    running = [(t, p, None) for t, p, _ in plan if (t, p) in ongoing]
    done, failed = await _alter(connection, running) if running else ([], [])
    if done:
        print(f"Successfully cancelled partition reassignment{'s' if len(done) > 1 else ''} for: {','.join(done)}")
    else:
        print("None of the specified partition reassignments are active.")
    return _report_failures("cancelling", failed)


async def _list(connection, args) -> int:
    ongoing = await _ongoing(connection)
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (topic, partition), p in sorted(ongoing.items()):
        print(f"{topic}-{partition}: replicas: {','.join(map(str, p.replicas))}. "
              f"adding: {','.join(map(str, p.adding_replicas))}. removing: {','.join(map(str, p.removing_replicas))}.")
    return 0


_VERBS = {"generate": _generate, "execute": _execute, "verify": _verify, "cancel": _cancel, "list": _list}


async def run(args) -> int:
    connection = await connect(args, "tidelog-reassign")
    if connection is None:
        return 1
    try:
        return await _VERBS[args.verb](connection, args)
    except (OSError, PlanError, KafkaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        connection.close()
