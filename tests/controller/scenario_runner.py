"""Data-driven controller scenarios (in the style of etcd's datadriven tests).

A scenario file is a sequence of blocks separated by blank lines::

    # optional comment lines
    <command> <args...>
    ----
    <expected output, one or more lines, no blank lines>

Each command drives a ``ControllerTestEnv``; its printed trace — the reply, then
every record the command wrote as ``+ <offset> <record>`` — is compared with the
expected output. With ``TIDELOG_REWRITE=1`` (or ``pytest --rewrite``) the files are
rewritten with the actual output instead, to be reviewed as a diff.

Commands (ids are broker ids, ``t/0`` is partition 0 of topic ``t``)::

    register 0 1 2 [racks=a,b,a] [dirs=N]     restart 1 [dirs=N]     unregister 1
    heartbeat 1 [want-fence=true] [want-shut-down=true] [offset=N] [epoch=N] [offline-dirs=0,1]
    assign-dirs 1 t/0=0 t/1=1        (AssignReplicasToDirs: broker 1's directory 0 / 1)
    unfence 0 1 2                    fence 2              shutdown 1
    tick 10s | tick 500ms            (advance the clock, fire due deadlines)
    advance 10s                      (advance the clock only: deadlines not fired)
    create-topic t [partitions=3] [rf=3] [assign=0,1,2/1,2,3] [config=k=v;k=v]
    delete-topic t                   create-partitions t count=5
    alter-partition t/0 from=1 isr=1,2 [leader-epoch=N] [partition-epoch=N]
    elect preferred|unclean [t/0 ...]
    set-config topic t k=v | set-config cluster k=v     delete-config topic t k
    describe [t]                     brokers              next-deadline
    effective-config t               (topic keys not at their default, with source)
    restart-controller               snapshot
"""

from __future__ import annotations

import re
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tidelog.controller import (
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerHeartbeatReply,
    CreatePartitionsTopic,
    ElectionType,
)
from tidelog.controller.quorum_controller import QuorumController
from tidelog.testing.controller import CLUSTER_ID, ControllerTestEnv, directory_id
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.delta import replay_all
from tidelog.metadata.records import ConfigResourceType, format_record

SEPARATOR = "----"


@dataclass
class Block:
    comments: list[str]
    command: str
    expected: list[str]


def parse_script(text: str) -> list[Block]:
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        comments = []
        while i < len(lines) and lines[i].startswith("#"):
            comments.append(lines[i])
            i += 1
        if i >= len(lines) or not lines[i].strip():
            blocks.append(Block(comments, "", []))
            continue
        command = lines[i]
        i += 1
        if i >= len(lines) or lines[i] != SEPARATOR:
            raise ValueError(f"line {i + 1}: expected {SEPARATOR!r} after {command!r}")
        i += 1
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        blocks.append(Block(comments, command, expected))
    return blocks


def render_script(blocks: list[Block]) -> str:
    parts = []
    for block in blocks:
        lines = list(block.comments)
        if block.command:
            lines += [block.command, SEPARATOR, *block.expected]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def run_script(path: Path) -> tuple[str, str]:
    """``(expected text, actual text)`` for the scenario file at ``path``."""
    text = path.read_text()
    blocks = parse_script(text)
    interpreter = ScenarioInterpreter()
    actual_blocks = []
    for block in blocks:
        output = interpreter.run(block.command) if block.command else []
        actual_blocks.append(Block(block.comments, block.command, output))
    return text, render_script(actual_blocks)


# ---------------------------------------------------------------- the interpreter

def _duration_ms(text: str) -> int:
    match = re.fullmatch(r"(\d+)(ms|s|m)", text)
    if not match:
        raise ValueError(f"bad duration {text!r} (use 500ms, 10s, 2m)")
    return int(match.group(1)) * {"ms": 1, "s": 1000, "m": 60_000}[match.group(2)]


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x != "")


def _tp(text: str) -> TopicPartition:
    topic, _, partition = text.rpartition("/")
    return TopicPartition(topic, int(partition))


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text == "true"


def _error(code: ErrorCode, message: str | None) -> str:
    return code.name + (f": {message}" if message else "")


def _dir_name(directory: uuid.UUID) -> str:
    """``d<broker>.<start>.<index>`` for ``controller.testing.directory_id``; ``-`` unassigned."""
    value = directory.int
    if value == 0:
        return "-"
    if value >> 120 != 1:
        return str(directory)
    return f"d{(value >> 32) & 0xFFFFFFFF}.{(value >> 16) & 0xFFFF}.{value & 0xFFFF}"


def _heartbeat_state(reply: BrokerHeartbeatReply) -> str:
    if reply.error_code != ErrorCode.NONE:
        return _error(reply.error_code, reply.error_message)
    state = ("SHUTDOWN_NOW" if reply.should_shut_down else
             "CONTROLLED_SHUTDOWN" if reply.in_controlled_shutdown else
             "FENCED" if reply.is_fenced else "UNFENCED")
    return f"{state} {'caught-up' if reply.is_caught_up else 'behind'}"


class ScenarioInterpreter:
    def __init__(self) -> None:
        self.env = ControllerTestEnv(seed=0)
        self.topic_names: dict[uuid.UUID, str] = {}   # every topic ever seen, for records
        self.commands: dict[str, Callable[[list[str], dict[str, str]], list[str]]] = {
            name.removeprefix("cmd_").replace("_", "-"): getattr(self, name)
            for name in dir(self) if name.startswith("cmd_")}

    @property
    def controller(self) -> QuorumController:
        return self.env.controller

    def run(self, line: str) -> list[str]:
        words = shlex.split(line)
        name, positional, options = words[0], [], {}
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if eq:
                options[key] = value
            else:
                positional.append(word)
        command = self.commands.get(name)
        if command is None:
            raise ValueError(f"unknown scenario command {name!r}")
        start = self.env.log.end_offset
        self._remember_topics()
        output = command(positional, options)
        self._remember_topics()
        output += [f"+ {offset} {self._format_record(record)}"
                   for offset, record in self.env.log.read(start)]
        return output or ["ok"]

    def _remember_topics(self) -> None:
        for topic_id, topic in self.controller.replication.topics.items():
            self.topic_names[topic_id] = topic.name

    def _format_record(self, record) -> str:
        text = format_record(record, self.topic_names)
        text = re.sub(r" endpoints=\[[^\]]*\]", "", text)
        text = re.sub(r"incarnation_id=([0-9a-f-]{36})",
                      lambda m: "incarnation=%d.%d" % divmod(uuid.UUID(m.group(1)).int, 1 << 32),
                      text)
        return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                      lambda m: _dir_name(uuid.UUID(m.group(0))), text)

    # ------------------------------------------------------------ brokers

    def cmd_register(self, args, options):
        racks = options.get("racks", "").split(",") if "racks" in options else []
        output = []
        for i, broker_id in enumerate(int(a) for a in args):
            reply = self.env.register(broker_id, racks[i] if i < len(racks) else None,
                                      log_dirs=int(options.get("dirs", 0)))
            output.append(f"register {broker_id}: " + (
                f"broker_epoch={reply.broker_epoch}" if reply.error_code == ErrorCode.NONE
                else _error(reply.error_code, reply.error_message)))
        return output

    def cmd_restart(self, args, options):
        broker_id = int(args[0])
        reply = self.env.restart(broker_id, options.get("rack"), log_dirs=int(options.get("dirs", 0)))
        return [f"restart {broker_id}: " + (
            f"broker_epoch={reply.broker_epoch}" if reply.error_code == ErrorCode.NONE
            else _error(reply.error_code, reply.error_message))]

    def cmd_heartbeat(self, args, options):
        broker_id = int(args[0])
        reply = self.env.heartbeat(
            broker_id,
            want_fence=_bool(options.get("want-fence", "false")),
            want_shut_down=_bool(options.get("want-shut-down", "false")),
            metadata_offset=int(options["offset"]) if "offset" in options else None,
            broker_epoch=int(options["epoch"]) if "epoch" in options else None,
            offline_log_dirs=[self._directory(broker_id, i) for i in _ids(options.get("offline-dirs", ""))])
        return [f"heartbeat {broker_id}: {_heartbeat_state(reply)}"]

    def _directory(self, broker_id: int, index: int) -> uuid.UUID:
        """Broker ``broker_id``'s ``index``-th directory, as its current process registered it."""
        return directory_id(broker_id, self.env.incarnations[broker_id].int & 0xFFFFFFFF, index)

    def cmd_assign_dirs(self, args, options):
        broker_id = int(args[0])
        response = self.env.assign_replicas_to_dirs(
            broker_id, {_tp(tp): self._directory(broker_id, int(i)) for tp, i in options.items()})
        if response.error_code != ErrorCode.NONE:
            return [f"assign-dirs {broker_id}: {_error(response.error_code, response.error_message)}"]
        return [f"assign-dirs {broker_id} {self.topic_names.get(a.topic_id, a.topic_id)}-{a.partition_id}: "
                f"{code.name}" for a, code in response.results]

    def cmd_unfence(self, args, options):
        return [line for a in args for line in self.cmd_heartbeat([a], {})]

    def cmd_fence(self, args, options):
        return [line for a in args for line in self.cmd_heartbeat([a], {"want-fence": "true"})]

    def cmd_shutdown(self, args, options):
        return self.cmd_heartbeat(args[:1], {"want-shut-down": "true", **options})

    def cmd_unregister(self, args, options):
        error = self.controller.unregister_broker(int(args[0]))
        return [f"unregister {args[0]}: {error}"]

    def cmd_tick(self, args, options):
        self.env.clock.advance(_duration_ms(args[0]))
        fenced = self.controller.fire_due_deadlines()
        lines = [f"time={self.env.clock.monotonic_ms()}ms"]
        lines += [f"fenced broker {b}: session expired" for b in fenced]
        return lines

    def cmd_advance(self, args, options):
        self.env.clock.advance(_duration_ms(args[0]))
        return [f"time={self.env.clock.monotonic_ms()}ms"]

    def cmd_next_deadline(self, args, options):
        deadline = self.controller.next_deadline_ms()
        return [f"next-deadline: {'none' if deadline is None else f'{deadline}ms'}"]

    def cmd_brokers(self, args, options):
        lines = []
        for broker in self.controller.image.brokers.values():
            state = ("FENCED" if broker.fenced else
                     "CONTROLLED_SHUTDOWN" if broker.in_controlled_shutdown else "UNFENCED")
            rack = f" rack={broker.rack}" if broker.rack else ""
            dirs = f" online_dirs=[{','.join(map(_dir_name, broker.log_dirs))}]" if broker.log_dirs else ""
            lines.append(f"broker {broker.broker_id}: broker_epoch={broker.broker_epoch} "
                         f"{state}{rack}{dirs}")
        return sorted(lines) or ["no brokers"]

    # ------------------------------------------------------------ topics

    def cmd_create_topic(self, args, options):
        name = args[0]
        repeat = re.fullmatch(r"(\w)\*(\d+)", name)   # x*250 = a name of 250 x's
        if repeat:
            name = repeat.group(1) * int(repeat.group(2))
        assignments = None
        if "assign" in options:
            assignments = [_ids(a) for a in options["assign"].split("/")]
        configs = dict(kv.split("=", 1) for kv in options.get("config", "").split(";") if kv)
        result = self.env.create_topic(
            name, int(options.get("partitions", -1)), int(options.get("rf", -1)),
            assignments, configs)
        if result.error_code != ErrorCode.NONE:
            message = _error(result.error_code, result.error_message).replace(name, args[0])
            return [f"create-topic {args[0]}: {message}"]
        return [f"create-topic {args[0]}: partitions={result.num_partitions} "
                f"rf={result.replication_factor}"]

    def cmd_delete_topic(self, args, options):
        return [f"delete-topic {r.name}: {_error(r.error_code, r.error_message)}"
                for r in self.controller.delete_topics(args)]

    def cmd_create_partitions(self, args, options):
        assignments = None
        if "assign" in options:
            assignments = tuple(_ids(a) for a in options["assign"].split("/"))
        results = self.controller.create_partitions(
            [CreatePartitionsTopic(args[0], int(options["count"]), assignments)])
        return [f"create-partitions {r.name}: {_error(r.error_code, r.error_message)}"
                for r in results]

    def cmd_describe(self, args, options):
        image = self.controller.image
        lines = [f"{tp}: {partition.describe()}" + (
                    f" dirs=[{','.join(map(_dir_name, partition.directories))}]" if partition.directories else "")
                 for tp, partition in image.all_partitions() if not args or tp.topic in args]
        return lines or ["no partitions"]

    # ------------------------------------------------------------ partitions

    def cmd_alter_partition(self, args, options):
        tp = _tp(args[0])
        partition = self.env.partition(*tp)
        sender = int(options.get("from", partition.leader))
        item = AlterPartitionItem(
            self.env.topic_id(tp.topic), tp.partition,
            int(options.get("leader-epoch", partition.leader_epoch)),
            int(options.get("partition-epoch", partition.partition_epoch)),
            _ids(options["isr"]),
            leader_recovery_state=int(options.get("recovery-state",
                                                  partition.leader_recovery_state)))
        response = self.controller.alter_partition(AlterPartitionRequest(
            sender, int(options.get("broker-epoch", self.env.broker_epochs.get(sender, -1))),
            (item,)))
        if response.error_code != ErrorCode.NONE:
            return [f"alter-partition {tp}: {_error(response.error_code, response.error_message)}"]
        result = response.partitions[0]
        if result.error_code != ErrorCode.NONE:
            return [f"alter-partition {tp}: {_error(result.error_code, result.error_message)}"]
        return [f"alter-partition {tp}: leader={result.leader} leader_epoch={result.leader_epoch} "
                f"partition_epoch={result.partition_epoch} isr=[{','.join(map(str, result.isr))}]"]

    def cmd_elect(self, args, options):
        election_type = ElectionType[args[0].upper()]
        partitions = [_tp(a) for a in args[1:]] or None
        results = self.controller.elect_leaders(election_type, partitions)
        return [f"elect {r.partition}: {_error(r.error_code, r.error_message)}"
                for r in results] or ["elect: nothing to do"]

    # ------------------------------------------------------------ configs

    def cmd_set_config(self, args, options):
        resource_type = args[0]
        if resource_type == "topic":
            resource = (ConfigResourceType.TOPIC, args[1])
        elif resource_type == "cluster":
            resource = (ConfigResourceType.BROKER, "")
        else:
            raise ValueError("set-config topic <name> k=v | set-config cluster k=v")
        return self._alter_config(resource, dict(options))

    def cmd_delete_config(self, args, options):
        return self._alter_config((ConfigResourceType.TOPIC, args[1]), {args[2]: None})

    def _alter_config(self, resource, changes):
        result = self.controller.incremental_alter_configs(
            [AlterConfigsResource(resource[0], resource[1], changes)])[0]
        name = result.resource_name or "cluster"
        return [f"config {name}: {_error(result.error_code, result.error_message)}"]

    def cmd_effective_config(self, args, options):
        lines = [f"{key}={value} ({source})"
                 for key, value, source in self.controller.configs.describe_topic(args[0])
                 if source != "default"]
        return lines or ["all defaults"]

    # ------------------------------------------------------------ durability

    def cmd_restart_controller(self, args, options):
        """A new controller process: replay the log (snapshot + tail), compare images."""
        before = self.controller.image
        env = self.env
        env.controller = QuorumController(
            clock=env.clock, log=env.log, cluster_id=CLUSTER_ID, rng=env.controller.replication.rng,
            session_timeout_ms=env.controller.heartbeat.session_timeout_ms)
        env.check_consistent()
        same = env.controller.image == before
        lines = [f"restart-controller: replayed to offset {env.controller.image.offset}, "
                 f"image {'identical' if same else 'DIFFERENT'}"]
        if env.log.latest_snapshot() is None:
            full = replay_all(env.log.read(0)) == before
            lines.append(f"full replay of the log: {'identical' if full else 'DIFFERENT'}")
        return lines

    def cmd_snapshot(self, args, options):
        snapshot = self.controller.write_snapshot()
        self.env.log.delete_before(snapshot.last_offset + 1)
        return [f"snapshot at offset {snapshot.last_offset}: {len(snapshot.records)} records, "
                f"log starts at {self.env.log.log_start_offset}"]
