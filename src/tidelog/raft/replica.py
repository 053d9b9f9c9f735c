"""One member of a KRaft quorum (KIP-595), sans-I/O: events in, messages out.

Theory of operation. A ``RaftReplica`` is a voter (or an observer: a broker that
only follows the log). It owns no socket, timer or file: the driver calls
``on_message(message, now_ms)`` and ``on_tick(now_ms)``, sends the messages
``take_outbox()`` returns, persists ``quorum_state()`` (Kafka's ``quorum-state``
file) before sending anything when ``quorum_state_changed`` is set, and makes the
log's appends durable. Randomness (election jitter) comes from an injected
``random.Random``; time only from ``now_ms``.

States, as Kafka's ``QuorumState``::

    Unattached(epoch) ──election timeout──▶ Prospective ──pre-votes from a majority──▶ Candidate(epoch+1)
         ▲   │ BeginQuorumEpoch / Fetch answer from a leader                    │ votes from a majority
         │   ▼                                                                  ▼
     Voted(epoch, for) ◀── Vote granted              Follower(epoch, leader) ◀── Leader(epoch)
                                                         fetch timeout ──▶ Prospective

* **Elections** (KIP-595, with KIP-996's pre-vote): a voter whose leader went
  quiet (no fetch answer for ``fetch_timeout_ms``) or that has none for a random
  ``election_timeout_ms .. 2×`` first asks a *pre-vote* at epoch + 1 without
  bumping its epoch; only with a majority of pre-votes does it become a
  candidate (epoch + 1, votes for itself). A vote is granted once per epoch, to
  a candidate whose log is at least as up to date (last epoch, then end offset).
  Pre-votes are granted by a voter that has no leader it hears from.
* **Replication is pulled**: followers (and observers) send Fetch(fetch offset,
  last fetched epoch); the leader answers records, or the *diverging epoch* when
  the follower's log does not match (``end_offset_for_epoch``), and the follower
  truncates there — the same rule as partitions (docs/replication.md). A
  follower's Fetch carries its progress, so the leader's high watermark is the
  largest offset a majority of voters has, counted only once it reaches the
  start of the leader's epoch (Raft's "commit only your own epoch" rule).
* **BeginQuorumEpoch** tells the voters a new leader exists; **EndQuorumEpoch**
  (a leader resigning) lets them start an election at once.
* **Check quorum**: a leader that has not been fetched from by a majority within
  ``fetch_timeout_ms`` resigns (a partitioned old leader stops believing it leads).

* **Input validation**: a request is checked before it is believed
  (``check_request``) and a refused one changes nothing: Kafka's rules (an older
  epoch is FENCED_LEADER_EPOCH; a sender that is not a voter, or a replica that
  is not one, INCONSISTENT_VOTER_SET; a negative id or an impossible last epoch
  or offset, INVALID_REQUEST), and ours for epochs (INVALID_REQUEST): none above
  ``MAX_EPOCH``, and none that would move this replica more than
  ``MAX_EPOCH_JUMP`` past its log's last epoch, except the very next epoch at
  most once per election timeout.
  Responses with an impossible epoch are dropped. A ``quorum-state`` record with
  an impossible epoch is discarded at ``start`` (``discarded_quorum_state``).

* **Dynamic voters** (KIP-853, ``kraft_version`` 1): the voter set is the log's
  latest VotersRecord entry, committed or not (``_refresh_voters`` after every
  append and truncation), else the static set. The leader makes one change at a
  time (``add_voter`` / ``remove_voter`` / ``update_voter``; their answers come
  out of ``take_voter_change_results`` once the record commits), appends an
  added voter only once it fetched up to the log end as an observer, counts the
  majority on the newest set, and resigns once its own removal commits.
  Observers that follow no one look for the leader by fetching (voters, else
  ``bootstrap_servers``). docs/raft.md, "Dynamic voters".

Messages are small dataclasses; the driver maps them onto Kafka's Vote,
BeginQuorumEpoch, EndQuorumEpoch and Fetch requests.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from tidelog.core.errors import ErrorCode

NO_LEADER = -1

INT32_MAX = 2**31 - 1
# The largest epoch a replica ever takes. Epochs are int32 on the wire (Kafka's), and
# a replica at epoch e asks for pre-votes and votes at e + 1: that must still encode.
MAX_EPOCH = INT32_MAX - 1
# How far a request (Vote, BeginQuorumEpoch) may move this replica's epoch past the
# last epoch of its own log, the last one a leader really wrote in (every leader's
# first entry is its LeaderChange). Each epoch past it is an election that elected no
# leader this replica heard of; with pre-votes an election needs a majority that
# hears no leader, so a hundred in a row does not happen. Past this window a request
# may only bring the very next epoch (one election step), and no more often than an
# election timeout (a candidate's own retries are that far apart). A voter that
# really is further behind (down for a long time) learns the epoch from the answers to
# its own pre-votes and fetches, which only the MAX_EPOCH bound applies to. So a client
# forging voters' requests raises an epoch by at most this much per leader that is
# then elected, or by one per election timeout: at Kafka's default timeouts, using up
# the int32 epoch space takes more than a year of forging; before, three requests.
MAX_EPOCH_JUMP = 100


# ================================================================ voters (KIP-853)


@dataclass(frozen=True)
class Voter:
    """One voter as a VotersRecord names it: Kafka's ReplicaKey (id, directory id) and
    the listeners it is reached at."""
    voter_id: int
    directory_id: str = ""                              # a Uuid's text; "" when not known (kraft.version 0)
    endpoints: tuple[tuple[str, str, int], ...] = ()     # (listener name, host, port)


@dataclass(frozen=True)
class VotersRecord:
    """The payload of a VotersRecord control entry: the whole voter set from its offset on."""
    voters: tuple[Voter, ...]


@dataclass
class VoterChange:
    """The leader's one voter change in progress (Kafka's Add/RemoveVoterHandlerState)."""
    kind: str                       # "add", "remove" or "update"
    voter: Voter
    deadline_ms: int                # the request's timeout: REQUEST_TIMED_OUT then
    token: object                   # the driver's handle on the waiting request
    offset: int | None = None       # where its VotersRecord went; None while an added voter catches up


# ================================================================ the log


class RaftLog:
    """The replicated log: entries with the epoch that wrote them (in memory; a
    durable implementation keeps the same interface)."""

    def __init__(self):
        self.entries: list[tuple[int, object]] = []     # (epoch, payload), offset = index
        self._voters_offsets: list[int] = []            # where each VotersRecord entry sits, ascending

    @property
    def end_offset(self) -> int:
        return len(self.entries)

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def epoch_at(self, offset: int) -> int:
        return self.entries[offset][0]

    def append_as_leader(self, epoch: int, payloads: list) -> None:
        self.entries.extend((epoch, p) for p in payloads)

    def append_leader_change(self, epoch: int, leader_id: int) -> None:
        """The entry a new leader writes first (KRaft's LeaderChangeMessage)."""
        self.entries.append((epoch, ("leader-change", leader_id)))

    def append_entries(self, start_offset: int, entries: list[tuple[int, object]]) -> None:
        assert start_offset == len(self.entries), "appends must continue the log"
        for offset, (_, payload) in enumerate(entries, start_offset):
            if isinstance(payload, VotersRecord):
                self._voters_offsets.append(offset)
        self.entries.extend(entries)

    def append_voters(self, epoch: int, voters: tuple[Voter, ...]) -> None:
        """A leader's VotersRecord control entry (KIP-853): the whole new voter set."""
        self._voters_offsets.append(len(self.entries))
        self.entries.append((epoch, VotersRecord(tuple(voters))))

    def last_voters(self) -> tuple[int, tuple[Voter, ...]] | None:
        """(offset, voters) of the log's latest VotersRecord, committed or not; None
        when the log has none (the static or bootstrap voters apply)."""
        if not self._voters_offsets:
            return None
        offset = self._voters_offsets[-1]
        return offset, self.entries[offset][1].voters

    def voters_before(self, offset: int) -> tuple[Voter, ...] | None:
        """The voters of the latest VotersRecord below ``offset`` (None: the static set)."""
        earlier = [o for o in self._voters_offsets if o < offset]
        return self.entries[earlier[-1]][1].voters if earlier else None

    def truncate_to(self, offset: int) -> None:
        del self.entries[offset:]
        while self._voters_offsets and self._voters_offsets[-1] >= offset:
            self._voters_offsets.pop()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` in the log, the end offset of that epoch) —
        Kafka's ``endOffsetForEpoch``; (0, 0) when no entry has such an epoch."""
        best_epoch, end = 0, 0
        for offset, (entry_epoch, _) in enumerate(self.entries):
            if entry_epoch <= epoch:
                best_epoch, end = entry_epoch, offset + 1
            else:
                break
        return best_epoch, end

    def read_entries(self, start_offset: int, max_entries: int) -> list[tuple[int, object]]:
        return self.entries[start_offset:start_offset + max_entries]

    # Snapshots (KIP-630): this in-memory log keeps every entry, so it never needs one.
    log_start_offset = 0

    def snapshot_id(self) -> tuple[int, int] | None:
        return None


# ================================================================ messages


@dataclass(frozen=True)
class VoteRequest:
    epoch: int                 # the candidate's epoch (for a pre-vote: its epoch + 1)
    candidate_id: int
    last_epoch: int
    end_offset: int
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    epoch: int                 # the voter's epoch
    granted: bool
    leader_id: int = NO_LEADER
    pre_vote: bool = False
    error: ErrorCode = ErrorCode.NONE    # why the request was refused (nothing changed then)


@dataclass(frozen=True)
class BeginQuorumEpoch:
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class EndQuorumEpoch:
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class QuorumEpochResponse:
    """The answer to a BeginQuorumEpoch or EndQuorumEpoch: the voter's epoch and the
    leader it knows (Kafka's BeginQuorumEpochResponse / EndQuorumEpochResponse carry
    them; the driver builds it from the replica's state)."""
    epoch: int
    leader_id: int = NO_LEADER
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True)
class FetchRequest:
    epoch: int                 # the epoch the fetcher believes in
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    replica_directory_id: str = ""     # the fetcher's ReplicaKey directory id (Fetch v17)


@dataclass(frozen=True)
class FetchResponse:
    epoch: int
    leader_id: int
    high_watermark: int = 0
    start_offset: int = 0
    entries: tuple = ()
    diverging: tuple[int, int] | None = None      # (epoch, end offset): truncate there
    fenced: bool = False                          # the fetcher's epoch is newer (or not a leader here)
    snapshot_id: tuple[int, int] | None = None    # (end offset, epoch): the fetch is below the log start
    for_fetch: tuple[int, int] | None = None      # the (fetch offset, last fetched epoch) it answers
    error: ErrorCode = ErrorCode.NONE             # an invalid request, refused (with fenced set)


@dataclass(frozen=True)
class FetchSnapshotRequest:
    epoch: int
    replica_id: int
    snapshot_id: tuple[int, int]


@dataclass(frozen=True)
class FetchSnapshotResponse:
    epoch: int
    leader_id: int
    snapshot_id: tuple[int, int]
    data: bytes | None                            # None: not the leader, or the snapshot is gone
    error: ErrorCode = ErrorCode.NONE             # an invalid request, refused


@dataclass(frozen=True)
class Envelope:
    source: int
    destination: int
    message: object


_REQUESTS = (VoteRequest, BeginQuorumEpoch, EndQuorumEpoch, FetchRequest, FetchSnapshotRequest)


# ================================================================ the replica


@dataclass
class RaftConfig:
    election_timeout_ms: int = 1000      # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000         # controller.quorum.fetch.timeout.ms
    fetch_interval_ms: int = 50          # how soon a follower fetches again after an answer
    max_fetch_entries: int = 100


UNATTACHED, VOTED, PROSPECTIVE, CANDIDATE, LEADER, FOLLOWER = (
    "Unattached", "Voted", "Prospective", "Candidate", "Leader", "Follower")


@dataclass
class QuorumStateRecord:
    """What ``quorum-state`` holds: enough that a restart never votes twice in an epoch."""
    epoch: int
    voted_for: int
    leader_id: int


def quorum_state_problem(record: QuorumStateRecord) -> str | None:
    """Why ``record`` cannot be a state this quorum ever was in (None when it can): an
    epoch no election can reach (negative, or above ``MAX_EPOCH``: a replica there could
    never ask for a vote again), or ids below -1 (ids no longer voters are the caller's)."""
    for name in ("epoch", "voted_for", "leader_id"):
        if type(getattr(record, name)) is not int:
            return f"{name} {getattr(record, name)!r} is not an integer"
    if not 0 <= record.epoch <= MAX_EPOCH:
        return f"epoch {record.epoch} is outside 0..{MAX_EPOCH}"
    if record.voted_for < NO_LEADER or record.leader_id < NO_LEADER:
        return f"votedId {record.voted_for} or leaderId {record.leader_id} is below -1"
    return None


@dataclass
class RaftReplica:
    node_id: int
    voters: tuple[int, ...]
    log: RaftLog
    rng: random.Random
    config: RaftConfig = field(default_factory=RaftConfig)
    epoch: int = 0
    voted_for: int = NO_LEADER
    leader_id: int = NO_LEADER
    state: str = UNATTACHED
    high_watermark: int = 0
    kraft_version: int = 0               # 1: the voter set lives in the log and may change (KIP-853)
    directory_id: str = ""               # this replica's ReplicaKey directory id
    bootstrap_servers: tuple[int, ...] = ()   # whom an observer that knows no voter asks for the leader

    def __post_init__(self):
        # ``voters`` as given is the static (controller.quorum.voters) or bootstrap set; the
        # log's latest VotersRecord, committed or not, overrides it (``_refresh_voters``).
        self.static_voters: tuple[int, ...] = tuple(self.voters)
        self.voter_set: tuple[Voter, ...] = ()
        self._voters_offset = -1                         # the VotersRecord in force; -1: the static set
        self._removed_at: int | None = None              # the VotersRecord that removed this replica
        self._refresh_voters()
        self._voter_change: VoterChange | None = None
        self._voter_change_results: list[tuple[object, ErrorCode]] = []
        self._fetcher_directory: dict[int, str] = {}     # each fetcher's directory id, as it last said
        self._caught_up_ms: dict[int, int] = {}          # when a fetcher last fetched from the log end
        self._discovery_index = 0
        self._abandoned_leader: tuple[int, int] | None = None   # (epoch, leader) given up on for a pre-vote
        self._outbox: list[Envelope] = []
        self.quorum_state_changed = False
        self._votes: set[int] = set()
        self._election_deadline_ms: int | None = None
        self._fetch_deadline_ms: int | None = None
        self._next_fetch_ms: int | None = None
        self._fetch_in_flight = False
        self._fetch_sent: tuple[int, int] | None = None     # the fetch whose answer is awaited
        self._follower_end: dict[int, int] = {}
        self._last_fetch_ms: dict[int, int] = {}
        self._epoch_start_offset = 0
        self._leader_since_ms = 0
        self._next_begin_epoch_ms = 0
        self.discarded_quorum_state: str | None = None     # why start() discarded the persisted record
        self.epoch_exhausted = False                       # at MAX_EPOCH: no election can follow
        self.refused: dict[ErrorCode, int] = {}            # requests refused by check_request, by error
        self._next_epoch_step_ms = 0                       # when a request may next step past the window

    # ------------------------------------------------------------ driver API

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def may_stand(self) -> bool:
        """A voter; or a replica whose removal it does not know to be committed. The
        latter keeps standing for election (its votes come from the new set only):
        otherwise a leader that removed itself and lost the others before the removal
        committed would hold the longest log, and the one voter left, needing its vote,
        could never be elected with the shorter one."""
        return self.is_voter or (self._removed_at is not None and self._removed_at >= self.high_watermark)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def start(self, now_ms: int, persisted: QuorumStateRecord | None = None) -> None:
        """Begin from the persisted ``quorum-state`` (None: there is none). A record no
        election can have written (``quorum_state_problem``: an epoch above
        ``MAX_EPOCH``, say, left by a forged request before epochs were checked) is
        discarded, the reason kept in ``discarded_quorum_state`` for the driver to
        report, and the replica starts as Kafka's does without the file: unattached
        in the log's last epoch, with no vote; the new record is persisted at once."""
        self.high_watermark = max(self.high_watermark, self.log.log_start_offset)   # a snapshot is committed
        if persisted is not None:
            self.discarded_quorum_state = quorum_state_problem(persisted)
            if self.discarded_quorum_state is not None:
                persisted = None
                self.quorum_state_changed = True
        if persisted is not None:
            self.epoch, self.voted_for, self.leader_id = persisted.epoch, persisted.voted_for, persisted.leader_id
            if self.leader_id not in self.voters:
                self.leader_id = NO_LEADER          # not a voter (any more): nothing to follow
            self.state = VOTED if self.voted_for != NO_LEADER else UNATTACHED
        log_epoch = min(self.log.last_epoch, MAX_EPOCH)
        if self.epoch < log_epoch:
            # Kafka's rule: never resume an epoch older than the log's last (no file, or
            # a discarded one): a vote may have been cast in any epoch up to it.
            self.epoch, self.voted_for, self.leader_id, self.state = log_epoch, NO_LEADER, NO_LEADER, UNATTACHED
            self.quorum_state_changed = True
        if persisted is not None and self.epoch == persisted.epoch:
            if self.leader_id == self.node_id:
                self.leader_id, self.state = NO_LEADER, UNATTACHED   # a restarted leader starts over
            elif self.leader_id != NO_LEADER:
                self._become_follower(self.leader_id, now_ms, persist=False)
                return
        if self.voters == (self.node_id,):
            self._become_candidate(now_ms)      # the only voter: no one to wait for (as Kafka's)
            return
        self._arm_election(now_ms)

    @property
    def epoch_start_offset(self) -> int:
        """The offset of this leader's leader-change entry (the start of its epoch)."""
        return self._epoch_start_offset

    @property
    def is_active_leader(self) -> bool:
        """Leads, and its leader-change entry is committed: every entry before it is
        committed too, so a state machine on top may act (Kafka's controller claims
        leadership only then)."""
        return self.state == LEADER and self.high_watermark > self._epoch_start_offset

    def voter_progress(self) -> dict[int, tuple[int, int]]:
        """The leader's view of each other voter and observer: (log end offset known from
        its last fetch, when that fetch arrived, in ms; -1 if never)."""
        return {replica: (self._follower_end.get(replica, -1), self._last_fetch_ms.get(replica, -1))
                for replica in set(self._follower_end) | set(self._last_fetch_ms)}

    def fetcher_directory(self, replica: int) -> str:
        """The directory id ``replica`` named in its last Fetch to this leader ("" if none)."""
        return self._fetcher_directory.get(replica, "")

    def on_leader_unreachable(self, now_ms: int) -> None:
        """The driver could not reach the leader at all (connection refused or lost): a
        voter need not wait the whole fetch timeout to ask for pre-votes — a leader
        that is alive still has the others, who refuse them (KIP-996) — but waits a
        random fraction of the election timeout, so that two followers who lost the
        same leader at the same instant do not split the vote."""
        if self.state == FOLLOWER and self.may_stand and self._fetch_deadline_ms is not None:
            self._fetch_deadline_ms = min(self._fetch_deadline_ms, now_ms + 1 + self._jitter())

    def _jitter(self) -> int:
        return self.rng.randrange(max(1, self.config.election_timeout_ms // 4))

    def take_outbox(self) -> list[Envelope]:
        out, self._outbox = self._outbox, []
        return out

    def quorum_state(self) -> QuorumStateRecord:
        self.quorum_state_changed = False
        record = QuorumStateRecord(self.epoch, self.voted_for, self.leader_id)
        assert quorum_state_problem(record) is None, f"an impossible quorum state: {record}"
        return record

    def append(self, payloads: list) -> int | None:
        """The leader appends (a controller's records); the offset of the first, or None
        when this replica does not lead."""
        if self.state != LEADER:
            return None
        first = self.log.end_offset
        self.log.append_as_leader(self.epoch, payloads)
        self._maybe_advance_high_watermark()
        return first

    # ------------------------------------------------------------ voter changes (KIP-853)

    @property
    def voters_offset(self) -> int:
        """The offset of the VotersRecord in force (-1: the static or bootstrap set)."""
        return self._voters_offset

    def add_voter(self, voter: Voter, now_ms: int, timeout_ms: int, token: object = None) -> ErrorCode:
        """AddRaftVoter on the leader (Kafka's AddVoterHandler). A refusal is returned
        and changes nothing; NONE means accepted: once ``voter`` (id and directory id)
        has fetched up to the log end as an observer, a VotersRecord with it appended
        is appended, and the answer — NONE once that record is committed by a majority
        of the new set, REQUEST_TIMED_OUT after ``timeout_ms`` — comes out of
        ``take_voter_change_results`` with ``token``."""
        error = self._voter_change_problem()
        if error == ErrorCode.NONE and voter.voter_id in self.voters:
            error = ErrorCode.DUPLICATE_VOTER
        if error == ErrorCode.NONE and (voter.voter_id < 0 or not voter.directory_id):
            error = ErrorCode.INVALID_REQUEST
        if error == ErrorCode.NONE:
            self._voter_change = VoterChange("add", voter, now_ms + timeout_ms, token)
            self._maybe_append_added_voter()
        return error

    def remove_voter(self, voter_id: int, directory_id: str, now_ms: int, timeout_ms: int,
                     token: object = None) -> ErrorCode:
        """RemoveRaftVoter on the leader (Kafka's RemoveVoterHandler): a VotersRecord
        without the voter is appended at once and the answer comes once it is
        committed (by a majority of the new set). A voter not in the set (id and
        directory id), or the last one, is VOTER_NOT_FOUND. A leader that removed
        itself resigns once the record is committed."""
        error = self._voter_change_problem()
        current = {v.voter_id: v for v in self.voter_set}.get(voter_id)
        if error == ErrorCode.NONE and (current is None or current.directory_id != directory_id
                                        or len(self.voter_set) == 1):
            error = ErrorCode.VOTER_NOT_FOUND
        if error == ErrorCode.NONE:
            self._voter_change = VoterChange("remove", current, now_ms + timeout_ms, token)
            self._append_voters(tuple(v for v in self.voter_set if v.voter_id != voter_id))
        return error

    def update_voter(self, voter: Voter, now_ms: int, timeout_ms: int, token: object = None) -> ErrorCode:
        """UpdateRaftVoter on the leader: a voter (same id and directory id) announces
        new endpoints; answered once the VotersRecord carrying them is committed."""
        error = self._voter_change_problem()
        if error == ErrorCode.NONE and voter not in self.voter_set and \
                not any(v.voter_id == voter.voter_id and v.directory_id == voter.directory_id
                        for v in self.voter_set):
            error = ErrorCode.VOTER_NOT_FOUND
        if error == ErrorCode.NONE:
            self._voter_change = VoterChange("update", voter, now_ms + timeout_ms, token)
            self._append_voters(tuple(voter if v.voter_id == voter.voter_id else v for v in self.voter_set))
        return error

    def take_voter_change_results(self) -> list[tuple[object, ErrorCode]]:
        out, self._voter_change_results = self._voter_change_results, []
        return out

    def _voter_change_problem(self) -> ErrorCode:
        """Why no voter change may start now (Kafka's order of checks), or NONE."""
        if self.state != LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.kraft_version < 1:
            return ErrorCode.UNSUPPORTED_VERSION           # static voters: controller.quorum.voters
        if not self.is_active_leader:
            return ErrorCode.REQUEST_TIMED_OUT             # earlier leaders not fenced yet
        if self._voter_change is not None or self._voters_offset >= self.high_watermark:
            return ErrorCode.REQUEST_TIMED_OUT             # one uncommitted change at a time
        return ErrorCode.NONE

    def _maybe_append_added_voter(self) -> None:
        change = self._voter_change
        if change is None or change.kind != "add" or change.offset is not None:
            return
        voter = change.voter
        if voter.voter_id in self._caught_up_ms and \
                self._fetcher_directory.get(voter.voter_id) == voter.directory_id:
            self._append_voters(tuple(sorted(self.voter_set + (voter,), key=lambda v: v.voter_id)))

    def _append_voters(self, voters: tuple[Voter, ...]) -> None:
        assert self.state == LEADER and voters and self._voters_offset < self.high_watermark, \
            "a voter change while another is uncommitted"
        self._voter_change.offset = self.log.end_offset
        self.log.append_voters(self.epoch, voters)
        self._refresh_voters()
        self._maybe_advance_high_watermark()

    def _refresh_voters(self) -> None:
        """The voter set is the log's latest VotersRecord (committed or not), else the
        static set: called whenever the log grows or is cut."""
        found = self.log.last_voters()
        if found is None:
            self._voters_offset, self.voter_set = -1, tuple(Voter(v) for v in self.static_voters)
        else:
            self._voters_offset, self.voter_set = found
            self.kraft_version = max(self.kraft_version, 1)
        self.voters = tuple(v.voter_id for v in self.voter_set)
        self._removed_at = None
        if self._voters_offset >= 0 and not self.is_voter:
            before = self.log.voters_before(self._voters_offset)
            earlier = self.static_voters if before is None else tuple(v.voter_id for v in before)
            if self.node_id in earlier:
                self._removed_at = self._voters_offset

    def _settle_voter_change(self, now_ms: int) -> None:
        """Answer the change in progress once committed (or timed out, or leadership
        lost); a leader whose removal is committed resigns (Kafka's RemoveVoterHandler)."""
        change = self._voter_change
        if change is not None:
            if self.state != LEADER:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif change.offset is not None and self.high_watermark > change.offset:
                error = ErrorCode.NONE
            elif now_ms >= change.deadline_ms:
                error = ErrorCode.REQUEST_TIMED_OUT
            else:
                error = None
            if error is not None:
                self._voter_change = None
                self._voter_change_results.append((change.token, error))
        if self.state == LEADER and not self.is_voter and self.high_watermark > self._voters_offset:
            self._resign(now_ms)

    def next_wakeup_ms(self) -> int | None:
        times = [t for t in (self._election_deadline_ms, self._fetch_deadline_ms, self._next_fetch_ms,
                             self._next_begin_epoch_ms if self.state == LEADER else None,
                             self._voter_change.deadline_ms if self._voter_change is not None else None)
                 if t is not None]
        return min(times) if times else None

    # ------------------------------------------------------------ time

    def on_tick(self, now_ms: int) -> None:
        self._tick(now_ms)
        self._settle_voter_change(now_ms)

    def _tick(self, now_ms: int) -> None:
        if self.state == LEADER:
            live = int(self.is_voter) + sum(1 for v in self.voters if v != self.node_id
                           and now_ms - self._last_fetch_ms.get(v, -1 << 62) <= self.config.fetch_timeout_ms)
            if live < self.majority and now_ms - self._leader_since_ms > self.config.fetch_timeout_ms:
                self._resign(now_ms)                      # check quorum: a minority leader steps down
                return
            if now_ms >= self._next_begin_epoch_ms:
                # BeginQuorumEpoch again to voters that do not fetch (theirs may have been lost).
                self._next_begin_epoch_ms = now_ms + self.config.fetch_timeout_ms // 2
                for voter in self.voters:
                    if voter != self.node_id and now_ms - self._last_fetch_ms.get(voter, -1 << 62) > \
                            self.config.fetch_timeout_ms // 2:
                        self._send(voter, BeginQuorumEpoch(self.epoch, self.node_id))
            return
        if self.state == FOLLOWER:
            if self._fetch_deadline_ms is not None and now_ms >= self._fetch_deadline_ms:
                if self.may_stand:
                    self._start_pre_vote(now_ms)
                elif self.kraft_version >= 1:
                    # An observer whose leader went quiet looks for the leader again.
                    self.state, self.leader_id = UNATTACHED, NO_LEADER
                    self.quorum_state_changed = True
                    self._send_discovery_fetch(now_ms)
                else:
                    self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
                    self._send_fetch(now_ms)
                return
            if self._next_fetch_ms is not None and now_ms >= self._next_fetch_ms:
                self._send_fetch(now_ms)          # the next fetch, or again if the answer was lost
            return
        if self._election_deadline_ms is not None and now_ms >= self._election_deadline_ms and not self.may_stand:
            self._send_discovery_fetch(now_ms)
        elif self._election_deadline_ms is not None and now_ms >= self._election_deadline_ms:
            # A split or lost vote starts over with pre-votes (as etcd's candidates do): a
            # candidate whose log the voters refuse (a replica removed while it led, say)
            # would otherwise raise the epoch every timeout, resetting their election timers.
            self._start_pre_vote(now_ms)

    # ------------------------------------------------------------ messages

    def on_message(self, source: int, message, now_ms: int) -> ErrorCode:
        """Feed one message from ``source``. A request is checked first
        (``check_request``): a refused one changes nothing, is answered (Vote, Fetch,
        FetchSnapshot) with the error, and the error is returned. A response that
        cannot be true (an epoch above ``MAX_EPOCH``, an error answer) is dropped."""
        if isinstance(message, _REQUESTS):
            error = self.check_request(source, message, now_ms)
            if error != ErrorCode.NONE:
                self.refused[error] = self.refused.get(error, 0) + 1
                self._refuse(source, message, error)
                return error
            if isinstance(message, (VoteRequest, BeginQuorumEpoch)) and not getattr(message, "pre_vote", False) \
                    and message.epoch > max(self.epoch, self.log.last_epoch + MAX_EPOCH_JUMP):
                self._next_epoch_step_ms = now_ms + self.config.election_timeout_ms   # a step past the window
        else:
            message = self._believable_response(source, message)
            if message is None:
                return ErrorCode.NONE
        handler = getattr(self, "_on_" + type(message).__name__)
        handler(source, message, now_ms)
        self._settle_voter_change(now_ms)
        return ErrorCode.NONE

    def epoch_ceiling(self, now_ms: int | None = None) -> int:
        """The largest epoch a request may bring this replica to (``MAX_EPOCH_JUMP``):
        the log's last epoch + the jump, or the next epoch — at ``now_ms``, unless a
        request already took a step past the window within an election timeout
        (``now_ms`` None: a pre-vote, which moves nothing)."""
        step = 1 if now_ms is None or now_ms >= self._next_epoch_step_ms else 0
        return min(MAX_EPOCH, max(self.log.last_epoch + MAX_EPOCH_JUMP, self.epoch + step))

    def check_request(self, source: int, message, now_ms: int | None = None) -> ErrorCode:
        """Kafka's validation of a Raft request (``KafkaRaftClient``), and this
        replica's epoch bounds; ``ErrorCode.NONE`` when the request may be handled.

        Vote, BeginQuorumEpoch and EndQuorumEpoch are between voters only: an epoch
        older than ours is FENCED_LEADER_EPOCH; a negative sender id, a sender that is
        not who the request names, or this replica itself as the sender is
        INVALID_REQUEST; a sender outside the voter set (or this replica being an
        observer) is INCONSISTENT_VOTER_SET; an epoch above ``epoch_ceiling()`` (so
        never one that cannot be encoded or incremented) is INVALID_REQUEST, and so
        is a BeginQuorumEpoch naming another leader of the epoch whose leader we know.
        A Vote also needs a last epoch and offset that can be true (Kafka's rule:
        not negative; the last epoch below the candidate's epoch, or at most equal
        for a pre-vote). A Fetch or FetchSnapshot needs an epoch in range, a
        fetcher other than this replica, and for a Fetch a fetch offset >= 0 and a
        last fetched epoch within -1 (nothing fetched yet) .. its epoch."""
        invalid = ErrorCode.INVALID_REQUEST
        if isinstance(message, (FetchRequest, FetchSnapshotRequest)):
            if not -1 <= message.epoch <= MAX_EPOCH or message.replica_id < 0 or message.replica_id == self.node_id \
                    or source != message.replica_id:
                return invalid
            if isinstance(message, FetchRequest):
                if message.fetch_offset < 0 or message.last_fetched_epoch < -1 or \
                        (message.epoch >= 0 and message.last_fetched_epoch > message.epoch):
                    return invalid
            elif min(message.snapshot_id) < 0:
                return invalid
            return ErrorCode.NONE
        if isinstance(message, VoteRequest):
            sender = message.candidate_id
            if message.end_offset < 0 or message.last_epoch < 0 or message.last_epoch > message.epoch or \
                    (not message.pre_vote and message.last_epoch == message.epoch):
                return invalid
        else:
            sender = message.leader_id
        if not 0 <= message.epoch <= MAX_EPOCH:
            return invalid
        if message.epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if sender < 0 or sender != source or sender == self.node_id:
            return invalid
        if self.kraft_version < 1 and (not self.is_voter or sender not in self.voters):
            # Static voters only. With dynamic voters (KIP-853) a replica's set may be
            # stale (a voter just added may not have its VotersRecord yet), so any
            # replica hears a leader or candidate and may grant a vote, as Kafka's does:
            # votes count only from the candidate's own voter set.
            return ErrorCode.INCONSISTENT_VOTER_SET
        if message.epoch > self.epoch_ceiling(None if getattr(message, "pre_vote", False) else now_ms):
            return invalid
        if isinstance(message, BeginQuorumEpoch) and message.epoch == self.epoch and \
                self.leader_id not in (NO_LEADER, message.leader_id):
            return invalid            # a second leader of an epoch whose leader we know cannot be
        return ErrorCode.NONE

    def _refuse(self, source: int, message, error: ErrorCode) -> None:
        if isinstance(message, VoteRequest):
            self._send(source, VoteResponse(self.epoch, False, self.leader_id, pre_vote=message.pre_vote, error=error))
        elif isinstance(message, FetchRequest):
            self._send(source, FetchResponse(self.epoch, self.leader_id, fenced=True, error=error,
                                             for_fetch=(message.fetch_offset, message.last_fetched_epoch)))
        elif isinstance(message, FetchSnapshotRequest):
            self._send(source, FetchSnapshotResponse(self.epoch, self.leader_id, message.snapshot_id, None, error))

    def _believable_response(self, source: int, response):
        """``response``, with a leader that is not another voter forgotten; or None (drop
        it) when its epoch is impossible or it is an error other than an older epoch."""
        if not 0 <= response.epoch <= MAX_EPOCH or \
                response.error not in (ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH):
            return None
        outside = response.leader_id not in self.voters and self.kraft_version < 1
        if response.leader_id != NO_LEADER and (outside or response.leader_id == self.node_id):
            if isinstance(response, FetchResponse) and response.epoch > self.epoch:
                return None       # a newer epoch with a leader that cannot be: nothing to follow
            response = dataclasses.replace(response, leader_id=NO_LEADER)
        return response

    def _on_VoteRequest(self, source: int, request: VoteRequest, now_ms: int) -> None:
        up_to_date = (request.last_epoch, request.end_offset) >= (self.log.last_epoch, self.log.end_offset)
        if request.pre_vote:
            # Granted only by a voter that does not hear from a leader of its own.
            hears_leader = self.state == LEADER or (self.state == FOLLOWER and self._fetch_deadline_ms is not None
                                                    and now_ms < self._fetch_deadline_ms)
            granted = request.epoch > self.epoch and up_to_date and not hears_leader
            self._send(source, VoteResponse(self.epoch, granted, self.leader_id if hears_leader else NO_LEADER,
                                            pre_vote=True))
            return
        if request.epoch > self.epoch:
            self._become_unattached(request.epoch, now_ms)
        granted = False
        if request.epoch == self.epoch and self.state in (UNATTACHED, VOTED) and up_to_date \
                and self.voted_for in (NO_LEADER, request.candidate_id):
            granted = True
            if self.voted_for != request.candidate_id:
                self.voted_for, self.state = request.candidate_id, VOTED
                self.quorum_state_changed = True
            self._arm_election(now_ms)
        self._send(source, VoteResponse(self.epoch, granted, self.leader_id))

    def _on_VoteResponse(self, source: int, response: VoteResponse, now_ms: int) -> None:
        if response.epoch > self.epoch:
            # A newer epoch: follow its leader if the voter knows one (KIP-996), else wait in it.
            if response.leader_id not in (NO_LEADER, self.node_id):
                self.epoch, self.voted_for = response.epoch, NO_LEADER
                self._become_follower(response.leader_id, now_ms)
            else:
                self._become_unattached(response.epoch, now_ms)
            return
        if response.pre_vote and self.state == PROSPECTIVE and response.epoch == self.epoch \
                and response.leader_id not in (NO_LEADER, self.node_id) \
                and (self.epoch, response.leader_id) != self._abandoned_leader:
            # KIP-996: the epoch has a leader a voter hears, follow it — unless it is the
            # one this replica just gave up on (the voter asked may not have noticed its
            # death yet). A stale voter the leader no longer counts learns its set so.
            self._become_follower(response.leader_id, now_ms)
            return
        if source not in self.voters:
            return                      # only the voter set's votes count towards its majority
        if response.pre_vote and self.state == PROSPECTIVE and response.granted:
            self._votes.add(source)
            if len(self._votes) >= self.majority:
                self._become_candidate(now_ms)
        elif not response.pre_vote and self.state == CANDIDATE and response.epoch == self.epoch and response.granted:
            self._votes.add(source)
            if len(self._votes) >= self.majority:
                self._become_leader(now_ms)

    def _on_BeginQuorumEpoch(self, source: int, message: BeginQuorumEpoch, now_ms: int) -> None:
        if message.epoch > self.epoch or (message.epoch == self.epoch and self.state != LEADER):
            if message.epoch > self.epoch:
                self.epoch, self.voted_for = message.epoch, NO_LEADER
            self._become_follower(message.leader_id, now_ms)

    def _on_QuorumEpochResponse(self, source: int, response: QuorumEpochResponse, now_ms: int) -> None:
        """A voter answered our BeginQuorumEpoch or EndQuorumEpoch from a newer epoch (it
        refused ours as FENCED_LEADER_EPOCH): that epoch exists, so this replica — a
        leader of an older one, typically — moves to it (Kafka's
        ``maybeHandleCommonResponse``). Seed 41654: a voter that had stood alone at epoch
        4 behind a partition refused the epoch-3 leader's BeginQuorumEpoch for ever, and
        its pre-votes, at 4, could not move the others (a pre-vote changes no epoch)."""
        if response.epoch <= self.epoch:
            return
        if response.leader_id not in (NO_LEADER, self.node_id):
            self.epoch, self.voted_for = response.epoch, NO_LEADER
            self._become_follower(response.leader_id, now_ms)
        else:
            self._become_unattached(response.epoch, now_ms)

    def _on_EndQuorumEpoch(self, source: int, message: EndQuorumEpoch, now_ms: int) -> None:
        if message.epoch == self.epoch and self.state == FOLLOWER and self.leader_id == message.leader_id \
                and self.may_stand:
            self._start_pre_vote(now_ms)

    def _on_FetchRequest(self, source: int, request: FetchRequest, now_ms: int) -> None:
        answering = (request.fetch_offset, request.last_fetched_epoch)

        def reply(response: FetchResponse) -> None:
            self._send(source, dataclasses.replace(response, for_fetch=answering))
        if self.state != LEADER or request.epoch > self.epoch:
            reply(FetchResponse(self.epoch, self.leader_id, fenced=True))
            return
        if request.epoch < self.epoch and request.epoch >= 0:
            pass                                   # an old epoch's fetcher learns the leader below
        log_ = self.log
        if request.fetch_offset < log_.log_start_offset:
            # What it needs is only in a snapshot now (KIP-630): it fetches that first.
            reply(FetchResponse(self.epoch, self.node_id, self.high_watermark, snapshot_id=log_.snapshot_id()))
            return
        if request.fetch_offset > 0 and request.last_fetched_epoch >= 0:
            epoch, end = log_.end_offset_for_epoch(request.last_fetched_epoch)
            if epoch < request.last_fetched_epoch or end < request.fetch_offset:
                if end < log_.log_start_offset:
                    reply(FetchResponse(self.epoch, self.node_id, self.high_watermark,
                                        snapshot_id=log_.snapshot_id()))
                    return
                reply(FetchResponse(self.epoch, self.node_id, self.high_watermark, diverging=(epoch, end)))
                return
        if request.fetch_offset > log_.end_offset:
            reply(FetchResponse(self.epoch, self.node_id, self.high_watermark,
                                diverging=log_.end_offset_for_epoch(log_.last_epoch)))
            return
        self._follower_end[source] = request.fetch_offset
        self._last_fetch_ms[source] = now_ms
        self._fetcher_directory[source] = request.replica_directory_id
        if request.fetch_offset >= log_.end_offset:
            self._caught_up_ms[source] = now_ms        # caught up once (Kafka's lastCaughtUpTimestamp)
        if source in self.voters:
            self._maybe_advance_high_watermark()
        self._maybe_append_added_voter()
        entries = tuple(log_.read_entries(request.fetch_offset, self.config.max_fetch_entries))
        reply(FetchResponse(self.epoch, self.node_id, self.high_watermark, request.fetch_offset, entries))

    def _on_FetchResponse(self, source: int, response: FetchResponse, now_ms: int) -> None:
        observer_learns = not self.is_voter and self.state != FOLLOWER and response.epoch == self.epoch
        if (response.epoch > self.epoch or observer_learns) and response.leader_id != NO_LEADER:
            self._fetch_in_flight = False
            self.epoch, self.voted_for = response.epoch, NO_LEADER
            self._become_follower(response.leader_id, now_ms)
            return
        if response.for_fetch is not None and self._fetch_sent is not None and response.for_fetch != self._fetch_sent:
            return      # the answer to a superseded fetch (a resend's twin): acting on it could cut committed entries
        self._fetch_in_flight = False
        if self.state != FOLLOWER or response.epoch != self.epoch or response.fenced:
            if response.fenced and self.state == FOLLOWER:
                self._next_fetch_ms = now_ms + self.config.fetch_interval_ms
                if source == self.leader_id and response.epoch == self.epoch and response.leader_id == NO_LEADER:
                    self.on_leader_unreachable(now_ms)     # our leader says it leads no more (it restarted)
            return
        self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms + self._jitter()
        if response.snapshot_id is not None:
            self._send(self.leader_id, FetchSnapshotRequest(self.epoch, self.node_id, response.snapshot_id))
            self._fetch_in_flight = True
            self._next_fetch_ms = now_ms + self.config.fetch_timeout_ms // 2      # ask again if lost
            return
        if response.diverging is not None:
            # Kafka's truncateToEndOffset: the leader's (epoch, end) against our own end of
            # that epoch; an epoch we never had ends where our largest earlier one ends.
            epoch, end = response.diverging
            local_epoch, local_end = self.log.end_offset_for_epoch(epoch)
            cut = min(end, local_end) if local_epoch == epoch else local_end
            # Committed entries are the leader's too: never below the high watermark.
            self.log.truncate_to(max(min(cut, self.log.end_offset), min(self.high_watermark, self.log.end_offset)))
            self.high_watermark = min(self.high_watermark, self.log.end_offset)
            self._refresh_voters()
            self._send_fetch(now_ms)
            return
        if response.entries and response.start_offset == self.log.end_offset:
            self.log.append_entries(response.start_offset, list(response.entries))
            self._refresh_voters()
        self.high_watermark = max(self.high_watermark, min(response.high_watermark, self.log.end_offset))
        if response.entries:
            self._send_fetch(now_ms)
        else:
            self._next_fetch_ms = now_ms + self.config.fetch_interval_ms

    def _on_FetchSnapshotRequest(self, source: int, request: FetchSnapshotRequest, now_ms: int) -> None:
        data = None
        if self.state == LEADER and request.epoch == self.epoch:
            data = self.log.read_snapshot(request.snapshot_id)
        self._send(source, FetchSnapshotResponse(self.epoch, self.leader_id, request.snapshot_id, data))

    def _on_FetchSnapshotResponse(self, source: int, response: FetchSnapshotResponse, now_ms: int) -> None:
        self._fetch_in_flight = False
        if self.state != FOLLOWER or response.epoch != self.epoch or source != self.leader_id:
            return
        if response.data is not None:
            end, epoch = response.snapshot_id
            if end > self.log.end_offset or self.log.log_start_offset < end:
                self.log.install_snapshot(end, epoch, response.data)
                self._refresh_voters()
                # A snapshot holds only committed records.
                self.high_watermark = max(self.high_watermark, end)
        self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms + self._jitter()
        self._send_fetch(now_ms)

    # ------------------------------------------------------------ transitions

    def _send(self, destination: int, message) -> None:
        self._outbox.append(Envelope(self.node_id, destination, message))

    def _arm_election(self, now_ms: int) -> None:
        timeout = self.config.election_timeout_ms
        self._election_deadline_ms = now_ms + timeout + self.rng.randrange(timeout)
        self._fetch_deadline_ms = self._next_fetch_ms = None

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        self.epoch, self.voted_for, self.leader_id, self.state = epoch, NO_LEADER, NO_LEADER, UNATTACHED
        self.quorum_state_changed = True
        self._arm_election(now_ms)

    def _epoch_space_left(self, now_ms: int) -> bool:
        """False at ``MAX_EPOCH``: no election can be held (its epoch would not encode)."""
        if self.epoch < MAX_EPOCH:
            return True
        self.epoch_exhausted = True
        self.state, self.leader_id = (VOTED if self.voted_for != NO_LEADER else UNATTACHED), NO_LEADER
        self._arm_election(now_ms)
        return False

    def _start_pre_vote(self, now_ms: int) -> None:
        if not self._epoch_space_left(now_ms):
            return
        # Only for the first round after giving a leader up: a leader that is alive
        # (its answers were lost for a while) is followed again from the second on.
        self._abandoned_leader = (self.epoch, self.leader_id) \
            if self.state == FOLLOWER and self.leader_id != self.node_id else None
        self.state, self.leader_id = PROSPECTIVE, NO_LEADER
        self._votes = {self.node_id} & set(self.voters)
        self._arm_election(now_ms)
        if len(self._votes) >= self.majority:
            self._become_candidate(now_ms)
            return
        for voter in self.voters:
            if voter != self.node_id:
                self._send(voter, VoteRequest(self.epoch + 1, self.node_id, self.log.last_epoch,
                                              self.log.end_offset, pre_vote=True))

    def _become_candidate(self, now_ms: int) -> None:
        if not self._epoch_space_left(now_ms):
            return
        self.epoch += 1
        self.state, self.voted_for, self.leader_id = CANDIDATE, self.node_id, NO_LEADER
        self.quorum_state_changed = True
        self._votes = {self.node_id} & set(self.voters)
        self._arm_election(now_ms)
        if len(self._votes) >= self.majority:
            self._become_leader(now_ms)
            return
        for voter in self.voters:
            if voter != self.node_id:
                self._send(voter, VoteRequest(self.epoch, self.node_id, self.log.last_epoch, self.log.end_offset))

    def _become_leader(self, now_ms: int) -> None:
        self.state, self.leader_id = LEADER, self.node_id
        self.quorum_state_changed = True
        self._election_deadline_ms = self._fetch_deadline_ms = self._next_fetch_ms = None
        self._follower_end = {}
        self._last_fetch_ms = {}
        self._fetcher_directory, self._caught_up_ms = {}, {}
        self._leader_since_ms = now_ms
        self._next_begin_epoch_ms = now_ms + self.config.fetch_timeout_ms // 2
        # KRaft's leader writes a LeaderChangeMessage control record first: its epoch's start.
        self._epoch_start_offset = self.log.end_offset
        self.log.append_leader_change(self.epoch, self.node_id)
        self._maybe_advance_high_watermark()
        for voter in self.voters:
            if voter != self.node_id:
                self._send(voter, BeginQuorumEpoch(self.epoch, self.node_id))

    def _become_follower(self, leader_id: int, now_ms: int, persist: bool = True) -> None:
        self.state, self.leader_id = FOLLOWER, leader_id
        if persist:
            self.quorum_state_changed = True
        self._election_deadline_ms = None
        self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms + self._jitter()
        self._fetch_in_flight = False
        self._send_fetch(now_ms)

    def _resign(self, now_ms: int) -> None:
        for voter in self.voters:
            if voter != self.node_id:
                self._send(voter, EndQuorumEpoch(self.epoch, self.node_id))
        self.state, self.leader_id = UNATTACHED, NO_LEADER
        self.quorum_state_changed = True
        self._arm_election(now_ms)

    def _send_fetch(self, now_ms: int) -> None:
        if self.leader_id in (NO_LEADER, self.node_id):
            return
        end = self.log.end_offset
        last_epoch = self.log.epoch_at(end - 1) if end > 0 else -1
        self._send(self.leader_id, FetchRequest(self.epoch, self.node_id, end, last_epoch, self.directory_id))
        self._fetch_sent = (end, last_epoch)
        self._fetch_in_flight = True
        self._next_fetch_ms = now_ms + self.config.fetch_timeout_ms // 2      # resend if the answer is lost

    def _send_discovery_fetch(self, now_ms: int) -> None:
        """An observer that follows no leader (a new controller started with only
        ``controller.quorum.bootstrap.servers``, or a removed voter) fetches from the
        voters it knows, else the bootstrap servers, in turn: the answer names the leader."""
        targets = [v for v in self.voters if v != self.node_id] or list(self.bootstrap_servers)
        self._arm_election(now_ms)
        if not targets:
            return
        target = targets[self._discovery_index % len(targets)]
        self._discovery_index += 1
        end = self.log.end_offset
        last_epoch = self.log.epoch_at(end - 1) if end > 0 else -1
        self._send(target, FetchRequest(self.epoch, self.node_id, end, last_epoch, self.directory_id))
        self._fetch_sent = (end, last_epoch)

    def _maybe_advance_high_watermark(self) -> None:
        # A majority of the voter set in force — the log's latest, even uncommitted, so a
        # change counts from its append on; a leader being removed no longer counts itself.
        ends = sorted((self.log.end_offset if v == self.node_id else self._follower_end.get(v, 0)
                       for v in self.voters), reverse=True)
        candidate = ends[self.majority - 1]
        # Only once the majority holds an entry of this epoch (Raft's commit rule).
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
