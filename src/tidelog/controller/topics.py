"""Pure checks for topic creation: names, counts, manual assignments.

Kafka's rules, each answered with its error code and a message a human can act on:

* name: 1–249 characters from ``[a-zA-Z0-9._-]``, not ``.`` or ``..``
  → ``INVALID_TOPIC_EXCEPTION``; a name equal to another after mapping ``.`` to
  ``_`` collides with it (metric names would clash) → ``INVALID_TOPIC_EXCEPTION``;
* partitions >= 1 → else ``INVALID_PARTITIONS``; replication factor >= 1 and at
  most the number of active brokers → else ``INVALID_REPLICATION_FACTOR``;
* a manual assignment: every partition non-empty, without duplicates, of one
  replication factor, naming registered brokers, at least one of them active →
  else ``INVALID_REPLICA_ASSIGNMENT``;
* one CreateTopics request: at most 10,000 partitions in all → else every topic of it
  ``POLICY_VIOLATION``.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from tidelog.core.errors import ErrorCode
from tidelog.controller.result import NO_ERROR, ApiError

TOPIC_NAME_LENGTH_MAX = 249
PARTITION_COUNT_MAX = 100_000        # per topic; a bound on one request's records
REQUEST_PARTITIONS_MAX = 10_000      # per CreateTopics request (Kafka's MAX_PARTITIONS_PER_BATCH)
REPLICATION_FACTOR_MAX = 32_767      # Kafka's int16
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> ApiError:
    """Kafka 4's checks and messages (its Topic.validate)."""
    if not name:
        return _invalid_topic("Topic name is invalid: the empty string is not allowed")
    if name in (".", ".."):
        return _invalid_topic(f"Topic name is invalid: '{name}' is not allowed")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return _invalid_topic(f"Topic name is invalid: the length of '{name}' is longer than the max allowed "
                              f"length {TOPIC_NAME_LENGTH_MAX}")
    if not _LEGAL.fullmatch(name):
        return _invalid_topic(f"Topic name is invalid: '{name}' contains one or more characters other than "
                              f"ASCII alphanumerics, '.', '_' and '-'")
    return NO_ERROR


def collision_key(name: str) -> str:
    return name.replace(".", "_")


def _invalid_topic(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, message)


def validate_counts(num_partitions: int, replication_factor: int, usable_broker_count: int
                    ) -> ApiError:
    """Kafka's order and messages: the replication factor, then the partition count, then
    whether enough brokers (registered, not shutting down) can hold the replicas."""
    if not 0 < replication_factor <= REPLICATION_FACTOR_MAX:
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        "Replication factor must be larger than 0, or -1 to use the default value.")
    if num_partitions <= 0:
        return ApiError(ErrorCode.INVALID_PARTITIONS,
                        "Number of partitions was set to an invalid non-positive value.")
    if num_partitions > PARTITION_COUNT_MAX:
        return ApiError(ErrorCode.INVALID_PARTITIONS, f"Number of partitions {num_partitions} "
                        f"is above the limit of {PARTITION_COUNT_MAX}.")
    if replication_factor > usable_broker_count:
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"Unable to replicate the partition {replication_factor} time(s): The "
                        f"target replication factor of {replication_factor} cannot be reached "
                        f"because only {usable_broker_count} broker(s) are registered or some brokers "
                        f"have all their log directories cordoned.")
    return NO_ERROR


def validate_assignment(assignments: Sequence[Sequence[int]], first_partition_id: int,
                        is_registered: Callable[[int], bool], is_active: Callable[[int], bool]
                        ) -> ApiError:
    if not assignments:
        return _bad_assignment("The manual partition assignment is empty.")
    if len(assignments) > PARTITION_COUNT_MAX:
        return _bad_assignment(f"The manual partition assignment has more than "
                               f"{PARTITION_COUNT_MAX} partitions.")
    replication_factor = len(assignments[0])
    for index, replicas in enumerate(assignments):
        partition_id = first_partition_id + index
        if not replicas:
            return _bad_assignment(f"The manual partition assignment for partition "
                                   f"{partition_id} is empty.")
        if len(replicas) != replication_factor:
            return _bad_assignment(f"The manual partition assignment for partition "
                                   f"{partition_id} has {len(replicas)} replicas; all partitions "
                                   f"need {replication_factor}.")
        if len(set(replicas)) != len(replicas):
            return _bad_assignment(f"The manual partition assignment for partition "
                                   f"{partition_id} includes a duplicate replica.")
        for broker_id in replicas:
            if not is_registered(broker_id):
                return _bad_assignment(f"The manual partition assignment includes broker "
                                       f"{broker_id}, but no such broker is registered.")
        if not any(is_active(b) for b in replicas):
            return _bad_assignment(f"All brokers specified in the manual partition assignment "
                                   f"for partition {partition_id} are fenced or in controlled "
                                   f"shutdown.")
    return NO_ERROR


def _bad_assignment(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)
