"""Every state machine is one table (tidelog.core.states): complete, reachable,
and an event without an entry is a bug that raises."""

import pytest

from tidelog.broker.lifecycle import TRANSITIONS as LIFECYCLE, BrokerState
from tidelog.core.states import IllegalTransition, mermaid, transition
from tidelog.replication.fetcher import FETCH_TRANSITIONS, FetchEvent, FetchState
from tidelog.replication.partition import ISR_TRANSITIONS, IsrEvent, IsrState
from tidelog.replication.replica_manager import HOSTING_TRANSITIONS, Hosting, HostingEvent

TABLES = {
    "lifecycle": (LIFECYCLE, BrokerState, None, BrokerState.NOT_RUNNING),
    "isr": (ISR_TRANSITIONS, IsrState, IsrEvent, IsrState.COMMITTED),
    "hosting": (HOSTING_TRANSITIONS, Hosting, HostingEvent, Hosting.NONE),
    "fetch": (FETCH_TRANSITIONS, FetchState, FetchEvent, None),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_state_has_a_row_and_is_reachable(name):
    table, states, _, start = TABLES[name]
    assert set(table) == set(states)
    if start is None:
        return            # a fetch state starts wherever _initial_state puts it
    seen, todo = {start}, [start]
    while todo:
        for target in table[todo.pop()].values():
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert seen == set(states)


@pytest.mark.parametrize("name", ["isr", "hosting", "fetch"])
def test_an_event_without_an_entry_raises(name):
    table, states, events, _ = TABLES[name]
    for state in states:
        for event in events:
            if event in table[state]:
                assert transition(table, state, event) == table[state][event]
            else:
                with pytest.raises(IllegalTransition):
                    transition(table, state, event)


def test_a_pending_isr_change_cannot_be_proposed_again():
    with pytest.raises(IllegalTransition, match="PENDING_SHRINK on PROPOSE_EXPAND"):
        transition(ISR_TRANSITIONS, IsrState.PENDING_SHRINK, IsrEvent.PROPOSE_EXPAND, "t-0 ISR")


def test_tables_draw_as_mermaid():
    text = mermaid(ISR_TRANSITIONS, IsrState.COMMITTED)
    assert text.splitlines()[:3] == ["stateDiagram-v2", "    [*] --> COMMITTED",
                                     "    COMMITTED --> PENDING_EXPAND: propose expand"]


def test_the_diagrams_in_docs_replication_md_are_the_tables():
    import os
    import re
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "replication.md")
    with open(path, encoding="utf-8") as f:
        diagrams = re.findall(r"```mermaid\n(.*?)\n```", f.read(), re.S)
    assert diagrams == [mermaid(ISR_TRANSITIONS, IsrState.COMMITTED), mermaid(HOSTING_TRANSITIONS, Hosting.NONE),
                        mermaid(FETCH_TRANSITIONS)]
