"""The chaos checker: what the clients saw, judged against the final logs (Jepsen style).

Theory of operation. A chaos run records, from the clients only (no peeking
into the brokers):

* every record the producer sent, in order, with its delivery outcome — for
  acks=all, the (partition, offset) it was acknowledged at, or the error;
* how many produce attempts carried each value: the workload retries itself
  (librdkafka's own retries are off), one record in flight per partition, so a
  failed attempt is retried before the partition's next record is sent;
* every record a consumer read during the run, with its (partition, offset);
* after healing, the *final log* of each partition, read from offset 0 to the
  high watermark by a fresh consumer.

``check(history)`` then verifies, per partition:

``lost``           no acknowledged acks=all write is missing from the final log,
                   or found at another offset (min ISR 2, clean election);
``duplicates``     a value appears in the final log at most as many times as
                   produce attempts carried it (a retry after an attempt whose
                   answer was lost may legitimately duplicate it);
``order``          the first copies of acknowledged values appear in the order
                   they were produced (one request in flight per connection);
``read-committed`` every record a consumer read during the faults is in the final
                   log at the same offset — a consumer never saw a record above
                   the high watermark that was later truncated away — and its
                   offsets went up one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class History:
    sent: list[tuple[int, bytes]] = field(default_factory=list)                 # (partition, value)
    acked: list[tuple[int, int, bytes]] = field(default_factory=list)          # (partition, offset, value)
    failed: list[tuple[int, bytes, str]] = field(default_factory=list)         # (partition, value, error)
    attempts: dict[bytes, int] = field(default_factory=dict)                   # value -> produce attempts
    consumed: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)  # partition -> (offset, value)
    final: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)


@dataclass
class Report:
    operations: int = 0
    acknowledged: int = 0
    failed: int = 0
    consumed: int = 0
    final_records: int = 0
    retries: int = 0
    duplicates: int = 0
    unexplained_duplicates: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    order_violations: list = field(default_factory=list)
    read_violations: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (not self.lost and not self.order_violations and not self.read_violations
                and not self.unexplained_duplicates)

    def summary(self) -> str:
        return (f"operations {self.operations}, acknowledged (acks=all) {self.acknowledged}, failed "
                f"{self.failed}, consumed during faults {self.consumed}, final records {self.final_records}, "
                f"producer retries {self.retries}, duplicates {self.duplicates} "
                f"({len(self.unexplained_duplicates)} unexplained), writes lost {len(self.lost)}, "
                f"order violations {len(self.order_violations)}, consumer violations "
                f"{len(self.read_violations)}: {'OK' if self.ok else 'FAILED'}")


def check(history: History) -> Report:
    report = Report(operations=sum(history.attempts.values()) or len(history.sent),
                    acknowledged=len(history.acked), failed=len(history.failed),
                    retries=sum(n - 1 for n in history.attempts.values()))
    final_at: dict[int, dict[int, bytes]] = {p: dict(records) for p, records in history.final.items()}
    report.final_records = sum(len(records) for records in history.final.values())
    # lost: every acknowledged write, at its offset
    for partition, offset, value in history.acked:
        found = final_at.get(partition, {}).get(offset)
        if found != value:
            report.lost.append((partition, offset, value, found))
    # duplicates: extra copies of a value in the final logs
    counts: dict[bytes, int] = {}
    for records in history.final.values():
        for _, value in records:
            counts[value] = counts.get(value, 0) + 1
    report.duplicates = sum(c - 1 for c in counts.values() if c > 1)
    report.unexplained_duplicates = [(v, c, history.attempts.get(v, 0)) for v, c in counts.items()
                                     if c > max(1, history.attempts.get(v, 0))]
    # order: first copies of acknowledged values follow the production order
    sequence = {value: i for i, (_, value) in enumerate(history.sent)}
    for partition, records in history.final.items():
        first: dict[bytes, int] = {}
        for offset, value in records:
            first.setdefault(value, offset)
        acked_here = sorted((sequence[v], first[v], v) for p, _, v in history.acked
                            if p == partition and v in first and v in sequence)
        for (_, offset_a, a), (_, offset_b, b) in zip(acked_here, acked_here[1:]):
            if offset_b < offset_a:
                report.order_violations.append((partition, a, offset_a, b, offset_b))
    # read-committed: what consumers saw is in the final log, offsets one by one
    for partition, records in history.consumed.items():
        report.consumed += len(records)
        previous = None
        for offset, value in records:
            if final_at.get(partition, {}).get(offset) != value:
                report.read_violations.append((partition, offset, value, "not in the final log there"))
            if previous is not None and offset != previous + 1:
                report.read_violations.append((partition, offset, value, f"after offset {previous}"))
            previous = offset
    return report
