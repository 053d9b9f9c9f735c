"""A broker's failed log directory reaches the controller (KIP-858), sans I/O.

The broker registers its directory ids, tells the controller where it placed each
replica (AssignReplicasToDirs) and, the moment a directory fails, sends a
heartbeat naming it; the controller moves that directory's partitions to other
brokers. Before, the failure stayed inside the broker: its partitions were
Offline there while the metadata still named it leader, until it was restarted.
"""

import pytest

from tidelog.broker.lifecycle import BrokerState
from tidelog.broker.node import SendAlterPartition, SendAssignReplicasToDirs, SendHeartbeat, SendRegistration
from tidelog.controller.messages import CreatableTopic
from tidelog.core.ids import TopicPartition
from tidelog.testing.crashable import CrashableFileSystem

from .test_node import World, running

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def fs(tmp_path):
    return CrashableFileSystem(str(tmp_path))


def start(world, node, others=()):
    world.run(node, node.start(world.clock.monotonic_ms()), until=running, others=others)


def answer(world, node, effects, others=()):
    """The driver's part: every request the nodes send is answered at once, and every
    node applies what the controller committed."""
    pending = [(node, e) for e in effects]
    while pending:
        target, effect = pending.pop(0)
        now = world.clock.monotonic_ms()
        controller = world.controller
        if isinstance(effect, SendRegistration):
            more = target.on_registration_reply(controller.register_broker(effect.request), now)
        elif isinstance(effect, SendHeartbeat):
            more = target.on_heartbeat_reply(controller.process_broker_heartbeat(effect.request), now)
        elif isinstance(effect, SendAlterPartition):
            more = target.on_alter_partition_reply(controller.alter_partition(effect.request), effect.sent, now)
        elif isinstance(effect, SendAssignReplicasToDirs):
            more = target.on_assign_replicas_to_dirs_reply(controller.assign_replicas_to_dirs(effect.request), now)
        else:
            more = []
        pending += [(target, e) for e in more]
        for each in (node, *others):
            pending += [(each, e) for e in each.on_metadata_committed()]


def tick_until(world, node, until, others=(), steps=5000):
    """Tick every node (answering what they send) until ``until()``; the effects of
    ``node``'s tick on which it first held, not yet answered."""
    for _ in range(steps):
        world.clock.advance(max(1, min(n.next_wakeup_ms() for n in (node, *others)) - world.clock.monotonic_ms()))
        now = world.clock.monotonic_ms()
        for other in others:
            answer(world, other, other.on_tick(now), [node, *others])
        effects = node.on_tick(now)
        if until():
            return effects
        answer(world, node, effects, others)
    raise AssertionError("never held")


def test_registration_names_the_directories_and_replicas_are_placed(tmp_path, fs):
    world = World(tmp_path)
    first, second = world.node(1, log_dirs=2, fs=fs), world.node(2, fs=fs)
    effects = first.start(world.clock.monotonic_ms())
    registration = [e for e in effects if isinstance(e, SendRegistration)][0].request
    assert registration.log_dirs == first.log_manager.directory_ids and len(registration.log_dirs) == 2
    world.run(first, effects, until=running)
    start(world, second, others=[first])
    world.controller.create_topics([CreatableTopic("t", assignments=((1, 2), (1, 2)))])
    seen = world.run(first, first.on_metadata_committed(), others=[second], until=lambda n: all(
        world.controller.image.partition(tp).directory(1) == n.log_manager.placements().get(tp)
        for tp in (T0, T1)))
    sent = [e.request for e in seen if isinstance(e, SendAssignReplicasToDirs)]
    assert sent and {(a.partition_id, a.directory_id) for r in sent for a in r.assignments} == {
        (tp.partition, first.log_manager.placements()[tp]) for tp in (T0, T1)}
    # one partition in each directory; broker 2's only directory was assigned at creation
    assert len(set(first.log_manager.placements().values())) == 2
    assert world.controller.image.partition(T0).directory(2) == second.log_manager.directory_ids[0]


def test_a_failed_directory_is_reported_at_once_and_only_its_partitions_move(tmp_path, fs):
    world = World(tmp_path)
    first, second = world.node(1, log_dirs=2, fs=fs), world.node(2, fs=fs)
    start(world, first)
    start(world, second, others=[first])
    world.controller.create_topics([CreatableTopic("t", assignments=((1, 2), (1, 2)))])
    world.run(first, first.on_metadata_committed(), others=[second], until=lambda n: all(
        world.controller.image.partition(tp).directory(1) == n.log_manager.placements().get(tp)
        for tp in (T0, T1)))
    assert world.controller.image.partition(T1).leader == 1
    failed_dir = first.log_manager.log_dir_of(T1)
    failed_id = first.log_manager.directory_id(failed_dir)
    fs.fail(failed_dir)
    # The next checkpoint finds it; that very tick sends the heartbeat (interval: 2 s).
    effects = tick_until(world, first, lambda: first.log_manager.offline_dirs, others=[second])
    heartbeats = [e.request for e in effects if isinstance(e, SendHeartbeat)]
    assert [h.offline_log_dirs for h in heartbeats] == [(failed_id,)]
    assert not heartbeats[0].want_fence
    answer(world, first, effects, [second])
    image = world.controller.image
    assert (image.partition(T1).leader, image.partition(T1).isr) == (2, (2,))
    assert image.partition(T0).leader == 1                      # its directory is fine
    assert not image.brokers[1].fenced and image.brokers[1].log_dirs == first.log_manager.directory_ids
    assert first.state == BrokerState.RUNNING
    # Later heartbeats still name it; nothing more changes.
    offset = world.log.end_offset
    tick_until(world, first, lambda: world.clock.monotonic_ms() > 10_000, others=[second])
    assert world.controller.image.partition(T1).leader == 2 and not world.controller.image.brokers[1].fenced
    assert world.log.end_offset == offset


def test_a_broker_left_without_a_directory_is_fenced_and_stays_up(tmp_path, fs):
    world = World(tmp_path)
    first, second = world.node(1, fs=fs), world.node(2, fs=fs)
    start(world, first)
    start(world, second, others=[first])
    world.controller.create_topics([CreatableTopic("t", assignments=((1, 2), (2, 1)))])
    world.run(first, first.on_metadata_committed(), others=[second],
              until=lambda n: n.replica_manager.get_partition(T0) is not None)
    fs.fail(first.log_manager.log_dirs[0])
    effects = tick_until(world, first, lambda: first.log_manager.offline_dirs, others=[second])
    heartbeat = [e.request for e in effects if isinstance(e, SendHeartbeat)][0]
    assert heartbeat.want_fence and heartbeat.offline_log_dirs == (first.log_manager.offline_directory_ids)
    answer(world, first, effects, [second])
    image = world.controller.image
    assert image.brokers[1].fenced
    assert (image.partition(T0).leader, image.partition(T0).isr) == (2, (2,))
    assert image.partition(T1).isr == (2,)
    # It stays up, asks to stay fenced, and is never unfenced.
    tick_until(world, first, lambda: world.clock.monotonic_ms() > 20_000, others=[second])
    assert first.state == BrokerState.RUNNING and world.controller.image.brokers[1].fenced


def test_placements_are_scanned_only_when_something_changed_and_a_failed_send_is_retried(tmp_path, fs):
    """Ticks do not rescan every replica's placement (O(partitions) each) unless the
    image or the placements changed or a retry is due: a failed AssignReplicasToDirs
    is sent again after ASSIGNMENT_RETRY_MS, with the image unchanged, and not before."""
    from tidelog.broker.node import ASSIGNMENT_RETRY_MS
    world = World(tmp_path)
    first, second = world.node(1, log_dirs=2, fs=fs), world.node(2, fs=fs)
    start(world, first)
    start(world, second, others=[first])
    world.controller.create_topics([CreatableTopic("t", assignments=((1, 2), (1, 2)))])
    first.on_metadata_committed()

    def assignments(now_ms):
        return [e.request for e in first.on_tick(now_ms) if isinstance(e, SendAssignReplicasToDirs)]

    now = world.clock.monotonic_ms()
    sent = assignments(now)
    assert sent and {a.partition_id for a in sent[0].assignments} == {0, 1}
    first.on_assign_replicas_to_dirs_failed(now, "connection lost")
    assert assignments(now + 1) == [] and assignments(now + ASSIGNMENT_RETRY_MS - 1) == []
    again = assignments(now + ASSIGNMENT_RETRY_MS)
    assert again and again[0].assignments == sent[0].assignments


def test_topic_configs_resolved_once_per_image_follow_a_config_change(tmp_path, fs):
    """The broker resolves a topic's configs once per metadata image (not per
    partition); a topic config change is a new image, so the partitions' logs and
    replication settings take it."""
    from tidelog.controller import AlterConfigsResource
    from tidelog.metadata.records import ConfigResourceType
    world = World(tmp_path)
    first = world.node(1, fs=fs)
    start(world, first)
    world.controller.create_topics([CreatableTopic("t", assignments=((1,), (1,)))])
    first.on_metadata_committed()
    partitions = [first.replica_manager.get_partition(tp) for tp in (T0, T1)]
    assert all(p.log.config.retention_ms == 604_800_000 and p.settings.min_insync_replicas == 1
               for p in partitions)
    world.controller.incremental_alter_configs([AlterConfigsResource(
        int(ConfigResourceType.TOPIC), "t", {"retention.ms": "1000", "min.insync.replicas": "2"})])
    first.on_metadata_committed()
    assert all(p.log.config.retention_ms == 1000 and p.settings.min_insync_replicas == 2 for p in partitions)
    assert first.topic_config_values("t")["retention.ms"] == ("1000", "DYNAMIC_TOPIC_CONFIG")
