"""A history checker for produce/consume runs under faults: what producers were told against what the log holds.

A test records, while it runs, every write a producer attempted and every acknowledgement it got (topic,
partition, offset), the outcome of every transaction, and then what consumers read back from the partitions
(from the start, ``read_uncommitted`` and/or ``read_committed``). :meth:`History.check` then reports, as
Jepsen-style analyses of Kafka do:

* **lost**: an acknowledged record that no read of its partition returned;
* **duplicated**: one written value at two or more offsets (an idempotent producer's retry written twice);
* **offset changed**: an acknowledged record found at another offset than the one its acknowledgement named
  (an acknowledgement without an offset is checked for loss only: librdkafka acknowledges the earlier messages
  of a partition implicitly, offset unknown, when a later batch of its idempotent producer succeeds while
  they wait for a retry);
* **reordered**: two records one producer acknowledged in one partition, found in the opposite order;
* **aborted seen** / **uncommitted seen**: a ``read_committed`` read that returned a record of an aborted
  transaction, or of one that never committed;
* **phantom**: a record read that no producer ever attempted.

Values identify records, so every value a test writes must be unique (e.g. ``b"p3-17"``). Reads are complete
scans of each partition the test wrote to; records of other tests are ignored by giving them values the history
never saw (use ``prefix``). The checker is pure bookkeeping, usable with any client library::

    h = History()
    h.attempt("t", b"v1")                     # before produce()
    h.ack("t", 0, 42, b"v1")                  # in the delivery callback
    h.read("t", 0, 42, b"v1", committed=True)  # a read_committed consumer saw it
    h.check().assert_ok()
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Report:
    """What :meth:`History.check` found: lists of examples per anomaly, and counts of what was checked."""

    acknowledged: int = 0
    read: int = 0
    lost: list[tuple[str, int, int | None, bytes]] = field(default_factory=list)
    duplicated: list[tuple[str, int, bytes, list[int]]] = field(default_factory=list)
    offset_changed: list[tuple[str, int, bytes, int, int]] = field(default_factory=list)
    reordered: list[tuple[str, int, bytes, bytes]] = field(default_factory=list)
    aborted_seen: list[tuple[str, int, int, bytes]] = field(default_factory=list)
    uncommitted_seen: list[tuple[str, int, int, bytes]] = field(default_factory=list)
    phantom: list[tuple[str, int, int, bytes]] = field(default_factory=list)

    ANOMALIES = ("lost", "duplicated", "offset_changed", "reordered", "aborted_seen", "uncommitted_seen",
                 "phantom")

    @property
    def ok(self) -> bool:
        return not any(getattr(self, a) for a in self.ANOMALIES)

    def summary(self) -> str:
        counts = ", ".join(f"{a.replace('_', ' ')} {len(getattr(self, a))}" for a in self.ANOMALIES)
        return f"{self.acknowledged} acknowledged, {self.read} read: {counts}"

    def assert_ok(self) -> None:
        """Raise AssertionError naming the first examples of every anomaly found."""
        if self.ok:
            return
        lines = [self.summary()]
        for a in self.ANOMALIES:
            found = getattr(self, a)
            if found:
                lines.append(f"  {a}: {found[:5]}")
        raise AssertionError("\n".join(lines))


class History:
    """Writes attempted and acknowledged, transaction outcomes, and reads; see the module docstring."""

    def __init__(self) -> None:
        self._attempted: set[bytes] = set()
        #: value -> (topic, partition, offset, producer) of its acknowledgement
        self._acked: dict[bytes, tuple[str, int, int | None, str]] = {}
        #: (producer, topic, partition) -> values in the order the producer's acknowledgements arrived
        self._ack_order: dict[tuple[str, str, int], list[bytes]] = defaultdict(list)
        #: value -> transactional id of the transaction that wrote it (its current one)
        self._txn_of: dict[bytes, tuple[str, int]] = {}
        self._txn_open: dict[str, list[bytes]] = {}
        self._txn_serial: dict[str, int] = defaultdict(int)
        self._txn_outcome: dict[tuple[str, int], bool] = {}
        #: (topic, partition, committed view) -> {offset: value}
        self._reads: dict[tuple[str, int, bool], dict[int, bytes]] = defaultdict(dict)

    # ---- recording (thread-safe enough for delivery callbacks: each call is one dict/set operation)
    def attempt(self, topic: str, value: bytes, txn: str | None = None) -> None:
        """A producer is about to send ``value`` (inside transaction ``txn`` when given)."""
        self._attempted.add(value)
        if txn is not None:
            self._txn_open.setdefault(txn, []).append(value)
            self._txn_of[value] = (txn, self._txn_serial[txn])

    def ack(self, topic: str, partition: int, offset: int | None, value: bytes, producer: str = "") -> None:
        """The producer was told ``value`` is at ``offset`` of ``topic``-``partition`` (None: acknowledged
        without an offset, as librdkafka's implicit acknowledgements are; confluent-kafka's ``offset()`` then
        returns None)."""
        self._acked[value] = (topic, partition, offset, producer)
        self._ack_order[(producer, topic, partition)].append(value)

    def end_transaction(self, txn: str, committed: bool) -> None:
        """The producer's transaction ``txn`` (the values attempted in it since the last end) committed or
        aborted, as the client said. A transaction whose end failed is left unrecorded (its outcome is
        unknown: its records may be seen or not)."""
        self._txn_outcome[(txn, self._txn_serial[txn])] = committed
        self._txn_serial[txn] += 1
        self._txn_open.pop(txn, None)

    def abandon_transaction(self, txn: str) -> None:
        """The transaction's outcome is unknown (its end failed): it is checked neither way."""
        self._txn_serial[txn] += 1
        self._txn_open.pop(txn, None)

    def read(self, topic: str, partition: int, offset: int, value: bytes, committed: bool) -> None:
        """A consumer read ``value`` at ``offset`` (``committed``: with ``isolation.level=read_committed``)."""
        self._reads[(topic, partition, committed)][offset] = value

    def acknowledged(self) -> list[tuple[bytes, str, int, int | None, str]]:
        """Every acknowledgement so far: ``(value, topic, partition, offset, producer)``."""
        return [(v, t, p, o, prod) for v, (t, p, o, prod) in self._acked.items()]

    # ---- checking
    def check(self) -> Report:
        r = Report(acknowledged=len(self._acked), read=sum(len(v) for v in self._reads.values()))
        views = {False: defaultdict(dict), True: defaultdict(dict)}  # committed -> (topic, partition) -> reads
        for (topic, partition, committed), offsets in self._reads.items():
            views[committed][(topic, partition)] = offsets
        for committed, by_partition in views.items():
            for (topic, partition), offsets in by_partition.items():
                where: dict[bytes, list[int]] = defaultdict(list)
                for off, value in offsets.items():
                    if value not in self._attempted:
                        r.phantom.append((topic, partition, off, value))
                        continue
                    where[value].append(off)
                    txn = self._txn_of.get(value)
                    if committed and txn is not None:
                        outcome = self._txn_outcome.get(txn)
                        if outcome is False:
                            r.aborted_seen.append((topic, partition, off, value))
                        elif outcome is None and txn[0] in self._txn_open and txn[1] == self._txn_serial[txn[0]]:
                            r.uncommitted_seen.append((topic, partition, off, value))
                for value, offs in where.items():
                    if len(offs) > 1:
                        r.duplicated.append((topic, partition, value, sorted(offs)))
        # every acknowledged record, in every read of its partition that must hold it (a committed read holds the
        # records outside transactions and those of committed transactions; a record of a transaction whose end
        # is unknown or aborted is expected only in an uncommitted read)
        positions = {(tp, c): {v: o for o, v in offs.items()} for c in (False, True) for tp, offs in views[c].items()}
        for value, (topic, partition, offset, _producer) in self._acked.items():
            txn = self._txn_of.get(value)
            for committed in (False, True):
                pos = positions.get(((topic, partition), committed))
                if pos is None:
                    continue
                if committed and txn is not None and self._txn_outcome.get(txn) is not True:
                    continue
                found = pos.get(value)
                if found is None:
                    r.lost.append((topic, partition, offset, value))
                elif offset is not None and found != offset:
                    r.offset_changed.append((topic, partition, value, offset, found))
        # the order of each producer's acknowledged records per partition
        for (producer, topic, partition), values in self._ack_order.items():
            offsets = views[False].get((topic, partition)) or views[True].get((topic, partition)) or {}
            pos = {v: o for o, v in offsets.items()}
            seen = [(pos[v], v) for v in values if v in pos]
            for (o1, v1), (o2, v2) in zip(seen, seen[1:]):
                if o2 < o1:
                    r.reordered.append((topic, partition, v1, v2))
        return r
