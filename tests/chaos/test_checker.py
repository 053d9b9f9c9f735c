"""The chaos checker on hand-made histories: it must catch each kind of failure."""

from tidelog.chaos.checker import History, check


def _history() -> History:
    h = History()
    for i in range(6):
        value = b"%09d" % i
        h.sent.append((0, value))
        h.attempts[value] = 1
        h.acked.append((0, i, value))
    h.final = {0: [(i, b"%09d" % i) for i in range(6)]}
    h.consumed = {0: [(i, b"%09d" % i) for i in range(4)]}
    return h


def test_a_clean_history_passes():
    report = check(_history())
    assert report.ok, report.summary()
    assert (report.acknowledged, report.duplicates, report.consumed) == (6, 0, 4)


def test_a_lost_acknowledged_write_is_caught():
    h = _history()
    h.final[0] = h.final[0][:5]
    report = check(h)
    assert not report.ok and report.lost == [(0, 5, b"000000005", None)]


def test_a_write_that_moved_offset_is_lost():
    h = _history()
    h.final[0][4], h.final[0][5] = (4, b"000000005"), (5, b"000000004")
    assert len(check(h).lost) == 2


def test_duplicates_need_as_many_attempts():
    h = _history()
    h.final[0].append((6, b"000000005"))
    assert not check(h).ok and check(h).unexplained_duplicates == [(b"000000005", 2, 1)]
    h.attempts[b"000000005"] = 2          # the producer did send it twice
    report = check(h)
    assert report.ok and report.duplicates == 1


def test_order_of_first_copies_follows_production():
    h = _history()
    h.final[0][2], h.final[0][3] = (2, b"000000003"), (3, b"000000002")
    h.acked = [(0, 3, b"000000002") if v == b"000000002" else (0, 2, b"000000003") if v == b"000000003"
               else (p, o, v) for p, o, v in h.acked]
    report = check(h)
    assert report.order_violations and not report.lost


def test_a_consumer_that_read_a_record_later_truncated_is_caught():
    h = _history()
    h.consumed[0].append((4, b"uncommitted"))
    report = check(h)
    assert not report.ok and report.read_violations[0][:2] == (0, 4)


def test_a_consumer_skipping_offsets_is_caught():
    h = _history()
    h.consumed[0] = [(0, b"000000000"), (2, b"000000002")]
    assert check(h).read_violations == [(0, 2, b"000000002", "after offset 0")]
