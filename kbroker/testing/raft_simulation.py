"""A deterministic simulation of the Raft state machine (:mod:`kbroker.controller.raft`).

One seed drives everything: message delays, drops and duplicates, network partitions, crashes (a crash loses
what a replica had not flushed) and restarts, clients appending to whoever is leader. The same seed replays the
same run exactly, so a failing seed is a reproducible bug report::

    python -m kbroker.testing.raft_simulation --seeds 1000          # a campaign
    python -m kbroker.testing.raft_simulation --seed 4711 --verbose # replay one run

After every event the invariants are checked (as Kafka's ``RaftEventSimulationTest`` does):

* **single leader**: at most one replica is leader in any epoch, over the whole run;
* **committed is forever**: entries below any replica's high watermark are the same everywhere and never change
  or disappear (a global list of committed entries grows, and every replica's log is checked against it);
* **leader completeness**: a leader's log holds every committed entry;
* **monotonic high watermark**: within one incarnation of a replica its high watermark never goes back;
* **snapshots hold the committed prefix**: every replica snapshots its state (the entries it holds as committed)
  every ``snapshot_every`` committed offsets and often drops its log below the snapshot; a snapshot a replica
  writes, and one it fetches from the leader to catch up (FetchSnapshot), must equal the committed entries below
  its end offset; a replica restarts from its snapshot and the rest of its log;
* **voter changes** (KIP-853): every ``voter_change_every_ms`` the leader is asked to add an observer as a voter
  or to remove a voter (one change at a time, refused while one is pending); every invariant above holds across
  them, and liveness is checked against the voter set in force at the end;
* **liveness** (at the end): once the network heals and every replica is up, a leader is elected and a new
  entry is committed on every voter within a bounded time.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from dataclasses import dataclass, field

from typing import Callable

from kbroker.controller.raft.client import MemoryElectionStore, RaftClient, RaftConfig, VoterChangeError
from kbroker.controller.raft.log import LogEntry, MemoryRaftLog, RaftLog, Voter
from kbroker.controller.raft.states import QuorumStateName


class InvariantViolation(AssertionError):
    """An invariant broke; the message names the seed and the simulated time."""


@dataclass
class SimConfig:
    voters: int = 3
    observers: int = 1
    duration_ms: int = 20_000
    settle_ms: int = 15_000
    min_delay_ms: int = 1
    max_delay_ms: int = 25
    drop_rate: float = 0.03
    duplicate_rate: float = 0.02
    crash_every_ms: int = 4_000
    """Mean time between crashes (exponential); 0 disables crashes."""
    down_ms: tuple[int, int] = (200, 3_000)
    partition_every_ms: int = 5_000
    """Mean time between network partitions; 0 disables them."""
    partition_ms: tuple[int, int] = (300, 4_000)
    append_every_ms: int = 40
    snapshot_every: int = 100
    """A replica snapshots once its high watermark is this many offsets past its latest snapshot; 0: never."""
    delete_before_snapshot_rate: float = 0.7
    voter_change_every_ms: int = 3_000
    """Mean time between requests to add or remove a voter (exponential); 0: the voters never change."""
    """How often a replica drops its log below a new snapshot (so lagging replicas must fetch the snapshot)."""
    raft: RaftConfig = field(default_factory=lambda: RaftConfig(election_timeout_ms=300, fetch_timeout_ms=600,
                                                                election_backoff_max_ms=300,
                                                                request_timeout_ms=400, retry_backoff_ms=20,
                                                                fetch_max_entries=20, append_linger_ms=100,
                                                                snapshot_chunk_bytes=2048))


@dataclass
class SimResult:
    seed: int
    events: int
    leaders: dict[int, int]
    committed: int
    appended: int
    crashes: int
    partitions: int
    snapshots_written: int = 0
    snapshots_fetched: int = 0
    voter_changes: int = 0


class _Node:
    def __init__(self, node_id: int, log: RaftLog | None = None) -> None:
        self.id = node_id
        self.log: RaftLog = log if log is not None else MemoryRaftLog()
        self.store = MemoryElectionStore()
        self.client: RaftClient | None = None
        self.poll_at = -1
        self.incarnation = 0
        self.last_hw = 0
        self.verified = 0
        self.leader_checked_epoch = -1


class Simulation:
    def __init__(self, seed: int, cfg: SimConfig | None = None, verbose: bool = False,
                 log_factory: Callable[[int], RaftLog] | None = None,
                 crash_log: Callable[[int, RaftLog], RaftLog] | None = None,
                 wire: Callable[[int, object], object] | None = None) -> None:
        """``log_factory(node_id)`` gives each replica its log (default: in memory); ``crash_log(node_id, log)``
        models a crash of a replica's log and returns the log it restarts with (default: ``log.crash()``)."""
        self._crash_log = crash_log
        self._wire = wire  # wire(dst, msg) -> msg as the peer decodes it (e.g. through the Kafka codec)
        self.seed = seed
        self.cfg = cfg or SimConfig()
        self.verbose = verbose
        self.rng = random.Random(seed)
        self.now = 0
        self.events = 0
        self._queue: list[tuple[int, int, str, tuple]] = []
        self._seq = 0
        self.voter_ids = frozenset(range(1, self.cfg.voters + 1))
        ids = list(range(1, self.cfg.voters + self.cfg.observers + 1))
        self.nodes = {i: _Node(i, log_factory(i) if log_factory else None) for i in ids}
        self.leaders: dict[int, int] = {}
        self.committed: dict[int, LogEntry] = {}  # base offset -> batch, in order
        self.committed_end = 0
        self.groups: list[set[int]] | None = None  # a network partition: who can reach whom
        self.appended = 0
        self.crashes = 0
        self.partitions = 0
        self.snapshots_written = 0
        self.snapshots_fetched = 0
        self.voter_changes = 0
        self.faults = True

    # ------------------------------------------------------------------ events
    def _push(self, at: int, kind: str, *data: object) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, data))

    def _start(self, node: _Node) -> None:
        node.incarnation += 1
        node.client = RaftClient(node.id, self.voter_ids, node.log, node.store,
                                 random.Random(self.rng.getrandbits(64)), self.now, self.cfg.raft,
                                 on_snapshot=lambda snap, n=node: self._snapshot_fetched(n, snap))
        node.last_hw = 0
        node.verified = node.log.log_start_offset  # below it: the snapshot, checked when it was written
        node.log.lowest_truncation = None
        self._poll(node)

    def _poll(self, node: _Node) -> None:
        client = node.client
        assert client is not None
        nxt = client.poll(self.now)
        self._flush_outbox(node)
        if nxt != node.poll_at or nxt <= self.now:
            node.poll_at = max(nxt, self.now + 1)
            self._push(node.poll_at, "poll", node.id, node.incarnation)

    def _flush_outbox(self, node: _Node) -> None:
        client = node.client
        assert client is not None
        out, client.outbox = client.outbox, []
        for dst, msg in out:
            if not self._reachable(node.id, dst):
                continue
            if self.faults and self.rng.random() < self.cfg.drop_rate:
                continue
            if self._wire is not None:
                msg = self._wire(dst, msg)
            copies = 2 if self.faults and self.rng.random() < self.cfg.duplicate_rate else 1
            for _ in range(copies):
                delay = self.rng.randint(self.cfg.min_delay_ms, self.cfg.max_delay_ms)
                self._push(self.now + delay, "deliver", dst, msg)

    def _reachable(self, a: int, b: int) -> bool:
        if self.groups is None:
            return True
        return any(a in g and b in g for g in self.groups)

    def _schedule_faults(self) -> None:
        c = self.cfg
        if c.crash_every_ms:
            t = 0
            while True:
                t += int(self.rng.expovariate(1 / c.crash_every_ms))
                if t >= c.duration_ms:
                    break
                # half of the crashes hit whoever leads at that moment (-1), the others a replica drawn now
                target = -1 if self.rng.random() < 0.5 else self.rng.choice(sorted(self.nodes))
                self._push(t, "crash", target, self.rng.randint(*c.down_ms))
        if c.partition_every_ms:
            t = 0
            while True:
                t += int(self.rng.expovariate(1 / c.partition_every_ms))
                if t >= c.duration_ms:
                    break
                self._push(t, "partition", self.rng.randint(*c.partition_ms))
        if c.voter_change_every_ms and len(self.nodes) > 1:
            t = 0
            while True:
                t += int(self.rng.expovariate(1 / c.voter_change_every_ms))
                if t >= c.duration_ms:
                    break
                self._push(t, "voters", self.rng.random(), self.rng.choice(sorted(self.nodes)))
        t = 0
        while t < c.duration_ms + c.settle_ms:
            t += self.rng.randint(1, 2 * c.append_every_ms)
            self._push(t, "append")
        self._push(c.duration_ms, "heal")

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        for node in self.nodes.values():
            self._start(node)
        self._schedule_faults()
        end = self.cfg.duration_ms + self.cfg.settle_ms
        marker_offset: int | None = None
        while self._queue:
            at, _, kind, data = heapq.heappop(self._queue)
            if at > end:
                break
            self.now = at
            self.events += 1
            try:
                self._handle(kind, data)
                self._check_invariants()
                for node in self.nodes.values():
                    self._maybe_snapshot(node)
            except InvariantViolation:
                raise
            except Exception as exc:  # the Raft code's own assertions, or a crash
                self._fail(f"{type(exc).__name__}: {exc}")
            if self.now >= self.cfg.duration_ms + self.cfg.settle_ms // 2 and marker_offset is None:
                leader = self._leader()
                if leader is not None and leader.client is not None:
                    marker_offset = leader.client.append([b"marker"], self.now)
                    self._poll(leader)
        self._check_liveness(marker_offset)
        return SimResult(self.seed, self.events, dict(self.leaders), self.committed_end, self.appended,
                         self.crashes, self.partitions, self.snapshots_written, self.snapshots_fetched,
                         self.voter_changes)

    # ------------------------------------------------------------------ snapshots
    @staticmethod
    def _render(entries: list[LogEntry]) -> bytes:
        """A replica's state machine state: the committed entries, one line each."""
        return b"".join(f"{e.offset}:{e.epoch}:{e.count}:{e.data!r}\n".encode() for e in entries)

    def _committed_prefix(self, end: int) -> bytes:
        if end > self.committed_end:
            self._fail(f"a snapshot ends at {end}, past the committed end {self.committed_end}")
        entries = [e for off, e in self.committed.items() if off < end]
        if entries and entries[-1].next_offset != end:
            self._fail(f"a snapshot ends at {end}, inside the committed batch {entries[-1]}")
        return self._render(entries)

    def _maybe_snapshot(self, node: _Node) -> None:
        client = node.client
        if client is None or not self.cfg.snapshot_every:
            return
        latest = node.log.latest_snapshot_id()
        hw = client.high_watermark
        if hw - (latest[0] if latest else 0) < self.cfg.snapshot_every or hw <= node.log.log_start_offset:
            return
        # the state machine's state: the snapshot the log starts at, then the log's committed entries
        start = node.log.log_start_offset
        base = b""
        if start > 0:
            start_snap = next(i for i in node.log.snapshot_ids() if i[0] == start)  # type: ignore[attr-defined]
            base = self._payload(node, start_snap)
        data = base + self._render([e for e in node.log.read(start, 1 << 30) if e.next_offset <= hw])
        if data != self._committed_prefix(hw):
            self._fail(f"node {node.id} would snapshot a state at {hw} that is not the committed prefix")
        if not isinstance(node.log, MemoryRaftLog):  # on disk: Kafka's format, with the voters in force
            from kbroker.controller.snapshot import encode_snapshot

            data = encode_snapshot([data], node.log.epoch_at(hw - 1), 0, 0, voters=node.log.voters_at(hw))
        client.create_snapshot(hw, data)
        self.snapshots_written += 1
        if self.rng.random() < self.cfg.delete_before_snapshot_rate:
            client.delete_before_snapshot()

    @staticmethod
    def _payload(node: _Node, snap: tuple[int, int]) -> bytes:
        if isinstance(node.log, MemoryRaftLog):
            return node.log.snapshot_payload(snap)
        from kbroker.controller.snapshot import decode_snapshot

        return b"".join(decode_snapshot(node.log.read_snapshot(snap, 0, 1 << 30)))

    def _snapshot_fetched(self, node: _Node, snap: tuple[int, int]) -> None:
        self.snapshots_fetched += 1
        data = self._payload(node, snap)
        if data != self._committed_prefix(snap[0]):
            self._fail(f"node {node.id} fetched snapshot {snap} that is not the committed prefix")
        node.verified = max(node.verified, snap[0])
        if self.verbose:
            print(f"{self.now:>7} node {node.id} installed snapshot {snap}")

    def _leader(self) -> _Node | None:
        best = None
        for n in self.nodes.values():
            if n.client is not None and n.client.is_leader:
                if best is None or n.client.epoch > best.client.epoch:  # type: ignore[union-attr]
                    best = n
        return best

    def _handle(self, kind: str, data: tuple) -> None:
        if kind == "poll":
            node = self.nodes[data[0]]
            if node.client is not None and data[1] == node.incarnation and node.poll_at == self.now:
                self._poll(node)
        elif kind == "deliver":
            dst, msg = data
            node = self.nodes[dst]
            if node.client is None or not self._reachable(msg.src, dst):
                return
            if self.verbose:
                print(f"{self.now:>7} {msg.src}->{dst} {msg}")
            node.client.handle(msg, self.now)
            self._poll(node)
        elif kind == "append":
            leader = self._leader()
            if leader is not None and leader.client is not None:
                n = self.rng.randint(1, 4)
                leader.client.append([f"{self.seed}-{self.appended + i}".encode() for i in range(n)], self.now)
                self.appended += n
                self._poll(leader)
        elif kind == "voters":
            leader = self._leader()
            if leader is None or leader.client is None:
                return
            roll, node_id = data
            voters = leader.client.voters
            try:
                if node_id not in voters and (roll < 0.5 or len(voters) <= 1):
                    leader.client.add_voter(Voter(node_id), self.now)
                elif node_id in voters and len(voters) > 1:
                    leader.client.remove_voter(node_id, None, self.now)
                else:
                    return
            except VoterChangeError as exc:
                if self.verbose:
                    print(f"{self.now:>7} voter change of node {node_id} refused: {exc.error} {exc}")
                return
            self.voter_changes += 1
            if self.verbose:
                print(f"{self.now:>7} leader {leader.id}: voters -> {sorted(leader.client.voters)}")
            self._poll(leader)
        elif kind == "crash":
            node_id, down = data
            if node_id == -1:
                leader = self._leader()
                if leader is None:
                    return
                node_id = leader.id
            node = self.nodes[node_id]
            if node.client is None or not self.faults:
                return
            self.crashes += 1
            if node.client.is_leader and self.rng.random() < 0.3:  # a graceful shutdown: resign first
                node.client.resign(self.now)
                self._flush_outbox(node)
            if self.verbose:
                print(f"{self.now:>7} crash node {node_id} for {down} ms")
            node.client = None
            if self._crash_log is not None:
                node.log = self._crash_log(node.id, node.log)
            else:
                node.log.crash()  # type: ignore[attr-defined]
            node.incarnation += 1
            self._push(self.now + down, "restart", node_id)
        elif kind == "restart":
            node = self.nodes[data[0]]
            if node.client is None:
                if self.verbose:
                    print(f"{self.now:>7} restart node {node.id}")
                self._start(node)
        elif kind == "partition":
            if not self.faults:
                return
            ids = sorted(self.nodes)
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, len(ids) - 1)
            self.groups = [set(ids[:cut]), set(ids[cut:])]
            self.partitions += 1
            if self.verbose:
                print(f"{self.now:>7} partition {self.groups}")
            self._push(self.now + data[0], "heal_partition", self.partitions)
        elif kind == "heal_partition":
            if data[0] == self.partitions:
                self.groups = None
        elif kind == "heal":
            self.faults = False
            self.groups = None
            for node in self.nodes.values():
                if node.client is None:
                    self._start(node)

    # ------------------------------------------------------------------ invariants
    def _fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.seed} at {self.now} ms (event {self.events}): {what}")

    def _check_invariants(self) -> None:
        for node in self.nodes.values():
            client = node.client
            if client is None:
                continue
            if client.state is QuorumStateName.LEADER:
                other = self.leaders.setdefault(client.epoch, node.id)
                if other != node.id:
                    self._fail(f"two leaders in epoch {client.epoch}: {other} and {node.id}")
                if node.leader_checked_epoch != client.epoch:  # leader completeness, when it takes office
                    node.leader_checked_epoch = client.epoch
                    start = node.log.log_start_offset
                    held = [e for e in node.log.read(start, len(self.committed)) if e.offset < self.committed_end]
                    if held != [e for e in self.committed.values() if e.offset >= start]:
                        self._fail(f"leader {node.id} of epoch {client.epoch} lacks committed entries: log end "
                                   f"offset {node.log.end_offset}, committed up to {self.committed_end}")
            hw = client.high_watermark
            if hw < node.last_hw:
                self._fail(f"node {node.id} high watermark went back from {node.last_hw} to {hw}")
            node.last_hw = hw
            if hw > node.log.end_offset:
                self._fail(f"node {node.id} high watermark {hw} past its log end offset {node.log.end_offset}")
            low = node.log.lowest_truncation
            if low is not None:
                node.log.lowest_truncation = None
                node.verified = max(min(node.verified, low), node.log.log_start_offset)
            if hw > node.verified:
                for e in node.log.read(node.verified, 1 << 30):
                    if e.next_offset > hw:
                        if e.offset < hw:
                            self._fail(f"node {node.id} high watermark {hw} inside batch {e}")
                        break
                    if e.offset < self.committed_end:
                        if self.committed.get(e.offset) != e:
                            self._fail(f"node {node.id} has {e} where {self.committed.get(e.offset)} was committed")
                    elif e.offset == self.committed_end:
                        self.committed[e.offset] = e
                        self.committed_end = e.next_offset
                    else:
                        self._fail(f"node {node.id} commits {e} past a gap at {self.committed_end}")
                node.verified = hw

    def _check_liveness(self, marker_offset: int | None) -> None:
        if marker_offset is None:
            self._fail("no leader after the network healed")
        leader = self._leader()
        voters = leader.client.voters if leader is not None and leader.client is not None else self.voter_ids
        for node in self.nodes.values():
            if node.id not in voters:
                continue
            if node.client is None or node.client.high_watermark <= marker_offset:
                hw = None if node.client is None else node.client.high_watermark
                self._fail(f"entry {marker_offset} appended after healing is not committed on voter {node.id} "
                           f"(high watermark {hw})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, help="replay one seed")
    ap.add_argument("--seeds", type=int, default=100, help="run seeds 0..N-1")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--voters", type=int, default=3)
    ap.add_argument("--observers", type=int, default=1)
    ap.add_argument("--duration-ms", type=int, default=20_000)
    ap.add_argument("--crash-every-ms", type=int, default=4_000)
    ap.add_argument("--partition-every-ms", type=int, default=5_000)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first_seed, args.first_seed + args.seeds)
    failures = 0
    totals = {"events": 0, "committed": 0, "crashes": 0, "partitions": 0, "epochs": 0, "snapshots written": 0,
              "snapshots fetched": 0, "voter changes": 0}
    for seed in seeds:
        cfg = SimConfig(voters=args.voters, observers=args.observers, duration_ms=args.duration_ms,
                        crash_every_ms=args.crash_every_ms, partition_every_ms=args.partition_every_ms)
        try:
            r = Simulation(seed, cfg, verbose=args.verbose).run()
        except InvariantViolation as exc:
            failures += 1
            print(f"FAIL {exc}", file=sys.stderr)
            continue
        totals["events"] += r.events
        totals["committed"] += r.committed
        totals["crashes"] += r.crashes
        totals["partitions"] += r.partitions
        totals["epochs"] += len(r.leaders)
        totals["snapshots written"] += r.snapshots_written
        totals["snapshots fetched"] += r.snapshots_fetched
        totals["voter changes"] += r.voter_changes
    print(f"{len(seeds)} seeds, {failures} failed; " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
