"""Partitions hosted by this broker: appends, reads, the high watermark, follower tracking and delayed fetches.

``Partition`` holds the replication state that the metadata image assigns (leader, leader epoch, replicas,
ISR) next to the :class:`~kbroker.storage.log.PartitionLog`. On the leader it also tracks every follower
(:class:`FollowerState`: its log end offset as its last Fetch said, when it last fetched and when it was last
caught up), and the high watermark rule is applied in :meth:`Partition.maybe_increment_high_watermark`: the
smallest log end offset among the in-sync replicas (the ISR plus an expansion in flight, as Kafka's
"maximal ISR"), never moving back. With one replica it follows the log end offset right after each append.

Followers fetch with :mod:`kbroker.server.replica_fetcher`; ISR changes go to the active controller with
:mod:`kbroker.server.alter_partition_manager`.

Delayed fetches (long polling) wait on :attr:`Partition.waiters`, which every high watermark change wakes;
followers' fetches wait on :attr:`Partition.append_waiters`, which every append wakes.
All state belongs to the event loop; nothing here awaits while changing state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.server.gc_policy import freeze_long_lived, thaw
from kbroker.storage.producer_state import AppendOrigin

if TYPE_CHECKING:
    from kbroker.controller.image import MetadataImage
    from kbroker.server.broker import Broker
    from kbroker.storage.log import PartitionLog

log = logging.getLogger(__name__)

SYNC_CREATE_LIMIT = 50
"""New partitions up to this many in one metadata change get their logs at once, on the event loop (a node
that is its own quorum; in a cluster they are always made in the background)."""
CREATE_CHUNK = 100
"""Logs a worker thread creates before the loop registers them (the loop serves other requests between)."""


@dataclass
class FollowerState:
    """What the leader knows of one follower replica (Kafka's ``ReplicaState``). Times in ms (wall clock)."""

    #: the follower's log end offset: the fetch offset of its last Fetch (-1: unknown since this leadership began)
    log_end_offset: int = -1
    #: the follower's log start offset as its last Fetch said (-1: unknown); KIP-392 reads need it
    log_start_offset: int = -1
    last_fetch_ms: int = 0
    #: the leader's log end offset when the follower last fetched
    last_fetch_leader_log_end_offset: int = -1
    #: the last time the follower had everything the leader had (ISR shrink after ``replica.lag.time.max.ms``)
    last_caught_up_ms: int = 0


@dataclass(eq=False)
class Partition:
    """One partition replica on this broker."""

    topic: str
    partition_index: int
    topic_id: bytes
    log: PartitionLog
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    #: this broker's node id
    local_id: int = -1
    #: followers' fetches waiting for new data (woken by every append, not only by the high watermark)
    append_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    #: on the leader: node id -> what its last Fetch said (every replica but this one)
    followers: dict[int, FollowerState] = field(default_factory=dict)
    #: an ISR change sent to the controller and not answered yet (AlterPartition; one at a time per partition)
    pending_isr: list[int] | None = None

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, capped at the high watermark (the log's rule)."""
        return self.log.last_stable_offset

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """FENCED_LEADER_EPOCH if the client's epoch is older, UNKNOWN_LEADER_EPOCH if newer; -1 skips."""
        if current_leader_epoch == -1:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def make_leader(self, now_ms: int) -> None:
        """This broker became the leader (or the leader epoch changed): follower positions are unknown until they
        fetch; in-sync followers count as caught up now, so none is dropped from the ISR right away."""
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms) for r in self.replicas if r != self.local_id}
        self.pending_isr = None
        self.log.leader_epoch_cache.assign(self.leader_epoch, self.log.log_end_offset)
        self.maybe_increment_high_watermark()

    def apply_state(self, leader: int, leader_epoch: int, partition_epoch: int, replicas: list[int],
                    isr: list[int], now_ms: int) -> str:
        """Take the metadata's state of this partition. Returns what that means for this replica: ``"stale"``
        (an older partition epoch than one already applied from an AlterPartition answer: ignored),
        ``"leader"`` (it became leader or the leader epoch changed: follower tracking restarts), ``"leading"``
        (still the leader; the ISR may have changed), ``"follower"`` (a new leader or epoch to follow) or
        ``"following"`` (nothing changed for a follower)."""
        if partition_epoch < self.partition_epoch and leader_epoch <= self.leader_epoch:
            return "stale"
        leadership_changed = leader != self.leader or leader_epoch != self.leader_epoch
        self.leader, self.leader_epoch = leader, leader_epoch
        self.partition_epoch, self.replicas, self.isr = partition_epoch, list(replicas), list(isr)
        if self.is_leader:
            if leadership_changed:
                self.make_leader(now_ms)
                return "leader"
            if self.pending_isr is not None and sorted(self.pending_isr) == sorted(self.isr):
                self.pending_isr = None
            self.maybe_increment_high_watermark()
            return "leading"
        self.followers = {}
        self.pending_isr = None
        if leadership_changed:
            self.wake_waiters()  # delayed produces and fetches on the old leadership answer now
            return "follower"
        return "following"

    def maximal_isr(self) -> list[int]:
        """The ISR the high watermark must wait for: the committed one plus members of an expansion in flight
        (a shrink in flight is not applied until committed), as in Kafka."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + [r for r in self.pending_isr if r not in self.isr]

    def update_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                              log_start_offset: int = -1) -> None:
        """A Fetch from follower ``replica_id`` at ``fetch_offset`` (already checked against the leader's log:
        no diverging epoch, within the log): that is its log end offset now (``log_start_offset``: its log start
        offset, from the same Fetch). Moves the high watermark."""
        state = self.followers.get(replica_id)
        if state is None:
            state = self.followers[replica_id] = FollowerState()
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_log_end_offset >= 0:
            # it has everything the leader had at its previous fetch: caught up as of then
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        state.last_fetch_ms = now_ms
        state.last_fetch_leader_log_end_offset = leader_leo
        self.maybe_increment_high_watermark()

    def isr_expansion(self, replica_id: int) -> list[int] | None:
        """The ISR with ``replica_id`` added, if it is a replica outside the ISR that has caught up with the high
        watermark (and with the start of the leader's epoch); else None. In ascending id order, as Kafka's leader
        proposes it (its ISR is a hash set of node ids: ``kafka-topics --describe`` shows ``Isr: 1,3`` after 1
        joins ``3``), not in the order replicas joined."""
        if replica_id in self.isr or replica_id not in self.replicas or self.pending_isr is not None:
            return None
        state = self.followers.get(replica_id)
        if state is None or state.log_end_offset < self.log.high_watermark:
            return None
        epoch_start = self.log.leader_epoch_cache.start_offset_of(self.leader_epoch)
        if epoch_start is not None and state.log_end_offset < epoch_start:
            return None
        return sorted(self.isr + [replica_id])

    def isr_shrink(self, now_ms: int, max_lag_ms: int) -> list[int] | None:
        """The ISR without followers not caught up within ``max_lag_ms`` (``replica.lag.time.max.ms``), if any;
        the leader always stays. In ascending id order, as Kafka's leader proposes it (see :meth:`isr_expansion`)."""
        if self.pending_isr is not None:
            return None
        def caught_up(r: int) -> bool:
            state = self.followers.get(r)
            return r == self.local_id or state is None or now_ms - state.last_caught_up_ms <= max_lag_ms

        out = sorted(r for r in self.isr if caught_up(r))
        return out if len(out) < len(self.isr) else None

    def maybe_increment_high_watermark(self) -> bool:
        """Advance the high watermark to the smallest log end offset in the (maximal) ISR; True if it moved.
        A follower whose position is not known yet (it has not fetched since this leadership began) holds it."""
        new_hw = self.log.log_end_offset
        for node in self.maximal_isr():
            if node != self.local_id:
                state = self.followers.get(node)
                new_hw = min(new_hw, state.log_end_offset if state is not None else -1)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            self.wake_waiters()
            return True
        return False

    def wake_append_waiters(self) -> None:
        for fut in self.append_waiters:
            if not fut.done():
                fut.set_result(None)
        self.append_waiters.clear()

    def wake_waiters(self) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)
        self.waiters.clear()
        self.wake_append_waiters()


class ReplicaManager:
    """Owns every :class:`Partition` on this broker and applies metadata changes to them."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: (topic, partition) -> (leader epoch, ISR, proposed ISR) of the last ISR shrink logged
        self._last_shrink: dict[tuple[str, int], tuple[int, list[int], list[int]]] = {}
        #: partitions whose logs a worker thread is creating (they answer NOT_LEADER_OR_FOLLOWER meanwhile)
        self.creating: set[tuple[str, int]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._partition_listeners: list[Any] = []
        self._create_lock = asyncio.Lock()
        #: followers fetching from leaders, and ISR changes to the controller (a cluster only; see start())
        self.fetcher_manager: Any = None
        self.alter_partition_manager: Any = None
        self.replica_lag_time_max_ms = broker.config.get_int("replica.lag.time.max.ms")
        #: ``replica.selector.class`` (KIP-392; empty: consumers read from leaders only, see
        #: :mod:`kbroker.server.replica_selector`)
        self.replica_selector = broker.config.get("replica.selector.class").strip()

    # ---- replication ----
    def start_replication(self, fetcher_manager: Any, alter_partition_manager: Any) -> None:
        """Start following the partitions this broker does not lead, and checking followers' lag on those it
        does (every ``replica.lag.time.max.ms`` / 2)."""
        self.fetcher_manager = fetcher_manager
        self.alter_partition_manager = alter_partition_manager
        for part in self.partitions.values():
            if not part.is_leader:
                fetcher_manager.follow(part)
        fetcher_manager.start()
        task = asyncio.get_running_loop().create_task(self._check_isr_lag())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def stop_replication(self) -> None:
        if self.fetcher_manager is not None:
            await self.fetcher_manager.stop()
        if self.alter_partition_manager is not None:
            await self.alter_partition_manager.close()

    async def _check_isr_lag(self) -> None:
        interval = max(0.05, self.replica_lag_time_max_ms / 2000)
        while True:
            await asyncio.sleep(interval)
            now_ms = int(time.time() * 1000)
            try:
                for part in list(self.partitions.values()):
                    if part.is_leader and len(part.isr) > 1:
                        new_isr = part.isr_shrink(now_ms, self.replica_lag_time_max_ms)
                        if new_isr is not None:
                            # the same proposal again (the last one failed: no controller reachable, say) is
                            # logged at debug level, not twice a second
                            key = (part.topic, part.partition_index)
                            same = self._last_shrink.get(key) == (part.leader_epoch, part.isr, new_isr)
                            self._last_shrink[key] = (part.leader_epoch, list(part.isr), list(new_isr))
                            log.log(logging.DEBUG if same else logging.INFO,
                                    "shrinking the ISR of %s-%d from %s to %s: followers lagging more than %d ms",
                                    part.topic, part.partition_index, part.isr, new_isr,
                                    self.replica_lag_time_max_ms)
                            self.alter_partition_manager.submit(part, new_isr)
            except Exception:
                log.exception("the ISR lag check failed")

    def _isr_eligible(self, replica_id: int) -> bool:
        reg = self.broker.controller.image.brokers.get(replica_id)
        return reg is not None and not reg.fenced and not reg.in_controlled_shutdown

    def maybe_expand_isr(self, part: Partition, replica_id: int) -> None:
        """After follower ``replica_id`` fetched: propose it for the ISR if it has caught up."""
        if self.alter_partition_manager is None:
            return
        new_isr = part.isr_expansion(replica_id)
        if new_isr is not None and not self._isr_eligible(replica_id):
            # as Kafka's Partition.isReplicaIsrEligible: a fenced broker, or one shutting down, is not proposed
            # (the controller would answer INELIGIBLE_REPLICA to every fetch of a broker still registering)
            return
        if new_isr is not None:
            log.info("expanding the ISR of %s-%d from %s to %s", part.topic, part.partition_index, part.isr, new_isr)
            self.alter_partition_manager.submit(part, new_isr)

    # ---- metadata ----
    def apply_image(self, image: MetadataImage) -> None:
        """Create logs for partitions this node leads or replicates and drop those of removed topics.

        A few new partitions get their logs at once. Many (a CreateTopics of thousands of partitions) are
        created in a worker thread, :data:`CREATE_CHUNK` at a time, so that other clients' requests are not held
        up; until its log exists a partition answers NOT_LEADER_OR_FOLLOWER, which clients retry. An I/O error
        while creating a log takes its directory offline (``KAFKA_STORAGE_ERROR`` for its partitions)."""
        node_id = self.broker.node_id
        lm = self.broker.log_manager
        configs: dict[str, Any] = {}
        wanted: set[tuple[str, int]] = set()
        missing: list[tuple[Any, Any]] = []
        for topic in image.topics_by_name.values():
            for p in topic.partitions.values():
                if node_id not in p.replicas:
                    continue
                key = (topic.name, p.partition_id)
                wanted.add(key)
                part = self.partitions.get(key)
                if part is not None and part.topic_id != topic.topic_id:
                    # deleted and re-created under the same name: new topic id, new log
                    self._remove(key)
                    part = None
                if part is None:
                    loaded = lm.get_log(topic.name, p.partition_id)
                    if loaded is not None and loaded.topic_id in (None, topic.topic_id):
                        # loaded at start-up (LogManager.startup): attach it here without reopening it (a second
                        # PartitionLog on the same directory from new_log would cost a reload per partition and
                        # leave the first one's files open)
                        if topic.name not in configs:
                            configs[topic.name] = self.broker.log_config_for(topic.name, image)
                        self._add(topic, p, lm.get_or_create_log(topic.name, p.partition_id, topic.topic_id,
                                                                 configs[topic.name]))
                    elif key not in self.creating:
                        missing.append((topic, p))
                    continue
                self._update(part, p)
        removed = [key for key in self.partitions if key not in wanted]
        for key in removed:
            self._remove(key)
        if removed:
            thaw()  # their cyclic garbage may be frozen: let the collector see it again
        # In a cluster a topic's creation is answered once committed, not once brokers made its logs: they are
        # always made in the background there, so that fsyncs of new logs never hold up this broker's requests.
        limit = 0 if self.broker.metadata_quorum is not None else SYNC_CREATE_LIMIT
        if len(missing) <= limit or not self._loop_running():
            for topic, p in missing:
                try:
                    plog = self.broker.log_manager.get_or_create_log(
                        topic.name, p.partition_id, topic.topic_id, self.broker.log_config_for(topic.name, image))
                except KafkaError as exc:
                    log.error("cannot create the log of %s-%d: %s", topic.name, p.partition_id, exc)
                    continue
                self._add(topic, p, plog)
        else:
            self._create_in_background(missing, image)

    def _update(self, part: Partition, p: Any) -> None:
        """Apply the image's state of a hosted partition (:meth:`Partition.apply_state`) and move it between
        the fetchers: a follower fetches from its (new) leader, a leader fetches from nobody."""
        change = part.apply_state(p.leader, p.leader_epoch, p.partition_epoch, list(p.replicas), list(p.isr),
                                  int(time.time() * 1000))
        fm = self.fetcher_manager
        if fm is None or change == "stale":
            return
        key = (part.topic, part.partition_index)
        if change == "leader":
            fm.unfollow(key)
        elif change == "follower" or (change == "following" and fm.following(key) < 0):
            fm.follow(part)

    @staticmethod
    def _loop_running() -> bool:
        try:
            asyncio.get_running_loop()
            return True
        except RuntimeError:
            return False

    def _add(self, topic: Any, p: Any, plog: Any) -> None:
        part = Partition(topic.name, p.partition_id, topic.topic_id, plog, p.leader, p.leader_epoch,
                         p.partition_epoch, list(p.replicas), list(p.isr), local_id=self.broker.node_id)
        self.partitions[(topic.name, p.partition_id)] = part
        if part.is_leader:
            part.make_leader(int(time.time() * 1000))
        elif self.fetcher_manager is not None:
            self.fetcher_manager.follow(part)

    def _create_in_background(self, missing: list[tuple[Any, Any]], image: MetadataImage) -> None:
        lm = self.broker.log_manager
        try:
            plan = lm.plan_log_dirs([(t.name, p.partition_id) for t, p in missing])
        except KafkaError as exc:
            log.error("cannot create %d partition logs: %s", len(missing), exc)
            return
        configs = {name: self.broker.log_config_for(name, image) for name in {t.name for t, _ in missing}}
        self.creating.update(plan)

        def build(chunk: list[tuple[Any, Any]]) -> list[tuple[Any, Any, Any]]:
            out = []
            for t, p in chunk:
                key = (t.name, p.partition_id)
                try:
                    plog = lm.new_log(plan[key], t.name, p.partition_id, t.topic_id, configs[t.name])
                    if p.leader == self.broker.node_id:  # its checkpoint file is written here, not on the loop
                        plog.leader_epoch_cache.assign(p.leader_epoch, plog.log_end_offset)
                    out.append((t, p, plog))
                except KafkaError as exc:
                    out.append((t, p, exc))
            return out

        async def run() -> None:
            started = time.monotonic()
            for i in range(0, len(missing), CREATE_CHUNK):
                chunk = missing[i:i + CREATE_CHUNK]
                try:
                    async with self._create_lock:  # one creating thread at a time: the loop keeps the GIL often
                        built = await asyncio.to_thread(build, chunk)
                except BaseException:
                    for t, p in chunk:
                        self.creating.discard((t.name, p.partition_id))
                    raise
                latest = self.broker.controller.image
                for t, p, plog in built:
                    key = (t.name, p.partition_id)
                    self.creating.discard(key)
                    if isinstance(plog, KafkaError):
                        log.error("cannot create the log of %s-%d: %s", t.name, p.partition_id, plog)
                        continue
                    now_topic = latest.topics_by_name.get(t.name)
                    now_part = now_topic.partitions.get(p.partition_id) if now_topic is not None else None
                    if now_part is None or now_topic.topic_id != t.topic_id or key in self.partitions:
                        plog.delete()  # deleted meanwhile
                        continue
                    lm.register(plan[key], plog)
                    self._add(now_topic, now_part, plog)
                freeze_long_lived("partitions created")  # keeps full collections from growing with them
                for callback in list(self._partition_listeners):
                    try:
                        callback()
                    except Exception:
                        log.exception("partition listener failed")
            log.info("created %d partition logs in %.1f s", len(missing), time.monotonic() - started)

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def add_partition_listener(self, callback: Any) -> None:
        """Call ``callback()`` whenever logs made in the background were added (no metadata change tells: the
        coordinators load their partitions of the internal topics then)."""
        self._partition_listeners.append(callback)

    def on_metadata_update(self, old: MetadataImage | None, new: MetadataImage, *_: object) -> None:
        self.apply_image(new)

    def _remove(self, key: tuple[str, int]) -> None:
        part = self.partitions.pop(key)
        if self.fetcher_manager is not None:
            self.fetcher_manager.unfollow(key)
        part.wake_waiters()
        self.broker.log_manager.delete_log(key[0], key[1])

    # ---- lookups ----
    def get_partition(self, topic: str, partition: int) -> Partition:
        """The partition, or KafkaError NOT_LEADER_OR_FOLLOWER (being created, or a partition of the metadata this
        broker holds no replica of) / UNKNOWN_TOPIC_OR_PARTITION."""
        part = self.partitions.get((topic, partition))
        if part is None:
            if (topic, partition) in self.creating:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the replica is being created")
            t = self.broker.controller.image.topics_by_name.get(topic)
            if t is not None and partition in t.partitions:
                # the partition exists but this broker holds no replica of it (Kafka answers the same)
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "this broker holds no replica of the partition")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return part

    def get_leader_partition(self, topic: str, partition: int) -> Partition:
        """The partition if this broker leads it, else KafkaError (NOT_LEADER_OR_FOLLOWER, as get_partition)."""
        part = self.get_partition(topic, partition)
        if part.leader != self.broker.node_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    # ---- append ----
    def append_records(self, part: Partition, records: memoryview, required_acks: int,
                       origin: AppendOrigin = AppendOrigin.CLIENT, transaction_version: int = 0) -> object:
        """Append validated batches as leader and advance the high watermark. Returns the AppendInfo.

        ``min.insync.replicas`` is checked for acks=-1 (NOT_ENOUGH_REPLICAS), as Kafka does before
        appending. ``origin`` COORDINATOR is for the coordinators' own writes (transaction markers,
        transactional offset commits): producer epochs are checked, sequences are not; ``transaction_version``
        2 checks a marker with the transactions-version-2 epoch rule (above the producer's epoch).
        """
        if required_acks == -1:
            min_isr = self.broker.topic_config_int(part.topic, "min.insync.replicas")
            if len(part.isr) < min_isr:
                raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)
        info = part.log.append_as_leader(records, part.leader_epoch, int(time.time() * 1000), origin,
                                         transaction_version)
        if not part.maybe_increment_high_watermark():
            part.wake_append_waiters()  # followers' fetches
        return info

    async def wait_replicated(self, part: Partition, timeout_s: float) -> int:
        """Until every in-sync replica of ``part`` holds what this leader has appended so far (the high watermark
        reaches the log end offset seen now): NONE, NOT_LEADER_OR_FOLLOWER when this replica stops leading it
        first, REQUEST_TIMED_OUT after ``timeout_s``. What the coordinators' writes and transaction markers wait
        for (Kafka appends them with acks=all)."""
        target = part.log_end_offset
        deadline = time.monotonic() + timeout_s
        while part.high_watermark < target:
            if not part.is_leader or self.partitions.get((part.topic, part.partition_index)) is not part:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            left = deadline - time.monotonic()
            if left <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self.wait_for_data([part], left)
        return ErrorCode.NONE

    # ---- delayed fetch ----
    async def wait_for_data(self, parts: list[Partition], timeout_s: float, appends: bool = False) -> None:
        """Wait until any of ``parts`` changes its high watermark (``appends``: gets new data, for a follower's
        fetch), or ``timeout_s`` passes."""
        if timeout_s <= 0 or not parts:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        for p in parts:
            (p.append_waiters if appends else p.waiters).add(fut)
        # one future and one timer (not wait_for + shield: three futures and a callback chain per wait); the
        # wakers skip a future that is done, so the timer, a wake-up or a cancellation may each come first
        timer = loop.call_later(timeout_s, _set_done, fut)
        try:
            await fut
        finally:
            timer.cancel()
            for p in parts:
                (p.append_waiters if appends else p.waiters).discard(fut)


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
