"""Followers fetching from leaders: Kafka's replica fetcher threads, as tasks on the broker's event loop.

:class:`ReplicaFetcherManager` keeps, for every partition this broker follows, which leader (and leader epoch)
it fetches from. Partitions led by one broker are spread over ``num.replica.fetchers`` :class:`ReplicaFetcher`
tasks (by a hash of topic and partition, as Kafka does). Each fetcher sends one Fetch (v17, ``ReplicaState`` with
this broker's id and broker epoch) for all its partitions to the leader's ``inter.broker.listener.name``
listener, with the follower's log end offset and the epoch of its last batch:

* records come back as the leader stored them and are appended as they are (``append_as_follower``: offsets,
  leader epochs and producer state from the batches; no re-encoding);
* the follower's high watermark becomes min(the leader's, its own log end offset); its log start offset follows
  the leader's (retention and DeleteRecords on the leader);
* ``DivergingEpoch``: the follower's log went past the end of that epoch in the leader's log (it was written by
  a leader that was then replaced): it is truncated to the smaller of the leader's end offset for the epoch and
  its own, and fetching goes on;
* OFFSET_OUT_OF_RANGE below the leader's log start (the leader deleted what the follower needs): the log restarts
  empty at the leader's log start offset; above the leader's log end: truncated to its own high watermark;
* NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_*: the metadata is moving; the partition waits
  ``replica.fetch.backoff.ms`` (a metadata change that names a new leader or epoch moves it on at once);
* UNKNOWN_LEADER_EPOCH: this follower learned of the leadership before the new leader did (both replay the same
  metadata log; the race is common right after a failover). Kafka's fetcher waits ``replica.fetch.backoff.ms``
  (1 s) here too, and every acks=all write to the partition with it: this one asks again after
  :data:`UNKNOWN_EPOCH_RETRY_S` (at most the backoff), as the leader is about to catch up;
* an unreachable leader: the whole fetcher backs off ``replica.fetch.backoff.ms``;
* replication throttles (KIP-73, :mod:`kbroker.server.replication_quota`): a partition in
  ``follower.replication.throttled.replicas`` for this broker whose replica is not in the ISR is left out of the
  Fetch while ``follower.replication.throttled.rate`` is exceeded; what arrives for throttled partitions is
  recorded. With nothing left to fetch, Kafka's fetcher looks again after ``replica.fetch.backoff.ms``; this one
  as soon as the quota's throttle time has passed, if that is sooner (with fetches of ``replica.fetch.max.bytes``
  that take less than the backoff at the throttled rate, a whole backoff per fetch would hold the catch-up well
  below the rate).

Settings: ``replica.fetch.max.bytes`` (per partition), ``replica.fetch.response.max.bytes``,
``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``, ``replica.fetch.backoff.ms``, ``num.replica.fetchers``.

The fetchers take narrow parts, not the broker: a way to reach another broker (:class:`BrokerChannels` and the
current metadata image), this broker's id and broker epoch, and the :class:`Partition` objects they fetch for.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import FetchRequest
from kbroker.server.inter_node import BrokerChannels, NodeRequestError
from kbroker.server.task_util import cancel_and_wait

log = logging.getLogger(__name__)

FETCH_VERSION = 17
"""Fetch v17: topic ids, ``ReplicaState`` and the follower's directory id (KIP-853 era); what Kafka 4.x brokers
send each other."""


@dataclass(frozen=True)
class FetcherSettings:
    """The ``replica.fetch.*`` keys, read once at start-up."""

    max_bytes: int = 1048576
    response_max_bytes: int = 10485760
    wait_max_ms: int = 500
    min_bytes: int = 1
    backoff_ms: int = 1000
    num_fetchers: int = 1
    request_timeout_ms: int = 30000

    @classmethod
    def from_config(cls, config: Any) -> FetcherSettings:
        return cls(max_bytes=config.get_int("replica.fetch.max.bytes"),
                   response_max_bytes=config.get_int("replica.fetch.response.max.bytes"),
                   wait_max_ms=config.get_int("replica.fetch.wait.max.ms"),
                   min_bytes=config.get_int("replica.fetch.min.bytes"),
                   backoff_ms=config.get_int("replica.fetch.backoff.ms"),
                   num_fetchers=max(1, config.get_int("num.replica.fetchers")),
                   request_timeout_ms=config.get_int("replica.socket.timeout.ms"))


#: Seconds before a partition answered UNKNOWN_LEADER_EPOCH (the leader's metadata is behind this follower's) is
#: fetched again; at most ``replica.fetch.backoff.ms``. Measured with bench/replication.py failover: with the full
#: backoff, 13 of 35 failovers waited a further 0.93-1.02 s for their first acks=all acknowledgement; with this,
#: none of 20 (the acknowledgement came 0.01-0.41 s after the survivors named the new leader).
UNKNOWN_EPOCH_RETRY_S = 0.05


class ReplicaFetcher:
    """One fetch loop to one leader for a set of partitions (``fetcher_id`` of ``num.replica.fetchers``)."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        #: (topic, partition) -> Partition
        self.partitions: dict[tuple[str, int], Any] = {}
        #: (topic, partition) -> monotonic time before which the partition is not fetched (after an error)
        self.delayed: dict[tuple[str, int], float] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def add(self, part: Any) -> None:
        key = (part.topic, part.partition_index)
        self.partitions[key] = part
        self.delayed.pop(key, None)
        self._changed.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self.delayed.pop(key, None)

    async def _run(self) -> None:
        settings = self.manager.settings
        while True:
            now = time.monotonic()
            ready = [p for k, p in self.partitions.items() if self.delayed.get(k, 0.0) <= now]
            fetchable = self._unthrottled(ready)
            if not fetchable:
                self._changed.clear()
                wait = min((t for t in self.delayed.values()), default=now + 1.0) - now
                if ready:  # all held back by the follower quota: until it allows them, at most the backoff
                    wait = min(settings.backoff_ms / 1000, max(0.01, self.manager.quota.throttle_time_s()))
                try:
                    await asyncio.wait_for(self._changed.wait(), max(0.01, wait))
                except asyncio.TimeoutError:
                    pass
                continue
            ch = self.manager.channel(self.leader_id)
            if ch is None:
                await asyncio.sleep(settings.backoff_ms / 1000)
                continue
            request, sent = self._build(fetchable)
            try:
                resp = await ch.request(ApiKey.FETCH, FETCH_VERSION, request,
                                        (settings.wait_max_ms + settings.request_timeout_ms) / 1000)
            except NodeRequestError as exc:
                log.debug("fetch from leader %d: %s", self.leader_id, exc)
                await asyncio.sleep(settings.backoff_ms / 1000)
                continue
            if resp.error_code:
                log.info("fetch from leader %d: %s", self.leader_id, ErrorCode(resp.error_code).name)
                await asyncio.sleep(settings.backoff_ms / 1000)
                continue
            try:
                self._process(resp, sent)
            except Exception:
                log.exception("replica fetcher for leader %d failed on a response", self.leader_id)
                await asyncio.sleep(settings.backoff_ms / 1000)

    def _unthrottled(self, parts: list[Any]) -> list[Any]:
        """``parts`` without those the follower replication quota holds back now (throttled, this replica outside
        the ISR, quota exceeded)."""
        quota = self.manager.quota
        if quota is None:
            return parts
        node = self.manager.node_id
        return [p for p in parts if not quota.should_throttle(p.topic, p.partition_index, node in p.isr)]

    def _build(self, parts: list[Any]) -> tuple[FetchRequest, dict[tuple[bytes, int], tuple[Any, int, int]]]:
        settings = self.manager.settings
        topics: dict[bytes, FetchRequest.FetchTopic] = {}
        sent: dict[tuple[bytes, int], tuple[Any, int, int]] = {}
        for part in parts:
            plog = part.log
            ft = topics.get(part.topic_id)
            if ft is None:
                ft = topics[part.topic_id] = FetchRequest.FetchTopic(topic=part.topic, topic_id=part.topic_id)
            ft.partitions.append(fetch_partition(part, settings.max_bytes))
            sent[(part.topic_id, part.partition_index)] = (part, part.leader_epoch, plog.log_end_offset)
        req = FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=self.manager.node_id,
                                                                   replica_epoch=self.manager.broker_epoch()),
                           max_wait_ms=settings.wait_max_ms, min_bytes=settings.min_bytes,
                           max_bytes=settings.response_max_bytes, isolation_level=0, session_id=0,
                           session_epoch=-1, topics=list(topics.values()))
        return req, sent

    def _process(self, resp: Any, sent: dict[tuple[bytes, int], tuple[Any, int, int]]) -> None:
        backoff = self.manager.settings.backoff_ms / 1000
        for t in resp.responses:
            for pd in t.partitions:
                entry = sent.get((t.topic_id, pd.partition_index))
                if entry is None:
                    continue
                part, epoch, fetch_offset = entry
                key = (part.topic, part.partition_index)
                if self.partitions.get(key) is not part or part.leader_epoch != epoch or part.is_leader:
                    continue  # moved on while the fetch was out: what came is for an old leadership
                plog = part.log
                if plog.log_end_offset != fetch_offset:
                    continue  # truncated meanwhile
                try:
                    if pd.error_code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                        if not apply_fetched(part, pd, self.leader_id):
                            self.delayed[key] = time.monotonic() + backoff
                        quota, size = self.manager.quota, len(pd.records) if pd.records is not None else 0
                        if quota is not None and size and quota.is_throttled(part.topic, part.partition_index):
                            quota.record(size)
                    else:
                        if pd.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                                                 ErrorCode.UNKNOWN_LEADER_EPOCH):
                            log.info("fetch of %s-%d from leader %d: %s", part.topic, part.partition_index,
                                     self.leader_id, ErrorCode(pd.error_code).name)
                        wait = min(backoff, UNKNOWN_EPOCH_RETRY_S) \
                            if pd.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH else backoff
                        self.delayed[key] = time.monotonic() + wait
                except (KafkaError, OSError) as exc:
                    log.error("follower %s-%d cannot apply what leader %d sent: %s", part.topic,
                              part.partition_index, self.leader_id, exc)
                    self.delayed[key] = time.monotonic() + backoff


def fetch_partition(part: Any, max_bytes: int) -> FetchRequest.FetchPartition:
    """What a follower asks the leader for ``part``: from its log end offset, with the epoch of its last batch."""
    plog = part.log
    return FetchRequest.FetchPartition(
        partition=part.partition_index, current_leader_epoch=part.leader_epoch, fetch_offset=plog.log_end_offset,
        last_fetched_epoch=plog.leader_epoch_cache.latest_epoch, log_start_offset=plog.log_start_offset,
        partition_max_bytes=max_bytes)


def apply_fetched(part: Any, pd: Any, leader_id: int = -1) -> bool:
    """Apply the leader's answer for ``part`` (NONE or OFFSET_OUT_OF_RANGE; sent for the follower's current log
    end offset): append the records, or truncate to a diverging epoch, or restart at the leader's log start; then
    the high watermark and log start offset. False when the partition should wait before its next fetch.
    Raises KafkaError / OSError / CorruptRecordError from the log."""
    if pd.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        return _out_of_range(part, pd, leader_id)
    plog = part.log
    div = pd.diverging_epoch
    if div.epoch >= 0 or div.end_offset >= 0:
        _truncate_diverging(part, div.epoch, div.end_offset, leader_id)
        return True
    records = pd.records
    if records is not None and len(records):
        plog.append_as_follower(records)
    if pd.high_watermark >= 0:
        new_hw = min(pd.high_watermark, plog.log_end_offset)
        if new_hw > plog.high_watermark:
            plog.high_watermark = new_hw
            part.wake_waiters()
    if pd.log_start_offset > plog.log_start_offset:
        plog.advance_log_start_offset(min(pd.log_start_offset, plog.high_watermark))
    return True


def _truncate_diverging(part: Any, epoch: int, end_offset: int, leader_id: int) -> None:
    """Truncate to where this log and the leader's agree: the smaller of the leader's end offset for ``epoch``
    and this log's own end offset for that epoch (epoch -1: the leader has nothing as old: down to this log's
    high watermark)."""
    plog = part.log
    if epoch < 0 or end_offset < 0:
        target = plog.high_watermark
    else:
        own_epoch, own_end = plog.leader_epoch_cache.end_offset_for(epoch, plog.log_end_offset)
        target = min(end_offset, own_end) if own_epoch == epoch else min(end_offset, max(own_end, 0))
    target = min(target, plog.log_end_offset)
    log.info("follower %s-%d diverged from leader %d at epoch %d: truncating from %d to %d", part.topic,
             part.partition_index, leader_id, epoch, plog.log_end_offset, target)
    plog.truncate_to(target)


def _out_of_range(part: Any, pd: Any, leader_id: int) -> bool:
    plog = part.log
    if pd.log_start_offset >= 0 and plog.log_end_offset < pd.log_start_offset:
        log.info("follower %s-%d is below leader %d's log start %d: starting over there", part.topic,
                 part.partition_index, leader_id, pd.log_start_offset)
        plog.truncate_fully_and_start_at(pd.log_start_offset)
        return True
    plog.truncate_to(plog.high_watermark)
    return False


class ReplicaFetcherManager:
    """Which leader each followed partition is fetched from, and the fetcher tasks doing it.

    ``channels`` + ``image()`` reach other brokers; ``broker_epoch()`` is this broker's registration epoch
    (-1 before it registered); ``follower_quota``: the follower replication throttle
    (:class:`~kbroker.server.replication_quota.ReplicationQuotaManager`; None: never throttled)."""

    def __init__(self, node_id: int, channels: BrokerChannels, image: Callable[[], Any],
                 broker_epoch: Callable[[], int], settings: FetcherSettings, follower_quota: Any = None) -> None:
        self.node_id = node_id
        self.quota = follower_quota
        self.channels = channels
        self.image = image
        self.broker_epoch = broker_epoch
        self.settings = settings
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        #: (topic, partition) -> the fetcher that has it
        self.assigned: dict[tuple[str, int], ReplicaFetcher] = {}
        self._running = False

    def channel(self, leader_id: int) -> Any:
        return self.channels.get(self.image(), leader_id)

    def start(self) -> None:
        self._running = True
        for f in self.fetchers.values():
            f.start()

    def follow(self, part: Any) -> None:
        """Fetch ``part`` from its current leader (after a leader or leader epoch change too)."""
        key = (part.topic, part.partition_index)
        if part.leader < 0 or part.is_leader:
            self.unfollow(key)
            return
        fid = (zlib.crc32(part.topic.encode()) * 31 + part.partition_index) % self.settings.num_fetchers
        fetcher = self.fetchers.get((part.leader, fid))
        if fetcher is None:
            fetcher = self.fetchers[(part.leader, fid)] = ReplicaFetcher(self, part.leader, fid)
            if self._running:
                fetcher.start()
        old = self.assigned.get(key)
        if old is not None and old is not fetcher:
            old.remove(key)
        self.assigned[key] = fetcher
        fetcher.add(part)

    def unfollow(self, key: tuple[str, int]) -> None:
        old = self.assigned.pop(key, None)
        if old is not None:
            old.remove(key)

    def following(self, key: tuple[str, int]) -> int:
        """The leader ``key`` is fetched from (-1: none)."""
        f = self.assigned.get(key)
        return f.leader_id if f is not None else -1

    async def stop(self) -> None:
        self._running = False
        for f in self.fetchers.values():
            await f.stop()
        self.fetchers.clear()
        self.assigned.clear()
        await self.channels.close()
