"""Forged Raft requests over the wire at a real three-controller quorum (plaintext,
so nothing authenticates the sender, as in Kafka without a secured controller
listener).

The reported attack: BeginQuorumEpoch with epoch 2**31 - 1 to the controllers left
that epoch in ``quorum-state``; every later Vote (epoch + 1) failed to encode and
the quorum stayed leaderless, restarts included. Now such requests are refused
with Kafka's error codes, nothing is persisted, the leader stays, topics are still
created, also after restarting two controllers; and a ``quorum-state`` the old
attack left behind is discarded at start instead of bricking the controller."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.server.controller_channel import RemoteController
from tidelog.testing import Cluster, wait_until

INT32_MAX = 2**31 - 1
FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300"}
CONTROLLERS = (1000, 1001, 1002)
INVALID_REQUEST, INCONSISTENT_VOTER_SET, INCONSISTENT_CLUSTER_ID = 42, 94, 104


def code(value) -> int:
    return int(getattr(value, "value", value))


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=1, controllers=3, overrides=FAST) as running:
        yield running


def _controllers(cluster):
    layout = cluster.processes.layout
    return [(c.node_id, layout.host, c.port) for c in layout.controllers if c.alive()]


def _ask(cluster, api_key, body):
    async def go():
        channel = RemoteController(_controllers(cluster), "forgery-test")
        try:
            return await channel.request(api_key, body, timeout_s=5)
        finally:
            channel.close()
    return asyncio.run(go())


def _quorum(cluster):
    """(leader id, epoch) from the quorum leader, or None."""
    try:
        answer = _ask(cluster, ApiKey.DESCRIBE_QUORUM, {"topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    except Exception:
        return None
    p = answer.topics[0].partitions[0]
    if code(p.error_code) != 0 or int(p.leader_id) < 0:
        return None
    return int(p.leader_id), int(p.leader_epoch)


def _create_topic(cluster, name, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            answer = _ask(cluster, ApiKey.CREATE_TOPICS, {"topics": [
                {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout": 10_000, "validate_only": False})
            if code(answer.topics[0].error_code) == 0:
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {name} not created within {timeout_s} s")
        time.sleep(0.2)


def _quorum_state_path(cluster, node_id):
    node = cluster.processes.layout.node(node_id)
    return os.path.join(cluster.processes.layout.directory, node.name, "data", "__cluster_metadata-0",
                        "quorum-state")


def _persisted_epoch(cluster, node_id) -> int:
    with open(_quorum_state_path(cluster, node_id)) as f:
        return int(json.load(f)["leaderEpoch"])


def _partition(**fields):
    return {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0, **fields}]}


def _forgeries(cluster_id: str, target: int, epoch: int):
    """(what, api key, version, body, expected (top-level, partition) error codes;
    None: any refusal) against controller ``target`` whose epoch is ``epoch``."""
    other = next(v for v in CONTROLLERS if v != target)

    def begin(epoch, leader, cluster=cluster_id):
        return {"cluster_id": cluster, "topics": [_partition(leader_id=leader, leader_epoch=epoch)]}

    def end(epoch, leader):
        return {"cluster_id": cluster_id, "topics": [_partition(leader_id=leader, leader_epoch=epoch,
                                                                preferred_successors=[])]}

    def vote(epoch, candidate, last_epoch=0, last_offset=0, pre_vote=False, cluster=cluster_id):
        return {"cluster_id": cluster, "voter_id": target, "topics": [_partition(
            replica_epoch=epoch, replica_id=candidate, last_offset_epoch=last_epoch, last_offset=last_offset,
            pre_vote=pre_vote)]}

    BQE, EQE, VOTE = ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH, ApiKey.VOTE
    return [
        ("BeginQuorumEpoch 2**31-1 from a voter", BQE, 0, begin(INT32_MAX, other), (0, INVALID_REQUEST)),
        ("BeginQuorumEpoch 2**31-1 naming itself", BQE, 0, begin(INT32_MAX, target), (0, INVALID_REQUEST)),
        ("BeginQuorumEpoch from a non-voter", BQE, 0, begin(INT32_MAX, 4242), (0, INVALID_REQUEST)),
        ("BeginQuorumEpoch next epoch from a non-voter", BQE, 0, begin(epoch + 1, 4242),
         (0, INCONSISTENT_VOTER_SET)),
        ("BeginQuorumEpoch from a negative id", BQE, 0, begin(epoch + 1, -1), (0, INVALID_REQUEST)),
        ("BeginQuorumEpoch, another cluster", BQE, 0, begin(INT32_MAX, other, "not-this-cluster"),
         (INCONSISTENT_CLUSTER_ID, None)),
        ("BeginQuorumEpoch, no cluster id", BQE, 0, begin(INT32_MAX, other, None), (INCONSISTENT_CLUSTER_ID, None)),
        ("Vote 2**31-1 from a voter", VOTE, 2, vote(INT32_MAX, other, 1, 10**9), (0, INVALID_REQUEST)),
        ("pre-vote 2**31-1 from a voter", VOTE, 2, vote(INT32_MAX, other, 1, 10**9, True), (0, INVALID_REQUEST)),
        ("Vote 2**31-1 from a non-voter", VOTE, 2, vote(INT32_MAX, 31337, 1, 10**9), (0, INVALID_REQUEST)),
        ("Vote from a non-voter", VOTE, 2, vote(epoch + 1, 31337, 1, 10**9), (0, INCONSISTENT_VOTER_SET)),
        ("Vote with a negative candidate", VOTE, 2, vote(epoch + 1, -1, 1, 10), (0, INVALID_REQUEST)),
        ("Vote last epoch = its epoch", VOTE, 2, vote(epoch + 1, other, epoch + 1, 10), (0, INVALID_REQUEST)),
        ("Vote, another cluster", VOTE, 2, vote(INT32_MAX, other, 1, 10, False, "x"), (INCONSISTENT_CLUSTER_ID, None)),
        ("EndQuorumEpoch from a non-voter", EQE, 0, end(epoch, 4242), (0, INCONSISTENT_VOTER_SET)),
        ("EndQuorumEpoch 2**31-1", EQE, 0, end(INT32_MAX, other), (0, INVALID_REQUEST)),
    ]


def _voter_fetch(cluster_id, replica_id: int, epoch: int) -> dict:
    return {"cluster_id": cluster_id, "replica_id": replica_id, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                "partition": 0, "current_leader_epoch": epoch, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}


async def _send_forgeries(cluster, rounds: int, epoch: int) -> list[str]:
    """Every forgery to every controller, ``rounds`` times; the answers that are not
    the refusal expected (empty when all are as they should be)."""
    layout = cluster.processes.layout
    wrong = []
    for node in layout.controllers:
        connection = await KafkaConnection.connect(layout.host, node.port, "forger", timeout_s=5)
        try:
            other = next(v for v in CONTROLLERS if v != node.node_id)
            for cluster_id in ("another-cluster", None):
                answer = await connection.request(ApiKey.FETCH, _voter_fetch(cluster_id, other, INT32_MAX),
                                                  version=12, timeout_s=5)
                if code(answer.error_code) != INCONSISTENT_CLUSTER_ID:
                    wrong.append(f"voter Fetch with cluster id {cluster_id!r}: {code(answer.error_code)}")
            for _ in range(rounds):
                for what, api_key, version, body, (top, partition) in _forgeries(layout.cluster_id, node.node_id,
                                                                                 epoch):
                    answer = await connection.request(api_key, body, version=version, timeout_s=5)
                    got_top = code(answer.error_code)
                    got = code(answer.topics[0].partitions[0].error_code) if answer.topics else None
                    if got_top != top or (partition is not None and got != partition) or \
                            (partition is None and top == 0 and got == 0):
                        wrong.append(f"{what} to {node.node_id}: top-level {got_top}, partition {got}")
        finally:
            connection.close()
    return wrong


def test_forged_quorum_requests_are_refused_and_the_quorum_keeps_its_leader(cluster):
    wait_until(lambda: _quorum(cluster) is not None, 30, "a quorum leader")
    _create_topic(cluster, "before-forgery")
    leader, epoch = _quorum(cluster)
    wrong = asyncio.run(_send_forgeries(cluster, rounds=3, epoch=epoch))
    # Nothing believed, nothing persisted: the same leader in the same epoch.
    assert _quorum(cluster) == (leader, epoch)
    assert all(_persisted_epoch(cluster, c) <= epoch for c in CONTROLLERS)
    _create_topic(cluster, "after-forgery")
    assert not wrong, wrong


def test_after_forgery_restarting_two_controllers_still_elects_a_leader(cluster):
    wait_until(lambda: _quorum(cluster) is not None, 30, "a quorum leader")
    leader, epoch = _quorum(cluster)
    wrong = asyncio.run(_send_forgeries(cluster, rounds=1, epoch=epoch))
    assert not wrong, wrong
    restarted = [leader, next(c for c in CONTROLLERS if c != leader)]
    for controller in restarted:
        cluster.stop(controller)
    for controller in restarted:
        cluster.start_node(controller)
    wait_until(lambda: _quorum(cluster) is not None, 30, "a leader after restarting two controllers")
    _create_topic(cluster, "after-restarting-two")
    assert all(_persisted_epoch(cluster, c) < 10_000 for c in CONTROLLERS)


def test_a_quorum_state_left_by_the_old_attack_does_not_brick_the_quorum(cluster):
    """Every controller's quorum-state holds epoch 2**31 - 1 (what the attack wrote
    before epochs were checked): each discards it at start and the quorum elects."""
    wait_until(lambda: _quorum(cluster) is not None, 30, "a quorum leader")
    for controller in CONTROLLERS:
        cluster.stop(controller)
    for controller in CONTROLLERS:
        path = _quorum_state_path(cluster, controller)
        with open(path) as f:
            state = json.load(f)
        state.update(leaderEpoch=INT32_MAX, leaderId=CONTROLLERS[0], votedId=CONTROLLERS[0])
        with open(path, "w") as f:
            json.dump(state, f)
    for controller in CONTROLLERS:
        cluster.start_node(controller)
    wait_until(lambda: _quorum(cluster) is not None, 30, "a leader after starting from the bricked state")
    _create_topic(cluster, "after-bricked-state")
    assert all(_persisted_epoch(cluster, c) < 10_000 for c in CONTROLLERS)
