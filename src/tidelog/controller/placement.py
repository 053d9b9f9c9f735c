"""Replica placement for new partitions: round-robin, random start, rack aware.

Theory of operation (Kafka's ``AdminUtils.assignReplicasToBrokers``). Brokers are
first laid out in a *rack-alternated* order (the first broker of each rack, then the second of each
rack, ...), so neighbours in the list sit in different racks. Partition ``p``'s
first replica (its preferred leader) is broker ``(start + p) mod n`` of that list,
so preferred leaders spread evenly; the followers are taken at a distance from the
first replica that grows by one every time the partitions wrap around the list,
so follower sets differ too. ``start`` and the initial distance are random, drawn
from the injected ``random.Random``, so that many small topics do not all start on
the same broker; tests seed the generator and get a fixed layout.

Rack rule: while some rack holds none of a partition's replicas, a follower
candidate whose rack already holds one is skipped. Brokers without a rack count as
one rack of their own, so a cluster without racks is placed by the plain
round-robin rule.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Sequence


def rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[int]:
    """Broker ids ordered so that consecutive ones are in different racks."""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker_id, rack in sorted(brokers, key=lambda b: b[0]):
        by_rack[rack or ""].append(broker_id)
    racks = [by_rack[r] for r in sorted(by_rack)]
    result = []
    for i in range(max(len(r) for r in racks)):
        result += [rack[i] for rack in racks if i < len(rack)]
    return result


def place_replicas(brokers: Sequence[tuple[int, str | None]], num_partitions: int,
                   replication_factor: int, rng: random.Random,
                   start_partition_id: int = 0) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``start_partition_id ..`` over ``(id, rack)`` brokers.

    The caller has checked ``1 <= replication_factor <= len(brokers)``.
    """
    n = len(brokers)
    assert 1 <= replication_factor <= n, (replication_factor, n)
    ordered = rack_alternated(brokers)
    rack_of = {broker_id: rack or "" for broker_id, rack in brokers}
    rack_count = len(set(rack_of.values()))
    start = rng.randrange(n)
    shift = rng.randrange(n)
    assignments = []
    for p in range(start_partition_id, start_partition_id + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (start + p) % n
        replicas = [ordered[first]]
        racks_used = {rack_of[ordered[first]]}
        step = 0
        while len(replicas) < replication_factor:
            assert step < 2 * n, "placement must terminate"
            candidate = ordered[(first + 1 + (shift + step) % (n - 1)) % n]
            step += 1
            if candidate in replicas:
                continue
            if len(racks_used) < rack_count and rack_of[candidate] in racks_used:
                continue
            replicas.append(candidate)
            racks_used.add(rack_of[candidate])
        assignments.append(tuple(replicas))
    return assignments
