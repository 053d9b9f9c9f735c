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
