"""PartitionChangeBuilder: the pure function behind every leader and ISR change.

Theory of operation (Kafka's ``PartitionChangeBuilder``; docs/controller.md).
Given a partition's current registration, a *target* ISR (and optionally target replicas, replica
directories and leader recovery state), a predicate saying which brokers are acceptable leaders (unfenced, not in
controlled shutdown, not the broker being removed, its replica on a directory the
broker still has online — Kafka's ``LeaderAcceptor``) and an election type,
``build()`` returns the ``PartitionChangeRecord`` carrying only what changes, or
``None`` when nothing would change (no-op detection: no record, no epoch bump).

Election, when needed (the current leader is not in the target ISR, is not
acceptable, or a PREFERRED election finds it is not the first replica)::

    valid(r) = (r in target ISR, or the target ISR is empty and r in the ELR) and acceptable(r)
    PREFERRED: replicas[0] if valid → current leader if valid → first valid
               replica in replica order → last known leader (ELR on) → -1
    ONLINE:    current leader if valid → first valid replica in replica order
               → last known leader (ELR on) → -1
    UNCLEAN:   as ONLINE, then the first *acceptable* replica in replica order;
    last known leader or UNCLEAN pick: ISR := [it], leader_recovery_state :=
               RECOVERING, ELR := []                              (may lose data)

Eligible leader replicas (KIP-966, on when ``elr_enabled``: the finalized
``eligible.leader.replicas.version`` >= 1). With the strict min ISR rule a leader's
high watermark does not move while the ISR is smaller than ``min_isr`` (the
topic's effective min ISR), so a replica that leaves an ISR that is, or becomes,
smaller than that still holds every committed record: it becomes *eligible*::

    |target ISR| >= min_isr:  ELR := []
    otherwise:                ELR := (ELR ∪ current ISR) − target ISR − unclean shutdowns

A replica whose broker restarted after an unclean shutdown (it may have lost
unflushed bytes) leaves the ISR and the ELR at once (``set_unclean_shutdown_replicas``).
The ISR may then become empty. When it is, an acceptable ELR member is a valid
leader (clean: it has every committed record); electing it sets ISR := [it] and
takes it out of the ELR.

The last known leader (Kafka 4.4's ``lastKnownElr`` in its default mode): the
write that leaves the partition leaderless (``leader`` := -1) records the leader it
had, unless one is recorded already; the write that elects a leader clears it.
It is recorded when the *leader* goes, not when the ISR empties: the ISR can
outlive the leader (its members' directories offline), and by the time it
empties there is no leader left to record (seed 5009). When ISR and ELR are both
empty — every replica that held all committed records shut down uncleanly or
lost its disk — that broker, if acceptable, is elected as Kafka 4.4 does, as an
unclean election (ISR := [it], RECOVERING), on any topic: it was the last to hold
every committed record, and without it a cluster whose brokers all crashed (a
lone node after ``kill -9``) would never lead again. On a topic that allows
unclean elections it comes before any other replica.

The last known *eligible* replicas (tidelog's use of the same field): after the
last known leader, ``last_known_elr`` gains every ISR or ELR member that leaves
them for an unclean shutdown while the partition has no leader
(``_known_eligible``). Each held every committed record until its crash; the one
that crashed last may be the only one that kept them (seed 6813: the broker whose
registration emptied the ELR held every record, the last known leader none).

Unclean recovery (KIP-966's longest log; tidelog's transport): a broker's
heartbeat says where its replicas of leaderless partitions end — (epoch of the
last batch, log end offset) — and the controller keeps the latest
report as soft state (``log_end``). When a last known eligible replica K may be
elected, the acceptable replica with the highest (last epoch, log end offset)
among those that reported is elected (same RECOVERING election), the earlier in
K on a tie, provided one of K is among them::

    candidates = {r acceptable, reported};  leader = max by (epoch, LEO), earlier in K on a tie
    (K[0], the last known leader, if it may lead and never reported: Kafka 4.4's rule)

Once any replica has reported, or the broker of one reports at all (its heartbeats
carry the reports, possibly none yet), the election waits (no leader yet, tried
again at every heartbeat; ``may_await_log_ends``, counted from the first wait):
  * for a member of K that may not lead now (down, starting, shutting down, its
    directory offline) and has not reported, or reported a longer log than every
    acceptable reporter: at most ``UNCLEAN_RECOVERY_WAIT_MS`` (five minutes);
  * for any replica that may lead, or is starting, and has not reported: at most
    one broker session timeout (from the latest registration of one still starting,
    if later; never past ``UNCLEAN_RECOVERY_WAIT_MS`` from the first wait) — a
    replica's report comes only once its metadata
    shows the partition leaderless, which may be after the last known leader's
    own restart made it so; ``UNCLEAN_RECOVERY_WAIT_MS`` if every acceptable
    reporter's log is empty and its broker reports or has not been heard by this
    controller yet (a killed broker stays registered and unfenced while failovers
    renew its session);
  * for a replica outside K (it left the ISR while the ISR stayed at min ISR or
    above, or left the ELR for an unclean shutdown while the partition had a
    leader) that is registered but may not lead now, and has not reported or
    reported a longer log than every acceptable reporter: one session timeout, or
    ``UNCLEAN_RECOVERY_WAIT_MS`` if every acceptable reporter's log is empty (a
    replaced disk, a power cut before any flush). Such a replica holds every
    committed record only by chance, but electing an empty log loses them all
    for certain. The recovery wait too if it reported a longer log than every
    acceptable reporter, or while this controller has not heard the replica since
    it became active (``heard_from``): a report it gave the previous active
    controller is lost with the failover.
When no replica's broker reports (``tidelog.unclean.recovery.log.ends.enable``
off), nothing is waited for but a member of K other than the last known leader
that may not lead now, or a replica that may lead whose broker this controller
has not heard since it became active (``heard_from``: the reports are soft
state), for a session timeout; the last known leader is elected as Kafka 4.4
elects it.

Reassignment (KIP-455, Kafka's ``completeReassignmentIfNeeded``): while the
partition has adding or removing replicas, every build first checks whether the
target ISR, without the replicas being removed, holds every replica of the
target without them; if so the reassignment completes in this very record::

    replicas := replicas − removing,  ISR := ISR − removing,  adding := removing := []

(skipped if either would be empty). A leader that was being removed is then not
in the target ISR and the election above moves leadership to a remaining
replica. When the replica list changes, each replica keeps its log directory and
a new one gets its broker's default (``default_dir``).

Rules on the result: without ELR the ISR never becomes empty (an empty target
ISR keeps the current ISR; the partition just has no leader, -1); any leader
change (including to -1) is written as ``leader`` and so bumps the leader epoch
at replay; a new replica set that drops an old replica forces a leader epoch bump
(``leader`` = the same leader); an ISR change alone bumps only the partition
epoch (metadata version >= 3.6, KAFKA-15021).
"""

from __future__ import annotations

import enum
import logging
import uuid
from typing import Callable

from tidelog.metadata.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionChangeRecord,
)
from tidelog.metadata.registrations import UNASSIGNED_DIR, PartitionRegistration

logger = logging.getLogger(__name__)


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


class PartitionChangeBuilder:
    def __init__(self, partition: PartitionRegistration, topic_id: uuid.UUID, partition_id: int,
                 is_acceptable_leader: Callable[[int], bool], election: Election = Election.ONLINE,
                 min_isr: int = 1, elr_enabled: bool = False,
                 default_dir: Callable[[int], uuid.UUID] = lambda broker_id: UNASSIGNED_DIR,
                 log_end: Callable[[int], tuple[int, int] | None] = lambda broker_id: None,
                 may_await_log_ends: Callable[..., bool] = lambda absent, registered_ms=None: False,
                 registered_ms: Callable[[int], int | None] = lambda broker_id: None,
                 starting: Callable[[int], bool] = lambda broker_id: False,
                 registered: Callable[[int], bool] = lambda broker_id: False,
                 reports_log_ends: Callable[[int], bool] = lambda broker_id: False,
                 heard_from: Callable[[int], bool] = lambda broker_id: True):
        self.partition = partition
        self.log_end = log_end
        self.reports_log_ends = reports_log_ends
        self.heard_from = heard_from
        self.may_await_log_ends = may_await_log_ends
        self.registered_ms = registered_ms
        self.starting = starting
        self.registered = registered
        self.default_dir = default_dir
        self.target_adding: tuple[int, ...] = partition.adding_replicas
        self.target_removing: tuple[int, ...] = partition.removing_replicas
        self.min_isr = min_isr
        self.elr_enabled = elr_enabled
        self.target_elr: tuple[int, ...] = partition.elr
        self.unclean_shutdown_replicas: frozenset[int] = frozenset()
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.election = election
        self.target_isr: tuple[int, ...] = partition.isr
        self.target_replicas: tuple[int, ...] = partition.replicas
        self.target_directories: tuple = partition.directories
        self.target_leader_recovery_state: int = partition.leader_recovery_state

    def set_target_isr(self, isr: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_isr = tuple(isr)
        return self

    def set_target_replicas(self, replicas: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_replicas = tuple(replicas)
        return self

    def set_target_adding(self, adding: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_adding = tuple(adding)
        return self

    def set_target_removing(self, removing: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_removing = tuple(removing)
        return self

    def set_target_directories(self, directories: tuple) -> PartitionChangeBuilder:
        """Every replica's log directory, in replica order (AssignReplicasToDirs)."""
        self.target_directories = tuple(directories)
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self.target_leader_recovery_state = state
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def set_unclean_shutdown_replicas(self, replicas) -> PartitionChangeBuilder:
        """Brokers that came back from an unclean shutdown: out of the ISR and the ELR."""
        self.unclean_shutdown_replicas = frozenset(replicas)
        return self

    # ------------------------------------------------------------ election

    def _is_valid_leader(self, replica: int) -> bool:
        eligible = replica in self.target_isr or (not self.target_isr and replica in self.target_elr)
        return eligible and self.is_acceptable_leader(replica)

    def _should_try_election(self) -> bool:
        leader = self.partition.leader
        if leader == NO_LEADER or not self._is_valid_leader(leader):
            return True
        return self.election == Election.PREFERRED and leader != self.target_replicas[0]

    def _best_leader(self) -> tuple[int, bool]:
        """``(leader, unclean)`` by the election order in the module docstring."""
        if self.election == Election.PREFERRED and self._is_valid_leader(self.target_replicas[0]):
            return self.target_replicas[0], False
        if self.partition.leader != NO_LEADER and self._is_valid_leader(self.partition.leader):
            return self.partition.leader, False
        for replica in self.target_replicas:
            if self._is_valid_leader(replica):
                return replica, False
        last_known = self._last_known_leader()
        if last_known != NO_LEADER:
            return last_known, True
        if self.election == Election.UNCLEAN:
            for replica in self.target_replicas:
                if self.is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    def _last_known_leader(self) -> int:
        """With ELR on and ISR and ELR empty, a leader from the last known eligible
        replicas (``last_known_elr``: the last known leader first, then the ISR and ELR
        members that left them for an unclean shutdown while the partition had no
        leader), if one of them may lead; else NO_LEADER. Kafka 4.4 elects the last
        known leader; tidelog the longest log among them (``_longest_log``)."""
        known = self._known_eligible(self.partition.last_known_elr)
        if not self.elr_enabled or self.target_isr or self.target_elr or not known:
            return NO_LEADER
        if not any(self.is_acceptable_leader(r) for r in known):
            return NO_LEADER
        return self._longest_log(known)

    def _awaits_log_ends(self, known: tuple[int, ...]) -> bool:
        """Whether the election waits (module docstring) for a replica that may hold a
        longer log than any acceptable one reported: a last known eligible replica
        that may not lead now (its broker down, starting, shutting down, or its
        directory offline) but is registered, at most the recovery wait; any other
        replica that may lead, or is starting, and has not reported, or one outside
        them that cannot lead, at most a session timeout — the recovery wait where
        electing now would lose records for certain or this controller cannot know
        (the module docstring lists when); all counted from the first wait."""
        ends = {r: self.log_end(r) for r in self.target_replicas}
        cannot_say = [r for r in known if r in ends and not self.is_acceptable_leader(r) and self.registered(r)]
        may_say = [r for r in self.target_replicas if self.is_acceptable_leader(r) or self.starting(r)]
        if all(end is None for end in ends.values()) and not any(map(self.reports_log_ends, self.target_replicas)):
            # Nobody reported and no replica's broker reports: reports are off (Kafka's
            # rule: no wait), or the first heartbeat has not come yet — a last known
            # eligible replica that cannot lead now could not have sent one (seed 7587:
            # one was starting), and a controller that has just become active has read
            # no heartbeat at all (seed 7 --long: it elected the last known leader, back
            # on a replaced disk, before any broker's report could reach it): wait a
            # session timeout for them. Once a replica's broker reports, the rules below
            # wait for the others too (seed 40234: the last known leader, back from a
            # power cut with nothing, was elected before a replica holding every
            # committed record had said where its log ends).
            return ((any(r != known[0] for r in cannot_say)
                     or not all(map(self.heard_from, may_say))) and self.may_await_log_ends(False))
        best = max((end for r, end in ends.items() if end is not None and self.is_acceptable_leader(r)),
                   default=None)
        if any(ends[r] is None or best is None or ends[r] > best for r in cannot_say):
            return self.may_await_log_ends(True)
        # Outside K: a registered replica that cannot lead now (down or still starting) and
        # has not reported, or reported a longer log than any that may lead, is waited for
        # a session timeout; the recovery wait if every log that may lead is empty (seed
        # 40236: the last known leader came back on a replaced disk while the replica that
        # left the ELR for its own restart, holding every committed record, was being
        # unfenced; seed 40123: that replica was cut off for longer; seed 42098: it was
        # starting when the session timeout ran out, so the long wait is asked first).
        # And the recovery wait too while such a replica has not been heard by this
        # controller since it became active: a report its predecessor had is lost with
        # the failover (seed 43459: broker 2, down, had reported 176 records to the old
        # controller; the new one elected a replica holding 119 after a session timeout).
        # And one that reported a longer log than every acceptable reporter: electing now
        # loses records for certain (seed 44475: broker 2 had reported 87, and crashed
        # again before it could lead; a replica holding 42 was elected a session timeout
        # later).
        outside = [r for r in self.target_replicas
                   if r not in known and self.registered(r) and not self.is_acceptable_leader(r)
                   and (ends[r] is None or best is None or ends[r] > best)]
        if outside and (best is None or best[0] < 0 or any(
                ends[r] is not None or not self.heard_from(r) for r in outside)):
            return self.may_await_log_ends(True)
        unreported = [r for r in may_say if ends[r] is None]
        if unreported and (best is None or best[0] < 0) and any(
                self.reports_log_ends(r) or not self.heard_from(r) for r in unreported):
            # Every log that may lead is empty and a replica that may lead, or is
            # starting, has not said where its log ends though its broker reports (or
            # this controller has not heard it yet): the recovery wait, as for one that
            # cannot lead — electing an empty log loses every record for certain (seed 7
            # --long: a killed broker holding 131 records stayed registered and unfenced,
            # each controller failover renewing its session, while its new incarnation
            # was refused as a duplicate; the last known leader was back on a new disk).
            return self.may_await_log_ends(True)
        if unreported:
            # A session timeout, from the latest registration of a replica still starting
            # (seed 138 --long: broker 1, holding every committed record, was refused as a
            # duplicate of its old incarnation until that one's session expired, and the
            # wait's session timeout, counted from its start, ran out 57 ms after it
            # registered, before its first report).
            registered = [ms for r in unreported if self.starting(r) and (ms := self.registered_ms(r)) is not None]
            return self.may_await_log_ends(False, max(registered, default=None))
        return bool(outside) and self.may_await_log_ends(False)

    def _longest_log(self, known: tuple[int, ...]) -> int:
        """KIP-966's unclean recovery: of every acceptable replica whose broker reported
        where its log ends, the one with the highest (last epoch, log end offset); on a
        tie the earlier in ``known`` (the last known leader first). A replica back from
        an unclean shutdown holding every committed record is chosen over a last known
        leader that lost some. An acceptable last known leader that did not report is
        elected as Kafka 4.4 elects it; a replica outside ``known`` leads only if one
        in it may lead too."""
        if self._awaits_log_ends(known):
            return NO_LEADER
        last_known = known[0]
        if self.is_acceptable_leader(last_known) and self.log_end(last_known) is None:
            return last_known
        rank = {r: i for i, r in enumerate(known)}
        candidates = [(self.log_end(r), -rank.get(r, len(known)), r) for r in self.target_replicas
                      if self.log_end(r) is not None and self.is_acceptable_leader(r)]
        if not any(r in rank for _, _, r in candidates):
            return NO_LEADER
        end, _, best = max(candidates)
        if best != last_known:
            logger.warning("Partition %s-%d: of the last known eligible replicas %s, broker %d's "
                           "replica ends furthest, at %s (epoch, offset), and is elected",
                           self.topic_id, self.partition_id, list(known), best, end)
        return best

    def _populate_target_elr(self) -> None:
        """The KIP-966 rules of the module docstring (Kafka's ``maybePopulateTargetElr``)."""
        if not self.elr_enabled or len(self.target_isr) >= self.min_isr:
            self.target_elr = ()
            return
        candidates = set(self.target_elr) | set(self.partition.isr)
        self.target_elr = tuple(r for r in self.target_replicas if r in candidates and r not in self.target_isr
                                and r not in self.unclean_shutdown_replicas)

    def _last_known_elr(self, leader: int) -> tuple[int, ...] | None:
        """The new last known eligible replicas, or None if unchanged (the leader as in
        Kafka 4.4's ``maybeUpdateLastKnownLeader``, then ``_known_eligible``; ``leader``
        is the record's)."""
        current = self.partition
        if not self.elr_enabled:
            return () if current.last_known_elr else None
        if leader >= 0:
            return () if current.last_known_elr else None      # a leader is elected
        known = current.last_known_elr
        if leader == NO_LEADER and current.leader != NO_LEADER and not known:
            known = (current.leader,)                # the write that leaves the partition leaderless
        if leader == NO_LEADER or current.leader == NO_LEADER:
            known = self._known_eligible(known)
        return known if known != current.last_known_elr else None

    def _known_eligible(self, known: tuple[int, ...]) -> tuple[int, ...]:
        """``known`` and, after it, the ISR and ELR members this write removes for an
        unclean shutdown: each held every committed record before it (none if ``known``
        is empty: the partition has a leader)."""
        if not known or not self.unclean_shutdown_replicas:
            return known
        eligible = set(self.partition.isr) | set(self.partition.elr)
        return known + tuple(r for r in self.target_replicas if r in self.unclean_shutdown_replicas
                             and r in eligible and r not in known)

    # ------------------------------------------------------------ reassignment

    def _complete_reassignment_if_needed(self) -> None:
        """The KIP-455 completion rule of the module docstring."""
        if not self.target_adding and not self.target_removing:
            return
        removing = set(self.target_removing)
        isr = tuple(r for r in self.target_isr if r not in removing)
        replicas = tuple(r for r in self.target_replicas if r not in removing)
        if not isr or not replicas or not set(replicas) <= set(isr):
            return
        self.target_isr, self.target_replicas = isr, replicas
        self.target_adding = self.target_removing = ()

    def _directories_for(self, replicas: tuple[int, ...]) -> tuple:
        """Every replica's directory after a replica change: kept, or the broker's default."""
        if replicas == self.partition.replicas:
            return self.target_directories
        old = dict(zip(self.partition.replicas, self.target_directories or ()))
        directories = tuple(old.get(r, UNASSIGNED_DIR) if r in self.partition.replicas
                            else self.default_dir(r) for r in replicas)
        return () if all(d == UNASSIGNED_DIR for d in directories) else directories

    # ------------------------------------------------------------ build

    def build(self) -> PartitionChangeRecord | None:
        current = self.partition
        self._complete_reassignment_if_needed()
        self.target_directories = self._directories_for(self.target_replicas)
        self._populate_target_elr()
        # Without ELR the ISR never becomes empty: keep the last member(s).
        isr = self.target_isr if self.target_isr or self.elr_enabled else current.isr
        leader = NO_LEADER_CHANGE
        leader_recovery_state = self.target_leader_recovery_state
        if self._should_try_election():
            new_leader, unclean = self._best_leader()
            if new_leader != current.leader:
                leader = new_leader
                if new_leader in self.target_elr and not self.target_isr:
                    isr = (new_leader,)      # a clean election from the ELR
                    self.target_elr = tuple(r for r in self.target_elr if r != new_leader)
                elif unclean:
                    logger.warning("UNCLEAN leader election for partition %s-%d: broker %d leads "
                                "from outside the ISR %s and ELR %s; committed records may be lost",
                                self.topic_id, self.partition_id, new_leader, list(current.isr),
                                list(current.elr))
                    isr = (new_leader,)
                    leader_recovery_state = LeaderRecoveryState.RECOVERING
                    self.target_elr = ()
        if leader == NO_LEADER_CHANGE and not set(current.replicas) <= set(self.target_replicas):
            leader = current.leader   # replicas were removed: fence them with a new epoch
        record = PartitionChangeRecord(
            self.topic_id, self.partition_id,
            isr=isr if isr != current.isr else None,
            leader=leader,
            replicas=self.target_replicas if self.target_replicas != current.replicas else None,
            leader_recovery_state=(int(leader_recovery_state)
                                   if leader_recovery_state != current.leader_recovery_state
                                   else -1),
            directories=(self.target_directories if self.target_directories != current.directories
                         else None),
            eligible_leader_replicas=self.target_elr if self.target_elr != current.elr else None,
            last_known_elr=self._last_known_elr(leader),
            adding_replicas=self.target_adding if self.target_adding != current.adding_replicas else None,
            removing_replicas=(self.target_removing if self.target_removing != current.removing_replicas
                               else None),
        )
        if record == PartitionChangeRecord(self.topic_id, self.partition_id):
            return None
        return record
