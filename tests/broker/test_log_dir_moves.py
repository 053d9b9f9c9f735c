"""A replica moved between a broker's log directories, sans I/O: the broker copies it
on its ticks while the partition takes writes, serves the new log from the swap on,
and tells the controller (AssignReplicasToDirs) so that the partition record's
directory follows the move (KIP-858)."""

import pytest

from tidelog.controller.messages import CreatableTopic
from tidelog.core.errors import ErrorCode
from tidelog.records.batch import build_batch, iter_batches, iter_records
from tidelog.testing.crashable import CrashableFileSystem

from .test_log_dir_failure import T0, T1, answer, start, tick_until
from .test_node import World


@pytest.fixture
def fs(tmp_path):
    return CrashableFileSystem(str(tmp_path))


def test_a_moved_replica_is_served_from_its_new_directory_and_the_controller_learns_it(tmp_path, fs):
    world = World(tmp_path)
    first = world.node(1, log_dirs=2, fs=fs, settings={"replica.fetch.max.bytes": "1024"})
    start(world, first)
    world.controller.create_topics([CreatableTopic("t", assignments=((1,), (1,)))])
    manager = first.log_manager
    answer(world, first, tick_until(world, first, lambda: all(
        world.controller.image.partition(tp).directory(1) == manager.placements().get(tp) for tp in (T0, T1))))
    source = manager.log_dir_of(T0)
    target = next(d for d in manager.log_dirs if d != source)
    partition = first.replica_manager.get_partition(T0)
    for i in range(200):
        partition.log.append_as_leader(build_batch([b"before-%d" % i * 4]), partition.leader_epoch)

    assert first.alter_replica_log_dirs({T0: target, T1: manager.log_dir_of(T1)}) == {
        T0: ErrorCode.NONE, T1: ErrorCode.NONE}
    assert manager.future_log(T0) is not None and manager.future_log(T1) is None
    assert first.next_wakeup_ms() <= world.clock.monotonic_ms() + 1        # the copy runs at once

    def appending_until_moved() -> bool:
        if manager.log_dir_of(T0) == source:
            partition.log.append_as_leader(build_batch([b"during"]), partition.leader_epoch)
            return False
        return True
    answer(world, first, tick_until(world, first, appending_until_moved))
    moved = manager.get_log(T0)
    assert first.replica_manager.get_partition(T0).log is moved and moved.directory.startswith(target)
    values = []
    offset = 0
    while offset < moved.log_end_offset:
        data = moved.read(offset, 1 << 20).records.read_bytes()
        for position, header in iter_batches(data):
            values += [r.value for r in iter_records(data, position)]
            offset = header.next_offset
    assert values[:200] == [b"before-%d" % i * 4 for i in range(200)] and set(values[200:]) == {b"during"}
    assert len(values) > 200
    # The controller learns the new directory; the partition record follows.
    target_id = manager.directory_id(target)
    tick_until(world, first, lambda: world.controller.image.partition(T0).directory(1) == target_id)
    assert world.controller.image.partition(T1).directory(1) == manager.placements()[T1]
    assert not manager.has_future_work()
