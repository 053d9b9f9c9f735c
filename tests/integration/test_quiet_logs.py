"""A node's log at INFO says what happened to it, not what happened to each partition:
a restart of a broker with a few hundred partitions (its own topics and the 50 of
__consumer_offsets) is summarised in a few lines, with no warning about the node's own
files; the details are at DEBUG."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

PARTITION = re.compile(r"\b(?:__consumer_offsets|quiet-[a-z])-\d+\b")


def test_a_restart_is_summarised_not_told_partition_by_partition():
    with Cluster(brokers=2) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topics = [NewTopic(f"quiet-{c}", 20, 2) for c in "abc"]
        for future in admin.create_topics(topics).values():
            future.result(30)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "quiet"})
        consumer.subscribe(["quiet-a"])               # FindCoordinator creates __consumer_offsets
        wait_until(lambda: consumer.poll(0.2) is None and bool(consumer.assignment()), 30, "an assignment")
        consumer.close()
        wait_until(lambda: "__consumer_offsets" in AdminClient({"bootstrap.servers": cluster.bootstrap})
                   .list_topics(timeout=10).topics, 30, "__consumer_offsets created")
        for node_id in (2, 1000):
            log_path = Path(cluster.processes.layout.directory) / cluster.processes.layout.node(node_id).name \
                / "server.log"
            before = len(log_path.read_text().splitlines())
            cluster.restart(node_id)
            lines = log_path.read_text().splitlines()[before:]
            info = [line for line in lines if " INFO " in line]
            assert not [line for line in lines if " WARNING " in line or " ERROR " in line], lines
            per_partition = [line for line in info if PARTITION.search(line)]
            assert per_partition == [], per_partition
            assert len(info) < 40, "\n".join(info)
            if node_id == 2:
                assert any("loaded" in line and "logs after a clean shutdown" in line for line in info), info
                assert any(re.search(r"following broker 1 for \d+ partitions: __consumer_offsets \(\d+\)", line)
                           for line in info), info


def test_the_package_license_is_an_spdx_expression():
    """setuptools >= 77 (the build backend is pinned at one) reads it as is; the table form printed a deprecation box on every install."""
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    pinned = [r.replace(" ", "").split("==", 1)[1] for r in project["build-system"]["requires"]
              if r.replace(" ", "").startswith("setuptools==")]     # pinned, as every version is
    assert pinned and int(pinned[0].split(".")[0]) >= 77, project["build-system"]["requires"]
