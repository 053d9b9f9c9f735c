"""Controller membership on the wire (KIP-853): AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter.

Theory of operation. ``VoterApis`` turns the three requests into the Raft replica's
``add_voter`` / ``remove_voter`` / ``update_voter`` (``raft/replica.py``, docs/raft.md
"Dynamic voters") through ``RaftDriver.change_voters``, and answers once the new
VotersRecord is committed — or at once with the replica's refusal. It is registered
on controller listeners only (``ControllerServer.register``), never on a client
listener; with an authorizer the controller gate asks ALTER on the cluster for Add
and Remove (an operator's call) and CLUSTER_ACTION for Update (a controller's own).

Before the replica sees anything, the request is checked, and a refused one changes
nothing (Kafka's rules, KafkaRaftClient and its Add/RemoveVoterHandler):

* a cluster id other than this cluster's: INCONSISTENT_CLUSTER_ID (none: accepted,
  as the admin client sends none);
* a negative voter id, an Add without a directory id, a negative timeout: INVALID_REQUEST;
* an Add or Update whose listeners are empty, more than ``VOTER_LISTENERS_MAX``, with
  an empty or overlong name or host, a port outside 1..65535, a name twice, or none
  named as this quorum's listener: INVALID_REQUEST.

The replica's answers are Kafka's: NOT_LEADER_OR_FOLLOWER off the leader (the
message names the leader known), UNSUPPORTED_VERSION for a static quorum,
REQUEST_TIMED_OUT while another change is uncommitted (or the new voter does not
catch up within the timeout), DUPLICATE_VOTER, VOTER_NOT_FOUND (an unknown id, a
directory id that is not the voter's, the last voter).
"""

from __future__ import annotations

import uuid

from tidelog.core.errors import ErrorCode
from tidelog.core.limits import VOTER_CHANGE_TIMEOUT_MAX_MS, VOTER_HOST_LENGTH_MAX, VOTER_LISTENERS_MAX
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import ZERO_UUID, millis
from tidelog.raft.replica import Voter

DEFAULT_TIMEOUT_MS = 30_000        # UpdateRaftVoter carries none


class VoterApis:
    def __init__(self, raft, cluster_id: str):
        self.raft = raft                  # server/raft_driver.RaftDriver
        self.cluster_id = cluster_id

    def register(self, dispatcher) -> None:
        dispatcher.register(ApiKey.ADD_RAFT_VOTER, self.handle_add_raft_voter, 0, 1)
        dispatcher.register(ApiKey.REMOVE_RAFT_VOTER, self.handle_remove_raft_voter, 0, 0)
        dispatcher.register(ApiKey.UPDATE_RAFT_VOTER, self.handle_update_raft_voter, 0, 0)

    # ------------------------------------------------------------ handlers

    def handle_add_raft_voter(self, header, request):
        problem = self._problem(request, with_listeners=True, directory_needed=True)
        if problem is None and millis(request.timeout) < 0:
            problem = (ErrorCode.INVALID_REQUEST, f"timeout {millis(request.timeout)} ms is negative")
        if problem is not None:
            return _answer(*problem)
        timeout_ms = min(max(millis(request.timeout), 1), VOTER_CHANGE_TIMEOUT_MAX_MS)
        return self._change("add", self._voter(request), timeout_ms, _answer)

    def handle_remove_raft_voter(self, header, request):
        problem = self._problem(request, with_listeners=False, directory_needed=False)
        if problem is not None:
            return _answer(*problem)
        return self._change("remove", self._voter(request), DEFAULT_TIMEOUT_MS, _answer)

    def handle_update_raft_voter(self, header, request):
        problem = self._problem(request, with_listeners=True, directory_needed=True)
        if problem is not None:
            return self._update_answer(*problem)
        return self._change("update", self._voter(request), DEFAULT_TIMEOUT_MS, self._update_answer)

    # ------------------------------------------------------------ checks

    def _problem(self, request, with_listeners: bool, directory_needed: bool) -> tuple[ErrorCode, str] | None:
        """Why ``request`` is refused before the replica sees it (None: it is not)."""
        cluster_id = getattr(request, "cluster_id", None)
        if cluster_id is not None and cluster_id != self.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID, f"cluster id {cluster_id!r} is not this cluster's"
        if int(request.voter_id) < 0:
            return ErrorCode.INVALID_REQUEST, f"voter id {int(request.voter_id)} is negative"
        if directory_needed and request.voter_directory_id in (None, ZERO_UUID):
            return ErrorCode.INVALID_REQUEST, "the voter's directory id is missing"
        if with_listeners:
            return self._listeners_problem(request.listeners)
        return None

    def _listeners_problem(self, listeners) -> tuple[ErrorCode, str] | None:
        if not listeners:
            return ErrorCode.INVALID_REQUEST, "no listeners: the voter could not be reached"
        if len(listeners) > VOTER_LISTENERS_MAX:
            return ErrorCode.INVALID_REQUEST, f"{len(listeners)} listeners (at most {VOTER_LISTENERS_MAX})"
        names = [str(listener.name).upper() for listener in listeners]
        if len(set(names)) != len(names):
            return ErrorCode.INVALID_REQUEST, "a listener name appears twice"
        for listener in listeners:
            if not listener.name or not listener.host or len(listener.host) > VOTER_HOST_LENGTH_MAX:
                return ErrorCode.INVALID_REQUEST, f"listener {listener.name!r} has an empty or overlong name or host"
            if not 0 < int(listener.port) < 65536:
                return ErrorCode.INVALID_REQUEST, f"listener {listener.name!r} has port {int(listener.port)}"
        if self.raft.listener_name not in names:
            return ErrorCode.INVALID_REQUEST, f"no endpoint for this quorum's listener {self.raft.listener_name}"
        return None

    # ------------------------------------------------------------ the change

    @staticmethod
    def _voter(request) -> Voter:
        directory = request.voter_directory_id
        endpoints = tuple((str(listener.name).upper(), str(listener.host), int(listener.port))
                          for listener in getattr(request, "listeners", ()) or ())
        return Voter(int(request.voter_id), "" if directory in (None, ZERO_UUID) else str(uuid.UUID(str(directory))),
                     endpoints)

    async def _change(self, kind: str, voter: Voter, timeout_ms: int, answer):
        error = await self.raft.change_voters(kind, voter, timeout_ms)
        message = None
        if error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            message = f"not the quorum leader (the leader is {self.raft.replica.leader_id})"
        elif error == ErrorCode.REQUEST_TIMED_OUT:
            message = "another voter change is in progress, or the voter did not catch up in time"
        elif error != ErrorCode.NONE:
            message = f"{kind} voter {voter.voter_id}: {error.name}"
        return answer(error, message)

    def _update_answer(self, error: ErrorCode, message: str | None = None) -> dict:
        replica = self.raft.replica
        host, port = self.raft.addresses.get(replica.leader_id, ("", -1))
        if replica.leader_id == self.raft.node_id and self.raft.own_endpoint():
            _, host, port = self.raft.own_endpoint()
        return {"throttle_time": 0, "error_code": int(error),
                "current_leader": {"leader_id": replica.leader_id, "leader_epoch": replica.epoch,
                                   "host": host, "port": port}}


def _answer(error: ErrorCode, message: str | None = None) -> dict:
    return {"throttle_time": 0, "error_code": int(error), "error_message": message}
