"""The purgatory's completion rules."""

import pytest

from tidelog.replication.purgatory import DelayedOperation, Purgatory, PurgatoryFullError


class WaitFor(DelayedOperation):
    """Completes when ``state["value"] >= target``; records how it completed."""

    def __init__(self, state, target, deadline_ms, log):
        super().__init__(deadline_ms)
        self.state, self.target, self.log = state, target, log

    def try_complete(self):
        if self.state["value"] >= self.target:
            return self.force_complete()
        return False

    def on_complete(self):
        self.log.append((self.target, "expired" if self.expired else "done"))


def test_operation_whose_condition_already_holds_completes_without_watching():
    purgatory, log = Purgatory("p"), []
    assert purgatory.try_complete_else_watch(WaitFor({"value": 5}, 5, 100, log), ["k"])
    assert log == [(5, "done")]
    assert purgatory.pending == 0


def test_check_and_complete_wakes_only_satisfied_watchers_of_that_key():
    purgatory, log, state = Purgatory("p"), [], {"value": 0}
    purgatory.try_complete_else_watch(WaitFor(state, 1, 100, log), ["a"])
    purgatory.try_complete_else_watch(WaitFor(state, 2, 100, log), ["a"])
    purgatory.try_complete_else_watch(WaitFor(state, 1, 100, log), ["b"])
    state["value"] = 1
    assert purgatory.check_and_complete("a") == 1
    assert log == [(1, "done")]
    assert purgatory.pending == 2
    assert purgatory.check_and_complete("b") == 1
    state["value"] = 2
    assert purgatory.check_and_complete("a") == 1
    assert purgatory.pending == 0


def test_expiry_completes_once_with_the_timeout_outcome():
    purgatory, log, state = Purgatory("p"), [], {"value": 0}
    purgatory.try_complete_else_watch(WaitFor(state, 1, 100, log), ["a", "b"])
    assert purgatory.next_deadline_ms() == 100
    assert purgatory.expire(99) == 0
    assert purgatory.expire(100) == 1
    state["value"] = 1
    assert purgatory.check_and_complete("a") == 0
    assert purgatory.check_and_complete("b") == 0
    assert log == [(1, "expired")]
    assert purgatory.next_deadline_ms() is None


def test_operation_watched_under_two_keys_completes_exactly_once():
    purgatory, log, state = Purgatory("p"), [], {"value": 0}
    purgatory.try_complete_else_watch(WaitFor(state, 1, 100, log), ["a", "b"])
    state["value"] = 1
    purgatory.check_and_complete("a")
    purgatory.check_and_complete("b")
    purgatory.expire(1000)
    assert log == [(1, "done")]


def test_full_purgatory_fails_fast_and_frees_space_after_completions():
    purgatory, log, state = Purgatory("p", capacity=2), [], {"value": 0}
    purgatory.try_complete_else_watch(WaitFor(state, 1, 100, log), ["a"])
    purgatory.try_complete_else_watch(WaitFor(state, 1, 100, log), ["a"])
    with pytest.raises(PurgatoryFullError):
        purgatory.try_complete_else_watch(WaitFor(state, 1, 100, log), ["a"])
    state["value"] = 1
    purgatory.check_and_complete("a")
    assert not purgatory.try_complete_else_watch(WaitFor(state, 2, 100, log), ["a"])


def test_complete_all_at_shutdown():
    purgatory, log, state = Purgatory("p"), [], {"value": 0}
    for target in (1, 2, 3):
        purgatory.try_complete_else_watch(WaitFor(state, target, 100, log), ["a"])
    assert purgatory.complete_all() == 3
    assert len(log) == 3


class CountingWaitFor(WaitFor):
    def __init__(self, *args):
        super().__init__(*args)
        self.tries = 0

    def try_complete(self):
        self.tries += 1
        return super().try_complete()


def test_check_and_complete_all_tries_each_operation_once_however_many_of_its_keys_move():
    """A follower's delayed fetch watches every partition it asked for; waking all of
    them after a metadata change must try it once, not once per partition (quadratic)."""
    purgatory, log, state = Purgatory("p"), [], {"value": 0}
    keys = [f"p{i}" for i in range(1000)]
    waiting = CountingWaitFor(state, 1, 100, log)
    other = CountingWaitFor(state, 5, 100, log)
    purgatory.try_complete_else_watch(waiting, keys)
    purgatory.try_complete_else_watch(other, keys[:10] + ["elsewhere"])
    tries_before = waiting.tries, other.tries
    assert purgatory.check_and_complete_all(keys) == 0
    assert (waiting.tries, other.tries) == (tries_before[0] + 1, tries_before[1] + 1)
    state["value"] = 1
    assert purgatory.check_and_complete_all(keys) == 1
    assert log == [(1, "done")] and waiting.tries == tries_before[0] + 2
    # The completed operation left the keys' lists; the other still waits under its keys.
    assert purgatory.check_and_complete("p500") == 0 and purgatory.pending == 1
    state["value"] = 5
    assert purgatory.check_and_complete("elsewhere") == 1
    assert log == [(1, "done"), (5, "done")]
