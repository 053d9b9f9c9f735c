"""The cluster invariants, checked after every simulated event (and at the end).

Theory of operation. The checker reads real state — every running broker's
``Partition`` objects and logs, the controller's and brokers' metadata images,
what clients were told — and keeps three pieces of its own:

* a *mirror* of each replica's log (``LogMirror``): batch headers and record
  values, refreshed incrementally from the log itself (only the new tail is
  read; a truncation or a restart re-reads);
* the partition's *committed history* (``History``): every record a leader ever
  exposed below its high watermark, with the leader epoch that committed it.
  Whenever any leader's HW moves, the newly committed records are compared with
  the history (a committed offset must never hold anything else) and added;
* client records: acknowledged writes per acks level, what producers sent,
  what consumers read.

Checks, each named by its number and what it keeps (a failure raises
``InvariantViolation`` with the name; the simulation prints
``seed=… config=… invariant=<name>``):

``10.1-one-leader-per-epoch``   two brokers lead one partition in one leader epoch,
                                or a broker's leader epoch goes back
``10.2-offsets-ordered``        ``log_start_offset <= HW <= LEO`` on a replica, or a
                                leader's HW goes back
``10.3-isr-holds-committed``    a member of the ISR (the controller's: who may be elected)
                                lacks, or holds different bytes for, a record below the
                                current leader's HW
``10.4-acknowledged-write-kept``a new leader lacks a record committed in an earlier
                                epoch; a committed offset changes; an acks=all
                                acknowledgement for a record that is not committed;
                                a leader elected outside the ISR with unclean off
``10.5-convergence``            after healing: logs differ, ISR not regrown, no leader
``10.6-consumer-below-hw``      a consumer got a record at/above the HW, not in the
                                committed history, or out of order
``10.7-metadata-images-agree``  a broker's image differs from the controller's at the
                                same offset
``10.8-fenced-broker-out-of-isr`` (and epochs monotonic on the controller) —
                                ``controller.invariants.check_invariants``
``group-single-owner``          coordinators' SyncGroup answers for one generation of
                                a group give one partition to two members
``group-commit-durable``        the serving coordinator of a group (the broker the
                                controller names leader of its ``__consumer_offsets``
                                partition, loaded at that leader epoch) holds, for a
                                partition, an offset from a commit taken *before* the
                                last one acknowledged for it (or none)
``group-fenced-cannot-commit``  an OffsetCommit acknowledged although, when the
                                coordinator took it, the member was not in the group
                                or its generation was older than the group's there
                                (or than the serving coordinator's)

Invariant 10.4 holds only without unclean election and while no more than
``min.insync.replicas - 1`` replicas lose data. What it may not promise is excused
and counted, never silently ignored: an *unclean* election (topic config) and,
only on runs with eligible leader replicas off (``SimConfig.eligible_leader_replicas``,
``--elr off``), the *last replica standing* (a broker that lost unsynced bytes in a
power cut returns as the only ISR member and leads). With ELR on (Kafka 4.4's
default, and the simulator's) that excuse is gone: such a broker leaves the ISR and
the ELR when it registers again, and 10.3 checks the ELR members too. What remains
is narrower and named apart: when *every* ISR and ELR member came back from an
unclean shutdown, Kafka elects the last known leader (RECOVERING); if that broker
lost data, the losses are excused as ``last known leader after every eligible
replica's unclean shutdown``. When another replica that is back reported a longer
log, the controller elects it instead (KIP-966's unclean recovery); if even that
one lacks committed records, ``longest reported log after ...``.
Either resets the partition's history at that leader epoch; acknowledged writes
missing afterwards are counted as ``excused_losses`` with the reason.

Groups. Commits are ordered by when a coordinator took them (``seq``): a
coordinator appends a commit's record as it takes it, and a record is committed
only once every record before it is, so of two commits that reached the log the
one taken later is later in the log, whichever leader took it. "The last
acknowledged commit" of a partition is the acknowledged one taken last; a
serving coordinator must answer with it or with one taken after it (told apart
by the commit's metadata and timestamp). A commit need not be
the highest offset: after a rebalance a member may commit below what a member of
the previous generation committed. Both group checks count an *era*: the history
resets of the group's ``__consumer_offsets`` partition. A reset (last replica
standing) may lose acknowledged commits and stored generations; those commits
are counted as ``group_commits_excused`` and generations are compared within an
era, and within an *incarnation* of the group: a group deleted when empty with no
offsets (seen ``Dead`` on a coordinator) is created again at generation 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidelog.controller.invariants import check_invariants as check_controller_image
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.classic import GroupState
from tidelog.group.coordinator import OFFSETS_TOPIC
from tidelog.txn.coordinator import TRANSACTION_STATE_TOPIC
from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.records import iter_batch_records
from tidelog.raft.control_records import voters_of_batch
from tidelog.raft.replica import LEADER
from tidelog.records.batch import iter_batches, iter_records
from tidelog.replication.partition import Partition
from tidelog.replication.replica_manager import OFFLINE
from tidelog.sim.clients import record_value
from tidelog.sim.group_clients import decode_assignment, offsets_partition, serving_coordinator

if TYPE_CHECKING:
    from tidelog.sim.world import World


class InvariantViolation(AssertionError):
    def __init__(self, invariant: str, detail: str):
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


# (batch crc, batch leader epoch, value, key) identifies a record's bytes: the CRC covers
# everything in the batch after it, base offset and epoch sit beside it. (The key is
# covered by the CRC too; it is kept for compacted topics.) On a compacted topic the
# CRC is left out (0): a cleaner rewrites a batch it removed records from, and each
# replica's cleaner runs on its own.
RecordId = tuple[int, int, bytes, bytes | None, bool]   # …, and whether a tombstone


def record_id(header, record, compacted: bool = False) -> RecordId:
    return (0 if compacted else header.crc, header.partition_leader_epoch, record_value(record), record.key,
            record.value is None)


class LogMirror:
    """What one replica's log holds, read incrementally."""

    def __init__(self, compacted: bool = False):
        self.compacted = compacted   # a compacted topic's replica (``record_id``)
        self.log = None
        self.start = 0
        self.end = 0
        self.records: dict[int, RecordId] = {}
        self.generation = 0          # bumped whenever records may have changed below ``end``
        self.committed_upto = (0, 0)  # (generation, offset): compared with the history up to here
        self.segments: tuple = ()    # a compacted log's segments (objects) when last read
        self.rewrites = 0            # times the cleaner was seen to rewrite the log (read again)
        self.tombstones_seen: set[int] = set()   # offsets this replica was seen to hold a tombstone at

    def refresh(self, log, segments: tuple) -> None:
        """Read what ``log`` holds beyond what was read; ``segments``: ``_segments_of(log)``."""
        rewritten = segments[:len(self.segments) - 1] != self.segments[:-1]   # beyond a roll
        self.segments = segments
        if rewritten and log is self.log:
            self.rewrites += 1
        if log is not self.log or log.log_start_offset != self.start or rewritten:
            self.log, self.start, self.end = log, log.log_start_offset, log.log_start_offset
            self.records = {}
            self.generation += 1
        elif log.log_end_offset < self.end:
            for offset in range(log.log_end_offset, self.end):
                self.records.pop(offset, None)
            self.end = log.log_end_offset
            self.generation += 1
        target = log.log_end_offset
        while self.end < target:
            data = log.read(self.end, 1 << 20, max_offset=None).records.read_bytes()
            if not data:
                break
            for position, header in iter_batches(data):
                for record in iter_records(data, position):
                    if record.offset >= self.end:
                        self.records[record.offset] = record_id(header, record, self.compacted)
                        if self.compacted and record.value is None:
                            self.tombstones_seen.add(record.offset)
                self.end = max(self.end, header.next_offset)
        self.end = target


def _segments_of(log) -> tuple:
    """A compacted log's segment objects (the cleaner swaps segments below the log end,
    which neither its start nor its end shows); () for any other log."""
    return tuple(log.segments) if log.config.compact and not log.is_offline else ()


@dataclass
class History:
    """The committed records of one partition, as leaders exposed them."""

    records: dict[int, tuple[RecordId, int]] = field(default_factory=dict)   # offset -> (id, commit epoch)
    reset_epoch: int = -1            # commits from leaders below this epoch are ignored
    resets: list[str] = field(default_factory=list)
    # record ids a reset dropped from the history while another replica still held them,
    # and those of them a last known eligible replica held (the election waits for those)
    held_at_reset: set = field(default_factory=set)
    held_eligible_at_reset: set = field(default_factory=set)
    compacted: bool = False          # a compacted topic (``--compact``): keys and ``latest`` matter
    deletes_expire: bool = False     # its delete.retention.ms is short enough for tombstones to go
    latest: dict[bytes, int] = field(default_factory=dict)   # key -> offset of its last committed record
    # A compacted topic's history reset: below the new leader's log end then, a replica
    # may lack records for good (``may_lack``)
    tainted_below: int = 0

    @property
    def end(self) -> int:
        return max(self.records) + 1 if self.records else 0

    def add(self, offset: int, record: RecordId, epoch: int) -> None:
        self.records[offset] = (record, epoch)
        key = record[3]
        if self.compacted and key is not None and self.latest.get(key, -1) < offset:
            self.latest[key] = offset

    def clear(self) -> None:
        self.records = {}
        self.latest = {}

    def superseded(self, offset: int, record: RecordId | None) -> bool:
        """Whether compaction may remove ``record`` at ``offset``: a later committed record
        has its key (Kafka's promise for a compacted topic: the last value of every key)."""
        return (self.compacted and record is not None and record[3] is not None
                and self.latest.get(record[3], -1) > offset)

    def may_lack(self, offset: int, record: RecordId | None) -> bool:
        """Whether a replica of a compacted topic may lack ``record`` at ``offset``: it was
        superseded, or it lies below where a new leader's log ended when the history was
        reset (an unclean election, the last replica standing): a follower's cleaner may
        have removed it for a later record of its key that the new leader never had, and
        the follower truncates only down to where the new leader's log ended. Kafka's
        cleaner does the same; the loss is the reset's, already excused."""
        return (self.superseded(offset, record) or (self.compacted and offset < self.tainted_below)
                or self.expired_tombstone(offset, record))

    def replicas_agree(self, offset: int, one: RecordId | None, other: RecordId | None) -> bool:
        """Whether two replicas' records at ``offset`` are consistent: the same, or only
        one holds it and the other may lack it (``may_lack``)."""
        return (one == other or one is None and self.may_lack(offset, other)
                or other is None and self.may_lack(offset, one))

    def superseded_or_expired(self, offset: int, record: RecordId) -> bool:
        """Whether an acknowledged ``record`` may be absent at the end without a loss."""
        return self.superseded(offset, record) or self.expired_tombstone(offset, record)

    def expired_tombstone(self, offset: int, record: RecordId | None) -> bool:
        """Whether ``record`` is its key's last committed record, a tombstone the cleaner
        may remove once its delete horizon passed (KIP-534): the key is then gone, and a
        replica must hold none of its older records either (``compaction-no-resurrection``)."""
        return (self.deletes_expire and record is not None and record[4] and record[3] is not None
                and self.latest.get(record[3]) == offset)


@dataclass(frozen=True)
class CommittedBatch:
    """A metadata batch some voter's high watermark has passed."""

    next_offset: int
    data: bytes
    commit_epoch: int            # the Raft epoch of the voter that first showed it committed


@dataclass
class Seen:
    incarnation: int
    leader: int
    leader_epoch: int
    high_watermark: int
    state: tuple


@dataclass
class CommitTaken:
    """An OffsetCommit a coordinator took, kept to judge its answer."""

    seq: int                  # the order coordinators took commits in
    broker: int
    group: str
    member: str
    generation: int
    offsets: dict             # tp -> offset
    metadata: str             # the member's name for the commit (``g0m1#7``)
    era: int                  # history resets of the group's __consumer_offsets partition then
    fenced: str | None        # why the member could not commit then, or None


class Checker:
    def __init__(self, sim: "World"):
        self.sim = sim
        self.histories: dict[TopicPartition, History] = {}
        self.mirrors: dict[tuple[int, TopicPartition], LogMirror] = {}
        self.seen: dict[tuple[int, TopicPartition], Seen] = {}
        self.leaders_by_epoch: dict[TopicPartition, dict[int, int]] = {}
        self.amnesiac: dict[tuple[int, TopicPartition], str] = {}   # replica -> how it lost data
        # The broker epoch registered when it lost them: only a later registration (a new
        # incarnation) can fetch them back, so only then does leaving the ISR end the excuse.
        self.amnesia_epoch: dict[tuple[int, TopicPartition], int] = {}
        # (tp, leader epoch) → the last known leader, for the elections made when ISR and
        # ELR were empty (the last known leader itself, or a longer log than its)
        self.last_known_leader_elections: dict[tuple[TopicPartition, int], int] = {}
        # (partition, epoch) → the last known eligible replicas when it was elected
        self.last_known_eligible: dict[tuple[TopicPartition, int], tuple[int, ...]] = {}
        # tp → the broker such an election chose for the longest log (not the last known
        # leader), until that broker leads: it may be elected again as the last known
        # leader before it ever led, still without what it lacked
        self.longest_log_elected: dict[TopicPartition, int] = {}
        self.isr_verified: dict[tuple, tuple] = {}
        self.controller_image = None             # the committed image at the highest offset seen
        self.broker_images: dict[int, object] = {}
        # the controller quorum
        self.raft_leaders: dict[int, int] = {}   # Raft epoch -> the voter that led it
        self.raft_leading_seen: set[tuple[int, int, int]] = set()   # (voter, process start, epoch)
        self.committed: dict[int, CommittedBatch] = {}   # base offset -> the committed metadata batch
        self.committed_end = 0                   # the longest committed prefix seen ends here
        self.committed_voters: set[int] | None = None   # ids of the last committed VotersRecord (KIP-853)
        self.raft_verified: dict[int, tuple[int, int]] = {}   # voter -> (truncations seen, verified up to)
        self.controller_images: dict[int, object] = {}   # voter -> the image last looked at
        self.images: dict[int, MetadataImage] = {}   # offset -> the committed image as of it
        self.broker_metadata_verified: dict[int, int] = {}   # broker -> its copy verified up to
        self.unclean_topics: set[str] = set()
        # clients
        self.received: dict[bytes, int] = {}              # value -> produce requests that carried it
        self.acked: dict[TopicPartition, list] = {}       # [(offset, value, acks, producer, seq)]
        self.excused: list[str] = []
        self.resets_at_send: dict[bytes, int] = {}
        self.dirty: set[TopicPartition] = set()
        # consumer groups
        self.commit_seq = 0
        self.commits: dict[tuple, int] = {}      # (group, tp, metadata, timestamp) -> seq of the commit taken
        self.acked_commits: dict[str, dict[TopicPartition, CommitTaken]] = {}   # the last acknowledged
        self.owners: dict[tuple, dict[TopicPartition, str]] = {}   # (group, era, incarnation, generation)
        self.serving: dict[str, object] = {}     # group -> the shard that last served it
        self.deleted: dict[str, list] = {}       # group -> the deleted (Dead) group objects seen
        self.last_group: dict[str, object] = {}  # group -> the group object a serving shard last had
        # Tests: check that a scoped check leaves out only processes that did not change.
        self.audit_scope = False
        self.scope_states: dict[str, tuple] = {}  # process -> what _scope_state said when last looked at

    def history(self, tp: TopicPartition) -> History:
        history = self.histories.get(tp)
        if history is None:
            spec = next((t for t in self.sim.config.topics if t.name == tp.topic), None)
            history = self.histories[tp] = History(
                compacted=spec is not None and spec.compact,
                deletes_expire=spec is not None and spec.delete_retention_ms is not None)
        return history

    # ================================================================ after every event

    def check(self, controllers=None, brokers=None) -> None:
        """The invariants after an event. ``controllers`` and ``brokers``: the processes
        whose state the event can have changed (``Simulation._after_event``: a process
        changes only its own state, what it tells others travels as a message whose
        delivery is their event); None: every one. With ``audit_scope`` on (a test),
        every process left out must indeed be as it was when last looked at."""
        sim = self.sim
        everything = controllers is None and brokers is None
        controllers = sim.controllers.values() if controllers is None else controllers
        brokers = sim.brokers.values() if brokers is None else brokers
        for controller in controllers:
            if controller.up:
                self._check_quorum_member(controller)
        for controller in controllers:
            if controller.up:
                self._check_controller_image(controller)
        if self.audit_scope:
            self._audit_scope(controllers, brokers, everything)
        for broker in brokers:
            if not broker.up:
                continue
            self._check_broker_metadata(broker)
            if broker.image is not self.broker_images.get(broker.broker_id):
                self.broker_images[broker.broker_id] = broker.image
                self._check_image(broker)
            with broker.disk.unfaulted():
                for tp, partition in broker.replica_manager.partitions.items():
                    if isinstance(partition, Partition):
                        self._observe(broker, tp, partition)
        for tp in sorted(self.dirty):
            self._check_isr(tp)
        self.dirty.clear()
        self._check_groups()

    def _audit_scope(self, controllers, brokers, everything: bool) -> None:
        """checker-scope: a process left out of a check is as it was when last looked at
        (what ``check`` reads of it: liveness, Raft and partition state, images)."""
        for node in [*self.sim.controllers.values(), *self.sim.brokers.values()]:
            looked_at = everything or node in controllers or node in brokers
            state = _scope_state(node)
            if not looked_at and self.scope_states.get(node.name, state) != state:
                raise InvariantViolation("checker-scope", f"{node.name} changed in an event the checker "
                                         f"did not look at it after: {self.scope_states[node.name]} -> {state}")
            self.scope_states[node.name] = state

    def _observe(self, broker, tp: TopicPartition, partition: Partition) -> None:
        log = partition.log
        key = (broker.broker_id, tp)
        incarnation = broker.owned.incarnation
        segments = _segments_of(log)
        state = (incarnation, partition.leader, partition.leader_epoch, log.log_start_offset,
                 log.high_watermark, log.log_end_offset, id(log), partition.isr, segments)
        seen = self.seen.get(key)
        if seen is not None and seen.state == state:
            return
        self.dirty.add(tp)
        where = f"broker {broker.broker_id} {tp}"
        if not log.log_start_offset <= log.high_watermark <= log.log_end_offset:
            raise InvariantViolation("10.2-offsets-ordered", f"{where}: log start {log.log_start_offset}, "
                                     f"HW {log.high_watermark}, LEO {log.log_end_offset}")
        mirror = self.mirrors.get(key)
        if mirror is None:
            mirror = self.mirrors[key] = LogMirror(self.history(tp).compacted)
        if not log.is_offline:   # an offline log's files are closed; its last mirror stands
            mirror.refresh(log, segments)
        same_process = seen is not None and seen.incarnation == incarnation
        if same_process and partition.leader_epoch < seen.leader_epoch:
            raise InvariantViolation("10.1-one-leader-per-epoch", f"{where}: leader epoch went back "
                                     f"from {seen.leader_epoch} to {partition.leader_epoch}")
        if partition.is_leader:
            epoch = partition.leader_epoch
            holder = self.leaders_by_epoch.setdefault(tp, {}).setdefault(epoch, broker.broker_id)
            if holder != broker.broker_id:
                raise InvariantViolation("10.1-one-leader-per-epoch",
                                         f"{tp}: brokers {holder} and {broker.broker_id} both lead epoch {epoch}")
            continuing = (same_process and seen.leader == broker.broker_id and seen.leader_epoch == epoch)
            if continuing and log.high_watermark < seen.high_watermark:
                raise InvariantViolation("10.2-offsets-ordered", f"{where}: leader HW went back from "
                                         f"{seen.high_watermark} to {log.high_watermark}")
            if not continuing:
                self._on_leader_activated(broker.broker_id, tp, partition, mirror)
                if self.longest_log_elected.get(tp) == broker.broker_id:
                    del self.longest_log_elected[tp]
            self._commit(broker.broker_id, tp, partition, mirror)
        self.seen[key] = Seen(incarnation, partition.leader, partition.leader_epoch, log.high_watermark, state)

    # ================================================================ leaders and history

    def _on_leader_activated(self, broker_id: int, tp: TopicPartition, partition: Partition,
                             mirror: LogMirror) -> None:
        """Invariant 10.4: a leader at epoch e holds every record committed before e."""
        history = self.history(tp)
        epoch = partition.leader_epoch
        if epoch < history.reset_epoch:
            return
        for offset in sorted(history.records):
            record, commit_epoch = history.records[offset]
            if commit_epoch >= epoch:
                continue
            mine = mirror.records.get(offset)
            if mine == record or (mine is None and history.may_lack(offset, record)):
                continue
            detail = (f"broker {broker_id} leads {tp} at epoch {epoch} but offset {offset} "
                      f"(committed at epoch {commit_epoch}: {record[2]!r}) is "
                      f"{'missing' if mine is None else repr(mine[2])} (LEO {partition.log.log_end_offset})")
            if tp.topic in self.unclean_topics or self._unclean(tp.topic):
                self._reset(tp, epoch, f"unclean topic: {detail}", broker_id)
            elif (broker_id, tp) in self.amnesiac and not self.sim.config.eligible_leader_replicas:
                # Without ELR only: with it, a broker back from an unclean shutdown is out of
                # the ISR and ELR and is elected cleanly nowhere (KIP-966).
                self._reset(tp, epoch, f"last replica standing after {self.amnesiac[(broker_id, tp)]}: {detail}",
                            broker_id)
            elif (tp, epoch) in self.last_known_leader_elections and (
                    (broker_id, tp) in self.amnesiac or self._longest_log_pick(broker_id, tp, epoch)):
                self._reset_after_last_known(broker_id, tp, epoch, detail)
            else:
                raise InvariantViolation("10.4-acknowledged-write-kept", detail)
            return

    def _longest_log_pick(self, broker_id: int, tp: TopicPartition, epoch: int) -> bool:
        """Whether ``broker_id`` leads ``tp`` at ``epoch`` as the longest reported log, not
        as a last known leader that held every committed record: chosen so now, or chosen
        so earlier and elected again as the last known leader before it ever led."""
        return (broker_id != self.last_known_leader_elections[(tp, epoch)]
                or self.longest_log_elected.get(tp) == broker_id)

    def _reset_after_last_known(self, broker_id: int, tp: TopicPartition, epoch: int, detail: str) -> None:
        """ELR on, but every replica in ISR and ELR came back from an unclean shutdown:
        the last known leader (Kafka 4.4's rule) or, when another replica reported a
        longer log, that replica (KIP-966's unclean recovery) is elected, and lacks
        committed records. Counted apart when another replica, as last seen, held every
        committed record, and named by whether it was a last known eligible replica
        (the election waits for those: such a loss means the wait ran out) or never
        eligible (it left the ISR while the ISR stayed at min ISR or above, so it held
        every committed record only by chance; the election does not wait for it)."""
        history = self.history(tp)
        complete = [other for (other, mirrored), mirror in self.mirrors.items()
                    if mirrored == tp and other != broker_id and self._holds_history(mirror, history, epoch)
                    and self._mirror_holds(other, tp)]
        eligible = [other for other in complete if other in self.last_known_eligible.get((tp, epoch), ())]
        found = f" (broker {(eligible or complete)[0]} held every committed record)" if complete else ""
        kind = (", another eligible replica complete" if eligible
                else ", another replica complete, never eligible" if complete else "")
        known = self.last_known_leader_elections[(tp, epoch)]
        who = ("last known leader" if not self._longest_log_pick(broker_id, tp, epoch)
               else f"longest reported log (last known leader {known})")
        how = self.amnesiac.get((broker_id, tp), "not amnesiac")
        self._reset(tp, epoch, f"{who.split(' (')[0]} after every eligible replica's unclean "
                               f"shutdown{kind}: {who}, {how}{found}: {detail}", broker_id,
                    eligible=self.last_known_eligible.get((tp, epoch), ()))

    def _on_failed_disk(self, broker_id: int, tp: TopicPartition) -> bool:
        """Whether ``broker_id``'s copy of ``tp`` is on a log directory that failed (it
        can neither lead nor be read; healing replaces the disk with an empty one)."""
        broker = self.sim.brokers[broker_id]
        return any(broker.disk.is_failing(log_dir) and os.path.isdir(os.path.join(log_dir, str(tp)))
                   for log_dir in broker.log_dirs)

    def _holders(self, tp: TopicPartition, offset: int, record) -> set[int]:
        """The brokers whose replica of ``tp`` still holds ``record`` at ``offset`` (``_mirror_holds``)."""
        return {broker_id for (broker_id, mirrored), mirror in self.mirrors.items()
                if mirrored == tp and mirror.records.get(offset) == record and self._mirror_holds(broker_id, tp)}

    def _mirror_holds(self, broker_id: int, tp: TopicPartition) -> bool:
        """Whether ``broker_id``'s replica of ``tp`` still holds what the checker last read
        of it: not on a failed disk, and nothing lost since (not amnesiac) or read again
        since its process came back."""
        if self._on_failed_disk(broker_id, tp):
            return False
        if (broker_id, tp) not in self.amnesiac:
            return True
        broker, seen = self.sim.brokers[broker_id], self.seen.get((broker_id, tp))
        return broker.up and seen is not None and seen.incarnation == broker.owned.incarnation

    @staticmethod
    def _holds_history(mirror: LogMirror, history, epoch: int) -> bool:
        """Whether a replica, as last read, holds every record committed before ``epoch``
        (or, on a compacted topic, a later record of its key)."""
        return all(mirror.records.get(offset) == record
                   or (offset not in mirror.records and history.may_lack(offset, record))
                   for offset, (record, commit_epoch) in history.records.items() if commit_epoch < epoch)

    def _unclean(self, topic: str) -> bool:
        """Unclean election on for ``topic`` (never for ``__consumer_offsets``)."""
        return any(t.name == topic and t.unclean for t in self.sim.config.topics)

    def _reset(self, tp: TopicPartition, epoch: int, reason: str, leader: int, eligible: tuple = ()) -> None:
        """Restart ``tp``'s history at ``epoch`` under the new ``leader``. A record some
        other replica still held is counted as dropped while held (``held_at_reset``), and
        apart if one of the last known ``eligible`` replicas held it; one the new leader
        holds is not dropped by this reset (a later one may drop it)."""
        history = self.history(tp)
        kept = self.mirrors.get((leader, tp))
        for offset, (record, _) in history.records.items():
            if kept is not None and kept.records.get(offset) == record or history.superseded(offset, record):
                continue
            holders = self._holders(tp, offset, record)
            if holders:
                history.held_at_reset.add(record)
            if holders.intersection(eligible):
                history.held_eligible_at_reset.add(record)
        history.clear()
        if history.compacted and kept is not None:
            history.tainted_below = max(history.tainted_below, kept.end)
        history.reset_epoch = max(history.reset_epoch, epoch)
        history.resets.append(reason)
        for (_, mirrored_tp), mirror in self.mirrors.items():
            if mirrored_tp == tp:
                mirror.committed_upto = (-1, 0)
        self.sim.stats.history_resets += 1
        if tp.topic == TRANSACTION_STATE_TOPIC:
            self.sim.txn_book.on_coordinator_log_lost()
        kind = reason.split(":")[0].split(" of broker")[0]
        self.sim.stats.reset_reasons[kind] = self.sim.stats.reset_reasons.get(kind, 0) + 1
        self.sim.loop.trace.add(self.sim.loop.now_ms, "check", f"{tp} history reset at epoch {epoch}: {reason}")

    def _commit(self, broker_id: int, tp: TopicPartition, partition: Partition, mirror: LogMirror) -> None:
        history = self.history(tp)
        epoch = partition.leader_epoch
        if epoch < history.reset_epoch:
            return
        records = history.records
        generation, upto = mirror.committed_upto
        start = upto if generation == mirror.generation else mirror.start
        high_watermark = partition.log.high_watermark
        for offset in range(max(start, mirror.start), high_watermark):
            mine = mirror.records.get(offset)
            if mine is None:
                continue
            known = records.get(offset)
            if known is None:
                history.add(offset, mine, epoch)
            elif known[0] != mine:
                raise InvariantViolation(
                    "10.4-acknowledged-write-kept",
                    f"{tp} offset {offset} was committed as {known[0][2]!r} (epoch {known[1]}), broker "
                    f"{broker_id} now exposes {mine[2]!r} below its HW {high_watermark} at epoch {epoch}")
        mirror.committed_upto = (mirror.generation, max(start, high_watermark))

    def _check_isr(self, tp: TopicPartition) -> None:
        """Invariant 10.3 (ISR members hold every committed record) for the legitimate
        leader (the controller's, at its epoch)."""
        sim = self.sim
        if self.controller_image is None:
            return
        registration = self.controller_image.partition(tp)
        if registration is None or registration.leader < 0:
            return
        leader_broker = sim.brokers.get(registration.leader)
        leader = leader_broker.partition(tp) if leader_broker and leader_broker.up else None
        if leader is None or not leader.is_leader or leader.leader_epoch != registration.leader_epoch:
            return
        leader_mirror = self.mirrors[(registration.leader, tp)]
        high_watermark = leader.log.high_watermark
        history = self.history(tp)
        # The controller's ISR and ELR (KIP-966): the replicas a clean election may pick.
        # (The leader's own view can be stale in either direction; the committed one is
        # what counts.)
        for member in registration.isr + registration.elr:
            if member == registration.leader or (member, tp) in self.amnesiac:
                continue
            broker = sim.brokers.get(member)
            follower = broker.partition(tp) if broker and broker.up else None
            mirror = self.mirrors.get((member, tp))
            if follower is None or mirror is None:
                continue
            key = (tp, registration.leader, member)
            stamp = (leader_mirror.generation, mirror.generation, id(leader_mirror), id(mirror))
            verified = self.isr_verified.get(key)
            start = verified[1] if verified is not None and verified[0] == stamp else leader_mirror.start
            for offset in range(max(start, leader_mirror.start), high_watermark):
                mine, leaders = mirror.records.get(offset), leader_mirror.records.get(offset)
                if mine != leaders and not history.replicas_agree(offset, mine, leaders):
                    raise InvariantViolation(
                        "10.3-isr-holds-committed",
                        f"{tp}: {'ISR' if member in registration.isr else 'ELR'} member {member} differs from leader {registration.leader} (epoch "
                        f"{leader.leader_epoch}) at offset {offset} below HW {high_watermark}: "
                        f"{_value(mirror.records.get(offset))} vs {_value(leader_mirror.records.get(offset))}")
            self.isr_verified[key] = (stamp, max(start, high_watermark))

    def on_logs_loaded(self, broker_id: int, ends: dict, manager) -> None:
        """restart-keeps-log: a broker that exited with its machine up (kill -9, a clean
        stop) loads every log back to where it ended: all of it was written, so
        recovery must find no reason to cut it (a hole it imagines between segments —
        a compacted log's gaps — would cut data no power cut lost)."""
        for tp, (log_dir, end) in sorted(ends.items()):
            if log_dir in manager.offline_dirs:
                continue
            log = manager.get_log(tp)
            loaded = None if log is None else log.log_end_offset
            if loaded is None or loaded < end:
                raise InvariantViolation("restart-keeps-log", f"broker {broker_id} exited with {tp} ending at "
                                         f"{end} and loaded it back {'without it' if loaded is None else f'ending at {loaded}'}")

    # ================================================================ the controller quorum

    def _check_quorum_member(self, controller) -> None:
        """raft-one-leader-per-epoch; raft-committed-kept: a voter's committed prefix (its
        log below its high watermark) is the longest committed prefix seen, byte for byte;
        a voter never cuts a committed entry it held; a new leader holds every entry
        committed in an earlier epoch (Raft's leader completeness); raft-voters-one-change
        for each newly committed VotersRecord and on a leader's uncommitted tail
        (``_on_committed_voters``, ``_check_uncommitted_voters``)."""
        replica, log, voter = controller.replica, controller.log, controller.node_id
        if replica.state == LEADER:
            holder = self.raft_leaders.setdefault(replica.epoch, voter)
            if holder != voter:
                raise InvariantViolation("raft-one-leader-per-epoch", f"controllers {holder} and {voter} both "
                                         f"lead Raft epoch {replica.epoch}")
            key = (voter, controller.starts, replica.epoch)
            if key not in self.raft_leading_seen:
                self.raft_leading_seen.add(key)
                self.sim.stats.controller_elections += 1
                for base, batch in sorted(self.committed.items()):
                    if batch.commit_epoch >= replica.epoch:
                        continue
                    mine = log.batch_at(base)
                    if mine is None or mine.base_offset != base or mine.data != batch.data:
                        raise InvariantViolation("raft-committed-kept", (
                            f"controller {voter} leads epoch {replica.epoch} without the batch committed at "
                            f"offset {base} in epoch {batch.commit_epoch} (its log ends at {log.end_offset})"))
        seen, upto = self.raft_verified.get(voter, (0, 0))
        cuts = log.truncations[seen:]
        if cuts and min(cuts) < upto:
            raise InvariantViolation("raft-committed-kept", f"controller {voter} truncated its log to "
                                     f"{min(cuts)}, below the committed offset {upto} it held")
        high_watermark = min(replica.high_watermark, log.end_offset)
        if high_watermark > upto:
            for batch in log.batches(upto):
                if batch.next_offset > high_watermark:
                    break
                known = self.committed.get(batch.base_offset)
                if known is None and batch.base_offset == self.committed_end:
                    self.committed[batch.base_offset] = CommittedBatch(batch.next_offset, batch.data, replica.epoch)
                    self.committed_end = batch.next_offset
                    self._on_committed_voters(voter, batch)
                    self._on_committed_batch(batch)
                elif known is None or known.data != batch.data:
                    raise InvariantViolation("raft-committed-kept", (
                        f"controller {voter} has committed a batch at offset {batch.base_offset} (epoch "
                        f"{batch.epoch}, its HW {high_watermark}) that differs from the one committed there "
                        f"before{'' if known is None else f' in epoch {known.commit_epoch}'}"))
            upto = high_watermark
        self.raft_verified[voter] = (len(log.truncations), upto)
        if replica.state == LEADER:
            self._check_uncommitted_voters(controller)

    def _check_uncommitted_voters(self, controller) -> None:
        """raft-voters-one-change on a leader: past the longest committed prefix seen it
        holds at most one VotersRecord — a leader appends a voter change only once the
        one before it is committed (KIP-853), so two changes never overlap."""
        pending = [batch.base_offset for batch in controller.log.batches(self.committed_end)
                   if batch.is_control and batch.base_offset >= self.committed_end
                   and voters_of_batch(batch.data) is not None]
        if len(pending) > 1:
            raise InvariantViolation("raft-voters-one-change", (
                f"controller {controller.node_id} leads epoch {controller.replica.epoch} with VotersRecords at "
                f"offsets {pending}, none committed (committed up to {self.committed_end})"))

    def _on_committed_voters(self, voter: int, batch) -> None:
        """raft-voters-one-change (KIP-853): a committed VotersRecord names the voters of
        the last committed one with at most one voter added or removed (or one voter's
        endpoints updated), so every majority of the new set meets every majority of the
        old one and no two leaders can be elected in one epoch across the change."""
        voters = voters_of_batch(batch.data)
        if voters is None:
            return
        ids = {v.voter_id for v in voters}
        if self.committed_voters is not None:
            changed = ids ^ self.committed_voters
            if len(changed) > 1:
                raise InvariantViolation("raft-voters-one-change", (
                    f"controller {voter} committed the voters {sorted(ids)} at offset {batch.base_offset} "
                    f"after {sorted(self.committed_voters)}: {sorted(changed)} changed at once"))
            if changed:
                self.sim.stats.voter_changes += 1
        self.committed_voters = ids

    def _on_committed_batch(self, batch) -> None:
        """The committed image, one controller write (one batch) at a time: the checker's
        own replay of the committed log, what every voter's and broker's image must equal
        at the same offset."""
        delta = MetadataDelta(self.controller_image or MetadataImage())
        for offset, record in iter_batch_records(batch.data):
            delta.replay(record, offset)
        delta.offset = batch.next_offset - 1          # a LeaderChange batch moves the offset too
        image = delta.apply()
        self.images[image.offset] = image
        self._on_controller_image(image)

    def _check_controller_image(self, controller) -> None:
        """10.7 for the voters: a voter's image equals the committed image at its offset."""
        image = controller.image
        if self.controller_images.get(controller.node_id) is image:
            return
        self.controller_images[controller.node_id] = image
        expected = self.images.get(image.offset)
        if expected is not None and image is not expected and image != expected:
            raise InvariantViolation("10.7-metadata-images-agree", f"controller {controller.node_id}'s image at "
                                     f"offset {image.offset} differs from the committed log's")

    def _check_broker_metadata(self, broker) -> None:
        """metadata-only-committed: a broker's copy of the metadata log is a prefix of the
        committed log (so its image never holds an uncommitted record)."""
        log = broker.metadata
        upto = self.broker_metadata_verified.get(broker.broker_id, 0)
        if log.end_offset != upto:
            for batch in log.batches(upto):
                known = self.committed.get(batch.base_offset)
                if known is None or known.data != batch.data:
                    raise InvariantViolation("metadata-only-committed", (
                        f"broker {broker.broker_id} holds a metadata batch at offset {batch.base_offset} (epoch "
                        f"{batch.epoch}) that is not the committed one (committed up to {self.committed_end})"))
            self.broker_metadata_verified[broker.broker_id] = log.end_offset
        if broker.image.offset >= self.committed_end:
            raise InvariantViolation("metadata-only-committed", f"broker {broker.broker_id}'s image is at offset "
                                     f"{broker.image.offset}, the committed log ends at {self.committed_end}")

    # ================================================================ metadata

    def _on_controller_image(self, image) -> None:
        previous = self.controller_image
        try:
            check_controller_image(image, previous)
        except AssertionError as e:
            raise InvariantViolation("10.8-fenced-broker-out-of-isr", f"controller image at offset "
                                     f"{image.offset}: {e}") from None
        if previous is not None:
            for tp, partition in image.all_partitions():
                before = previous.partition(tp)
                if before is None or partition.leader < 0 or partition.leader == before.leader:
                    continue
                # An eligible leader replica is a clean choice (KIP-966); the record that
                # empties the ISR may elect it at once. With ISR and ELR empty the last known
                # leader may be elected (Kafka 4.4, RECOVERING; the ELR may have emptied in a
                # record between the two images): checked when it leads.
                # A reassignment (KIP-455) completed by the leader's AlterPartition adds
                # the caught-up new replica to the ISR and, the old leader being removed,
                # elects it in the same record: clean (10.3 holds it to the committed
                # records as an ISR member, 10.4 checks it as it leads).
                completed_onto = (before.is_reassigning and not partition.is_reassigning
                                  and partition.leader in before.adding_replicas and partition.leader in partition.isr)
                outside = partition.leader not in before.isr and partition.leader not in before.elr \
                    and not completed_onto
                if outside and partition.leader not in before.last_known_elr[:1] and (
                        tp.topic in self.unclean_topics or self._unclean(tp.topic)):
                    # Unclean (Kafka's electAnyLeader with no valid ISR or ELR member): the
                    # history restarts now, not when the new leader is first seen — the old
                    # leader, cut off, may still commit alone at min ISR 1 (seed 33053).
                    self._reset(tp, partition.leader_epoch, f"unclean election of broker {partition.leader}",
                                partition.leader)
                elif not before.isr and before.last_known_elr and partition.leader_recovery_state == 1 \
                        and partition.leader in before.replicas:
                    self.last_known_leader_elections[(tp, partition.leader_epoch)] = before.last_known_elr[0]
                    self.last_known_eligible[(tp, partition.leader_epoch)] = tuple(before.last_known_elr)
                    if partition.leader != before.last_known_elr[0]:
                        self.longest_log_elected[tp] = partition.leader
                elif outside:
                    if not self._unclean(tp.topic):
                        raise InvariantViolation("10.4-acknowledged-write-kept", (
                            f"{tp}: broker {partition.leader} elected outside the ISR {list(before.isr)} "
                            f"with unclean.leader.election.enable=false (epoch {partition.leader_epoch})"))
                    self._reset(tp, partition.leader_epoch, f"unclean election of broker {partition.leader}",
                                partition.leader)
        self.controller_image = image
        for broker_id, broker in self.sim.brokers.items():
            if broker.up:
                self._check_image(broker)
        for tp, partition in image.all_partitions():
            for broker_id, flagged_tp in sorted(self.amnesiac):
                if flagged_tp != tp or broker_id in partition.isr + partition.elr + partition.last_known_elr:
                    continue
                # Out of the ISR and ELR after the loss: it rejoins only by fetching, unless
                # an image committed now still carries the registration from before the
                # loss (its process is gone, a stale fetch may still put it back).
                registration = image.brokers.get(broker_id)
                if registration is not None and registration.broker_epoch > self.amnesia_epoch[(broker_id, tp)]:
                    del self.amnesiac[(broker_id, tp)]

    def _check_image(self, broker) -> None:
        expected = self.images.get(broker.image.offset)
        if expected is None or broker.image is expected:
            return
        if broker.image != expected:
            raise InvariantViolation("10.7-metadata-images-agree",
                                     f"broker {broker.broker_id}'s image at offset {broker.image.offset} "
                                     f"differs from the committed log's")

    # ================================================================ faults

    def on_data_loss(self, broker_id: int, lost: dict[str, int], how: str) -> None:
        """A replica forgot bytes it had (a power cut, a replaced disk): until it leaves
        the ISR and ELR under a new registration it is excused from 10.3, and if it leads
        as the last ISR member the losses are KIP-966's "last replica standing", outside
        invariant 4's promise. (Leaving them under the old registration does not count: a
        delayed fetch from the dead process can put it back in the ISR — seed 49.)"""
        for name in lost:
            try:
                tp = TopicPartition.parse(name)
            except ValueError:
                continue
            self.amnesiac[(broker_id, tp)] = how
            mirror = self.mirrors.get((broker_id, tp))
            if mirror is not None:
                mirror.tombstones_seen.clear()    # what it held is no longer known to be there
            registration = self.controller_image.brokers.get(broker_id) if self.controller_image else None
            self.amnesia_epoch[(broker_id, tp)] = registration.broker_epoch if registration is not None else -1

    # ================================================================ clients

    def on_produce_started(self, producer, tp, values) -> None:
        # An acknowledgement can arrive after an excused reset although its record was
        # committed before it: what counts is whether a reset came after the send.
        resets = len(self.history(tp).resets)
        for value in values:
            self.resets_at_send[value] = resets

    def on_produce_received(self, values) -> None:
        for value in values:
            self.received[value] = self.received.get(value, 0) + 1

    def on_produce_done(self, producer, tp: TopicPartition, values, error, base_offset: int) -> None:
        if error != 0 or producer.acks == 0:
            if producer.acks == 0 and error == 0:
                self.sim.stats.acked[0] = self.sim.stats.acked.get(0, 0) + len(values)
            return
        acks = producer.acks
        self.sim.stats.acked[acks] = self.sim.stats.acked.get(acks, 0) + len(values)
        entries = self.acked.setdefault(tp, [])
        history = self.history(tp)
        for i, value in enumerate(values):
            offset = base_offset + i
            entries.append((offset, value, acks, producer.name, self.resets_at_send.get(value, len(history.resets))))
            if acks != -1:
                continue
            known = history.records.get(offset)
            if known is None and self._learn_commit_from_ack(tp, offset, value):
                continue
            if known is None or known[0][2] != value:
                # After an excused reset the old lineage may still commit for a while: a
                # leader of an earlier epoch that has not heard of the unclean election (or
                # of the last replica standing) with followers that have not either.
                if history.resets:
                    continue
                raise InvariantViolation(
                    "10.4-acknowledged-write-kept",
                    f"{producer.name}: acks=all acknowledged {value!r} at {tp} offset {offset}, but the "
                    f"committed history holds {None if known is None else known[0][2]!r} there")

    def _learn_commit_from_ack(self, tp: TopicPartition, offset: int, value: bytes) -> bool:
        """Seed 41907: a leader's high watermark passed ``offset`` and its answer went out
        in the very event that found its log directory failed and took the partition
        offline, so the checker never read that high watermark. If a broker last seen
        leading ``tp`` hosts it offline now and held ``value`` at ``offset`` when last
        read, the acknowledgement is taken as the commit it claims, at that leader's
        epoch: from then on every leader must hold it (10.4), as for any commit."""
        for broker_id, broker in self.sim.brokers.items():
            seen = self.seen.get((broker_id, tp))
            mirror = self.mirrors.get((broker_id, tp))
            if (seen is None or mirror is None or seen.leader != broker_id or not broker.up
                    or seen.leader_epoch < self.history(tp).reset_epoch
                    or broker.replica_manager.partitions.get(tp) != OFFLINE):
                continue
            record = mirror.records.get(offset)
            if record is not None and record[2] == value:
                self.history(tp).add(offset, record, seen.leader_epoch)
                self.sim.loop.trace.add(self.sim.loop.now_ms, "check", f"{tp} offset {offset} committed "
                                        f"by broker {broker_id} as it went offline (learned from its answer)")
                return True
        return False

    def on_consumed(self, consumer, tp: TopicPartition, position: int, records, high_watermark: int,
                    leader: int) -> None:
        history = self.history(tp)
        expected = position
        for offset, value in records:
            if offset != expected and not self._cleaned_away(history, expected, offset):
                raise InvariantViolation("10.6-consumer-below-hw", f"{consumer.name} read {tp} offset {offset} "
                                         f"after {expected - 1} (fetch from {position}, leader {leader})")
            expected = offset + 1
            if offset >= high_watermark:
                raise InvariantViolation("10.6-consumer-below-hw", f"{consumer.name} read {tp} offset {offset} "
                                         f"at/above the HW {high_watermark} from broker {leader}")
            known = history.records.get(offset)
            if (known is None or known[0][2] != value) and not history.resets:
                raise InvariantViolation(
                    "10.6-consumer-below-hw",
                    f"{consumer.name} read {value!r} at {tp} offset {offset} from broker {leader}; the "
                    f"committed history holds {None if known is None else known[0][2]!r}")

    @staticmethod
    def _cleaned_away(history: History, start: int, end: int) -> bool:
        """Whether a consumer may skip offsets ``start`` to ``end`` (exclusive): none of
        them holds a committed record that is the last of its key. After a history reset
        any: a leader of the lineage the reset dropped may still serve, and its cleaner
        removed records by keys the new lineage does not have (as the values it serves
        are not checked against the new history then; seed 671 ``--compact``)."""
        if start > end or not history.compacted:
            return False
        if history.resets:
            return True
        return all(history.records.get(offset) is None or history.may_lack(offset, history.records[offset][0])
                   for offset in range(start, end))

    def on_consumer_reset(self, consumer, tp, position, result) -> None:
        self.sim.loop.trace.add(self.sim.loop.now_ms, consumer.name,
                                f"{tp} offset {position} out of range; reset to {result.log_start_offset}")

    # ================================================================ consumer groups

    def _era(self, index: int) -> int:
        return len(self.history(TopicPartition(OFFSETS_TOPIC, index)).resets)

    def _incarnation(self, group_id: str) -> int:
        """How often the group was deleted (empty, no offsets left): its generations start again."""
        return len(self.deleted.get(group_id, ()))

    def on_assignment(self, broker_id: int, shard, group_id: str, generation: int, member_id: str,
                      assignment: bytes) -> None:
        """Invariant group-single-owner, at each SyncGroup answer a coordinator gives."""
        key = (group_id, self._era(shard.partition), self._incarnation(group_id), generation)
        owners = self.owners.get(key)
        if owners is None:
            owners = self.owners[key] = {}
            self.sim.stats.rebalances += 1
        topic = next(g.topic for g in self.sim.config.groups if g.name == group_id)
        for tp in decode_assignment(topic, assignment):
            owner = owners.setdefault(tp, member_id)
            if owner != member_id:
                raise InvariantViolation("group-single-owner", f"{group_id} generation {generation}: {tp} is "
                                         f"assigned to {owner} and, by b{broker_id}, to {member_id}")

    def _note_deletion(self, group_id: str, serving) -> None:
        """A coordinator that deleted the group (Dead until its tombstone is replayed)
        starts a new incarnation of it: generations restart at 1 (Kafka's cleanup).
        ``serving``: ``serving_coordinator(sim, group_id)``."""
        index = offsets_partition(self.sim, group_id)
        if index is None:
            return
        for broker_id, broker in self.sim.brokers.items():
            loaded = broker.node.group_coordinator.loaded.get(index) if broker.up else None
            group = loaded.shard.groups.get(group_id) if loaded is not None else None
            if group is None or not group.is_in(GroupState.DEAD):
                continue
            self._deleted(group_id, group, f"on b{broker_id}")
        # A deletion can also start and finish within one event (its tombstone committed
        # at once with an ISR of one, or a shard loading and expiring the group in the
        # same tick): the serving shard then lacks a group last seen Empty or Dead.
        if serving is None:
            return
        group = serving[1].groups.get(group_id)
        last = self.last_group.get(group_id)
        if group is None and last is not None and last.is_in(GroupState.EMPTY, GroupState.DEAD):
            self._deleted(group_id, last, f"by b{serving[0]} (gone from its shard)")
        if group is not None:
            self.last_group[group_id] = group

    def _deleted(self, group_id: str, group, where: str) -> None:
        deleted = self.deleted.setdefault(group_id, [])
        if all(group is not other for other in deleted):
            deleted.append(group)
            self.sim.loop.trace.add(self.sim.loop.now_ms, "check", f"{group_id} deleted {where} "
                                    f"at generation {group.generation_id}: generations start again")

    def on_commit_taken(self, broker_id: int, shard, request, now_ms: int) -> CommitTaken:
        """A coordinator takes an OffsetCommit (and appends its record, if it accepts it);
        ``request`` is the request layer's ``OffsetCommit``, one metadata string for all."""
        group_id, member_id, generation = request.group_id, request.member_id, request.generation_id
        offsets = {o.topic_partition: o.offset for o in request.offsets}
        metadata = request.offsets[0].metadata
        self.commit_seq += 1
        for tp in offsets:
            self.commits[(group_id, tp, metadata, now_ms)] = self.commit_seq
        return CommitTaken(self.commit_seq, broker_id, group_id, member_id, generation, offsets,
                           metadata, self._era(shard.partition),
                           self._fenced(shard, group_id, member_id, generation))

    def _fenced(self, shard, group_id: str, member_id: str, generation: int) -> str | None:
        group = shard.groups.get(group_id)
        if group is None or member_id not in group.members:
            return f"{member_id} was not a member of {group_id} there"
        current, where = group.generation_id, "there"
        serving = serving_coordinator(self.sim, group_id)
        if serving is not None and serving[1] is not shard:
            other = serving[1].groups.get(group_id)
            if other is not None and other.generation_id > current:
                current, where = other.generation_id, f"on b{serving[0]}, its serving coordinator"
        if generation < current:
            return f"{group_id} was at generation {current} {where}"
        return None

    def on_commit_answered(self, taken: CommitTaken, errors: dict) -> None:
        """Invariant group-fenced-cannot-commit; remember the last acknowledged commit."""
        for tp, error in sorted(errors.items()):
            if error != ErrorCode.NONE:
                continue
            if taken.fenced is not None:
                raise InvariantViolation("group-fenced-cannot-commit", (
                    f"b{taken.broker} acknowledged commit {taken.metadata} of {tp} offset {taken.offsets[tp]} "
                    f"at generation {taken.generation}, but when it took the commit {taken.fenced}"))
            self.sim.stats.group_commits += 1
            acked = self.acked_commits.setdefault(taken.group, {})
            last = acked.get(tp)
            if last is None or (taken.era, taken.seq) > (last.era, last.seq):
                acked[tp] = taken

    def _check_groups(self) -> None:
        """Group deletions, and invariant group-commit-durable: the serving coordinator
        answers the last acknowledged commit of each partition, or one taken after it."""
        for spec in self.sim.config.groups:
            group_id = spec.name
            serving = serving_coordinator(self.sim, group_id)
            self._note_deletion(group_id, serving)
            if serving is None:
                continue
            broker_id, shard = serving
            if self.serving.get(group_id) is not shard:
                if group_id in self.serving:
                    self.sim.stats.coordinator_moves += 1
                self.serving[group_id] = shard
                self.sim.loop.trace.add(self.sim.loop.now_ms, "check", f"{group_id} is served by b{broker_id} "
                                        f"({OFFSETS_TOPIC}-{shard.partition} loaded)")
            acked = self.acked_commits.get(group_id)
            if not acked:
                continue
            era = self._era(shard.partition)
            committed = shard.fetch_offsets(group_id, list(acked))
            for tp, last in list(acked.items()):
                if last.era != era:
                    del acked[tp]
                    self.sim.stats.group_commits_excused += 1
                    self.sim.loop.trace.add(self.sim.loop.now_ms, "check", (
                        f"{group_id} {tp}: commit {last.metadata} of offset {last.offsets[tp]} excused: "
                        f"{OFFSETS_TOPIC}-{shard.partition}'s history was reset"))
                    continue
                value = committed[tp]
                seq = None if value is None else self.commits.get(
                    (group_id, tp, value.metadata, value.commit_timestamp_ms))
                if seq is None or seq < last.seq:
                    has = "no offset" if value is None else f"offset {value.offset} from commit {value.metadata}"
                    raise InvariantViolation("group-commit-durable", (
                        f"{group_id} {tp}: b{last.broker} acknowledged commit {last.metadata} of offset "
                        f"{last.offsets[tp]} (generation {last.generation}), but its serving coordinator "
                        f"b{broker_id} has {has}"))


def _scope_state(node) -> tuple:
    """What the checker reads of a process, for ``Checker.audit_scope``."""
    if not node.up:
        return ("down", node.owned.incarnation)
    if hasattr(node, "replica_manager"):
        partitions = tuple((tp, p.leader, p.leader_epoch, p.isr, p.log.log_start_offset, p.log.high_watermark,
                            p.log.log_end_offset, id(p.log)) if isinstance(p, Partition) else (tp, type(p))
                           for tp, p in node.replica_manager.partitions.items())
        return (node.owned.incarnation, id(node.image), node.metadata.end_offset, partitions)
    replica = node.replica
    return (node.owned.incarnation, id(node.image), replica.state, replica.epoch, replica.high_watermark,
            node.log.end_offset, len(node.log.truncations))


def _value(record: RecordId | None):
    return None if record is None else record[2]
