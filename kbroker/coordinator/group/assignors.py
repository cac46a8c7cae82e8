"""Server-side partition assignors of consumer groups (KIP-848): ``uniform`` (the default) and ``range``.

An assignor turns the members' subscriptions into a *target assignment*. It sees, per member, the topic ids it
subscribes to (names and regular expressions already resolved) and the member's current target assignment,
and per topic its partition count. It returns every member's partitions. Which partitions a member may
consume *now* is decided afterwards, by reconciliation (``consumer_group.reconcile``): a partition moves to its
new owner only once the previous owner released it.

* ``uniform``: spreads all subscribed partitions evenly over the members (counts differ by at most one among
  members with the same subscriptions; with different subscriptions every partition goes to one of its
  subscribers and loads are levelled where subscriptions allow) and is *sticky*: a member keeps the
  partitions of its previous target assignment unless balance requires moving them. Kafka's uniform assignor
  has the same goals (balance first, then stickiness); its exact choices of which partitions move may
  differ.
* ``range``: per topic, the subscribers sorted by instance id (static members) or member id get contiguous
  ranges of partitions, the first ``partitions % members`` of them one more. Members subscribed to the same
  co-partitioned topics get the same partition numbers of each (what range is for: joins).

Both are pure functions of their input, so a target assignment can be recomputed and compared in tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

#: topic id -> partitions
Assignment = dict[bytes, set[int]]


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows about one member."""

    subscribed_topic_ids: frozenset[bytes]
    instance_id: str | None = None
    rack_id: str | None = None
    #: the member's current target assignment (for stickiness)
    target: Mapping[bytes, frozenset[int]] = field(default_factory=dict)


class PartitionAssignor:
    name = ""

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[bytes, int]) -> dict[str, Assignment]:
        """``topics``: topic id -> partition count (only topics that exist). Returns member id -> assignment
        (every member, possibly empty)."""
        raise NotImplementedError


def _sort_key(member_id: str, spec: MemberSpec) -> tuple[str, str]:
    return (spec.instance_id if spec.instance_id is not None else "\uffff", member_id)


class UniformAssignor(PartitionAssignor):
    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[bytes, int]) -> dict[str, Assignment]:
        order = sorted(members, key=lambda m: _sort_key(m, members[m]))
        result: dict[str, Assignment] = {m: {} for m in order}
        owner: dict[tuple[bytes, int], str] = {}
        load = {m: 0 for m in order}
        eligible: dict[bytes, list[str]] = {}
        for tid in sorted(topics):
            eligible[tid] = [m for m in order if tid in members[m].subscribed_topic_ids]
        # 1. stickiness: keep every valid partition of the previous target assignment
        for m in order:
            spec = members[m]
            for tid, parts in sorted(spec.target.items()):
                if tid not in topics or tid not in spec.subscribed_topic_ids:
                    continue
                for p in sorted(parts):
                    if p < topics[tid] and (tid, p) not in owner:
                        owner[(tid, p)] = m
                        result[m].setdefault(tid, set()).add(p)
                        load[m] += 1
        # 2. balance: take partitions away from members above their fair share (homogeneous quota first)
        all_partitions = [(tid, p) for tid in sorted(topics) for p in range(topics[tid]) if eligible[tid]]
        if order and all(members[m].subscribed_topic_ids == members[order[0]].subscribed_topic_ids for m in order):
            quota_min, extra = divmod(len(all_partitions), len(order))
            # members keeping the most get the +1 slots, which moves the fewest partitions
            by_load = sorted(order, key=lambda m: (-load[m], order.index(m)))
            quota = {m: quota_min + (1 if i < extra else 0) for i, m in enumerate(by_load)}
            for m in order:
                if load[m] > quota[m]:
                    for tid, p in sorted(((t, q) for t, ps in result[m].items() for q in ps), reverse=True):
                        if load[m] <= quota[m]:
                            break
                        self._unassign(result, owner, load, m, tid, p)
        # 3. unassigned partitions go to the least loaded subscriber
        for tid, p in all_partitions:
            if (tid, p) not in owner:
                m = min(eligible[tid], key=lambda x: (load[x], order.index(x)))
                owner[(tid, p)] = m
                result[m].setdefault(tid, set()).add(p)
                load[m] += 1
        # 4. level what subscriptions allow: move partitions along a chain of subscribers from a member to
        #    one with 2+ fewer partitions (a -> b of one topic, b -> c of another, ...), until none exists
        while True:
            path = self._levelling_path(order, load, owner, eligible)
            if path is None:
                break
            for src, dst, tid, p in path:
                self._unassign(result, owner, load, src, tid, p)
                owner[(tid, p)] = dst
                result[dst].setdefault(tid, set()).add(p)
                load[dst] += 1
        return result

    @staticmethod
    def _levelling_path(order: list[str], load: dict[str, int], owner: dict[tuple[bytes, int], str],
                        eligible: dict[bytes, list[str]]) -> list[tuple[str, str, bytes, int]] | None:
        if not order or max(load.values()) - min(load.values()) <= 1:
            return None  # balanced already: no chain can help
        lowest = min(load.values())
        owned: dict[str, list[tuple[bytes, int]]] = {m: [] for m in order}
        for tp in sorted(owner):
            owned[owner[tp]].append(tp)
        for src in sorted(order, key=lambda m: (-load[m], order.index(m))):
            if load[src] < lowest + 2:
                break
            prev: dict[str, tuple[str, bytes, int] | None] = {src: None}
            queue = [src]
            while queue:
                x = queue.pop(0)
                if load[x] <= load[src] - 2:
                    path = []
                    y = x
                    while prev[y] is not None:
                        px, tid, p = prev[y]  # type: ignore[misc]
                        path.append((px, y, tid, p))
                        y = px
                    return path
                for tid, p in owned[x]:
                    for y in eligible[tid]:
                        if y not in prev:
                            prev[y] = (x, tid, p)
                            queue.append(y)
        return None

    @staticmethod
    def _unassign(result: dict[str, Assignment], owner: dict[tuple[bytes, int], str], load: dict[str, int],
                  m: str, tid: bytes, p: int) -> None:
        result[m][tid].discard(p)
        if not result[m][tid]:
            del result[m][tid]
        del owner[(tid, p)]
        load[m] -= 1


class RangeAssignor(PartitionAssignor):
    name = "range"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[bytes, int]) -> dict[str, Assignment]:
        order = sorted(members, key=lambda m: _sort_key(m, members[m]))
        result: dict[str, Assignment] = {m: {} for m in order}
        for tid in sorted(topics):
            subs = [m for m in order if tid in members[m].subscribed_topic_ids]
            if not subs:
                continue
            n = topics[tid]
            quota, extra = divmod(n, len(subs))
            start = 0
            for i, m in enumerate(subs):
                count = quota + (1 if i < extra else 0)
                if count:
                    result[m][tid] = set(range(start, start + count))
                start += count
        return result


ASSIGNORS: dict[str, type[PartitionAssignor]] = {"uniform": UniformAssignor, "range": RangeAssignor}

#: Kafka's class names for the built-in assignors (``group.consumer.assignors`` accepts either form).
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def parse_assignors(value: str) -> tuple[str, ...]:
    """``group.consumer.assignors`` (comma-separated names or Kafka class names) -> assignor names, in order;
    the first is the default. Raises ValueError for unknown ones."""
    names = []
    for item in (s.strip() for s in value.split(",")):
        if not item:
            continue
        name = _CLASS_NAMES.get(item, item)
        if name not in ASSIGNORS:
            raise ValueError(f"unknown consumer group assignor {item!r} (known: {', '.join(ASSIGNORS)})")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError("group.consumer.assignors is empty")
    return tuple(names)
