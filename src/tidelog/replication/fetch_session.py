"""Incremental fetch sessions (KIP-227; Kafka's ``FetchSession``, ``FetchSessionCache``,
``FetchManager``).

Theory of operation. A fetcher that reads many partitions (a follower, a Java
consumer) need not name every partition in every Fetch. Its first Fetch is *full*
(session id 0, epoch 0): it names every partition, and the broker may answer with a
new session id, caching each partition's request (fetch offset, max bytes, epochs)
and what it last told the fetcher (high watermark, log start offset). The next
Fetches are *incremental* (that session id, epochs 1, 2, ...): they name only the
partitions whose request changed, list the partitions to forget, and the broker
answers only the partitions with something new — records, a moved high watermark or
log start offset, an error, a diverging epoch. Partitions that returned records go
to the back of the session's order, so that a byte limit is shared out in turn.

``FetchManager.new_context`` turns a Fetch's session fields into a ``FetchContext``:

- epoch -1 (FINAL): sessionless — the request is read as it is; a session named is closed;
- epoch 0 (INITIAL): full — a session named is closed, and a new one is made when the
  response is built, if the cache has room (``maybe_create_session``);
- epoch > 0: incremental — ``FETCH_SESSION_ID_NOT_FOUND`` if the session is unknown
  (never made, closed or evicted), ``INVALID_FETCH_SESSION_EPOCH`` if the epoch is not
  the one the broker expects next, ``FETCH_SESSION_TOPIC_ID_ERROR`` if the request's
  version does not use topic ids the way the session does.

``FetchContext.respond`` takes the per-partition responses and says which to send
and with what session id. The cache holds at most ``max.incremental.fetch.session.cache.slots``
sessions. When full, a new session takes the place of one idle for more than
``SESSION_EVICTION_MS``, else of the least valuable evictable one: consumers' before
followers' (privileged), smaller before larger — and only if the new one is worth at
least as much; a session younger than ``SESSION_EVICTION_MS`` can be evicted only by a
privileged one, and only if it is a consumer's (Kafka's ``tryEvict``). Who may evict
whom is decided when a session was last used, as in Kafka.

Plain Python, time passed in (``now_ms``). Invariants: a session in the cache has at
least one partition; its epoch is the one its next incremental Fetch must carry.
"""

from __future__ import annotations

import enum
import random
import uuid
from dataclasses import dataclass, field

from tidelog.core.errors import ErrorCode
from tidelog.replication.delayed import FetchPartitionRequest

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0           # a full Fetch that asks for a new session
FINAL_EPOCH = -1            # a full Fetch that wants no session (and closes the one it names)
SESSION_EVICTION_MS = 120_000   # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
EPOCH_MAX = (1 << 31) - 1
MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS = 1000   # the config's default


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``): FINAL stays FINAL,
    the largest int wraps to 1 (0 is INITIAL, never an incremental epoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == EPOCH_MAX else epoch + 1


@dataclass
class CachedPartition:
    """One partition of a session: the fetcher's last request, and what it was last told."""

    topic_id: uuid.UUID | None
    request: FetchPartitionRequest
    high_watermark: int = -1
    log_start_offset: int = -1           # this broker's, as last sent

    def must_respond(self, response: dict, update: bool) -> bool:
        """Whether an incremental response must carry this partition (Kafka's
        ``maybeUpdateResponseData``); with ``update``, remember what it says."""
        must = bool(response.get("records"))
        if response["high_watermark"] != self.high_watermark:
            must = True
            if update:
                self.high_watermark = response["high_watermark"]
        if response["log_start_offset"] != self.log_start_offset:
            must = True
            if update:
                self.log_start_offset = response["log_start_offset"]
        if response.get("preferred_read_replica", -1) >= 0:
            must = True
        if response["error_code"] != int(ErrorCode.NONE):
            must = True
            if update:
                self.high_watermark = -1      # so the partition is sent again when the error clears
        diverging = response.get("diverging_epoch") or {}
        if diverging.get("epoch", -1) >= 0 or diverging.get("end_offset", -1) >= 0:
            must = True
        return must

    def quiet(self, result) -> bool:
        """Whether a read result (``partition.ReadResult``) is sure to give a response entry
        ``must_respond`` leaves out: no error (an error's entry always goes), no records,
        no preferred read replica, no diverging epoch, and the high watermark and log start
        offset last sent. Lets an incremental response skip building those entries."""
        records = result.records
        return (result.error == ErrorCode.NONE and (records is None or records.length == 0)
                and result.high_watermark == self.high_watermark and result.log_start_offset == self.log_start_offset
                and result.preferred_read_replica < 0 and result.diverging_epoch is None)


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool                     # a follower's; a consumer's is not
    partitions: dict                     # TopicPartition -> CachedPartition, in fetch order
    uses_topic_ids: bool                 # made by a Fetch of version >= 13
    creation_ms: int
    last_used_ms: int
    epoch: int                           # the epoch the next incremental Fetch must carry
    cached_size: int = -1                # the size when last touched (-1: not in the cache yet)
    evictable_by_privileged: bool = False
    evictable_by_all: bool = False

    def update(self, fetch_data: dict, forgotten: list) -> tuple[list, list, list]:
        """Apply an incremental Fetch: new or changed partitions, then forgotten ones.
        Returns (added, updated, removed)."""
        added, updated, removed = [], [], []
        for tp, (topic_id, request) in fetch_data.items():
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = CachedPartition(topic_id, request)
                added.append(tp)
            else:
                cached.request = request
                updated.append(tp)
        for tp in forgotten:
            if self.partitions.pop(tp, None) is not None:
                removed.append(tp)
        return added, updated, removed


class FetchSessionCache:
    """The broker's sessions, bounded by ``max_entries`` (Kafka's ``FetchSessionCacheShard``)."""

    def __init__(self, max_entries: int = MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS,
                 eviction_ms: int = SESSION_EVICTION_MS, rng: random.Random | None = None):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        # Session ids are drawn from ``rng``: the server seeds it from the OS, so that a
        # restarted broker does not hand out the ids of its last life; tests seed it.
        self.rng = rng if rng is not None else random.Random(0)
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0               # Kafka's IncrementalFetchSessionEvictionsPerSec, as a count
        self.partitions_cached = 0       # Kafka's NumIncrementalFetchPartitionsCached

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def _new_session_id(self) -> int:
        while True:
            session_id = self.rng.randint(1, EPOCH_MAX - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(self, now_ms: int, privileged: bool, partitions: dict,
                             uses_topic_ids: bool) -> int:
        """A new session holding ``partitions`` if there is room (or someone to evict);
        its id, or ``INVALID_SESSION_ID``."""
        if not partitions:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, partitions, uses_topic_ids, now_ms, now_ms,
                               next_epoch(INITIAL_EPOCH))
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Make room: the least recently used session if it is stale, else the least
        valuable evictable one if the new session is worth at least as much."""
        if not self.sessions:
            return False
        oldest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        least = min(candidates, key=lambda s: (s.privileged, s.cached_size, s.id))
        if (privileged, size, 0) < (least.privileged, least.cached_size, least.id):
            return False
        self._evict(least)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None and session.cached_size > 0:
            self.partitions_cached -= session.cached_size
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """The session was used now: its size, age and who may evict it are updated."""
        session.last_used_ms = now_ms
        if session.cached_size > 0:
            self.partitions_cached -= session.cached_size
        session.cached_size = len(session.partitions)
        self.partitions_cached += session.cached_size
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old_enough
        session.evictable_by_all = old_enough


class ContextKind(enum.Enum):
    SESSION_ERROR = "session error"
    SESSIONLESS = "sessionless"
    FULL = "full"
    INCREMENTAL = "incremental"


@dataclass
class FetchContext:
    """What one Fetch reads (``partitions``: TopicPartition -> (topic id, request), in
    order) and how its response is made (``respond``)."""

    kind: ContextKind
    partitions: dict = field(default_factory=dict)
    error: ErrorCode = ErrorCode.NONE
    session: FetchSession | None = None
    request_epoch: int = FINAL_EPOCH
    privileged: bool = False
    uses_topic_ids: bool = False
    cache: FetchSessionCache | None = None

    def quiet(self, results: dict) -> set:
        """The partitions of an incremental session whose read results ``respond`` would
        leave out (``CachedPartition.quiet``): their response entries need not be built.
        Most of a big follower session's partitions, most of the time."""
        if self.kind != ContextKind.INCREMENTAL:
            return set()
        cached = self.session.partitions
        return {tp for tp, result in results.items() if tp in cached and cached[tp].quiet(result)}

    def respond(self, responses: dict, now_ms: int) -> tuple[ErrorCode, int, list]:
        """``responses``: TopicPartition -> the partition's response entry, for the
        partitions read. Returns (top-level error, session id, the partitions to send)."""
        if self.kind == ContextKind.SESSION_ERROR:
            return self.error, INVALID_SESSION_ID, []
        if self.kind == ContextKind.SESSIONLESS:
            return ErrorCode.NONE, INVALID_SESSION_ID, list(responses)
        if self.kind == ContextKind.FULL:
            cached = {tp: CachedPartition(topic_id, request, response["high_watermark"],
                                          response["log_start_offset"])
                      for tp, (topic_id, request) in self.partitions.items()
                      if (response := responses.get(tp)) is not None}
            session_id = self.cache.maybe_create_session(now_ms, self.privileged, cached, self.uses_topic_ids)
            return ErrorCode.NONE, session_id, list(responses)
        session = self.session
        if session.epoch != next_epoch(self.request_epoch) or self.cache.get(session.id) is not session:
            # Another Fetch of this session came in while this one waited (a duplicate).
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, []
        send = []
        for tp, response in responses.items():
            cached = session.partitions.get(tp)
            if cached is None:        # named but refused before the read (unknown topic): always sent
                send.append(tp)
                continue
            if cached.must_respond(response, update=True):
                send.append(tp)
                if response.get("records"):       # records: to the back of the order
                    session.partitions[tp] = session.partitions.pop(tp)
        return ErrorCode.NONE, session.id, send


class FetchManager:
    """Turns a Fetch's session fields into a ``FetchContext`` (Kafka's ``FetchManager.newContext``)."""

    def __init__(self, cache: FetchSessionCache):
        self.cache = cache

    def new_context(self, version: int, session_id: int, epoch: int, is_follower: bool, fetch_data: dict,
                    forgotten: list, now_ms: int) -> FetchContext:
        """``fetch_data``: TopicPartition -> (topic id, FetchPartitionRequest) as the Fetch
        names them; ``forgotten``: the TopicPartitions it asks to forget."""
        uses_topic_ids = version >= 13
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)       # a full Fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return FetchContext(ContextKind.SESSIONLESS, dict(fetch_data))
            return FetchContext(ContextKind.FULL, dict(fetch_data), privileged=is_follower,
                                uses_topic_ids=uses_topic_ids, cache=self.cache)
        session = self.cache.get(session_id)
        if session is None:
            return FetchContext(ContextKind.SESSION_ERROR, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(ContextKind.SESSION_ERROR, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(ContextKind.SESSION_ERROR, error=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, forgotten)
        if not session.partitions:
            # Nothing left to fetch: the session closes, this Fetch is answered without one.
            self.cache.remove(session.id)
            return FetchContext(ContextKind.SESSIONLESS, dict(fetch_data))
        self.cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        partitions = {tp: (cached.topic_id, cached.request) for tp, cached in session.partitions.items()}
        return FetchContext(ContextKind.INCREMENTAL, partitions, session=session, request_epoch=epoch,
                            cache=self.cache)



class FetchSessionHandler:
    """The fetcher's side of a session (Kafka's ``FetchSessionHandler``), for one leader.

    ``build`` turns the partitions a Fetch should carry into what goes on the wire: all of
    them in a full Fetch (epoch 0 asks for a session), else only those whose request
    changed since the leader cached it, and the ones to forget (no longer fetched here:
    removed, delayed, truncating). ``on_response`` moves the session on; a session error
    or a failed request makes the next Fetch full again (closing the session named)."""

    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict = {}                 # what the leader's session holds: tp -> partition request

    def build(self, partitions: dict) -> tuple[int, int, dict, list]:
        """(session id, epoch, the partitions to send, the partitions to forget)."""
        if self.epoch == INITIAL_EPOCH:
            return self.session_id, INITIAL_EPOCH, dict(partitions), []
        changed = {tp: p for tp, p in partitions.items() if self.sent.get(tp) != p}
        forgotten = [tp for tp in self.sent if tp not in partitions]
        return self.session_id, self.epoch, changed, forgotten

    def on_response(self, partitions: dict, error: ErrorCode, session_id: int) -> bool:
        """After a Fetch built from ``partitions`` was answered: whether its partitions'
        answers are to be used (False on a session error: fetch again, in full)."""
        if error in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                     ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR):
            self.reset(close=error != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            return False
        if error != ErrorCode.NONE:
            self.reset(close=True)
            return True
        if self.epoch == INITIAL_EPOCH:
            # A full Fetch: a session if the leader made one, else full again next time.
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id != INVALID_SESSION_ID else INITIAL_EPOCH
        elif session_id == INVALID_SESSION_ID:
            self.reset(close=False)            # the leader closed the session (nothing left in it)
            return True
        else:
            self.epoch = next_epoch(self.epoch)
        self.sent = dict(partitions) if self.session_id != INVALID_SESSION_ID else {}
        return True

    def reset(self, close: bool = True) -> None:
        """The next Fetch is full; with ``close`` it names the old session, which the leader then closes."""
        self.session_id = self.session_id if close else INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent = {}
