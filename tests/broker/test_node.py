"""BrokerNode without I/O: inputs in, effects out, against a real QuorumController.

Each test plays the driver's part by hand — it hands every SendRegistration /
SendHeartbeat / SendAlterPartition to the controller and feeds the reply back —
so the lifecycle, the metadata gate and the shutdown paths are checked exactly,
with a ManualClock and no sockets, tasks or sleeps."""

import random
import uuid

import pytest

from tidelog.broker.config import BrokerConfig
from tidelog.broker.lifecycle import BrokerState
from tidelog.broker.node import (
    BrokerNode,
    FetcherAdded,
    FetcherRemoved,
    MetadataPublished,
    SendAlterPartition,
    SendAssignReplicasToDirs,
    SendHeartbeat,
    SendRegistration,
    StateChanged,
    StopNow,
)
from tidelog.controller.messages import BrokerHeartbeatReply, CreatableTopic
from tidelog.controller.quorum_controller import QuorumController
from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.log import InMemoryMetadataLog
from tidelog.metadata.records import Endpoint
from tidelog.replication.partition import IsrProposal


class LaggingCopy:
    """A broker's copy of the metadata log that holds only what was 'fetched'."""

    def __init__(self, source):
        self.source, self.fetched = source, -1

    @property
    def committed_offset(self):
        return self.fetched

    @property
    def end_offset(self):
        return self.fetched + 1

    @property
    def log_start_offset(self):
        return self.source.log_start_offset

    def read(self, start_offset):
        for offset, record in self.source.read(start_offset):
            if offset > self.fetched:
                return
            yield offset, record

    def latest_snapshot(self):
        return None

    def catch_up(self):
        self.fetched = self.source.committed_offset


class World:
    def __init__(self, tmp_path, controlled_shutdown_timeout_ms=5000, clock=None):
        self.clock = clock or ManualClock()
        self.log = InMemoryMetadataLog()
        self.controller = QuorumController(clock=self.clock, log=self.log, cluster_id="c1",
                                           rng=random.Random(0), session_timeout_ms=9000)
        self.tmp_path = tmp_path
        self.nodes = {}
        self.timeout_ms = controlled_shutdown_timeout_ms

    def node(self, node_id, metadata_log=None, settings=None, log_dirs=1, fs=None):
        dirs = [str(self.tmp_path / f"b{node_id}")] + [str(self.tmp_path / f"b{node_id}-{i}") for i in range(1, log_dirs)]
        config = BrokerConfig({"node.id": str(node_id), "process.roles": "broker",
                               "log.dirs": ",".join(dirs), **(settings or {})})
        node = BrokerNode(config, self.clock, metadata_log or self.log, "c1", uuid.uuid4(),
                          (Endpoint("PLAINTEXT", "localhost", 9000 + node_id),),
                          controlled_shutdown_timeout_ms=self.timeout_ms, fs=fs)
        self.nodes[node_id] = node
        return node

    def run(self, node, effects, steps=400, until=None, others=()):
        """Carry out effects (the driver's job) and tick — ``node`` and any ``others``,
        which keep heartbeating — until ``until(node)``."""
        seen = list(effects)
        pending = [(node, e) for e in effects]
        everyone = [node, *others]
        for _ in range(steps):
            if until is not None and until(node):
                return seen
            while pending:
                target, effect = pending.pop(0)
                now = self.clock.monotonic_ms()
                if isinstance(effect, SendRegistration):
                    more = target.on_registration_reply(self.controller.register_broker(effect.request), now)
                elif isinstance(effect, SendHeartbeat):
                    more = target.on_heartbeat_reply(self.controller.process_broker_heartbeat(effect.request), now)
                elif isinstance(effect, SendAlterPartition):
                    more = target.on_alter_partition_reply(self.controller.alter_partition(effect.request),
                                                           effect.sent, now)
                elif isinstance(effect, SendAssignReplicasToDirs):
                    more = target.on_assign_replicas_to_dirs_reply(
                        self.controller.assign_replicas_to_dirs(effect.request), now)
                else:
                    more = []
                for each in everyone:
                    update = each.on_metadata_committed()
                    pending += [(each, e) for e in update]
                    if each is node:
                        seen += update
                if target is node:
                    seen += more
                pending += [(target, e) for e in more]
                if until is not None and until(node):
                    return seen
            wake = min(each.next_wakeup_ms() for each in everyone)
            self.clock.advance(max(1, wake - self.clock.monotonic_ms()))
            for each in everyone:
                more = each.on_tick(self.clock.monotonic_ms())
                if each is node:
                    seen += more
                pending += [(each, e) for e in more]
        assert until is None or until(node), f"{until} never held; node is {node.state.name}"
        return seen


def running(node):
    return node.state == BrokerState.RUNNING


def test_start_registers_catches_up_and_runs(tmp_path):
    world = World(tmp_path)
    node = world.node(1)
    effects = node.start(world.clock.monotonic_ms())
    assert [type(e) for e in effects] == [StateChanged, SendRegistration]
    assert node.state == BrokerState.STARTING
    seen = world.run(node, effects, until=running)
    changes = [(e.old, e.new) for e in seen if isinstance(e, StateChanged)]
    assert changes[-3:] == [(BrokerState.NOT_RUNNING, BrokerState.STARTING),
                            (BrokerState.STARTING, BrokerState.RECOVERY),
                            (BrokerState.RECOVERY, BrokerState.RUNNING)]
    heartbeats = [e.request for e in seen if isinstance(e, SendHeartbeat)]
    assert heartbeats[0].want_fence and not heartbeats[-1].want_fence
    assert not world.controller.image.brokers[1].fenced


def test_metadata_is_applied_only_past_the_brokers_own_registration(tmp_path):
    world = World(tmp_path)
    other = world.node(2)
    world.run(other, other.start(world.clock.monotonic_ms()), until=running)
    world.controller.create_topics([CreatableTopic("t", assignments=((2,),))])
    copy = LaggingCopy(world.log)
    copy.catch_up()                              # everything before broker 1 registers: topic t
    node = world.node(1, copy)
    effects = node.start(world.clock.monotonic_ms())
    assert node.on_metadata_committed() == []    # not registered: nothing applied
    assert node.image.offset == -1
    registration = [e for e in effects if isinstance(e, SendRegistration)][0]
    reply = world.controller.register_broker(registration.request)
    effects = node.on_registration_reply(reply, world.clock.monotonic_ms())
    assert not any(isinstance(e, MetadataPublished) for e in effects), "the copy lacks the registration"
    assert node.image.offset == -1
    copy.catch_up()
    effects = node.on_metadata_committed()
    assert [e for e in effects if isinstance(e, MetadataPublished)] == [MetadataPublished(copy.fetched)]
    assert node.image.topic("t") is not None


def test_stale_broker_epoch_registers_again_and_returns_to_running(tmp_path):
    world = World(tmp_path)
    node = world.node(1)
    world.run(node, node.start(world.clock.monotonic_ms()), until=running)
    old_epoch = node.broker_epoch
    effects = node.on_heartbeat_reply(BrokerHeartbeatReply(ErrorCode.STALE_BROKER_EPOCH, "replaced"),
                                      world.clock.monotonic_ms())
    assert node.state == BrokerState.STARTING and node.broker_epoch == -1
    assert any(isinstance(e, SendRegistration) for e in effects)
    world.run(node, effects, until=running)
    assert node.broker_epoch == world.controller.image.brokers[1].broker_epoch >= old_epoch


def test_stopping_alone_stops_at_once(tmp_path):
    world = World(tmp_path)
    node = world.node(1)
    world.run(node, node.start(world.clock.monotonic_ms()), until=running)
    effects = node.on_stop_requested(world.clock.monotonic_ms())
    assert isinstance(effects[-1], StopNow) and node.state == BrokerState.SHUTTING_DOWN
    node.shutdown()
    assert node.state == BrokerState.NOT_RUNNING


def test_controlled_shutdown_waits_for_the_controller_to_move_leaderships(tmp_path):
    world = World(tmp_path)
    first, second = world.node(1), world.node(2)
    world.run(first, first.start(world.clock.monotonic_ms()), until=running)
    world.run(second, second.start(world.clock.monotonic_ms()), until=running)
    world.controller.create_topics([CreatableTopic("t", assignments=((1, 2),))])
    world.run(first, first.on_metadata_committed(), until=lambda n: n.replica_manager.get_partition(
        TopicPartition("t", 0)) is not None)
    effects = first.on_stop_requested(world.clock.monotonic_ms())
    assert first.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
    assert [e.request.want_shut_down for e in effects if isinstance(e, SendHeartbeat)] == [True]
    seen = world.run(first, effects, until=lambda n: n.state == BrokerState.SHUTTING_DOWN, others=[second])
    assert any(isinstance(e, StopNow) for e in seen)
    assert world.controller.image.partition(TopicPartition("t", 0)).leader == 2


def test_a_controlled_shutdown_that_never_completes_stops_at_its_deadline(tmp_path):
    world = World(tmp_path, controlled_shutdown_timeout_ms=3000)
    first, second = world.node(1), world.node(2)
    world.run(first, first.start(world.clock.monotonic_ms()), until=running)
    world.run(second, second.start(world.clock.monotonic_ms()), until=running)
    first.on_metadata_committed()                # it knows broker 2 can take over
    start = world.clock.monotonic_ms()
    first.on_stop_requested(start)               # the heartbeat is "lost": never answered
    assert first.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
    effects = []
    for _ in range(1000):
        if effects:
            break
        world.clock.advance(max(1, first.next_wakeup_ms() - world.clock.monotonic_ms()))
        effects = [e for e in first.on_tick(world.clock.monotonic_ms()) if isinstance(e, StopNow)]
    assert world.clock.monotonic_ms() - start == 3000


def test_alter_partition_carries_the_leaders_own_broker_epoch(tmp_path):
    world = World(tmp_path)
    node = world.node(1)
    world.run(node, node.start(world.clock.monotonic_ms()), until=running)
    world.controller.create_topics([CreatableTopic("t", assignments=((1,),))])
    world.run(node, node.on_metadata_committed(), until=lambda n: n.image.topic("t") is not None)
    tp = TopicPartition("t", 0)
    partition = node.replica_manager.get_partition(tp)
    node.replica_manager.pending_isr_proposals[tp] = IsrProposal(partition.leader_epoch,
                                                                 partition.partition_epoch, (1,), (-1,))
    world.clock.advance(100)
    sends = [e for e in node.on_tick(world.clock.monotonic_ms()) if isinstance(e, SendAlterPartition)]
    assert len(sends) == 1
    assert sends[0].request.partitions[0].new_isr_broker_epochs == (node.broker_epoch,)


def test_a_broken_invariant_escapes_to_the_driver(tmp_path):
    """The node never swallows an AssertionError: the driver's fault handler stops
    the broker (the runtime) or fails the seed (the simulator)."""
    world = World(tmp_path)
    node = world.node(1)
    world.run(node, node.start(world.clock.monotonic_ms()), until=running)

    def broken(now_ms):
        raise AssertionError("high_watermark > log_end_offset")

    node.replica_manager.on_tick = broken
    world.clock.advance(100)
    with pytest.raises(AssertionError):
        node.on_tick(world.clock.monotonic_ms())


def test_a_broker_in_controlled_shutdown_stops_fetching_the_partitions_whose_isr_it_left(tmp_path):
    """Kafka: when the controller takes a shutting-down broker out of an ISR and the
    broker learns it, its fetcher for that partition is removed and not restarted —
    both where it was a follower (the ISR shrinks, the leader epoch stays) and where
    it led (leadership moves away with a new leader epoch)."""
    world = World(tmp_path)
    first, second = world.node(1), world.node(2)
    world.run(first, first.start(world.clock.monotonic_ms()), until=running)
    world.run(second, second.start(world.clock.monotonic_ms()), until=running)
    led, followed = TopicPartition("led", 0), TopicPartition("followed", 0)
    world.controller.create_topics([CreatableTopic("led", assignments=((1, 2),)),
                                    CreatableTopic("followed", assignments=((2, 1),))])
    fetchers = first.replica_manager.fetcher_manager
    world.run(first, first.on_metadata_committed(), others=[second],
              until=lambda n: fetchers.fetch_state(followed) is not None and n.replica_manager.get_partition(led))
    fetcher = fetchers.fetcher_of(followed)
    effects = first.on_stop_requested(world.clock.monotonic_ms())
    assert first.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN

    def left_every_isr(node):
        return all(1 not in node.image.partition(tp).isr for tp in (led, followed))

    seen = world.run(first, effects, others=[second], until=left_every_isr)
    assert first.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN, "learned while still shutting down"
    assert first.image.partition(led).leader == 2 and not first.replica_manager.get_partition(led).is_leader
    assert fetchers.fetch_state(followed) is None and fetchers.fetch_state(led) is None
    assert fetchers.fetchers == {}
    assert [e.fetcher for e in seen if isinstance(e, FetcherRemoved)] == [fetcher]
    assert not any(isinstance(e, FetcherAdded) for e in seen)
    seen = world.run(first, [], others=[second], until=lambda n: n.state == BrokerState.SHUTTING_DOWN)
    assert not any(isinstance(e, FetcherAdded) for e in seen)


class SteppingClock(ManualClock):
    """A ManualClock whose wall time can step (NTP, an operator) while the monotonic clock runs on."""

    def __init__(self):
        super().__init__()
        self.wall_step_ms = 0

    def now_ms(self) -> int:
        return super().now_ms() + self.wall_step_ms


def test_a_wall_clock_step_back_does_not_hold_a_rebalance(tmp_path):
    """Kafka's group coordinator times a rebalance on a monotonic timer (the DelayedJoin
    of rebalanceTimeoutMs): when it passes, the members that did not rejoin are removed
    and the join completes, whatever the wall clock did meanwhile. Simulator seed 1023:
    the coordinator's wall clock stepped back an hour during PreparingRebalance and the
    join deadline (and the sessions), stamped in wall time, moved an hour away — every
    JoinGroup timed out and was resent until the run ended, the group still rebalancing."""
    import asyncio
    from types import SimpleNamespace

    from tidelog.group.classic import GroupState
    from tidelog.group.coordinator import offsets_topic
    from tidelog.server.group_apis import GroupApis

    clock = SteppingClock()
    world = World(tmp_path, clock=clock)
    node = world.node(1, settings={"offsets.topic.num.partitions": "1"})
    world.run(node, node.start(clock.monotonic_ms()), until=running)
    world.controller.create_topics([offsets_topic(node.config, 1)])
    world.run(node, node.on_metadata_committed(),
              until=lambda n: not isinstance(n.group_coordinator.shard_for("g"), ErrorCode))
    shard = node.group_coordinator.shard_for("g")

    def advance(ms):
        end = clock.monotonic_ms() + ms
        world.run(node, [], steps=10_000, until=lambda n: clock.monotonic_ms() >= end)

    async def scenario():
        apis = GroupApis(node, "PLAINTEXT", clock, lambda topic: ErrorCode.NONE)
        header = SimpleNamespace(client_id="c", api_version=3)     # v3: no MEMBER_ID_REQUIRED round

        def join(member_id=""):
            request = SimpleNamespace(group_id="g", member_id=member_id, group_instance_id=None,
                                      session_timeout=10_000, rebalance_timeout=30_000, protocol_type="consumer",
                                      protocols=[SimpleNamespace(name="range", metadata=b"")])
            answer = apis.handle_join_group(header, request)
            return answer if isinstance(answer, dict) else asyncio.ensure_future(answer)

        def heartbeat(member_id, generation):
            request = SimpleNamespace(group_id="g", generation_id=generation, member_id=member_id)
            return apis.handle_heartbeat(header, request)["error_code"]

        async def settled(task):
            for _ in range(3):
                await asyncio.sleep(0)
            assert task.done(), "no answer yet"
            return task.result()

        first, second = join(), join()
        advance(3_000)                                             # group.initial.rebalance.delay.ms
        a, b = (await settled(first))["member_id"], (await settled(second))["member_id"]
        sync = apis.handle_sync_group(header, SimpleNamespace(
            group_id="g", generation_id=1, member_id=a, assignments=[]))
        sync = sync if isinstance(sync, dict) else asyncio.ensure_future(sync)
        advance(100)
        if not isinstance(sync, dict):
            await settled(sync)
        assert shard.groups["g"].state == GroupState.STABLE

        rejoin = join(a)                                           # the leader rejoins: a rebalance
        assert shard.groups["g"].state == GroupState.PREPARING_REBALANCE
        clock.wall_step_ms = -3_600_000                            # the wall clock steps back an hour
        resent = None
        for step in range(14):                                     # 28 s: b stays alive, never rejoins
            advance(2_000)
            assert heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS
            if step == 5:                                          # a's client timed out and asks again
                resent = join(a)
                assert (await settled(rejoin))["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        assert shard.groups["g"].state == GroupState.PREPARING_REBALANCE
        advance(2_500)                                             # the rebalance timeout, from its start
        answer = await settled(resent)
        assert answer["error_code"] == ErrorCode.NONE and answer["generation_id"] == 2
        assert shard.groups["g"].state == GroupState.COMPLETING_REBALANCE
        assert set(shard.groups["g"].members) == {a}               # b did not rejoin: removed
        assert heartbeat(b, 1) == ErrorCode.UNKNOWN_MEMBER_ID

    asyncio.run(scenario())


def test_a_wall_clock_step_back_does_not_hold_a_transactions_markers(tmp_path):
    """Kafka's transaction coordinator retries markers on its channel's timers, not at a
    wall-clock instant: markers that failed while the wall clock was an hour ahead are
    retried within the backoff once the clock steps back, and the transaction completes.
    Simulator seed 1012: b3's wall clock an hour ahead while a PREPARE_COMMIT's markers
    failed; the retry, due 200 ms later in that time, was an hour away after the step
    back, and the producer got CONCURRENT_TRANSACTIONS until the run ended."""
    from tidelog.txn.coordinator import transaction_state_topic
    from tidelog.txn.records import TxnState

    clock = SteppingClock()
    world = World(tmp_path, clock=clock)
    node = world.node(1, settings={"transaction.state.log.num.partitions": "1"})
    world.run(node, node.start(clock.monotonic_ms()), until=running)
    out = TopicPartition("out", 0)
    world.controller.create_topics([transaction_state_topic(node.config, 1), CreatableTopic("out", 1, 1)])
    coordinator = node.txn_coordinator
    world.run(node, node.on_metadata_committed(),
              until=lambda n: not isinstance(coordinator.shard_for("app"), ErrorCode)
              and n.image.partition(out) is not None)
    shard = coordinator.shard_for("app")
    markers, failing = [], [False]

    def write_markers(broker_id, producer_id, epoch, commit, coordinator_epoch, partitions, on_done):
        markers.append((clock.monotonic_ms(), clock.now_ms()))
        code = ErrorCode.NOT_LEADER_OR_FOLLOWER if failing[0] else ErrorCode.NONE
        on_done({tp: code for tp in partitions})
    coordinator.write_markers = write_markers

    def advance(ms, until=lambda n: False):
        end = clock.monotonic_ms() + ms
        world.run(node, [], steps=10_000, until=lambda n: until(n) or clock.monotonic_ms() >= end)

    def call(method, *args):
        answers = []
        getattr(shard, method)(*args, coordinator.now_ms(), lambda *a: answers.append(a))
        advance(2_000, until=lambda n: answers)
        return answers[0]

    assert call("init_producer_id", "app", 60_000, -1, -1, 7) == (ErrorCode.NONE, 7, 0)
    assert call("add_partitions", "app", 7, 0, {out}) == (ErrorCode.NONE,)
    failing[0] = True
    assert call("end_transaction", "app", 7, 0, True) == (ErrorCode.NONE,)     # decided: PREPARE_COMMIT
    clock.wall_step_ms = 3_600_000                               # the wall clock an hour ahead
    advance(1_000)
    assert shard.transactions["app"].state == TxnState.PREPARE_COMMIT
    retried = len(markers)
    assert retried >= 3, "failed markers are retried after a backoff"
    clock.wall_step_ms = 0                                       # ... and back
    failing[0] = False
    advance(1_000, until=lambda n: shard.transactions["app"].state == TxnState.COMPLETE_COMMIT)
    assert shard.transactions["app"].state == TxnState.COMPLETE_COMMIT
    assert len(markers) == retried + 1 and markers[-1][0] - markers[retried - 1][0] <= 500
    assert call("end_transaction", "app", 7, 0, True) == (ErrorCode.NONE,)     # the client's retry


def test_a_publish_resolves_topic_configs_again_only_when_a_config_changed(tmp_path, monkeypatch):
    """A broker resolves each topic's configs once per set of configs, not once per
    publish: a publish that changes no config resolves only what it creates, and a
    config change still reaches every hosted partition's log."""
    import tidelog.broker.node as node_module
    from tidelog.controller.messages import AlterConfigsResource
    world = World(tmp_path)
    node = world.node(1)
    world.run(node, node.start(world.clock.monotonic_ms()), until=running)
    for t in range(20):
        world.controller.create_topics([CreatableTopic(f"t{t}", assignments=((1,), (1,)))])
    node.on_metadata_committed()
    resolved = []
    real = node_module.topic_config_values
    monkeypatch.setattr(node_module, "topic_config_values",
                        lambda image, config, topic: resolved.append(topic) or real(image, config, topic))
    world.controller.create_topics([CreatableTopic("new", assignments=((1,),))])
    node.on_metadata_committed()
    assert set(resolved) == {"new"}, sorted(set(resolved))
    world.controller.incremental_alter_configs([AlterConfigsResource(2, "t3", {"retention.ms": "12345"})])
    node.on_metadata_committed()
    assert node.replica_manager.partitions[TopicPartition("t3", 1)].log.config.retention_ms == 12345
    # ... and to the logs the log manager opens later (a log moved between directories).
    assert node.log_manager.config_for("t3").retention_ms == 12345
    assert node.replica_manager.partitions[TopicPartition("t4", 0)].log.config.retention_ms != 12345


def test_thousands_of_new_partitions_are_hosted_a_slice_per_tick(tmp_path, monkeypatch):
    """A publish creating more partitions than a slice hosts one slice and leaves the rest
    waiting for the next ticks (the event loop serves requests and heartbeats in between);
    a partition deleted while waiting is never created, and partitions already hosted
    take their changes at once."""
    import tidelog.broker.node as node_module
    monkeypatch.setattr(node_module, "PARTITIONS_HOSTED_PER_SLICE", 10)
    world = World(tmp_path)
    node = world.node(1)
    world.run(node, node.start(world.clock.monotonic_ms()), until=running)
    world.controller.create_topics([CreatableTopic("small", assignments=((1,),))])
    node.on_metadata_committed()
    assert TopicPartition("small", 0) in node.replica_manager.partitions
    world.controller.create_topics([CreatableTopic("big", assignments=((1,),) * 25),
                                    CreatableTopic("gone", assignments=((1,),) * 15)])
    node.on_metadata_committed()

    def hosted(topic):
        return sorted(tp.partition for tp in node.replica_manager.partitions if tp.topic == topic)
    assert len(hosted("big")) + len(hosted("gone")) == 10
    assert node.next_wakeup_ms() == world.clock.monotonic_ms()      # more to do at once
    # Kafka's getPartitionOrError: known to the metadata but not hosted (yet) is
    # NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata and retries); unknown is
    # UNKNOWN_TOPIC_OR_PARTITION.
    waiting = TopicPartition("gone", 3)
    assert waiting not in node.replica_manager.partitions
    assert node.replica_manager.partition_error(waiting) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert node.replica_manager.partition_error(TopicPartition("nope", 0)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    world.controller.delete_topics(["gone"])
    node.on_metadata_committed()
    for _ in range(5):
        node.on_tick(world.clock.monotonic_ms())
    assert hosted("big") == list(range(25)) and hosted("gone") == []
    assert not list((tmp_path / "b1").glob("gone-*")), "a deleted topic's waiting partitions got logs"
    assert all(node.replica_manager.get_partition(TopicPartition("big", p)).is_leader for p in range(25))
    assert node.next_wakeup_ms() > world.clock.monotonic_ms()
