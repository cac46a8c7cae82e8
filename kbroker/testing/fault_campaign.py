"""A seeded fault campaign against a replicated kbroker cluster, with real processes and a real client (issue 10).

Three controllers and three brokers (``KbrokerCluster(nodes=3, brokers=3)``), a topic with 3 partitions,
replication factor 3 and ``min.insync.replicas=2``, and confluent-kafka's idempotent acks=all producer writing
about 1,000 unique records/s (:class:`Writer`) while faults chosen by the seed hit the brokers one after
another:

* ``kill-leader`` / ``kill-follower``: SIGKILL a broker leading (or only following) a partition, restart it
  (it registers once its session has expired and the controller fenced it, then catches up);
* ``pause``: SIGSTOP a broker for 0.2-1.5 s, then SIGCONT (a follower stopped beyond
  ``replica.lag.time.max.ms`` leaves the ISR and comes back; a leader only delays its answers);
* ``wipe``: SIGKILL a broker, delete its data directories, restart it (it rebuilds every replica from the
  leaders);
* ``cut-leader``: cut a broker leading a partition off from the controllers and the other brokers for 0.5-4 s
  (the cluster's ``firewall``: iptables drops what its process and the others send to each other; its clients
  still reach it), then heal:
  beyond ``broker.session.timeout.ms`` it is fenced and its partitions move, and whatever it appended alone
  meanwhile was never acknowledged (acks=all) and is truncated when it follows again.

After each fault the campaign waits until every broker is back, every ISR is full again and every partition has
acknowledged new records. At the end everything acknowledged is read back and checked with
:class:`~kbroker.testing.history.History` (nothing lost, duplicated, moved or reordered), and the replicas'
segment files are compared byte for byte. ``compat_tests/test_replication.py`` runs a seeded slice of 100 faults
in CI; longer campaigns::

    python -m kbroker.testing.fault_campaign --faults 1000 --seed 7

print the counts (faults by kind, acknowledged, read, lost, duplicated) and the recovery times.

The producer's librdkafka ``eos`` debug lines (epoch bumps, partition drains, sequence errors: few, and only around
faults) go to ``<root>/producer-eos.log`` with the faults interleaved; when the history check fails, the lines
naming the idempotent producer's state changes are added to the failure.

One duplicate is the client's, not the broker's, and is counted apart (``renumbered``): librdkafka bumps its
idempotent epoch when a batch fails with OUT_OF_ORDER_SEQUENCE_NUMBER behind a failed one ("skipped sequence
numbers", rdkafka_request.c), and then renumbers *every* unacknowledged message of every partition from sequence 0
of the new epoch, including a batch of another partition that the broker had written and whose answer the client
lost (a disconnection, NOT_LEADER_OR_FOLLOWER from a leader that lost its leadership while the batch waited for
acks=all, as Kafka's brokers answer too); that batch is then written again as new records (librdkafka issue #4953,
open; Apache Kafka behaves the same). Such a copy is told apart from a broker that failed to recognise a retry by the
batches themselves: the copies carry the same producer id but *different producer epochs*, and the producer logged
an epoch bump. A copy under the same epoch (a retry the broker wrote twice) is still a failure.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import random
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing.cluster import KbrokerCluster, ask, wait_until
from kbroker.testing.history import History

TOPIC = "rep"
PARTITIONS = 3


class Admin:
    """Metadata from whichever node of ``ids`` is up (a stopped node cannot answer)."""

    def __init__(self, cluster: KbrokerCluster) -> None:
        self.cluster = cluster
        self.down: set[int] = set()
        self._clients: dict[int, AdminClient] = {}

    def client(self) -> AdminClient:
        nid = next(i for i in self.cluster.broker_ids if i not in self.down)
        if nid not in self._clients:
            self._clients[nid] = AdminClient({"bootstrap.servers": self.cluster.nodes[nid].bootstrap})
        return self._clients[nid]

    def metadata(self, topic: str = TOPIC) -> dict[int, Any]:
        """partition -> its Metadata answer (``leader_id``, ``replica_nodes``, ``isr_nodes``), asked of the first
        broker that is up, on its own connection (a client library may route the request to a stopped broker
        whose connection still looks open). The answering broker may not have replayed the topic's creation yet
        (metadata reaches brokers eventually): asked again until it has."""
        from kbroker.protocol.api_keys import ApiKey
        from kbroker.protocol.messages import MetadataRequest, MetadataResponse

        deadline = time.monotonic() + 15
        while True:
            node = self.cluster.nodes[next(i for i in self.cluster.broker_ids if i not in self.down)]
            try:
                resp = ask(node.host, node.port, ApiKey.METADATA, 12,
                           MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
                           MetadataResponse, timeout=10)
                parts = {p.partition_index: p for t in resp.topics if t.name == topic and not t.error_code
                         for p in t.partitions}
            except OSError:
                parts = {}
            if parts or time.monotonic() > deadline:
                return dict(sorted(parts.items()))
            time.sleep(0.1)

    def state(self, topic: str = TOPIC) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader, sorted ISR), as :meth:`metadata` answers."""
        return {pid: (p.leader_id, sorted(p.isr_nodes)) for pid, p in self.metadata(topic).items()}

    def wait_isr(self, want: int, timeout: float, topic: str = TOPIC, what: str = "") -> float:
        started = time.monotonic()
        wait_until(lambda: all(len(isr) == want and leader >= 0 for leader, isr in self.state(topic).values()),
                   timeout, what or f"every ISR of {topic} with {want} members")
        return time.monotonic() - started


def create_topic(admin: Admin, name: str = TOPIC, partitions: int = PARTITIONS, min_isr: int = 2) -> None:
    admin.client().create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": str(min_isr)})]
                                 )[name].result(30)
    admin.wait_isr(3, 30, name)


def segment_digests(cluster: KbrokerCluster, node_ids: list[int], topic: str, partition: int) -> dict[int, str]:
    """node -> digest of the partition's segment files, concatenated in offset order."""
    out = {}
    for n in node_ids:
        files = sorted(Path(cluster.nodes[n].log_dirs).rglob(f"{topic}-{partition}/*.log"))
        h = hashlib.sha256()
        for f in files:
            h.update(f.read_bytes())
        out[n] = h.hexdigest()[:16]
    return out


#: a v2 record batch header: base offset, batch length, partition leader epoch, magic, crc, attributes, last offset
#: delta, base timestamp, max timestamp, producer id, producer epoch, base sequence, record count
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def partition_batches(cluster: KbrokerCluster, node_id: int, topic: str = TOPIC
                      ) -> dict[int, list[tuple[int, int, int, int, int]]]:
    """partition -> ``(base offset, last offset, producer id, producer epoch, base sequence)`` of every batch in the
    segment files of ``node_id``'s replica, in offset order."""
    out: dict[int, list[tuple[int, int, int, int, int]]] = {}
    for p in range(PARTITIONS):
        batches = out[p] = []
        for f in sorted(Path(cluster.nodes[node_id].log_dirs).rglob(f"{topic}-{p}/*.log")):
            data, pos = f.read_bytes(), 0
            while pos + _BATCH_HEADER.size <= len(data):
                h = _BATCH_HEADER.unpack_from(data, pos)
                batches.append((h[0], h[0] + h[6], h[9], h[10], h[11]))
                pos += 12 + h[1]
    return out


def client_renumbered(duplicated: list[tuple[str, int, bytes, list[int]]],
                      batches: Mapping[int, list[tuple[int, int, int, int, int]]],
                      eos_log: str) -> list[tuple[str, int, bytes, list[int]]]:
    """The duplicates (``Report.duplicated`` entries) that librdkafka wrote again under a bumped producer epoch:
    every copy in a batch of the same producer id, no two copies under the same epoch, and an epoch bump in the
    producer's eos log (see the module docstring). The others are the broker's."""
    if "epoch bump" not in eos_log:
        return []

    def producer_of(partition: int, offset: int) -> tuple[int, int] | None:
        for base, last, pid, epoch, _ in batches.get(partition, ()):
            if base <= offset <= last:
                return pid, epoch
        return None

    found = []
    for dup in duplicated:
        _, partition, _, offsets = dup
        owners = [producer_of(partition, o) for o in offsets]
        if None in owners or len({pid for pid, _ in owners}) != 1 or owners[0][0] < 0:
            continue
        if len({epoch for _, epoch in owners}) == len(owners):
            found.append(dup)
    return found


def wait_identical(cluster: KbrokerCluster, node_ids: list[int], topic: str = TOPIC, timeout: float = 30) -> None:
    for p in range(PARTITIONS):
        wait_until(lambda: len(set(segment_digests(cluster, node_ids, topic, p).values())) == 1, timeout,
                   f"identical replicas of {topic}-{p}: {segment_digests(cluster, node_ids, topic, p)}")


class Writer:
    """An idempotent acks=all confluent-kafka producer writing unique values round-robin over the partitions,
    in a thread, recording attempts and acknowledgements in a :class:`History`."""

    def __init__(self, bootstrap: str, h: History, prefix: str, config: Mapping[str, Any] | None = None,
                 eos_log: logging.Logger | None = None) -> None:
        """``config``: librdkafka settings over the ones below; ``eos_log``: where librdkafka's ``eos`` debug lines
        go (served by the writer's poll)."""
        self.h = h
        self.prefix = prefix
        # request.timeout.ms 5 s (30 s by default): a leader cut off from the cluster holds acks=all produce
        # requests until their timeout, and a broker answers a connection's requests in order (as Kafka's do), so
        # with 30 s the requests for its other partitions, and the metadata request that would name the new
        # leader, queue 30 s each behind it, and the idempotent producer cannot move the partition before its
        # in-flight requests are answered. enable.sparse.connections off: librdkafka asks a connected broker for
        # metadata, and when the cut-off leader led every partition it was the only one, answering with its own
        # stale view (itself the leader) until the records expired
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 2, "message.timeout.ms": 120000, "retry.backoff.ms": 50,
                           "request.timeout.ms": 5000, "enable.sparse.connections": False,
                           "topic.metadata.refresh.interval.ms": 1000,
                           **({"debug": "eos", "logger": eos_log} if eos_log is not None else {}), **(config or {})})
        self.acked = 0
        #: per partition: acknowledgements of records produced after the last mark()
        self.acked_in = [0] * PARTITIONS
        self.mark = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _done(self, err, msg) -> None:  # noqa: ANN001
        if err is None:
            self.h.ack(msg.topic(), msg.partition(), msg.offset(), msg.value(), producer=self.prefix)
            self.acked += 1
            if int(msg.value().rsplit(b"-", 1)[1]) >= self.mark:
                self.acked_in[msg.partition()] += 1
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(20):
                value = f"{self.prefix}-{self.sent}".encode()
                self.h.attempt(TOPIC, value)
                self.p.produce(TOPIC, value=value, partition=self.sent % PARTITIONS, on_delivery=self._done)
                self.sent += 1
            self.p.poll(0)
            time.sleep(0.02)  # about 1,000 records/s

    def start(self) -> Writer:
        self._thread.start()
        return self

    def set_mark(self) -> None:
        """From now on ``acked_in`` counts only records produced after this call (not ones in flight before)."""
        self.acked_in = [0] * PARTITIONS
        self.mark = self.sent

    def wait_acked(self, more: int, timeout: float, partition: int | None = None) -> None:
        """Until ``more`` further acknowledgements came (with ``partition``: of its records produced after the
        last :meth:`set_mark`)."""
        count = (lambda: self.acked) if partition is None else (lambda: self.acked_in[partition])
        target = count() + more
        wait_until(lambda: count() >= target, timeout, f"{more} more acknowledgements (errors {self.errors[:3]})")

    def wait_knows_brokers(self, n: int, timeout: float) -> None:
        """Until a metadata answer to the producer names ``n`` brokers. librdkafka drops the brokers a metadata
        answer leaves out (a fenced one) and asks the brokers it knows; a leader cut off from the cluster still
        answers with its own stale view (itself the leader), so a producer that knows only that broker and
        others it cannot reach goes on asking it and never finds the new leader until the cut heals."""
        wait_until(lambda: len(self.p.list_topics(timeout=5).brokers) >= n, timeout,
                   f"the producer's metadata naming {n} brokers")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.p.flush(150) == 0


def read_back(bootstrap: str, h: History, topic: str = TOPIC, isolation: str = "read_uncommitted",
              partitions: int = PARTITIONS) -> int:
    """Read every record of ``topic``'s partitions from offset 0 into ``h`` (as ``isolation`` returns them) until
    nothing more comes for 3 s; returns how many were read."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-back-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, last, deadline = 0, time.monotonic(), time.monotonic() + 90
    while time.monotonic() < deadline and time.monotonic() - last < 3:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                h.read(m.topic(), m.partition(), m.offset(), m.value(), committed=isolation == "read_committed")
                got += 1
                last = time.monotonic()
    c.close()
    return got




#: fast failure detection, so that a fault costs seconds: the controller fences a silent broker after 1.5 s,
#: a leader drops a follower not caught up for 1 s
CAMPAIGN_OVERRIDES = {"broker.session.timeout.ms": 1500, "broker.heartbeat.interval.ms": 200,
                      "replica.lag.time.max.ms": 1000, "replica.fetch.backoff.ms": 200}
FAULT_KINDS = ("kill-leader", "kill-follower", "pause", "wipe", "cut-leader")
FAULT_WEIGHTS = (4, 3, 6, 1, 3)


@dataclass
class CampaignResult:
    faults: Counter = field(default_factory=Counter)
    acknowledged: int = 0
    read: int = 0
    lost: int = 0
    duplicated: int = 0
    #: records librdkafka wrote again under a bumped producer epoch (see the module docstring)
    renumbered: int = 0
    #: per fault: seconds from the fault until everything was back (brokers registered, ISRs full, acks flowing)
    recovery_s: list[float] = field(default_factory=list)
    report: Any = None

    def summary(self) -> str:
        rec = sorted(self.recovery_s)
        p50 = statistics.median(rec) if rec else 0.0
        p99 = rec[min(len(rec) - 1, int(len(rec) * 0.99))] if rec else 0.0
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (f"{sum(self.faults.values())} faults ({kinds}); {self.acknowledged} acknowledged, {self.read} read, "
                f"{self.lost} lost, {self.duplicated} duplicated ({self.renumbered} re-sent by the client under a bumped "
                f"epoch); recovery p50 {p50:.1f} s, p99 {p99:.1f} s")


def _broker_roles(admin: Admin) -> tuple[set[int], set[int]]:
    state = admin.state()
    leaders = {leader for leader, _ in state.values() if leader >= 0}
    replicas = {r for _, isr in state.values() for r in isr}
    return leaders, replicas - leaders


#: librdkafka eos debug facilities that tell why the idempotent producer changed its epoch or sequence numbers
_EOS_EVENTS = ("epoch bump", "ERRSEQ", "UNKPID", "DUPSEQ", "NEWPID", "fatal", "campaign:")


def _eos_logger(path: Path) -> logging.Logger:
    """A logger of its own (not propagated) writing to ``path``: the producer's eos debug lines and the faults."""
    logger = logging.getLogger(f"kbroker.fault_campaign.{path}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    return logger


def _eos_excerpt(path: Path, limit: int = 60) -> str:
    """The producer's state changes (and the faults around them) from ``path``, at most ``limit`` lines ending at
    the last state change."""
    try:
        lines = [ln.rstrip() for ln in path.read_text(errors="replace").splitlines()
                 if any(e in ln for e in _EOS_EVENTS)]
    except OSError as exc:
        return f"(no producer eos log: {exc})"
    last = max((i for i, ln in enumerate(lines) if "campaign:" not in ln), default=len(lines) - 1)
    return "producer eos log (" + str(path) + "):\n" + "\n".join(lines[max(0, last - limit + 1):last + 1])


def run_campaign(root: Path, faults: int, seed: int, log: Any = None) -> CampaignResult:
    """Run ``faults`` seeded faults against a fresh cluster under ``root``; see the module docstring. Raises
    AssertionError (from the history check or a recovery that does not come) on a failure."""
    rng = random.Random(seed)
    out = CampaignResult()
    eos_log = _eos_logger(root / "producer-eos.log")

    def say(msg: str) -> None:
        eos_log.info("campaign: %s", msg)
        if log is not None:
            log(msg)

    cluster = KbrokerCluster(root, nodes=3, brokers=3, overrides=CAMPAIGN_OVERRIDES, firewall=True)
    with cluster:
        admin = Admin(cluster)
        create_topic(admin)
        h = History()
        w = Writer(cluster.bootstrap, h, f"c{seed}", eos_log=eos_log).start()
        try:
            w.wait_acked(300, 30)
            for i in range(faults):
                kind = rng.choices(FAULT_KINDS, FAULT_WEIGHTS)[0]
                leaders, followers = _broker_roles(admin)
                pool = sorted(leaders if kind in ("kill-leader", "cut-leader") else
                              followers if kind == "kill-follower" else cluster.broker_ids)
                if not pool:
                    pool = sorted(cluster.broker_ids)
                victim = rng.choice(pool)
                started = time.monotonic()
                say(f"fault {i + 1}/{faults}: {kind} broker {victim}")
                admin.down.add(victim)
                if kind == "pause":
                    cluster.pause(victim)
                    time.sleep(rng.uniform(0.2, 1.5))
                    cluster.resume(victim)
                elif kind == "cut-leader":
                    # cut off from the controllers and the other brokers (its clients still reach it), for less
                    # or more than the session timeout: a blip, or a fenced leader whose partitions move
                    cluster.isolate(victim)
                    time.sleep(rng.uniform(0.5, 4.0))
                    cluster.heal()
                else:
                    cluster.kill(victim)
                    time.sleep(rng.uniform(0.0, 1.0))
                    if kind == "wipe":
                        shutil.rmtree(cluster.nodes[victim].log_dirs, ignore_errors=True)
                    cluster.restart(victim)
                admin.down.discard(victim)
                out.faults[kind] += 1
                admin.wait_isr(3, 60, what=f"every ISR full again after fault {i + 1} ({kind} {victim})")
                w.set_mark()
                for p in range(PARTITIONS):
                    w.wait_acked(5, 60, partition=p)
                out.recovery_s.append(time.monotonic() - started)
                say(f"fault {i + 1}/{faults}: recovered after {out.recovery_s[-1]:.1f} s")
        finally:
            w.stop()
        out.read = read_back(cluster.bootstrap, h)
        report = h.check()
        if report.duplicated:
            renumbered = client_renumbered(report.duplicated, partition_batches(cluster, cluster.broker_ids[0]),
                                           (root / "producer-eos.log").read_text(errors="replace"))
            report.duplicated = [d for d in report.duplicated if d not in renumbered]
            out.renumbered = len(renumbered)
            if renumbered:
                say(f"{len(renumbered)} records re-sent by librdkafka under a bumped epoch: {renumbered[:3]}")
        out.report = report
        out.acknowledged = report.acknowledged
        out.lost, out.duplicated = len(report.lost), len(report.duplicated)
        try:
            report.assert_ok()
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_eos_excerpt(root / 'producer-eos.log')}") from None
        finally:
            for handler in eos_log.handlers[:]:
                eos_log.removeHandler(handler)
                handler.close()
        wait_identical(cluster, cluster.broker_ids)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--faults", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", help="where the cluster's directories go (default: a temporary directory)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="kbroker-faults-"))
    started = time.monotonic()
    try:
        r = run_campaign(root, args.faults, args.seed, log=(lambda m: print(m, flush=True)) if args.verbose else None)
    except AssertionError as exc:
        print(f"FAIL (seed {args.seed}): {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)
    print(f"seed {args.seed}: {r.summary()}; {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
