"""State machines as tables: one mechanism for every enum-with-transitions.

A table maps ``state → {event → next state}``. ``transition`` is the only way a
state machine here moves, and an event with no entry raises
``IllegalTransition`` — an ``AssertionError``, because it can only mean a bug,
and bugs stop the broker (docs/broker.md, "Errors"). ``mermaid`` draws a table,
so the docs' diagrams are generated from the code rather than drawn beside it.

Users: the broker lifecycle (``tidelog.broker.lifecycle``), a leader partition's
ISR-change state (``tidelog.replication.partition``), a partition's hosting on a
broker (``tidelog.replication.replica_manager``) and a follower's partition fetch
state (``tidelog.replication.fetcher``).
"""

from __future__ import annotations

import enum
from typing import Mapping, TypeVar

State = TypeVar("State", bound=enum.Enum)
Table = Mapping[State, Mapping[enum.Enum, State]]


class IllegalTransition(AssertionError):
    """An event arrived in a state that has no transition for it: a bug."""


def transition(table: Table, state: State, event: enum.Enum, what: str = "state machine") -> State:
    try:
        return table[state][event]
    except KeyError:
        raise IllegalTransition(f"{what}: no transition from {state.name} on {event.name}") from None


def mermaid(table: Table, initial: enum.Enum | None = None) -> str:
    """The table as a Mermaid state diagram."""
    lines = ["stateDiagram-v2"]
    if initial is not None:
        lines.append(f"    [*] --> {initial.name}")
    for state, moves in table.items():
        for event, target in moves.items():
            label = event.value if isinstance(event.value, str) else event.name.lower().replace("_", " ")
            lines.append(f"    {state.name} --> {target.name}: {label}")
    return "\n".join(lines)
