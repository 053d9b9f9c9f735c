"""Planted defects: test-only switches that break the replication core, groups,
transactions or the controller quorum on purpose.

A simulator that cannot fail proves nothing. Each defect here re-creates a bug
Kafka actually had (or one its design exists to prevent) by patching one
production method for the duration of a run — ``planted(name)`` is a context
manager, and production code carries no flag for it. Tests
(``tests/sim/test_defects.py``) run the fixed seed set with each defect and
assert that some seed fails with the invariant named in ``EXPECTED``.

``truncate-to-high-watermark``
    Pre-KIP-101 Kafka: a follower that (re)starts following truncates its log to
    its high watermark and never asks the leader where its epoch ends (no
    OffsetsForLeaderEpoch, no diverging epochs in Fetch). A follower's HW lags
    the leader's, so committed records are cut from a replica that stays in the
    ISR; a second leader change then loses them (KIP-101, scenario 1).
``hw-ignores-caught-up-follower``
    The leader computes the HW over its *committed* ISR only, ignoring a
    caught-up follower outside it — including one whose addition to the ISR is
    in flight (the maximal ISR of Kafka's ``Partition.maybeIncrementLeaderHW``). The follower
    then enters the ISR below the HW.
``publish-before-registration``
    A broker applies its local copy of the metadata log at start, before it has
    registered and caught up past its own registration: restarted with an empty
    disk, it leads its old epoch and the followers truncate to it (scenario
    ``stale-metadata-restart``; the simulator's fixed seeds rarely reach it).
``unclean-election-when-disabled``
    The controller elects a leader from outside the ISR although
    ``unclean.leader.election.enable`` is false.
``group-load-stops-at-high-watermark``
    A new group coordinator serves as soon as its replay of
    ``__consumer_offsets`` reaches the partition's high watermark, instead of
    the log end offset the partition had at its election. A new leader's high
    watermark lags the old leader's (it learns it on its next fetch), so commits
    the old coordinator acknowledged are missing, or older values answered,
    until the new high watermark catches up.
``lso-ignores-open-transactions``
    The last stable offset is the high watermark even while a transaction is
    open: read_committed readers see records whose transaction may yet abort.
``aborted-transactions-not-reported``
    A read_committed Fetch names no aborted transaction, so readers cannot drop
    an aborted transaction's records (a partition without its ``.txnindex``).
``read-committed-reads-to-high-watermark``
    The request layer picks a read_committed consumer's read bound as
    read_uncommitted's (``fetch_params`` ignores the isolation level): it sees
    records of transactions that are still open, or that will abort.
``transaction-markers-acks-1``
    A partition leader appends a coordinator's COMMIT/ABORT markers with acks=1
    (``TxnRequests.append_markers``): the coordinator hears them written before
    any follower has them and completes the transaction; a leader that then
    loses them (power cut, unclean or clean election of a follower that had not
    fetched them) leaves the partition with a transaction nobody will end
    (scenario ``txn-markers-acks-all``).
``produce-skips-verification``
    A partition leader appends a transactional batch without asking the
    coordinator whether its producer added the partition (KIP-890 part 1 off in
    ``ProduceRequests.unverified``): a zombie's or a buggy client's write opens a
    transaction that nobody will end (scenario ``txn-produce-verified``).
``raft-vote-twice``
    A controller that already voted in an epoch — for another candidate, or for
    itself as a candidate — grants a second candidate's vote request too (the
    ``votedId`` of ``quorum-state`` ignored). Two candidates of one epoch can
    then both win: two quorum leaders, two active controllers.
``raft-commit-without-majority``
    The quorum leader moves its high watermark to its own log end, as if it were
    a majority by itself (Raft's commit rule dropped): a write is answered, and
    brokers apply it, before any other voter has it; a leader cut off from the
    voters (but not from brokers) commits alone, and the next leader lacks what
    was committed.
``cleaner-beyond-high-watermark``
    The log cleaner ignores the high watermark (``first_uncleanable_offset``): a
    record no follower has yet shadows an earlier committed record of its key,
    which goes; a leader change truncates the newer one, and the key's last
    committed value is gone from that replica (``--compact`` seeds).
``cleaner-forgets-tombstones``
    The log cleaner does not see tombstones: its map of keys skips them (so a delete
    supersedes nothing) and its rewrite drops them (``--compact`` seeds whose tombstones
    expire; invariant ``compaction-no-resurrection``: the deleted key's older value
    comes back).
``roll-at-batch-offset``
    A rolled segment begins at the first offset of the batch that made the log roll
    (Kafka's rule) instead of where the active segment's data ends: a follower of a
    compacted leader appends across the gaps the leader's cleaner left, so its
    segments do not meet, and recovery after a crash takes the gap for lost data
    and cuts good records (``--compact`` seeds; invariant ``restart-keeps-log``).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

EXPECTED = {
    "truncate-to-high-watermark": {"10.4-acknowledged-write-kept", "10.3-isr-holds-committed",
                                   "10.6-consumer-below-hw"},
    "hw-ignores-caught-up-follower": {"10.3-isr-holds-committed", "10.4-acknowledged-write-kept"},
    "unclean-election-when-disabled": {"10.4-acknowledged-write-kept"},
    "publish-before-registration": {"10.4-acknowledged-write-kept"},
    "group-load-stops-at-high-watermark": {"group-commit-durable", "group-single-owner"},
    "lso-ignores-open-transactions": {"txn-visible-only-if-committed"},
    "aborted-transactions-not-reported": {"txn-visible-only-if-committed"},
    "read-committed-reads-to-high-watermark": {"txn-lso-bound", "txn-visible-only-if-committed"},
    "raft-vote-twice": {"raft-one-leader-per-epoch", "raft-committed-kept"},
    "raft-commit-without-majority": {"raft-committed-kept", "metadata-only-committed"},
}
# Defects that only a named scenario reaches (tests/sim/test_scenarios.py), not the fixed seeds.
SCENARIO_ONLY = {"publish-before-registration"}
# …and those no fixed seed was shown to reach: the scenario that catches each.
CAUGHT_BY_SCENARIO = {"transaction-markers-acks-1": "txn-markers-acks-all",
                      "produce-skips-verification": "txn-produce-verified"}
# Defects of the log cleaner: caught by ``--compact`` seeds (tests/sim/test_compaction_sim.py).
COMPACT = {"cleaner-beyond-high-watermark": {"10.4-acknowledged-write-kept", "10.3-isr-holds-committed",
                                             "10.5-convergence"},
           "roll-at-batch-offset": {"restart-keeps-log"},
           "cleaner-forgets-tombstones": {"compaction-no-resurrection"}}
# The quorum's defects need one: the fixed seeds are run with this many controllers.
CONTROLLERS = {"raft-vote-twice": 5, "raft-commit-without-majority": 3}


def _truncate_to_high_watermark():
    from tidelog.replication.fetcher import FetcherState
    from tidelog.replication.replica_manager import ReplicaManager
    original_init = FetcherState.__init__

    def init(self, source_broker_id, fetcher_id, replica_id, config, *args, **kwargs):
        original_init(self, source_broker_id, fetcher_id, replica_id,
                      dataclasses.replace(config, truncate_on_fetch=False), *args, **kwargs)

    return [(FetcherState, "__init__", init), (FetcherState, "_latest_epoch", lambda self, tp: None),
            (ReplicaManager, "initial_fetch_offset", lambda self, log_: log_.high_watermark)]


def _hw_ignores_caught_up_follower():
    from tidelog.replication.partition import Partition

    def maybe_increment_leader_high_watermark(self, now_ms: int) -> bool:
        if not self.is_leader:
            return False
        if self.settings.strict_min_isr and len(self.isr) < self.effective_min_isr:
            return False
        new_high_watermark = self.log.log_end_offset
        for replica_id, state in self.replica_states.items():
            if replica_id in self.isr:     # DEFECT: the maximal ISR and caught-up followers are ignored
                new_high_watermark = min(new_high_watermark, state.log_end_offset)
        if new_high_watermark > self.log.high_watermark:
            self.log.update_high_watermark(new_high_watermark)
            return True
        return False

    return [(Partition, "maybe_increment_leader_high_watermark", maybe_increment_leader_high_watermark)]


def _unclean_election_when_disabled():
    from tidelog.controller.partition_change import Election
    from tidelog.controller.replication_control import ReplicationControlManager
    return [(ReplicationControlManager, "_election_for", lambda self, topic: Election.UNCLEAN)]


def _publish_before_registration():
    from tidelog.broker.node import BrokerNode
    original_start = BrokerNode.start

    def start(self, now_ms):
        self._publish()               # DEFECT: the local metadata copy is applied before registering
        return original_start(self, now_ms)

    return [(BrokerNode, "_may_publish", lambda self: True), (BrokerNode, "start", start)]


def _group_load_stops_at_high_watermark():
    from tidelog.group.coordinator import _Loaded
    original_init = _Loaded.__init__

    def init(self, shard, leader_epoch, load_end_offset, next_offset):
        # DEFECT: no load end: the first replay, up to the high watermark, completes the load
        original_init(self, shard, leader_epoch, 0, next_offset)

    return [(_Loaded, "__init__", init)]


def _lso_ignores_open_transactions():
    from tidelog.storage.log import Log
    return [(Log, "last_stable_offset", property(lambda self: self.high_watermark))]


def _aborted_transactions_not_reported():
    from tidelog.storage.log import Log
    return [(Log, "collect_aborted_transactions", lambda self, start, upper: [])]


def _read_committed_reads_to_high_watermark():
    from tidelog.broker.requests import fetch
    from tidelog.replication.partition import Isolation
    return [(fetch, "isolation", lambda request: Isolation.LOG_END if request.replica_id >= 0
             else Isolation.HIGH_WATERMARK)]


def _transaction_markers_acks_1():
    from tidelog.broker.requests.txn import TxnRequests
    from tidelog.core.errors import ErrorCode
    from tidelog.records.batch import build_marker

    def append_markers(self, request, on_done):
        entries = {tp: build_marker(request.producer_id, request.producer_epoch, request.commit,
                                    request.coordinator_epoch, self.clock.now_ms()) for tp in request.partitions}
        # DEFECT: acks=1, answered once the leader alone has the markers
        self.node.replica_manager.append_records(
            1, self.request_timeout_ms, entries,
            lambda responses: on_done({tp: ErrorCode(r["error_code"]) for tp, r in responses.items()}),
            internal=True, from_coordinator=True)

    return [(TxnRequests, "append_markers", append_markers)]


def _produce_skips_verification():
    from tidelog.broker.requests.produce import ProduceRequests
    return [(ProduceRequests, "unverified", lambda self, *args, **kwargs: {})]   # DEFECT: nothing is verified


def _raft_vote_twice():
    from tidelog.raft.replica import CANDIDATE, VOTED, RaftReplica, VoteResponse
    original = RaftReplica._on_VoteRequest

    def on_vote_request(self, source, request, now_ms):
        if not request.pre_vote and request.epoch == self.epoch and self.state in (VOTED, CANDIDATE) \
                and self.voted_for != request.candidate_id \
                and (request.last_epoch, request.end_offset) >= (self.log.last_epoch, self.log.end_offset):
            # DEFECT: a second vote in this epoch (the first one, or its own candidacy, stands too)
            self._send(source, VoteResponse(self.epoch, True, self.leader_id))
            return
        original(self, source, request, now_ms)

    return [(RaftReplica, "_on_VoteRequest", on_vote_request)]


def _raft_commit_without_majority():
    from tidelog.raft.replica import RaftReplica

    def maybe_advance_high_watermark(self):
        # DEFECT: the leader's own log end is taken as the majority's
        candidate = self.log.end_offset
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate

    return [(RaftReplica, "_maybe_advance_high_watermark", maybe_advance_high_watermark)]


def _cleaner_beyond_high_watermark():
    from tidelog.storage import cleaner
    # DEFECT: uncommitted records are cleanable
    return [(cleaner, "first_uncleanable_offset",
             lambda log: min(log.segments[-1].base_offset, log.recovery_point))]


def _cleaner_forgets_tombstones():
    from tidelog.storage import cleaner
    every_record = cleaner.iter_records

    def iter_records(data, position):
        return (record for record in every_record(data, position) if record.value is not None)   # DEFECT

    return [(cleaner, "iter_records", iter_records)]


def _roll_at_batch_offset():
    from tidelog.storage import local_log
    # DEFECT: Kafka's rule, with tidelog's recovery check
    return [(local_log, "_next_base_offset", lambda active, first_offset, last_offset: first_offset)]


PATCHES = {
    "roll-at-batch-offset": _roll_at_batch_offset,
    "cleaner-forgets-tombstones": _cleaner_forgets_tombstones,
    "cleaner-beyond-high-watermark": _cleaner_beyond_high_watermark,
    "transaction-markers-acks-1": _transaction_markers_acks_1,
    "produce-skips-verification": _produce_skips_verification,
    "read-committed-reads-to-high-watermark": _read_committed_reads_to_high_watermark,
    "raft-commit-without-majority": _raft_commit_without_majority,
    "raft-vote-twice": _raft_vote_twice,
    "lso-ignores-open-transactions": _lso_ignores_open_transactions,
    "aborted-transactions-not-reported": _aborted_transactions_not_reported,
    "publish-before-registration": _publish_before_registration,
    "truncate-to-high-watermark": _truncate_to_high_watermark,
    "hw-ignores-caught-up-follower": _hw_ignores_caught_up_follower,
    "unclean-election-when-disabled": _unclean_election_when_disabled,
    "group-load-stops-at-high-watermark": _group_load_stops_at_high_watermark,
}


@contextmanager
def planted(name: str | None):
    """Apply the named defect for the duration of the block (None: nothing)."""
    if name is None:
        yield
        return
    if name not in PATCHES:
        raise ValueError(f"unknown defect {name!r}; known: {', '.join(sorted(PATCHES))}")
    patches = PATCHES[name]()
    saved = [(owner, attribute, owner.__dict__[attribute]) for owner, attribute, _ in patches]
    try:
        for owner, attribute, replacement in patches:
            setattr(owner, attribute, replacement)
        yield
    finally:
        for owner, attribute, original in saved:
            setattr(owner, attribute, original)
