"""Identifiers shared by every layer.

``TopicPartition`` names one partition; its ``str`` is Kafka's directory name
``<topic>-<partition>`` (the topic itself may contain ``-``, so parsing splits on
the last one).
"""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @classmethod
    def parse(cls, name: str) -> "TopicPartition":
        """Parse ``<topic>-<partition>``; raises ``ValueError`` if it is not one."""
        topic, sep, partition = name.rpartition("-")
        if not sep or not topic or not partition.isdigit() or not partition.isascii():
            raise ValueError(f"{name!r} is not <topic>-<partition>")
        return cls(topic, int(partition))


def partition_summary(partitions, listed: int = 8) -> str:
    """Many partitions in one short log line: ``19 partitions: __consumer_offsets (17), t1 [0, 3]``
    — a topic's partition numbers when it has at most ``listed`` of them, else their count."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = [f"{topic} {sorted(numbers)}" if len(numbers) <= listed else f"{topic} ({len(numbers)})"
             for topic, numbers in sorted(by_topic.items())]
    total = sum(len(numbers) for numbers in by_topic.values())
    return f"{total} partition{'s' if total != 1 else ''}: {', '.join(parts)}"
