"""``meta.properties``: which cluster and node a log directory belongs to.

Kafka requires ``kafka-storage format`` before a first start; tidelog formats an
empty directory itself (the development default), and refuses to start on a
directory of another cluster or another node — mixing them would corrupt both.
"""

from __future__ import annotations

import base64
import logging
import os
import uuid

log = logging.getLogger("tidelog.storage_format")

META_PROPERTIES = "meta.properties"


class StorageFormatError(Exception):
    pass


def new_cluster_id() -> str:
    """Kafka's textual Uuid: URL-safe base64 of 16 random bytes, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _read(path: str) -> dict[str, str]:
    props = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                props[key.strip()] = value.strip()
    return props


def format_log_dirs(log_dirs: list[str], node_id: int, configured_cluster_id: str | None) -> str:
    """Agree on one cluster id across ``log_dirs`` (writing it where missing); return it."""
    found: dict[str, dict[str, str]] = {}
    for log_dir in log_dirs:
        os.makedirs(log_dir, exist_ok=True)
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
        log.info("formatted %s for cluster %s", log_dir, cluster_id)
    return cluster_id
