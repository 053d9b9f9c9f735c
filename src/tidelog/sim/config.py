"""Swarm options: everything about a run that the seed decides (swarm testing).

Theory of operation. ``SimConfig.from_seed(seed)`` draws, from one
``random.Random(seed)``, the cluster (brokers, log directories per broker), the
topics (partitions, replication factor, ``min.insync.replicas``, unclean
election, fsync policy, segment size), the timeouts (session, heartbeat,
``replica.lag.time.max.ms``, fetch wait and backoff, request timeout), the
network (delay, jitter, loss, duplication in the fault phase), clock skew per
node, the clients (producers with acks 0/1/all, consumers or consumer groups)
and the nemesis (which fault kinds are on, how often they strike). Different
seeds therefore explore different corners (FoundationDB's and TigerBeetle's "swarm testing"):
a seed with no power cuts but heavy partitions, one with tiny segments and a
full disk, one with unclean election and acks=1 …

``from_seed(seed, compact=True)`` (``--compact``) also makes the seed's own topics
compacted, with keyed records, tombstones and a busy cleaner (``_compacted``: from
generators of their own, so every other option is the seed's).

``describe()`` is the one-line ``config=`` of a failure report; the run itself
uses a second generator seeded from the same seed, so the options and the run
are both functions of the seed alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

FAULT_KINDS = ("partition", "asymmetric", "isolate", "split", "swizzle", "lossy", "kill",
               "power", "stop", "pause", "controller", "disk-full", "disk-fail", "clock")
# Kinds no seed draws (adding one to FAULT_KINDS would change every seed's draws):
# a test enables them with SimConfig.with_options(fault_kinds=...).
OPT_IN_FAULT_KINDS = ("reassign", "voters")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    unclean: bool = False
    flush_messages: int | None = None   # 1 = fsync every append; None = Kafka's default (never)
    segment_bytes: int = 1 << 20
    flush_ms: int | None = None         # flush.ms (scenarios); None = Kafka's default (never)
    assignments: tuple[tuple[int, ...], ...] | None = None   # scenarios: explicit replica lists
    # cleanup.policy=compact (``--compact``): producers write keyed records, ``keys`` keys
    # per partition, and the checker holds replicas to compaction's promise instead
    compact: bool = False
    keys: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    tombstone_percent: int = 0          # of a compacted topic's records, sent as tombstones (null values)
    delete_retention_ms: int | None = None   # delete.retention.ms; None = Kafka's day (never in a run)

    def describe(self) -> str:
        flags = ("unclean" if self.unclean else "clean") + (",fsync" if self.flush_messages == 1 else "")
        if self.compact:
            flags += f",compact{self.keys}keys/dirty{self.min_cleanable_dirty_ratio}"
            if self.tombstone_percent:
                flags += f"/tombstones{self.tombstone_percent}%"
            if self.delete_retention_ms is not None:
                flags += f"/deleteretention{self.delete_retention_ms}ms"
        return (f"{self.name}:p{self.partitions}:rf{self.replication_factor}:isr{self.min_insync_replicas}"
                f":{flags}:seg{self.segment_bytes}")


@dataclass(frozen=True)
class ClientSpec:
    kind: str            # "producer" | "consumer"
    topic: str
    acks: int = -1       # producers only


@dataclass(frozen=True)
class GroupSpec:
    """A consumer group (classic protocol) of ``members`` simulated members reading ``topic``."""

    name: str
    topic: str
    members: int


@dataclass(frozen=True)
class SimConfig:
    seed: int
    brokers: int = 3
    log_dirs_per_broker: int = 1
    topics: tuple[TopicSpec, ...] = (TopicSpec("t0", 1, 3, 2),)
    clients: tuple[ClientSpec, ...] = (ClientSpec("producer", "t0", -1), ClientSpec("consumer", "t0"))
    session_timeout_ms: int = 3000
    heartbeat_interval_ms: int = 500
    replica_lag_time_max_ms: int = 4000
    replica_fetch_wait_max_ms: int = 200
    replica_fetch_backoff_ms: int = 200
    request_timeout_ms: int = 1500
    hw_checkpoint_interval_ms: int = 2000
    tick_ms: int = 100
    net_delay_ms: int = 1
    net_jitter_ms: int = 4
    net_link_spread_ms: int = 0             # links differ by up to this much base latency
    fault_loss: float = 0.0
    fault_duplicate: float = 0.0
    clock_drift_ppm: tuple[int, ...] = ()   # per node: the first controller, then brokers
    controllers: int = 1                    # voters of the controller quorum (1, 3 or 5)
    controller_drift_ppm: tuple[int, ...] = ()   # the other controllers' drift
    # 0: every controller is a static voter (controller.quorum.voters, kraft.version 0).
    # n > 0: a dynamic quorum (KIP-853): the first n controllers are formatted with
    # their VotersRecord, the others start empty with them as bootstrap servers.
    initial_voters: int = 0
    raft_election_timeout_ms: int = 1000    # controller.quorum.election.timeout.ms
    raft_fetch_timeout_ms: int = 2000       # controller.quorum.fetch.timeout.ms
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    fault_interval_ms: int = 1500           # mean time between faults
    fault_duration_ms: int = 3000           # mean duration of a fault
    faults_at_once: int = 2                 # the nemesis waits while this many are active
    fault_phase_ms: int = 20_000
    healed_phase_ms: int = 40_000           # the longest convergence may take
    produce_interval_ms: int = 60
    groups: tuple[GroupSpec, ...] = ()
    group_session_timeout_ms: int = 3000    # the members' session.timeout.ms
    offsets_partitions: int = 3             # offsets.topic.num.partitions
    transactions: bool = False              # a transactional producer and a read_committed consumer on "tx"
    eligible_leader_replicas: bool = True   # KIP-966 ELR finalized at bootstrap (Kafka 4.4's default)
    # brokers report where their leaderless replicas end (tidelog.unclean.recovery.log.ends.enable):
    # the controller elects the longest log (KIP-966 unclean recovery); off = Kafka 4.4's choice
    replica_log_ends: bool = True
    txn_partitions: int = 2                 # transaction.state.log.num.partitions
    txn_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # The transactional producer's protocol: 1 (AddPartitionsToTxn, one epoch for many
    # transactions) or 2 (KIP-890 part 2: partitions added by their leaders, an epoch bump
    # with every EndTxn, as Kafka 4's Java producer). Drawn per seed, from a stream of its own.
    transaction_version: int = 1
    log_cleaner_backoff_ms: int = 15_000    # log.cleaner.backoff.ms (Kafka's default)
    defect: str | None = None

    # ------------------------------------------------------------------ swarm

    @classmethod
    def from_seed(cls, seed: int, *, long: bool = False, defect: str | None = None,
                  controllers: int | None = None, compact: bool = False) -> "SimConfig":
        rng = random.Random(f"tidelog-sim-config-{seed}")
        brokers = rng.choice([3, 3, 4, 5])
        topics = []
        for i in range(rng.choice([1, 1, 2])):
            rf = rng.choice([2, 3, 3, 3]) if brokers >= 3 else 2
            rf = min(rf, brokers)
            min_isr = rng.choice([1, 2, 2]) if rf >= 2 else 1
            unclean = rng.random() < 0.2
            topics.append(TopicSpec(
                f"t{i}", rng.choice([1, 1, 2, 3]), rf, min_isr, unclean,
                1 if rng.random() < 0.3 else None, rng.choice([600, 2000, 1 << 20])))
        clients = []
        for topic in topics:
            for _ in range(rng.choice([1, 1, 2])):
                clients.append(ClientSpec("producer", topic.name, rng.choice([-1, -1, -1, 1, 0])))
            clients.append(ClientSpec("consumer", topic.name))
        session = rng.choice([1500, 3000, 6000])
        kinds = tuple(k for k in FAULT_KINDS if rng.random() < 0.75) or ("partition", "kill")
        config = cls(
            seed=seed, brokers=brokers, log_dirs_per_broker=rng.choice([1, 1, 2]), topics=tuple(topics),
            clients=tuple(clients), session_timeout_ms=session,
            heartbeat_interval_ms=session // rng.choice([3, 4, 6]),
            replica_lag_time_max_ms=rng.choice([1000, 3000, 8000]),
            replica_fetch_wait_max_ms=rng.choice([50, 200, 500]),
            replica_fetch_backoff_ms=rng.choice([50, 250, 1000]),
            request_timeout_ms=rng.choice([800, 1500, 4000]),
            hw_checkpoint_interval_ms=rng.choice([500, 2000, 5000]),
            tick_ms=rng.choice([50, 100, 100]),
            net_delay_ms=rng.choice([0, 1, 2]), net_jitter_ms=rng.choice([0, 3, 10, 30]),
            net_link_spread_ms=rng.choice([0, 2, 10]),
            fault_loss=rng.choice([0.0, 0.0, 0.01, 0.05]), fault_duplicate=rng.choice([0.0, 0.0, 0.01, 0.03]),
            clock_drift_ppm=tuple(rng.choice([0, 0, 500, -500, 20_000, -20_000]) for _ in range(brokers + 1)),
            fault_kinds=kinds, fault_interval_ms=rng.choice([500, 1000, 2000]),
            fault_duration_ms=rng.choice([1000, 3000, 8000]), faults_at_once=rng.choice([1, 2, 3, 4]),
            fault_phase_ms=(rng.choice([60_000, 120_000]) if long else rng.choice([15_000, 20_000, 25_000])),
            healed_phase_ms=60_000, produce_interval_ms=rng.choice([20, 60, 150]), defect=defect)
        # Drawn last, so every option above is what it was before groups existed: a
        # topic's consumer is, on most seeds, a consumer group of 2-4 members instead.
        groups = []
        for topic in topics:
            if rng.random() < 0.7:
                groups.append(GroupSpec(f"g{len(groups)}", topic.name, rng.choice([2, 3, 3, 4])))
        grouped = {g.topic for g in groups}
        config = config.with_options(
            clients=tuple(c for c in clients if c.kind != "consumer" or c.topic not in grouped),
            groups=tuple(groups), group_session_timeout_ms=rng.choice([1000, 2000, 4000]),
            offsets_partitions=rng.choice([1, 2, 3]))
        # Drawn after the groups, for the same reason: on half the seeds a transactional
        # producer and a read_committed consumer use their own topic "tx".
        if rng.random() < 0.5:
            rf = min(3, brokers)
            config = config.with_options(
                transactions=True, txn_partitions=rng.choice([1, 2, 3]),
                topics=config.topics + (TopicSpec("tx", rng.choice([1, 2, 3]), rf, min(2, rf),
                                                  rng.random() < 0.1, None, rng.choice([2000, 1 << 20])),))
        # Only seeds with transactions use it; drawn apart, so nothing else changes.
        config = config.with_options(transaction_version=_transaction_version(seed))
        # The controller quorum comes from a generator of its own, so every option
        # above — and the run's random stream — is what it was with one controller.
        quorum = random.Random(f"tidelog-sim-controllers-{seed}")
        voters = quorum.choice([1, 3, 3, 5]) if controllers is None else controllers
        config = config.with_options(
            controllers=voters,
            controller_drift_ppm=tuple(quorum.choice([0, 0, 500, -500, 20_000, -20_000])
                                       for _ in range(voters - 1)))
        return _compacted(config, seed) if compact else config

    def with_options(self, **changes) -> "SimConfig":
        return replace(self, **changes)

    def topic(self, name: str) -> TopicSpec:
        return next(t for t in self.topics if t.name == name)

    def describe(self) -> str:
        topics = "+".join(t.describe() for t in self.topics)
        acks = ",".join(str(c.acks) for c in self.clients if c.kind == "producer")
        parts = [f"controllers={self.controllers}",
                 f"brokers={self.brokers}x{self.log_dirs_per_broker}dir", f"topics={topics}", f"acks={acks}",
                 f"session={self.session_timeout_ms}", f"lag={self.replica_lag_time_max_ms}",
                 f"fetch_wait={self.replica_fetch_wait_max_ms}", f"net={self.net_delay_ms}+{self.net_link_spread_ms}+{self.net_jitter_ms}ms",
                 f"loss={self.fault_loss}", f"dup={self.fault_duplicate}",
                 f"faults={','.join(self.fault_kinds)}/{self.fault_interval_ms}ms/x{self.faults_at_once}",
                 f"phase={self.fault_phase_ms}ms"]
        if self.groups:
            parts.append(f"groups={'+'.join(f'{g.name}:{g.topic}x{g.members}' for g in self.groups)}"
                         f"/session{self.group_session_timeout_ms}/offsets{self.offsets_partitions}p")
        if self.transactions:
            parts.append(f"txn=tx/state{self.txn_partitions}p/tv{self.transaction_version}")
        if not self.eligible_leader_replicas:
            parts.append("elr=off")
        if not self.replica_log_ends:
            parts.append("log-ends=off")
        if self.log_cleaner_backoff_ms != 15_000:
            parts.append(f"cleaner_backoff={self.log_cleaner_backoff_ms}ms")
        if self.defect:
            parts.append(f"defect={self.defect}")
        return " ".join(parts)


def _compacted(config: SimConfig, seed: int) -> SimConfig:
    """``--compact``: the seed's own topics (``tx`` aside) compacted, with small segments so
    that they roll and the cleaner swaps cleaned segments in during the fault phase, and
    a cleaner that looks often. Drawn from a generator of its own: every other option
    is the seed's."""
    rng = random.Random(f"tidelog-sim-compact-{seed}")
    topics = tuple(replace(topic, compact=True, keys=rng.choice([2, 5, 20]),
                           segment_bytes=rng.choice([400, 800, 2000]),
                           min_cleanable_dirty_ratio=rng.choice([0.01, 0.2, 0.5]))
                   if topic.name != "tx" else topic for topic in config.topics)
    config = config.with_options(topics=topics, log_cleaner_backoff_ms=rng.choice([100, 500, 2000]))
    # Tombstones (deletes) on most seeds, from a generator of their own (drawn after
    # the options above existed).
    deletes = random.Random(f"tidelog-sim-tombstones-{seed}")
    topics = tuple(replace(topic, tombstone_percent=deletes.choice([0, 10, 30])) if topic.compact else topic
                   for topic in config.topics)
    # …and, drawn after them, a delete.retention.ms short enough that tombstones go
    # within the run, on some topics that write them.
    topics = tuple(replace(topic, delete_retention_ms=deletes.choice([None, None, 1000, 5000]))
                   if topic.tombstone_percent else topic for topic in topics)
    return config.with_options(topics=topics)


def _transaction_version(seed: int) -> int:
    """1 or 2, from a generator of its own: every other option of the seed (and the
    controller quorum, drawn after it) is what it was before the version was drawn."""
    return random.Random(f"tidelog-sim-transaction-version-{seed}").choice([1, 2])


@dataclass
class RunStats:
    """What a run did, for reports (docs/reliability.md)."""

    events: int = 0
    sim_ms: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    produce_requests: int = 0
    acked: dict[int, int] = field(default_factory=dict)      # acks -> records acknowledged
    consumed: int = 0
    acked_all_lost: int = 0           # must be 0 for clean topics
    excused_losses: int = 0           # unclean election / last replica standing after power loss
    excused_losses_clean: int = 0     # of which on clean-election topics (last replica standing)
    excused_losses_clean_fsync: int = 0   # of which on topics that fsync every append (flush.messages=1)
    excused_losses_clean_held: int = 0    # of which another replica held when a reset dropped them
    excused_losses_clean_held_eligible: int = 0   # of which a last known eligible replica held
    history_resets: int = 0
    reset_reasons: dict[str, int] = field(default_factory=dict)
    group_commits: int = 0            # partition offsets a coordinator acknowledged
    group_commits_excused: int = 0    # acknowledged commits its __consumer_offsets partition lost, excused
    rebalances: int = 0               # generations whose assignment a coordinator handed out
    coordinator_moves: int = 0        # a group served by a newly loaded coordinator shard
    member_faults: dict[str, int] = field(default_factory=dict)   # leave / crash / pause / rejoin
    transactions: dict[str, int] = field(default_factory=dict)    # committed / aborted / abandoned / read
    controller_elections: int = 0     # Raft leaders seen (one per epoch)
    controller_activations: int = 0   # a leader becoming the active controller
    controller_faults: dict[str, int] = field(default_factory=dict)   # kill / pause / isolate-leader …
    metadata_records_committed: int = 0   # the quorum's committed log end at the end of the run
    voter_changes: int = 0            # committed VotersRecords that added or removed a voter (KIP-853)
    compaction_rewrites: int = 0      # --compact: cleaner swaps the checker saw, over every replica
    compacted_away: int = 0           # --compact: committed records absent at the end, superseded
    tombstones_removed: int = 0       # --compact: keys whose last record, a tombstone, the cleaner removed
    tombstones_missed: int = 0        # --compact: a replica that lagged behind a removed tombstone keeps an older value

    def add(self, other: "RunStats") -> None:
        self.events += other.events
        self.sim_ms += other.sim_ms
        for k, v in other.faults.items():
            self.faults[k] = self.faults.get(k, 0) + v
        for k, v in other.acked.items():
            self.acked[k] = self.acked.get(k, 0) + v
        self.produce_requests += other.produce_requests
        self.consumed += other.consumed
        self.acked_all_lost += other.acked_all_lost
        self.excused_losses += other.excused_losses
        self.excused_losses_clean += other.excused_losses_clean
        self.excused_losses_clean_fsync += other.excused_losses_clean_fsync
        self.excused_losses_clean_held += other.excused_losses_clean_held
        self.excused_losses_clean_held_eligible += other.excused_losses_clean_held_eligible
        self.history_resets += other.history_resets
        for k, v in other.reset_reasons.items():
            self.reset_reasons[k] = self.reset_reasons.get(k, 0) + v
        self.group_commits += other.group_commits
        self.group_commits_excused += other.group_commits_excused
        self.rebalances += other.rebalances
        self.coordinator_moves += other.coordinator_moves
        for k, v in other.member_faults.items():
            self.member_faults[k] = self.member_faults.get(k, 0) + v
        for k, v in other.transactions.items():
            self.transactions[k] = self.transactions.get(k, 0) + v
        self.controller_elections += other.controller_elections
        self.controller_activations += other.controller_activations
        for k, v in other.controller_faults.items():
            self.controller_faults[k] = self.controller_faults.get(k, 0) + v
        self.metadata_records_committed += other.metadata_records_committed
        self.voter_changes += other.voter_changes
        self.compaction_rewrites += other.compaction_rewrites
        self.compacted_away += other.compacted_away
        self.tombstones_missed += other.tombstones_missed
        self.tombstones_removed += other.tombstones_removed
