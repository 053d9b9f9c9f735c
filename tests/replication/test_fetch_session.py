"""Incremental fetch sessions (KIP-227), the core: contexts, epochs, what an incremental
response carries, and the cache's eviction rules — with time passed in."""

import random

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.replication.delayed import FetchPartitionRequest
from tidelog.replication.fetch_session import (
    EPOCH_MAX,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    SESSION_EVICTION_MS,
    ContextKind,
    FetchManager,
    FetchSessionCache,
    next_epoch,
)

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
VERSION = 17


def data(*tps, offset=0):
    return {tp: (None, FetchPartitionRequest(offset, 1_048_576)) for tp in tps}


def entry(high_watermark=10, log_start_offset=0, records=b"", error=ErrorCode.NONE):
    return {"high_watermark": high_watermark, "log_start_offset": log_start_offset, "records": records,
            "error_code": int(error), "preferred_read_replica": -1,
            "diverging_epoch": {"epoch": -1, "end_offset": -1}}


def full_session(manager, tps=(T0, T1, T2), now_ms=0, follower=False):
    context = manager.new_context(VERSION, INVALID_SESSION_ID, INITIAL_EPOCH, follower, data(*tps), [], now_ms)
    assert context.kind == ContextKind.FULL
    error, session_id, send = context.respond({tp: entry() for tp in tps}, now_ms)
    assert error == ErrorCode.NONE and session_id != INVALID_SESSION_ID and send == list(tps)
    return session_id


def test_next_epoch_wraps_to_one_and_final_stays_final():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(EPOCH_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_sessionless_fetch_makes_no_session():
    manager = FetchManager(FetchSessionCache())
    context = manager.new_context(VERSION, INVALID_SESSION_ID, FINAL_EPOCH, False, data(T0), [], 0)
    assert context.kind == ContextKind.SESSIONLESS
    assert context.respond({T0: entry()}, 0) == (ErrorCode.NONE, INVALID_SESSION_ID, [T0])
    assert not manager.cache.sessions


def test_incremental_fetch_reads_the_cached_partitions_and_sends_only_what_changed():
    manager = FetchManager(FetchSessionCache())
    session_id = full_session(manager)
    # Epoch 1 names only T1 (its offset moved); the read covers the whole session.
    context = manager.new_context(VERSION, session_id, 1, False, data(T1, offset=5), [], 10)
    assert context.kind == ContextKind.INCREMENTAL
    assert list(context.partitions) == [T0, T1, T2]
    assert context.partitions[T1][1].fetch_offset == 5 and context.partitions[T0][1].fetch_offset == 0
    # T0 unchanged; T1 has records; T2's high watermark moved.
    error, sid, send = context.respond({T0: entry(), T1: entry(records=b"x"), T2: entry(high_watermark=11)}, 10)
    assert (error, sid, send) == (ErrorCode.NONE, session_id, [T1, T2])
    # T1 returned records: it goes to the back of the order.
    assert list(manager.cache.get(session_id).partitions) == [T0, T2, T1]
    # Epoch 2: nothing changed, nothing sent.
    context = manager.new_context(VERSION, session_id, 2, False, {}, [], 20)
    assert context.respond({T0: entry(), T2: entry(high_watermark=11), T1: entry()}, 20) == (
        ErrorCode.NONE, session_id, [])


def test_an_error_is_always_sent_and_the_partition_again_once_it_clears():
    manager = FetchManager(FetchSessionCache())
    session_id = full_session(manager, (T0,))
    context = manager.new_context(VERSION, session_id, 1, False, {}, [], 0)
    failed = entry(high_watermark=-1, log_start_offset=-1, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert context.respond({T0: failed}, 0)[2] == [T0]
    context = manager.new_context(VERSION, session_id, 2, False, {}, [], 0)
    assert context.respond({T0: entry()}, 0)[2] == [T0]


def test_forgotten_partitions_leave_the_session_and_an_emptied_session_closes():
    manager = FetchManager(FetchSessionCache())
    session_id = full_session(manager, (T0, T1))
    context = manager.new_context(VERSION, session_id, 1, False, {}, [T0], 0)
    assert list(context.partitions) == [T1]
    context.respond({T1: entry()}, 0)
    context = manager.new_context(VERSION, session_id, 2, False, {}, [T1], 0)
    assert context.kind == ContextKind.SESSIONLESS
    assert manager.cache.get(session_id) is None


def test_unknown_session_and_wrong_epoch_are_kafkas_errors():
    manager = FetchManager(FetchSessionCache())
    assert manager.new_context(VERSION, 12345, 1, False, {}, [], 0).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    session_id = full_session(manager)
    assert manager.new_context(VERSION, session_id, 2, False, {}, [], 0).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert manager.new_context(12, session_id, 1, False, {}, [], 0).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # The failed attempts did not move the epoch: 1 is still the one expected.
    assert manager.new_context(VERSION, session_id, 1, False, {}, [], 0).kind == ContextKind.INCREMENTAL


def test_a_duplicate_incremental_fetch_is_answered_invalid_epoch():
    """Two Fetches of epoch 1 in flight (a retry): the second is refused at once; the
    first, answered after the second moved the epoch, would be — each epoch is served once."""
    manager = FetchManager(FetchSessionCache())
    session_id = full_session(manager)
    first = manager.new_context(VERSION, session_id, 1, False, {}, [], 0)
    assert manager.new_context(VERSION, session_id, 1, False, {}, [], 0).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    second = manager.new_context(VERSION, session_id, 2, False, {}, [], 0)
    assert first.respond({T0: entry()}, 0)[0] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert second.respond({T0: entry()}, 0)[0] == ErrorCode.NONE


def test_a_full_fetch_closes_the_session_it_names():
    manager = FetchManager(FetchSessionCache())
    session_id = full_session(manager)
    context = manager.new_context(VERSION, session_id, INITIAL_EPOCH, False, data(T0), [], 0)
    assert manager.cache.get(session_id) is None
    _, new_id, _ = context.respond({T0: entry()}, 0)
    assert new_id not in (INVALID_SESSION_ID, session_id)
    manager.new_context(VERSION, new_id, FINAL_EPOCH, False, data(T0), [], 0)
    assert not manager.cache.sessions


# -- the cache: max.incremental.fetch.session.cache.slots and eviction --------------------

def sessions(cache, now_ms, privileged, size):
    partitions = {TopicPartition("t", p): None for p in range(size)}
    return cache.maybe_create_session(now_ms, privileged, partitions, True)


def test_zero_slots_means_no_sessions():
    assert sessions(FetchSessionCache(0), 0, True, 5) == INVALID_SESSION_ID


def test_a_full_cache_evicts_a_stale_session_first():
    cache = FetchSessionCache(2, rng=random.Random(1))
    stale = sessions(cache, 0, True, 100)
    fresh = sessions(cache, 1000, True, 100)
    new = sessions(cache, SESSION_EVICTION_MS + 1, False, 1)
    assert new != INVALID_SESSION_ID
    assert cache.get(stale) is None and cache.get(fresh) is not None and cache.evictions == 1


def test_young_sessions_are_evicted_only_by_followers_and_only_consumers_ones():
    cache = FetchSessionCache(2, rng=random.Random(1))
    consumer = sessions(cache, 0, False, 10)
    follower = sessions(cache, 0, True, 10)
    assert sessions(cache, 100, False, 1000) == INVALID_SESSION_ID     # a consumer evicts no young session
    new = sessions(cache, 100, True, 1)                                 # a follower evicts the consumer's
    assert new != INVALID_SESSION_ID and cache.get(consumer) is None and cache.get(follower) is not None
    assert sessions(cache, 200, True, 1000) == INVALID_SESSION_ID      # but no young follower session


def test_old_sessions_are_evicted_smallest_first_and_only_by_one_worth_as_much():
    cache = FetchSessionCache(2, rng=random.Random(1))
    small = sessions(cache, 0, False, 5)
    large = sessions(cache, 0, False, 50)
    later = SESSION_EVICTION_MS + 10
    for session_id in (small, large):                   # used recently, but created long ago
        cache.touch(cache.get(session_id), later)
    assert sessions(cache, later, False, 4) == INVALID_SESSION_ID      # worth less than the smallest
    assert sessions(cache, later, False, 6) != INVALID_SESSION_ID
    assert cache.get(small) is None and cache.get(large) is not None
    assert cache.partitions_cached == 50 + 6


# -- the fetcher's side: FetchSessionHandler ------------------------------------------------

def plan(*offsets):
    return {TopicPartition("t", p): FetchPartitionRequest(offset, 100) for p, offset in enumerate(offsets)}


def test_handler_sends_everything_first_then_only_what_changed_and_forgets_what_left():
    from tidelog.replication.fetch_session import FetchSessionHandler
    handler = FetchSessionHandler()
    assert handler.build(plan(0, 0, 0)) == (0, INITIAL_EPOCH, plan(0, 0, 0), [])
    assert handler.on_response(plan(0, 0, 0), ErrorCode.NONE, 77)
    # Partition 1 moved on, partition 2 is no longer fetched (delayed, removed).
    partitions = {**plan(0, 5), }
    session_id, epoch, send, forgotten = handler.build(partitions)
    assert (session_id, epoch, list(send), forgotten) == (77, 1, [T1], [T2])
    assert handler.on_response(partitions, ErrorCode.NONE, 77)
    assert handler.build(partitions) == (77, 2, {}, [])


def test_handler_goes_back_to_a_full_fetch_after_a_session_error_or_a_failure():
    from tidelog.replication.fetch_session import FetchSessionHandler
    handler = FetchSessionHandler()
    handler.on_response(plan(0, 0), ErrorCode.NONE, 77)
    assert not handler.on_response(plan(0, 0), ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert handler.build(plan(0, 0)) == (0, INITIAL_EPOCH, plan(0, 0), [])        # a new session
    handler.on_response(plan(0, 0), ErrorCode.NONE, 78)
    assert not handler.on_response(plan(0, 0), ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    assert handler.build(plan(0, 0)) == (78, INITIAL_EPOCH, plan(0, 0), [])       # closes 78, opens one
    handler.on_response(plan(0, 0), ErrorCode.NONE, 79)
    handler.reset()                                                                # the connection failed
    assert handler.build(plan(0, 0))[:2] == (79, INITIAL_EPOCH)
    handler.on_response(plan(0, 0), ErrorCode.NONE, 0)                             # no room for a session
    assert handler.build(plan(0, 0))[:2] == (0, INITIAL_EPOCH)


def test_handler_and_broker_agree_over_a_run_of_fetches():
    """The follower's handler against the broker's FetchManager: whatever partitions come and
    go and whatever offsets move, the broker reads exactly the follower's current plan."""
    from tidelog.replication.fetch_session import FetchSessionHandler
    rng = random.Random(7)
    manager, handler = FetchManager(FetchSessionCache()), FetchSessionHandler()
    offsets = {TopicPartition("t", p): 0 for p in range(8)}
    for step in range(200):
        ready = {tp: FetchPartitionRequest(o, 100) for tp, o in offsets.items() if rng.random() < 0.8}
        session_id, epoch, send, forgotten = handler.build(ready)
        context = manager.new_context(VERSION, session_id, epoch, True, {tp: (None, p) for tp, p in send.items()},
                                      forgotten, step)
        if ready:
            assert {tp: p for tp, (_, p) in context.partitions.items()} == ready, step
        responses = {tp: entry(high_watermark=step) for tp in context.partitions}
        error, response_session_id, _ = context.respond(responses, step)
        handler.on_response(ready, error, response_session_id)
        for tp in ready:
            offsets[tp] += rng.choice((0, 0, 1))


def test_the_follower_driver_opens_a_session_and_then_sends_only_changes():
    """server/fetcher_driver.py on a recording connection: the first Fetch is full (epoch 0),
    the next ones carry the session id, the next epoch, only the changed partitions and the
    forgotten ones; a session error returns no partitions and makes the next Fetch full."""
    import asyncio
    from types import SimpleNamespace

    from tidelog.replication.fetch_session import FetchSessionHandler
    from tidelog.replication.fetcher import FetchPartitionPlan, FetchRequestPlan
    from tidelog.server.fetcher_driver import FetcherDriver

    class Connection:
        def __init__(self):
            self.sent, self.answers = [], []

        async def request(self, api_key, body, timeout_s=None):
            self.sent.append(body)
            error, session_id = self.answers.pop(0)
            return SimpleNamespace(error_code=error, session_id=session_id, responses=[])

    node = SimpleNamespace(image=SimpleNamespace(topic=lambda name: None))
    driver = FetcherDriver(node, "PLAINTEXT", fault_handler=None)
    connection = Connection()

    def fetch_plan(**offsets):
        return FetchRequestPlan(1, 0, 2, 5, 500, 1, 1 << 20, {
            TopicPartition("t", int(p[1:])): FetchPartitionPlan(o, 0, 1 << 20, 0) for p, o in offsets.items()})

    def sent(index):
        body = connection.sent[index]
        return (body["session_id"], body["session_epoch"],
                sorted(p["partition"] for t in body["topics"] for p in t["partitions"]),
                sorted(p for t in body["forgotten_topics_data"] for p in t["partitions"]))

    async def run():
        for error, session_id, plan in ((0, 77, fetch_plan(p0=0, p1=0, p2=0)), (0, 77, fetch_plan(p0=0, p1=4)),
                                        (0, 77, fetch_plan(p0=0, p1=4)),
                                        (int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), 0, fetch_plan(p0=1, p1=4)),
                                        (0, 80, fetch_plan(p0=1, p1=4))):
            connection.answers.append((error, session_id))
            session = driver.sessions.setdefault((plan.source_broker_id, plan.fetcher_id), FetchSessionHandler())
            assert await driver._fetch(connection, plan, session) == {}
    asyncio.run(run())
    assert sent(0) == (0, 0, [0, 1, 2], [])
    assert sent(1) == (77, 1, [1], [2])
    assert sent(2) == (77, 2, [], [])
    assert sent(3) == (77, 3, [0], [])                      # answered FETCH_SESSION_ID_NOT_FOUND
    assert sent(4) == (0, 0, [0, 1], [])                    # full again, at once


def test_a_quiet_read_result_is_one_an_incremental_response_leaves_out():
    """``quiet`` lets the server skip building entries: it must never call quiet a result
    whose entry ``must_respond`` would send. Every combination of what can change."""
    from types import SimpleNamespace

    from tidelog.broker.requests.fetch import FetchRequests
    from tidelog.replication.partition import ReadResult

    node = SimpleNamespace(image=SimpleNamespace(partition=lambda tp: None))
    entry_of = FetchRequests.__new__(FetchRequests)
    entry_of.node = node
    manager = FetchManager(FetchSessionCache())
    session_id = full_session(manager)
    context = manager.new_context(VERSION, session_id, 1, False, {}, [], 10)
    cached = context.session.partitions[T0]
    assert (cached.high_watermark, cached.log_start_offset) == (10, 0)

    class Empty:               # an empty FileSlice, as a read at the log end gives
        length = 0

        def __len__(self):
            return 0

        def on_file(self):
            return False

        def read_bytes(self):
            return b""
    empty = Empty()
    quiet_seen = 0
    for error in (ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.OFFSET_OUT_OF_RANGE):
        for records in (None, empty):
            for high_watermark in (10, 11, -1):
                for log_start_offset in (0, 1):
                    for preferred in (-1, 2):
                        for diverging in (None, (3, 7)):
                            result = ReadResult(error, records, None, high_watermark, high_watermark,
                                                log_start_offset, 20, diverging, None, preferred)
                            if cached.quiet(result):
                                quiet_seen += 1
                                assert not cached.must_respond(entry_of.partition_response(T0, result), update=False)
    assert quiet_seen == 2      # no error, no records (None or empty), nothing changed
    unchanged = ReadResult(high_watermark=10, last_stable_offset=10, log_start_offset=0)
    assert context.quiet({T0: unchanged, T1: ReadResult(high_watermark=11, log_start_offset=0)}) == {T0}
