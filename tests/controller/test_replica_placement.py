"""Replica placement for new partitions (kbroker/controller/replica_placement.py): Kafka's rules."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kbroker.controller.replica_placement import place_replicas, rack_alternated


def test_racks_alternate_in_the_broker_order():
    assert rack_alternated([(1, "a"), (2, "a"), (3, "b"), (4, "c")]) == [1, 3, 4, 2]
    assert rack_alternated([(6, "c"), (5, "c"), (4, "b"), (3, "b"), (2, "a"), (1, "a")]) == [1, 3, 5, 2, 4, 6]


def test_the_documented_rack_aware_example():
    # six brokers on three racks, rotation starting at the first broker with no shift: each partition has one
    # replica per rack, leaders go round the rack-alternated order
    got = place_replicas([(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")], 6, 3,
                         start_index=0, start_shift=0)
    assert got == {0: [1, 3, 5], 1: [3, 5, 2], 2: [5, 2, 4], 3: [2, 4, 6], 4: [4, 6, 1], 5: [6, 1, 3]}


@pytest.mark.parametrize("seed", range(40))
def test_placement_properties(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 9)
    with_racks = rng.random() < 0.6
    racks = [f"r{rng.randrange(1, 4)}" if with_racks else None for _ in range(n)]
    brokers = [(i + 1, racks[i]) for i in range(n)]
    rf = rng.randint(1, n)
    parts = rng.randint(1, 30)
    first = rng.randrange(5)
    got = place_replicas(brokers, parts, rf, first, rng=rng)
    assert sorted(got) == list(range(first, first + parts))
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= {b for b, _ in brokers}
        if with_racks and len(set(racks)) > 1:
            # as many racks as the partition can span
            assert len({racks[b - 1] for b in replicas}) == min(rf, len(set(racks)))
    leaders = Counter(r[0] for r in got.values())
    if parts >= n:  # leaders spread evenly
        assert max(leaders.values()) - min(leaders.get(b, 0) for b, _ in brokers) <= 1


def test_too_few_brokers_is_refused():
    with pytest.raises(ValueError):
        place_replicas([(1, None), (2, None)], 1, 3)
