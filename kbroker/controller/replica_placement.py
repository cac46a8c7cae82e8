"""Where the replicas of new partitions go: spread over the live brokers and alternated across racks.

The rules are those of Kafka's replica assignment for new topics and partitions (``AdminUtils``' rack-aware
assignment; facts only):

* the brokers are ordered by id; with racks (every broker has ``broker.rack``) they are first arranged so that
  racks alternate (the first broker of each rack in rack order, then the second of each, ...);
* partition ``p``'s first replica (its preferred leader) is broker ``(start + p) % n`` of that order, so
  leaders are spread evenly; the other replicas follow it at a distance ``1 + (shift + j) % (n - 1)``, where
  ``shift`` grows by one every ``n`` partitions, so followers of a leader are not always the same brokers;
* rack-aware: a follower is skipped while its rack already holds a replica of the partition (until every rack
  holds one), and while the broker already holds one (until every broker does);
* when some brokers have a rack and others do not, the racks are ignored (Kafka refuses unless told to ignore
  them; kbroker places without racks rather than fail a CreateTopics).

``place_replicas`` returns ``{partition: [broker ids]}``; the caller checks the replication factor against the
number of live brokers first (INVALID_REPLICATION_FACTOR).
"""

from __future__ import annotations

import random
from typing import Sequence

__all__ = ["place_replicas", "rack_alternated"]


def rack_alternated(brokers: Sequence[tuple[int, str]]) -> list[int]:
    """Broker ids ordered so that racks alternate: ``[(1,"a"),(2,"a"),(3,"b"),(4,"c")]`` -> ``[1, 3, 4, 2]``."""
    by_rack: dict[str, list[int]] = {}
    for node_id, rack in sorted(brokers):
        by_rack.setdefault(rack, []).append(node_id)
    racks = sorted(by_rack)
    out: list[int] = []
    for i in range(max(len(v) for v in by_rack.values())):
        for rack in racks:
            if i < len(by_rack[rack]):
                out.append(by_rack[rack][i])
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def place_replicas(brokers: Sequence[tuple[int, str | None]], num_partitions: int, replication_factor: int,
                   first_partition: int = 0, rng: random.Random | None = None,
                   start_index: int | None = None, start_shift: int | None = None) -> dict[int, list[int]]:
    """Replica lists for partitions ``first_partition .. first_partition + num_partitions - 1``.

    ``brokers``: ``(node id, rack or None)`` of the live (unfenced) brokers, at least ``replication_factor`` of
    them. ``start_index`` / ``start_shift`` (default: random, as Kafka) pick where the rotation begins."""
    n = len(brokers)
    if replication_factor < 1 or replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} with {n} live brokers")
    rng = rng or random.Random()
    start = rng.randrange(n) if start_index is None else start_index % n
    shift = (rng.randrange(n) if start_shift is None else start_shift) if n > 1 else 0
    racks = {node_id: rack for node_id, rack in brokers}
    rack_aware = all(r for r in racks.values()) and len(set(racks.values())) > 1
    order = rack_alternated([(b, r or "") for b, r in brokers]) if rack_aware else sorted(racks)
    num_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    for i in range(num_partitions):
        p = first_partition + i
        if i > 0 and i % n == 0:
            shift += 1
        first = (start + i) % n
        replicas = [order[first]]
        if not rack_aware:
            replicas += [order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            used_racks = {racks[order[first]]}
            k = 0
            while len(replicas) < replication_factor:
                b = order[_replica_index(first, shift, k, n)]
                k += 1
                if b in replicas:
                    if k > 4 * n:  # cannot happen with n >= rf; a guard against a loop
                        raise AssertionError("replica placement found no broker")
                    continue
                if racks[b] in used_racks and len(used_racks) < num_racks and k <= 2 * n:
                    continue
                replicas.append(b)
                used_racks.add(racks[b])
        out[p] = replicas
    return out
