"""A deterministic simulation of partition replication over kbroker's own replication code (issue 10).

One seed drives everything: message delays and losses between the brokers, the controller and the producer,
stale metadata, broker crashes (a process crash keeps what was written; a power loss also loses what the log had
not flushed) and restarts, leadership moved away from live leaders (sometimes twice within milliseconds, so
that a leader appended nothing in its epoch), and a producer writing with acks=all, with pauses. The same seed
replays the same run exactly::

    python -m kbroker.testing.replication_simulation --seeds 1000          # a campaign
    python -m kbroker.testing.replication_simulation --seed 4711 --verbose # replay one run

What is real and what is modelled:

* real: each broker's :class:`~kbroker.storage.log.PartitionLog` on disk (a temporary directory: appends,
  truncation, recovery after a crash, the leader epoch checkpoint), its
  :class:`~kbroker.server.replica_manager.Partition` (follower tracking, the high watermark, ISR proposals,
  applying metadata), the leader's answer to a follower's fetch
  (:func:`kbroker.server.handlers.fetch.follower_position`, then a read up to the log end offset), the follower's
  handling of the answer (:func:`kbroker.server.replica_fetcher.apply_fetched`: append as follower, diverging
  epoch truncation, high watermark), AlterPartition answers (:func:`~kbroker.server.alter_partition_manager.
  apply_answer`) and when an acks=all write is acknowledged (:func:`kbroker.server.handlers.produce.
  acks_all_outcome`);
* modelled: the network (one event queue), the controller (the rules of ``QuorumController``: AlterPartition's
  epoch checks, fencing a broker whose session expired (out of every ISR unless last, leadership to the first
  live in-sync replica), a returning broker registering only after its old session was fenced), and the metadata
  reaching each broker in commit order after a random delay.

Invariants, checked at the end once every broker is back and replication has caught up:

* **no acknowledged write lost**: every record acknowledged with acks=all (``min.insync.replicas`` = 2) is in the
  leader's log at the offset it was acknowledged with;
* **replicas agree**: every replica holds the same records at the same offsets, with the same leader epochs;
* **the high watermark**: every replica's equals the leader's log end offset (nothing committed is missing);

and during the run: **a leader's high watermark never goes back** within one leadership, **no follower copies,
below its high watermark, a record other than the acknowledged one at that offset**, and **no offset is
acknowledged for two different records**.
"""

from __future__ import annotations

import argparse
import heapq
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import AlterPartitionResponse, FetchResponse
from kbroker.protocol.records import build_batch, iter_batches
from kbroker.server.alter_partition_manager import apply_answer
from kbroker.server.handlers.fetch import follower_position
from kbroker.server.handlers.produce import acks_all_outcome
from kbroker.server.replica_fetcher import apply_fetched, fetch_partition
from kbroker.server.replica_manager import Partition
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog
from kbroker.storage.producer_state import AppendOrigin

TOPIC = "sim"
TOPIC_ID = bytes(range(1, 17))
MIN_ISR = 2
#: a bound on the events of one run (a run that needs more is a bug in the simulation or in what it drives)
MAX_EVENTS = 2_000_000
#: wall-clock milliseconds at simulated time 0 (record timestamps and the logs' clocks)
EPOCH_MS = 1_700_000_000_000


class InvariantViolation(AssertionError):
    pass


@dataclass
class SimConfig:
    brokers: int = 3
    duration_ms: int = 20_000
    crash_every_ms: int = 2_500
    #: of crashes, the share that are power losses (the log loses what it had not flushed)
    power_loss_share: float = 0.3
    produce_every_ms: int = 5
    session_timeout_ms: int = 600
    replica_lag_time_max_ms: int = 400
    max_delay_ms: int = 15
    drop_rate: float = 0.02
    #: about how often the controller moves leadership away from a live leader (a preferred leader election, a
    #: controlled shutdown, a reassignment): 0 = never. Such a leader may have appended nothing in its epoch.
    elect_every_ms: int = 3_000
    #: the producer pauses now and then (about every ``pause_every_ms``, for up to ``pause_max_ms``): the high
    #: watermark reaches the log end, which is when a follower's own stale epochs decide what it truncates
    pause_every_ms: int = 1_000
    pause_max_ms: int = 300


@dataclass
class ControllerModel:
    """The committed partition state and the brokers' sessions, with QuorumController's rules."""

    replicas: list[int]
    leader: int
    isr: list[int]
    leader_epoch: int = 0
    partition_epoch: int = 0
    #: broker -> registered (unfenced) or not
    live: dict[int, bool] = field(default_factory=dict)
    version: int = 0

    def state(self) -> tuple[int, int, int, list[int], list[int]]:
        return (self.leader, self.leader_epoch, self.partition_epoch, list(self.replicas), list(self.isr))

    def _change(self, isr: list[int] | None = None, leader: int | None = None) -> None:
        if isr is not None:
            self.isr = isr
        if leader is not None:
            self.leader = leader
            self.leader_epoch += 1
        self.partition_epoch += 1
        self.version += 1

    def fence(self, b: int, rejoining: bool = False) -> None:
        """``_leaders_without``: out of the ISR unless last; leadership to the first live in-sync replica."""
        self.live[b] = rejoining
        isr = [r for r in self.isr if r != b] if b in self.isr and len(self.isr) > 1 else list(self.isr)
        leader = None
        if self.leader == b:
            leader = next((r for r in isr if self.live.get(r) and r != b),
                          b if rejoining and isr == [b] else -1)
        if isr != self.isr or leader is not None:
            self._change(isr if isr != self.isr else None, leader)

    def register(self, b: int) -> None:
        """A new incarnation: its old one's places go first (unclean shutdown), then it is live; a leaderless
        partition whose ISR holds it gets it as leader."""
        self.fence(b, rejoining=True)
        self.live[b] = True
        if self.leader == -1 and b in self.isr:
            self._change(leader=b)

    def alter_partition(self, b: int, leader_epoch: int, partition_epoch: int, new_isr: list[int]) -> Any:
        pd = AlterPartitionResponse.PartitionData(partition_index=0)
        if not self.live.get(b):
            pd.error_code = ErrorCode.STALE_BROKER_EPOCH
        elif self.leader != b:
            pd.error_code = ErrorCode.INVALID_REQUEST
        elif leader_epoch < self.leader_epoch:
            pd.error_code = ErrorCode.FENCED_LEADER_EPOCH
        elif leader_epoch > self.leader_epoch:
            pd.error_code = ErrorCode.NOT_CONTROLLER
        elif partition_epoch != self.partition_epoch:
            pd.error_code = ErrorCode.INVALID_UPDATE_VERSION
        elif b not in new_isr or any(r not in self.replicas for r in new_isr):
            pd.error_code = ErrorCode.INVALID_REQUEST
        elif any(r not in self.isr and not self.live.get(r) for r in new_isr):
            pd.error_code = ErrorCode.INELIGIBLE_REPLICA
        else:
            if sorted(new_isr) != sorted(self.isr):
                self._change(isr=list(new_isr))
            pd.leader_id, pd.leader_epoch, pd.isr = self.leader, self.leader_epoch, list(self.isr)
            pd.partition_epoch = self.partition_epoch
        return pd


class _ExpansionSink:
    """What ``follower_position`` calls on the leader's replica manager: ISR expansions go to the simulation."""

    def __init__(self, propose: Callable[[Partition, int], None]) -> None:
        self.propose = propose

    def maybe_expand_isr(self, part: Partition, replica_id: int) -> None:
        self.propose(part, replica_id)


@dataclass
class Broker:
    node_id: int
    dir: Path
    part: Partition | None = None
    up: bool = True
    #: metadata versions delivered (in order) and the time the last one arrives
    metadata_version: int = -1
    metadata_at: int = 0
    fetch_in_flight: bool = False
    #: the number of the fetch in flight (an answer or timeout of an older one is ignored)
    fetch_seq: int = 0
    incarnation: int = 0
    down_since: int = 0
    #: leader: (leader epoch, high watermark) last seen, to check it never goes back within a leadership
    leader_hw: tuple[int, int] = (-1, -1)


@dataclass
class Result:
    events: int = 0
    acknowledged: int = 0
    crashes: int = 0
    power_losses: int = 0
    leader_changes: int = 0
    #: of the leader changes, those that moved leadership away from a live leader
    elections: int = 0
    isr_changes: int = 0
    truncations: int = 0


class Simulation:
    def __init__(self, seed: int, cfg: SimConfig | None = None, verbose: bool = False) -> None:
        self.seed = seed
        self.cfg = cfg or SimConfig()
        self.rng = random.Random(seed)
        #: the elections' and producer pauses' own stream, so that they draw nothing from the network's and
        #: crashes' one
        self.elect_rng = random.Random(seed * 7919 + 1)
        self.paused_until = 0
        self.verbose = verbose
        self.now = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.root = Path(tempfile.mkdtemp(prefix=f"kbroker-repsim-{seed}-"))
        ids = list(range(1, self.cfg.brokers + 1))
        self.controller = ControllerModel(replicas=ids, leader=ids[0], isr=list(ids), live={i: True for i in ids})
        self.brokers = {i: Broker(i, self.root / f"broker{i}") for i in ids}
        #: offset -> value acknowledged there (acks=all)
        self.acked: dict[int, bytes] = {}
        self.result = Result()
        self._next_value = 0
        self.expansions = _ExpansionSink(self._propose_expansion)

    # ------------------------------------------------------------------ plumbing
    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"[{self.now:6d}] {msg}")

    def at(self, delay: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + max(0, delay), self._seq, fn))

    def send(self, fn: Callable[[], None]) -> None:
        """A message over the network: delayed, sometimes lost."""
        if self.rng.random() < self.cfg.drop_rate:
            return
        self.at(self.rng.randint(1, self.cfg.max_delay_ms), fn)

    # ------------------------------------------------------------------ brokers
    def _open(self, b: Broker) -> None:
        plog = PartitionLog(b.dir / f"{TOPIC}-0", LogConfig(segment_bytes=4096), topic_id=TOPIC_ID,
                            recovery_point=0, clean_shutdown=False, now_ms=EPOCH_MS + self.now)
        c = self.controller
        b.part = Partition(TOPIC, 0, TOPIC_ID, plog, -1, -1, -1, list(c.replicas), [], local_id=b.node_id)
        b.metadata_version = -1
        b.leader_hw = (-1, -1)
        b.fetch_in_flight = False
        b.incarnation += 1
        self._deliver_metadata(b)

    def _deliver_metadata(self, b: Broker) -> None:
        """The committed state reaches ``b`` after a delay, in commit order (the metadata log)."""
        version, state = self.controller.version, self.controller.state()
        at = max(self.now + self.rng.randint(1, self.cfg.max_delay_ms * 2), b.metadata_at)
        b.metadata_at = at
        inc = b.incarnation

        def apply() -> None:
            if not b.up or b.incarnation != inc or b.part is None or version <= b.metadata_version:
                return
            b.metadata_version = version
            change = b.part.apply_state(*state, now_ms=self.now)
            self.log(f"broker {b.node_id} applies {state}: {change}")
            if change == "leader":
                b.leader_hw = (b.part.leader_epoch, b.part.high_watermark)
            if change in ("follower", "following") and not b.fetch_in_flight:
                self._fetch(b)

        self.at(at - self.now, apply)

    def _committed(self) -> None:
        """The controller committed a change: every live broker hears of it."""
        for b in self.brokers.values():
            if b.up:
                self._deliver_metadata(b)

    def _crash(self, b: Broker) -> None:
        power = self.rng.random() < self.cfg.power_loss_share and all(
            x.up for x in self.brokers.values()) and len(self.controller.isr) == self.cfg.brokers
        self.log(f"broker {b.node_id} crashes{' (power loss)' if power else ''}")
        self.result.crashes += 1
        b.up = False
        b.down_since = self.now
        assert b.part is not None
        plog = b.part.log
        if power:
            # what was not flushed is gone: the files end at the last flush
            self.result.power_losses += 1
            plog.truncate_to(plog.recovery_point)
        plog.close()
        b.part = None
        # its session expires: the controller fences it
        self.at(self.cfg.session_timeout_ms, lambda: self._session_expired(b))
        self.at(self.rng.randint(self.cfg.session_timeout_ms // 2, self.cfg.session_timeout_ms * 3),
                lambda: self._restart(b))

    def _elect(self, burst: bool = True) -> None:
        """The controller moves leadership to another live in-sync replica; the old leader stays up and in the
        ISR and learns it follows from the metadata. Sometimes a second move follows within a few milliseconds
        (``burst``), often before the producer has written through the new leader: a leader that appended
        nothing in its epoch, as a preferred leader election right after a failover makes."""
        c = self.controller
        if burst and self.elect_rng.random() < 0.3:
            self.at(self.elect_rng.randint(1, 3 * self.cfg.max_delay_ms), lambda: self._elect(burst=False))
        candidates = [r for r in c.isr if r != c.leader and c.live.get(r)]
        if not candidates or not c.live.get(c.leader):
            return
        new = self.elect_rng.choice(candidates)
        self.log(f"controller moves leadership from {c.leader} to {new}")
        c._change(leader=new)
        self.result.leader_changes += 1
        self.result.elections += 1
        self._committed()

    def _session_expired(self, b: Broker) -> None:
        if not b.up and self.controller.live.get(b.node_id):
            self.log(f"controller fences broker {b.node_id}")
            before = self.controller.leader
            self.controller.fence(b.node_id)
            self.result.leader_changes += before != self.controller.leader
            self._committed()

    def _restart(self, b: Broker) -> None:
        if b.up:
            return
        if self.controller.live.get(b.node_id):
            self.at(50, lambda: self._restart(b))  # DUPLICATE_BROKER_REGISTRATION until the old session ends
            return
        b.up = True
        self._open(b)
        self.log(f"broker {b.node_id} restarts (log end {b.part.log.log_end_offset if b.part else -1})")
        before = self.controller.leader
        self.controller.register(b.node_id)
        self.result.leader_changes += before != self.controller.leader
        self._committed()

    # ------------------------------------------------------------------ replication
    def _fetch(self, b: Broker) -> None:
        part = b.part
        if not b.up or part is None or part.is_leader or part.leader < 0:
            b.fetch_in_flight = False
            return
        b.fetch_in_flight = True
        b.fetch_seq += 1
        seq = b.fetch_seq
        leader = self.brokers[part.leader]
        fp = fetch_partition(part, 4096)
        inc, epoch, leo = b.incarnation, part.leader_epoch, part.log.log_end_offset

        def lost() -> None:  # no answer within the follower's request timeout: it asks again
            if b.incarnation == inc and b.fetch_seq == seq and b.fetch_in_flight:
                self._fetch(b)

        self.at(200, lost)
        self.send(lambda: self._serve_fetch(leader, b, fp, lambda pd: self.send(
            lambda: self._fetched(b, inc, seq, part, epoch, leo, pd))))

    def _serve_fetch(self, leader: Broker, follower: Broker, fp: Any, reply: Callable[[Any], None]) -> None:
        part = leader.part
        if not leader.up or part is None:
            return
        pd = FetchResponse.PartitionData(partition_index=0, high_watermark=-1, last_stable_offset=-1,
                                         log_start_offset=-1, records=b"")
        try:
            if not part.is_leader:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            part.check_leader_epoch(fp.current_leader_epoch)
            if follower_position(self.expansions, part, follower.node_id, fp, pd, 17, self.now):
                pd.high_watermark, pd.log_start_offset = part.high_watermark, part.log_start_offset
                info = part.log.read(fp.fetch_offset, fp.partition_max_bytes, part.log_end_offset,
                                     min_one_message=True)
                pd.records = info.read_bytes() if info.size else b""
            self._check_leader(leader)
            self._settle_produces()
        except KafkaError as exc:
            pd.error_code = exc.code
        reply(pd)

    def _fetched(self, b: Broker, inc: int, seq: int, part: Partition, epoch: int, leo: int, pd: Any) -> None:
        if b.incarnation != inc or b.part is not part or not b.up or b.fetch_seq != seq:
            return
        b.fetch_in_flight = False
        if part.leader_epoch == epoch and not part.is_leader and part.log.log_end_offset == leo:
            if pd.error_code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                before = part.log.log_end_offset
                apply_fetched(part, pd, part.leader)
                if part.log.log_end_offset < before:
                    self.result.truncations += 1
                    self.log(f"broker {b.node_id} truncated {before} -> {part.log.log_end_offset}")
                self._check_fetched(b, pd)
        self.at(self.rng.randint(0, 3) if pd.error_code == ErrorCode.NONE else 20, lambda: self._fetch_if_idle(b, inc))

    def _fetch_if_idle(self, b: Broker, inc: int) -> None:
        if b.incarnation == inc and b.up and not b.fetch_in_flight:
            self._fetch(b)

    # ------------------------------------------------------------------ ISR changes
    def _propose_expansion(self, part: Partition, replica_id: int) -> None:
        new_isr = part.isr_expansion(replica_id)
        if new_isr is not None:
            self._alter(part, new_isr)

    def _alter(self, part: Partition, new_isr: list[int]) -> None:
        owner = self.brokers[part.local_id]
        part.pending_isr = list(new_isr)
        part.maybe_increment_high_watermark()
        inc, leader_epoch, partition_epoch = owner.incarnation, part.leader_epoch, part.partition_epoch

        def at_controller() -> None:
            pd = self.controller.alter_partition(part.local_id, leader_epoch, partition_epoch, list(new_isr))
            if not pd.error_code and pd.partition_epoch > partition_epoch:
                self.result.isr_changes += 1
                self.log(f"controller: ISR {pd.isr} (partition epoch {pd.partition_epoch})")
                self._committed()

            def answered() -> None:
                if owner.incarnation == inc and owner.part is part:
                    apply_answer(part, new_isr, pd)
                    self._settle_produces()

            self.send(answered)

        def lost() -> None:  # no answer in time: the proposal is dropped and made again later
            if owner.incarnation == inc and owner.part is part and part.pending_isr == new_isr:
                apply_answer(part, new_isr, None)

        self.at(300, lost)
        self.send(at_controller)

    def _check_isr_lag(self) -> None:
        for b in self.brokers.values():
            part = b.part
            if b.up and part is not None and part.is_leader and len(part.isr) > 1:
                new_isr = part.isr_shrink(self.now, self.cfg.replica_lag_time_max_ms)
                if new_isr is not None:
                    self._alter(part, new_isr)
        self.at(self.cfg.replica_lag_time_max_ms // 2, self._check_isr_lag)

    # ------------------------------------------------------------------ the producer
    def _produce(self) -> None:
        self.at(self.cfg.produce_every_ms, self._produce)
        cfg = self.cfg
        if self.now < self.paused_until:
            return
        if cfg.pause_every_ms and self.elect_rng.random() < cfg.produce_every_ms / cfg.pause_every_ms:
            self.paused_until = self.now + self.elect_rng.randint(1, cfg.pause_max_ms)
            return
        target = self.brokers.get(self.controller.leader)
        if target is None:
            return
        value = f"v{self._next_value}".encode()
        self._next_value += 1
        self.send(lambda: self._append(target, value))

    def _append(self, b: Broker, value: bytes) -> None:
        part = b.part
        if not b.up or part is None or not part.is_leader or len(part.isr) < MIN_ISR:
            return  # NOT_LEADER_OR_FOLLOWER / NOT_ENOUGH_REPLICAS: not acknowledged
        info = part.log.append_as_leader(build_batch([(None, value, [], EPOCH_MS + self.now)]),
                                         part.leader_epoch, EPOCH_MS + self.now, AppendOrigin.CLIENT)
        if not part.maybe_increment_high_watermark():
            part.wake_append_waiters()
        if self.rng.random() < 0.05:
            part.log.flush()  # logs are flushed now and then (power losses keep what was)
        self._pending.append((b, b.incarnation, part, info.last_offset, value))
        self._settle_produces()

    _pending: list[tuple[Broker, int, Partition, int, bytes]]

    def _settle_produces(self) -> None:
        keep = []
        for entry in self._pending:
            b, inc, part, last, value = entry
            if b.incarnation != inc or b.part is not part:
                continue  # the leader crashed: no answer came, the write is not acknowledged
            code = acks_all_outcome(part, last, MIN_ISR)
            if code is None:
                keep.append(entry)
            elif code == ErrorCode.NONE:
                if last in self.acked and self.acked[last] != value:
                    raise InvariantViolation(f"seed {self.seed}: offset {last} acknowledged twice "
                                             f"({self.acked[last]!r}, {value!r})")
                self.acked[last] = value
        self._pending = keep

    # ------------------------------------------------------------------ invariants
    def _check_leader(self, b: Broker) -> None:
        part = b.part
        if part is None or not part.is_leader:
            return
        epoch, hw = b.leader_hw
        if epoch == part.leader_epoch and part.high_watermark < hw:
            raise InvariantViolation(f"seed {self.seed}: leader {b.node_id}'s high watermark went back from {hw} "
                                     f"to {part.high_watermark} in epoch {epoch}")
        b.leader_hw = (part.leader_epoch, part.high_watermark)

    def _values(self, part: Partition) -> list[tuple[int, int, bytes]]:
        """(offset, leader epoch, value) of every record in the log."""
        plog = part.log
        if plog.log_end_offset == plog.log_start_offset:
            return []
        info = plog.read(plog.log_start_offset, 1 << 30, plog.log_end_offset, min_one_message=True)
        out = []
        for batch in iter_batches(info.read_bytes()):
            for i, rec in enumerate(batch.records()):
                out.append((batch.base_offset + i, batch.partition_leader_epoch, bytes(rec.value or b"")))
        return out

    def _check_fetched(self, b: Broker, pd: Any) -> None:
        """What a follower just copied must be, below its high watermark, what was acknowledged there."""
        part = b.part
        if part is None or not pd.records:
            return
        hw = part.high_watermark
        for batch in iter_batches(bytes(pd.records)):
            for i, rec in enumerate(batch.records()):
                offset = batch.base_offset + i
                want = self.acked.get(offset)
                if offset < hw and want is not None and want != bytes(rec.value or b""):
                    raise InvariantViolation(
                        f"seed {self.seed}: broker {b.node_id} copied {rec.value!r} to offset {offset} below its "
                        f"high watermark {hw}, but {want!r} was acknowledged there")

    def _check_end(self) -> None:
        c = self.controller
        leader = self.brokers.get(c.leader)
        if leader is None or leader.part is None:
            raise InvariantViolation(f"seed {self.seed}: no leader at the end (state {c.state()})")
        logs = {i: self._values(b.part) for i, b in self.brokers.items() if b.part is not None}
        mine = logs[c.leader]
        at = {o: v for o, _, v in mine}
        for offset, value in self.acked.items():
            if at.get(offset) != value:
                raise InvariantViolation(f"seed {self.seed}: acknowledged {value!r} at offset {offset} is lost "
                                         f"(the leader {c.leader} has {at.get(offset)!r})")
        for i, entries in logs.items():
            if entries != mine:
                diff = next((x for x in zip(entries, mine) if x[0] != x[1]), None)
                raise InvariantViolation(f"seed {self.seed}: broker {i}'s log differs from leader {c.leader}'s "
                                         f"({len(entries)} vs {len(mine)} records; first difference {diff})")
        end = leader.part.log.log_end_offset
        for i, b in self.brokers.items():
            if b.part is not None and b.part.high_watermark != end:
                raise InvariantViolation(f"seed {self.seed}: broker {i}'s high watermark {b.part.high_watermark} "
                                         f"!= the leader's log end {end}")

    # ------------------------------------------------------------------ the run
    def run(self) -> Result:
        cfg = self.cfg
        self._pending = []
        try:
            for b in self.brokers.values():
                self._open(b)
            self.at(1, self._produce)
            self.at(cfg.replica_lag_time_max_ms // 2, self._check_isr_lag)
            crash_at = self.rng.randint(cfg.crash_every_ms // 2, cfg.crash_every_ms)
            elect_at = (self.elect_rng.randint(cfg.elect_every_ms // 2, cfg.elect_every_ms) if cfg.elect_every_ms
                        else cfg.duration_ms)
            while self.now < cfg.duration_ms and self._queue and self.result.events < MAX_EVENTS:
                when, _, fn = heapq.heappop(self._queue)
                self.now = when
                fn()
                self.result.events += 1
                if self.now >= crash_at:
                    crash_at = self.now + self.rng.randint(cfg.crash_every_ms // 2, cfg.crash_every_ms)
                    up = [b for b in self.brokers.values() if b.up]
                    if len(up) > 1:
                        self._crash(self.rng.choice(up))
                if cfg.elect_every_ms and self.now >= elect_at:
                    elect_at = self.now + self.elect_rng.randint(cfg.elect_every_ms // 2, cfg.elect_every_ms)
                    self._elect()
            # heal: no more crashes or losses, the producer stops; everything restarts and catches up
            self.cfg = cfg = SimConfig(**{**cfg.__dict__, "drop_rate": 0.0})
            self._queue = [(t, s, fn) for t, s, fn in self._queue if fn.__name__ != "_produce"]
            heapq.heapify(self._queue)
            deadline = self.now + 20_000
            while self._queue and self.now < deadline and self.result.events < MAX_EVENTS:
                when, _, fn = heapq.heappop(self._queue)
                self.now = when
                fn()
                self.result.events += 1
                if self._quiescent():
                    break
            if not self._quiescent():
                raise InvariantViolation(f"seed {self.seed}: replication did not catch up within 20 s after healing "
                                         f"(state {self.controller.state()}, log ends "
                                         f"{[b.part.log.log_end_offset if b.part else None for b in self.brokers.values()]})")
            self._settle_produces()
            self._check_end()
            self.result.acknowledged = len(self.acked)
            return self.result
        finally:
            for b in self.brokers.values():
                if b.part is not None:
                    b.part.log.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def _quiescent(self) -> bool:
        c = self.controller
        if not all(b.up and b.part is not None for b in self.brokers.values()) or len(c.isr) != len(c.replicas):
            return False
        leader = self.brokers[c.leader].part
        if leader is None or not leader.is_leader or leader.leader_epoch != c.leader_epoch:
            return False
        end = leader.log.log_end_offset
        return all(b.metadata_version == c.version and b.part is not None and b.part.log.log_end_offset == end
                   and b.part.high_watermark == end for b in self.brokers.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, help="replay one seed")
    ap.add_argument("--seeds", type=int, default=100, help="run seeds 0..N-1")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--duration-ms", type=int, default=20_000)
    ap.add_argument("--crash-every-ms", type=int, default=2_500)
    ap.add_argument("--elect-every-ms", type=int, default=3_000,
                    help="about how often leadership moves away from a live leader (0: never)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first_seed, args.first_seed + args.seeds)
    failures = 0
    totals = {"events": 0, "acknowledged": 0, "crashes": 0, "power losses": 0, "leader changes": 0,
              "elections of a live leader's successor": 0, "ISR changes": 0, "truncations": 0}
    for seed in seeds:
        cfg = SimConfig(duration_ms=args.duration_ms, crash_every_ms=args.crash_every_ms,
                        elect_every_ms=args.elect_every_ms)
        try:
            r = Simulation(seed, cfg, verbose=args.verbose).run()
        except InvariantViolation as exc:
            failures += 1
            print(f"FAIL {exc}", file=sys.stderr)
            continue
        for k, v in (("events", r.events), ("acknowledged", r.acknowledged), ("crashes", r.crashes),
                     ("power losses", r.power_losses), ("leader changes", r.leader_changes),
                     ("elections of a live leader's successor", r.elections),
                     ("ISR changes", r.isr_changes), ("truncations", r.truncations)):
            totals[k] += v
    print(f"{len(seeds)} seeds, {failures} failed; " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
