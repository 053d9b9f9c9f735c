"""The broker's lifecycle: its states, the events that move it, and the one table.

Theory of operation. Kafka's ``BrokerLifecycleManager`` keeps a broker in one of
six states (``BrokerState``). Here every move between them is one entry in
``TRANSITIONS``; ``next_state(state, event)`` is the only way to change state and
raises ``IllegalTransition`` (a programming error, which stops the broker) for an
event that has no entry. docs/broker.md's lifecycle diagram is generated from this
table (``mermaid()``) and a test checks the page against it. The mechanism is
shared with every other state machine (``tidelog.core.states``).

    NOT_RUNNING ─start─▶ STARTING ─caught up─▶ RECOVERY ─unfenced─▶ RUNNING
    RUNNING ─controlled shutdown─▶ PENDING_CONTROLLED_SHUTDOWN ─shut down─▶ SHUTTING_DOWN
    SHUTTING_DOWN ─stopped─▶ NOT_RUNNING

``REGISTRATION_LOST`` is the controller answering a heartbeat with
STALE_BROKER_EPOCH: the registration this broker heartbeats for was replaced (a
late registration of an earlier incarnation, or the controller dropped it). The
broker registers again and earns its way back to RUNNING, fenced meanwhile; a
broker already waiting to shut down just stops, since the controller no longer
counts it as a leader.
"""

from __future__ import annotations

import enum

from tidelog.core.states import IllegalTransition, mermaid as draw, transition

__all__ = ["BrokerState", "LifecycleEvent", "TRANSITIONS", "IllegalTransition", "next_state", "mermaid"]


class BrokerState(enum.Enum):
    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


class LifecycleEvent(enum.Enum):
    START = "start"                                  # the process starts: register
    CAUGHT_UP = "caught up"                          # a heartbeat reply says is_caught_up
    UNFENCED = "unfenced"                            # a heartbeat reply says not is_fenced
    REGISTRATION_LOST = "registration lost"          # a heartbeat reply says STALE_BROKER_EPOCH
    CONTROLLED_SHUTDOWN = "controlled shutdown"      # asked to stop while others can lead
    SHUT_DOWN = "shut down"                          # stop now (allowed, timed out, or alone)
    STOPPED = "stopped"                              # logs closed, checkpoints written


S, E = BrokerState, LifecycleEvent

TRANSITIONS: dict[BrokerState, dict[LifecycleEvent, BrokerState]] = {
    S.NOT_RUNNING: {E.START: S.STARTING},
    S.STARTING: {E.CAUGHT_UP: S.RECOVERY, E.REGISTRATION_LOST: S.STARTING, E.SHUT_DOWN: S.SHUTTING_DOWN},
    S.RECOVERY: {E.UNFENCED: S.RUNNING, E.REGISTRATION_LOST: S.STARTING, E.SHUT_DOWN: S.SHUTTING_DOWN},
    S.RUNNING: {E.CONTROLLED_SHUTDOWN: S.PENDING_CONTROLLED_SHUTDOWN, E.REGISTRATION_LOST: S.STARTING,
                E.SHUT_DOWN: S.SHUTTING_DOWN},
    S.PENDING_CONTROLLED_SHUTDOWN: {E.SHUT_DOWN: S.SHUTTING_DOWN, E.REGISTRATION_LOST: S.SHUTTING_DOWN},
    S.SHUTTING_DOWN: {E.STOPPED: S.NOT_RUNNING},
}

del S, E


def next_state(state: BrokerState, event: LifecycleEvent) -> BrokerState:
    return transition(TRANSITIONS, state, event, "broker lifecycle")


def mermaid() -> str:
    """The table as a Mermaid state diagram (docs/broker.md embeds this text)."""
    return draw(TRANSITIONS, initial=BrokerState.NOT_RUNNING)
