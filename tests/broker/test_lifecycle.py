"""The broker lifecycle table: complete, illegal moves raise, the docs match it."""

import os
import re

import pytest

from tidelog.broker.lifecycle import (
    TRANSITIONS,
    BrokerState,
    IllegalTransition,
    LifecycleEvent,
    mermaid,
    next_state,
)

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "broker.md")


def test_every_state_has_a_row():
    assert set(TRANSITIONS) == set(BrokerState)


@pytest.mark.parametrize("state", list(BrokerState))
@pytest.mark.parametrize("event", list(LifecycleEvent))
def test_an_event_without_a_transition_is_a_programming_error(state, event):
    if event in TRANSITIONS[state]:
        assert next_state(state, event) == TRANSITIONS[state][event]
    else:
        with pytest.raises(IllegalTransition):
            next_state(state, event)
        assert issubclass(IllegalTransition, AssertionError)   # the fault handler stops the broker


def _reachable(start):
    seen, todo = {start}, [start]
    while todo:
        for target in TRANSITIONS[todo.pop()].values():
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_every_state_is_reachable_and_every_state_can_stop():
    assert _reachable(BrokerState.NOT_RUNNING) == set(BrokerState)
    for state in BrokerState:
        assert BrokerState.NOT_RUNNING in _reachable(state) or state == BrokerState.NOT_RUNNING


def test_the_diagram_in_docs_broker_md_is_the_table():
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    diagrams = re.findall(r"```mermaid\n(.*?)\n```", text, re.S)
    assert diagrams, "docs/broker.md has no mermaid diagram"
    assert diagrams[0] == mermaid(), "regenerate the diagram: python -c 'from tidelog.broker.lifecycle import mermaid; print(mermaid())'"
