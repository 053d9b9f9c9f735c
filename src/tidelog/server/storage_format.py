"""``meta.properties``: which cluster and node a log directory belongs to.

Kafka requires ``kafka-storage format`` before a first start; tidelog formats an
empty directory itself (the development default), and refuses to start on a
directory of another cluster or another node — mixing them would corrupt both.

A log directory holds the metadata log (SCRAM keys included) and every record, so
it is private to the broker's user: created 0700 (``tidelog serve`` runs with
umask 077, so what it writes inside is 0600/0700), and an existing one that group
or others may enter loses those permissions, logged once (not a directory of
another user's, nor a shared sticky one such as /tmp: those are only warned about).
"""

from __future__ import annotations

import base64
import logging
import os
import stat
import uuid

logger = logging.getLogger("tidelog.storage_format")

META_PROPERTIES = "meta.properties"
LOG_DIR_MODE = 0o700


class StorageFormatError(Exception):
    pass


def new_cluster_id() -> str:
    """Kafka's textual Uuid: URL-safe base64 of 16 random bytes, unpadded — never one
    starting with "-" (Kafka's ``Uuid.randomUuid`` draws again: command lines such as
    ``kafka-storage format -t <id>`` would take it for an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _read(path: str) -> dict[str, str]:
    props = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                props[key.strip()] = value.strip()
    return props


def make_private(log_dir: str) -> None:
    """Take group and other permissions off ``log_dir`` (logged when there were any)."""
    status = os.stat(log_dir)
    mode = stat.S_IMODE(status.st_mode)
    if not mode & 0o077:
        return
    if status.st_uid != os.geteuid() or mode & stat.S_ISVTX:
        logger.warning("log directory %s is mode %o (others may read the data); it is shared or not ours, "
                    "so it is left as it is", log_dir, mode)
        return
    try:
        os.chmod(log_dir, mode & ~0o077)
    except OSError as e:
        logger.warning("log directory %s is mode %o (others may read the data); cannot restrict it to its "
                    "owner: %s", log_dir, mode, e.strerror)
        return
    logger.warning("log directory %s was mode %o: restricted to its owner (%o)", log_dir, mode, mode & ~0o077)


def format_log_dirs(log_dirs: list[str], node_id: int, configured_cluster_id: str | None) -> str:
    """Agree on one cluster id across ``log_dirs`` (writing it where missing); return it."""
    found: dict[str, dict[str, str]] = {}
    for log_dir in log_dirs:
        os.makedirs(log_dir, mode=LOG_DIR_MODE, exist_ok=True)
        make_private(log_dir)
        path = os.path.join(log_dir, META_PROPERTIES)
        if os.path.exists(path):
            found[log_dir] = _read(path)
    cluster_ids = {p.get("cluster.id") for p in found.values()} - {None}
    if configured_cluster_id:
        cluster_ids.add(configured_cluster_id)
    if len(cluster_ids) > 1:
        raise StorageFormatError(f"log directories belong to different clusters: {sorted(cluster_ids)}")
    for log_dir, props in found.items():
        if props.get("node.id") not in (None, str(node_id)):
            raise StorageFormatError(f"{log_dir} belongs to node {props['node.id']}, but node.id is {node_id}")
    cluster_id = cluster_ids.pop() if cluster_ids else new_cluster_id()
    for log_dir in log_dirs:
        if log_dir in found:
            continue
        path = os.path.join(log_dir, META_PROPERTIES)
        with open(path + ".tmp", "w") as f:
            f.write(f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\ndirectory.id={new_cluster_id()}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        logger.info("formatted %s for cluster %s", log_dir, cluster_id)
    return cluster_id


def uuid_of_kafka_text(text: str) -> str:
    """Kafka's textual Uuid (22 characters of URL-safe base64) as a standard UUID string;
    ValueError naming the text when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError):
        raw = b""
    if len(text) != 22 or len(raw) != 16:
        raise ValueError(f"{text!r} is not a Kafka Uuid (22 characters of URL-safe base64)")
    return str(uuid.UUID(bytes=raw))


def kafka_text_of_uuid(value: str) -> str:
    """A standard UUID string as Kafka writes Uuids (URL-safe base64, unpadded)."""
    return base64.urlsafe_b64encode(uuid.UUID(value).bytes).decode().rstrip("=")


def directory_id(log_dir: str) -> str:
    """The ``directory.id`` of ``log_dir``'s meta.properties as a UUID string ("" if none)."""
    path = os.path.join(log_dir, META_PROPERTIES)
    text = _read(path).get("directory.id", "") if os.path.exists(path) else ""
    return uuid_of_kafka_text(text) if text else ""
