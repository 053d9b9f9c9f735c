"""An attacker against controller membership (KIP-853's AddRaftVoter, RemoveRaftVoter,
UpdateRaftVoter).

One plaintext cluster: a controller formatted ``--standalone`` (a dynamic quorum of
one voter) and a broker. The three APIs are not served on the client listener at
all; on the controller listener (plaintext authenticates nobody, as Kafka without a
secured controller listener: tests/security/test_adversary.py checks the secured one
refuses them) absurd values are INVALID_REQUEST or INCONSISTENT_CLUSTER_ID, Kafka's
refusals answer what the replica refuses, and after all of it the voter set is what
it was and a topic is still created.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest

from tests.security.probe import CLOSED, call
from tidelog.cluster import ProcessCluster, _free_port
from tidelog.core.errors import ErrorCode
from tidelog.core.limits import VOTER_LISTENERS_MAX
from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection

ADD, REMOVE, UPDATE = ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("voter-attacks"))
    processes = ProcessCluster.create(directory, 1, base_port=0, controllers=1)
    layout = processes.layout
    controller = layout.controller
    controller.port = _free_port(layout.host)         # a lone controller would bind any: its voter needs one
    layout.overrides.update({"controller.quorum.voters": "",
                             "controller.quorum.bootstrap.servers": f"{layout.host}:{controller.port}"})
    result = subprocess.run(
        [sys.executable, "-m", "tidelog.cli.main", "format", f"--cluster-id={layout.cluster_id}", "--standalone",
         "--override", f"node.id={controller.node_id}", "--override", "process.roles=controller",
         "--override", f"log.dirs={os.path.join(processes._node_dir(controller), 'data')}",
         "--override", f"listeners=CONTROLLER://{layout.host}:{controller.port}"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    try:
        processes.up()
        yield processes
    finally:
        processes.down()


async def _ask(port: int, api_key: int, body: dict, version: int = 0):
    connection = await KafkaConnection.connect("127.0.0.1", port, client_id="attacker", timeout_s=10)
    try:
        if api_key not in connection.api_versions:
            return CLOSED if connection.closed else "not advertised"
        return await call(connection, api_key, version, body, timeout_s=15)
    finally:
        connection.close()


def _voters(cluster) -> list[tuple[int, uuid.UUID]]:
    """(id, directory id) of every voter, from the controller."""
    async def go():
        connection = await KafkaConnection.connect("127.0.0.1", cluster.layout.controller.port, timeout_s=10)
        try:
            return await connection.request(ApiKey.DESCRIBE_QUORUM, {"topics": [
                {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}, version=2)
        finally:
            connection.close()
    p = run(go()).topics[0].partitions[0]
    return [(int(v.replica_id), v.replica_directory_id) for v in p.current_voters]


def _listener(port: int = 9999, name: str = "CONTROLLER", host: str = "127.0.0.1") -> dict:
    return {"name": name, "host": host, "port": port}


def _add(cluster, voter_id=7, directory=None, listeners=None, timeout_ms=500, **extra) -> dict:
    return {"cluster_id": cluster.layout.cluster_id, "timeout": timeout_ms, "voter_id": voter_id,
            "voter_directory_id": directory or uuid.uuid4(), "listeners": [_listener()] if listeners is None
            else listeners, **extra}


def test_no_voter_change_on_the_client_listener(cluster):
    broker = cluster.layout.brokers[0].port
    before = _voters(cluster)
    for api_key, body in ((ADD, _add(cluster)), (REMOVE, {"cluster_id": None, "voter_id": before[0][0],
                                                           "voter_directory_id": before[0][1]})):
        assert run(_ask(broker, api_key, body)) in ("not advertised", CLOSED, {ErrorCode.UNSUPPORTED_VERSION})
    assert _voters(cluster) == before


def test_absurd_values_are_invalid_and_change_nothing(cluster):
    controller = cluster.layout.controller.port
    before = _voters(cluster)
    (own_id, own_directory), = before
    absurd = [
        (ADD, _add(cluster, voter_id=-1)),
        (ADD, _add(cluster, voter_id=-(2**31))),
        (ADD, _add(cluster, directory=uuid.UUID(int=0))),
        (ADD, _add(cluster, listeners=[])),
        (ADD, _add(cluster, listeners=[_listener(1000 + i, f"L{i}") for i in range(VOTER_LISTENERS_MAX + 1)])),
        (ADD, _add(cluster, listeners=[_listener(0)])),
        (ADD, _add(cluster, listeners=[_listener(host="")])),
        (ADD, _add(cluster, listeners=[_listener(host="h" * 300)])),
        (ADD, _add(cluster, listeners=[_listener(name="")])),
        (ADD, _add(cluster, listeners=[_listener(), _listener(9998)])),          # a name twice
        (ADD, _add(cluster, listeners=[_listener(name="ELSEWHERE")])),           # not this quorum's listener
        (ADD, _add(cluster, timeout_ms=-5)),
        (REMOVE, {"cluster_id": None, "voter_id": -3, "voter_directory_id": own_directory}),
        (UPDATE, {"cluster_id": None, "current_leader_epoch": 1, "voter_id": own_id,
                  "voter_directory_id": own_directory, "listeners": [],
                  "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}}),
    ]
    for api_key, body in absurd:
        assert run(_ask(controller, api_key, body)) == {ErrorCode.INVALID_REQUEST}, (api_key, body)
    for api_key, body in ((ADD, _add(cluster, cluster_id="another-cluster")),
                          (REMOVE, {"cluster_id": "x", "voter_id": own_id, "voter_directory_id": own_directory})):
        assert run(_ask(controller, api_key, body)) == {ErrorCode.INCONSISTENT_CLUSTER_ID}
    assert _voters(cluster) == before


def test_kafkas_refusals_and_the_change_in_flight(cluster):
    controller = cluster.layout.controller.port
    before = _voters(cluster)
    (own_id, own_directory), = before
    remove = lambda voter_id, directory: {"cluster_id": None, "voter_id": voter_id,  # noqa: E731
                                          "voter_directory_id": directory}
    assert run(_ask(controller, ADD, _add(cluster, voter_id=own_id))) == {ErrorCode.DUPLICATE_VOTER}
    assert run(_ask(controller, REMOVE, remove(own_id, uuid.uuid4()))) == {ErrorCode.VOTER_NOT_FOUND}
    assert run(_ask(controller, REMOVE, remove(42, uuid.uuid4()))) == {ErrorCode.VOTER_NOT_FOUND}
    # The only voter cannot be removed.
    assert run(_ask(controller, REMOVE, remove(own_id, own_directory))) == {ErrorCode.VOTER_NOT_FOUND}
    # A voter that never fetches (so never catches up) is not added: REQUEST_TIMED_OUT.
    # While its change waits, another change is refused at once (one at a time): the
    # removal of the only voter, VOTER_NOT_FOUND above, is REQUEST_TIMED_OUT then.

    async def in_flight():
        first = await KafkaConnection.connect("127.0.0.1", controller, client_id="attacker", timeout_s=10)
        try:
            pending = asyncio.ensure_future(call(first, ADD, 0, _add(cluster, voter_id=8, timeout_ms=5000),
                                                 timeout_s=15))
            await asyncio.sleep(0)         # its bytes are written before the second connection opens
            second = await _ask(controller, REMOVE, remove(own_id, own_directory))
            return await pending, second
        finally:
            first.close()
    added, removed = run(in_flight())
    assert added == {ErrorCode.REQUEST_TIMED_OUT} and removed == {ErrorCode.REQUEST_TIMED_OUT}
    assert _voters(cluster) == before
