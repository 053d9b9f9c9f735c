"""``tidelog format``: Kafka's ``kafka-storage format`` for a node's log directories.

Writes ``meta.properties`` (cluster id, node id, a directory id per directory) and,
for a controller of a dynamic quorum (KIP-853), the first voter set as a
``VotersRecord`` at offset 0 of ``__cluster_metadata``:

* ``--standalone``: this controller alone (its endpoint on the controller listener);
  more are added later with AddRaftVoter (``kafka-metadata-quorum add-controller``);
* ``--initial-controllers id@host:port:directory-id,...``: that set, the same on every
  controller formatted with it; this node's entry gives its directory id;
* ``--no-initial-controllers`` (or neither): no set — the controller starts as an
  observer of ``controller.quorum.bootstrap.servers`` and waits to be added.

A directory that is already formatted is refused (naming it), as Kafka's tool does.
"""

from __future__ import annotations

import os
import sys

from tidelog.core.clock import SystemClock
from tidelog.metadata.file_log import FileMetadataLog
from tidelog.raft.replica import Voter
from tidelog.server.storage_format import (
    META_PROPERTIES,
    directory_id,
    format_log_dirs,
    kafka_text_of_uuid,
    uuid_of_kafka_text,
)


class FormatError(Exception):
    pass


def parse_initial_controllers(text: str) -> list[tuple[int, str, int, str]]:
    """``id@host:port:directory-id,...`` → [(id, host, port, directory id as a UUID string)]."""
    controllers = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        node, at, rest = entry.partition("@")
        address, colon, directory = rest.rpartition(":")
        host, colon2, port = address.rpartition(":")
        if not at or not colon or not colon2 or not node.isdigit() or not port.isdigit() or not host \
                or not 0 < int(port) < 65536:
            raise FormatError(f"--initial-controllers entry {entry!r} is not id@host:port:directory-id")
        try:
            directory_uuid = uuid_of_kafka_text(directory)
        except ValueError as e:
            raise FormatError(f"--initial-controllers entry {entry!r}: {e}") from None
        controllers.append((int(node), host.strip("[]"), int(port), directory_uuid))
    ids = [c[0] for c in controllers]
    if not controllers or len(set(ids)) != len(ids):
        raise FormatError(f"--initial-controllers {text!r} names no controller, or one id twice")
    return controllers


def _set_directory_id(log_dir: str, directory_uuid: str) -> None:
    path = os.path.join(log_dir, META_PROPERTIES)
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if not line.startswith("directory.id=")]
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines + [f"directory.id={kafka_text_of_uuid(directory_uuid)}"]) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def format_storage(config, cluster_id: str | None, standalone: bool = False,
                   initial_controllers: str | None = None) -> tuple[str, tuple[Voter, ...]]:
    """Format ``config``'s log directories; (cluster id, the voter set written, if any)."""
    node_id = config["node.id"]
    log_dirs = config["log.dirs"]
    for log_dir in log_dirs:
        if os.path.exists(os.path.join(log_dir, META_PROPERTIES)):
            raise FormatError(f"log directory {log_dir} is already formatted")
    controllers = parse_initial_controllers(initial_controllers) if initial_controllers else None
    is_controller = "controller" in set(config["process.roles"])
    if (standalone or controllers) and not is_controller:
        raise FormatError("--standalone and --initial-controllers are for a controller (process.roles)")
    if controllers is not None and node_id not in [c[0] for c in controllers]:
        raise FormatError(f"node {node_id} is not among --initial-controllers {initial_controllers}")
    cluster_id = format_log_dirs(log_dirs, node_id, cluster_id or config["cluster.id"])
    listener = (config["controller.listener.names"] or ["CONTROLLER"])[0].upper()
    voters: tuple[Voter, ...] = ()
    if controllers is not None:
        own = next(c for c in controllers if c[0] == node_id)
        _set_directory_id(log_dirs[0], own[3])
        voters = tuple(Voter(node, directory, ((listener, host, port),))
                       for node, host, port, directory in sorted(controllers))
    elif standalone:
        endpoints = [e for e in config.listener_endpoints(advertised=True) if e[0] == listener]
        if not endpoints or not endpoints[0][2]:
            raise FormatError(f"--standalone needs this controller's {listener} listener with a port "
                              "(listeners or advertised.listeners)")
        _, host, port = endpoints[0]
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        voters = (Voter(node_id, directory_id(log_dirs[0]), ((listener, host, port),)),)
    if voters:
        log = FileMetadataLog(log_dirs[0], SystemClock(), follower=True)
        try:
            log.append_voters(0, voters)
        finally:
            log.close()
    return cluster_id, voters


def run(args) -> int:
    from tidelog.server.runtime import load_config
    try:
        config = load_config(args.properties, args.override)
        cluster_id, voters = format_storage(config, args.cluster_id, args.standalone, args.initial_controllers)
    except (FormatError, ValueError) as e:
        print(f"tidelog format: {e}", file=sys.stderr)
        return 1
    print(f"formatted {', '.join(config['log.dirs'])} for cluster {cluster_id} (node {config['node.id']}, "
          f"directory id {kafka_text_of_uuid(directory_id(config['log.dirs'][0]))})")
    for voter in voters:
        print(f"voter {voter.voter_id}: directory {kafka_text_of_uuid(voter.directory_id)} at "
              + ", ".join(f"{name}://{host}:{port}" for name, host, port in voter.endpoints))
    return 0
