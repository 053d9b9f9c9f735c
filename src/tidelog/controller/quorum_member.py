"""A controller in a Raft quorum: active only while its replica leads (sans-I/O).

Theory of operation. ``QuorumMember`` joins a ``QuorumController`` (whose
``MetadataLog`` is the quorum's log, ``raft/metadata_log.py``) to the
``RaftReplica`` under it. The driver calls ``on_quorum_change()`` after every
Raft input that may have moved leadership or the high watermark:

* the replica became the leader and its epoch's first entry is committed (so is
  everything before it) → **activate**: rebuild the managers from the committed
  log (``renounce()``), which also gives every registered broker a fresh session;
  on a new cluster, write the bootstrap feature levels (``maybe_bootstrap``);
* it stopped leading → **deactivate**: writes waiting for their commit are told
  they failed (their callers answer NOT_CONTROLLER) and the managers are rebuilt
  from committed records, dropping what this leader appended and never committed;
* in every case the committed image is published (``on_commit``) and the writes
  now committed are told so.

``after_commit(offset, done)`` is how a write's response waits: ``done(True)``
once the quorum's high watermark passes ``offset``, ``done(False)`` if leadership
is lost first. The network server and the simulator both drive this class, so
the controller's failover rules are one mechanism.
"""

from __future__ import annotations

from typing import Callable

from tidelog.controller.quorum_controller import QuorumController
from tidelog.raft.replica import RaftReplica

ACTIVATED, DEACTIVATED = "activated", "deactivated"


class QuorumMember:
    def __init__(self, controller: QuorumController, replica: RaftReplica):
        self.controller = controller
        self.replica = replica
        self.active = False
        self._waiting: list[tuple[int, Callable[[bool], None]]] = []

    @property
    def committed_offset(self) -> int:
        return self.controller.committed_offset

    def on_quorum_change(self) -> str | None:
        """Follow the replica: (de)activate, publish, finish committed writes. Returns
        ACTIVATED, DEACTIVATED or None."""
        change = None
        leads = self.replica.is_active_leader
        if leads and not self.active:
            self.controller.renounce()
            self.controller.co_located_broker_id = None      # only a process restart loses it
            self.active, change = True, ACTIVATED
            self.controller.maybe_bootstrap()                # a new cluster's feature levels
        elif not leads and self.active:
            self.active, change = False, DEACTIVATED
            waiting, self._waiting = self._waiting, []
            for _, done in waiting:
                done(False)
            self.controller.renounce()
        self.controller.on_commit()
        committed = self.controller.committed_offset
        done_now = [done for offset, done in self._waiting if offset <= committed]
        self._waiting = [(offset, done) for offset, done in self._waiting if offset > committed]
        for done in done_now:
            done(True)
        return change

    def after_commit(self, offset: int, done: Callable[[bool], None]) -> None:
        """``done(True)`` once ``offset`` is committed (at once if it is), ``done(False)``
        if this member stops being active first."""
        if offset <= self.controller.committed_offset:
            done(True)
        elif not self.active:
            done(False)
        else:
            self._waiting.append((offset, done))
