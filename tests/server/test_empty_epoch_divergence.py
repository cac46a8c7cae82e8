"""A follower that led an epoch without appending anything in it (fault campaign seed 7, fault 660: it fetched,
was told its log diverged at the very offset it already ended at, truncated to it and fetched again, 428,000 times
in a minute, and never rejoined the ISR). Truncating at the log end offset drops the empty epoch, as Kafka's
``UnifiedLog.truncateTo`` does, so the next fetch agrees with the leader."""

from __future__ import annotations

import time
from types import SimpleNamespace

from kbroker.protocol.messages import FetchResponse
from kbroker.protocol.records import build_batch
from kbroker.server.handlers.fetch import follower_position
from kbroker.server.replica_fetcher import apply_fetched, fetch_partition
from kbroker.server.replica_manager import Partition
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog

TOPIC_ID = bytes(range(1, 17))


def _log(path, records: int) -> PartitionLog:
    now_ms = int(time.time() * 1000)
    plog = PartitionLog(path, LogConfig(), topic_id=TOPIC_ID, recovery_point=0, clean_shutdown=False, now_ms=now_ms)
    for i in range(records):
        plog.append_as_leader(build_batch([(b"k", b"v%d" % i)]), 0, now_ms)
    return plog


def test_a_follower_drops_an_epoch_it_led_without_appending(tmp_path):
    now_ms = int(time.time() * 1000)
    # node 2 led epoch 1 briefly (its cache got 1@5) and appended nothing; node 1 now leads epoch 2 from offset 5
    follower_log, leader_log = _log(tmp_path / "f" / "t-0", 5), _log(tmp_path / "l" / "t-0", 5)
    follower_log.leader_epoch_cache.assign(1, 5)
    follower = Partition("t", 0, TOPIC_ID, follower_log, 1, 2, 3, [1, 2], [1], local_id=2)
    leader = Partition("t", 0, TOPIC_ID, leader_log, 1, 2, 3, [1, 2], [1], local_id=1)
    leader.make_leader(now_ms)
    leader_log.append_as_leader(build_batch([(b"k", b"new")]), 2, now_ms)
    rm = SimpleNamespace(maybe_expand_isr=lambda part, replica: None)

    rounds = 0
    while rounds < 5:
        rounds += 1
        fp = fetch_partition(follower, 1 << 20)
        pd = FetchResponse.PartitionData(partition_index=0)
        if follower_position(rm, leader, 2, fp, pd, 17, now_ms):
            break
        assert (pd.diverging_epoch.epoch, pd.diverging_epoch.end_offset) == (0, 5)
        apply_fetched(follower, pd, 1)
        assert follower_log.log_end_offset == 5  # nothing of epoch 0 is removed
    assert rounds == 2, "the follower kept fetching with the epoch it led alone"
    assert follower_log.leader_epoch_cache.latest_epoch == 0


def test_a_follower_whose_last_epoch_the_leader_never_had_truncates(tmp_path):
    """compat_tests/test_replication.py::test_acks_all_survives_leader_kills (a CI run): the leader of epoch 0 was
    killed with 20 records nobody had copied; the new leader's log starts with epoch 1 at offset 0. The restarted
    broker fetched with last epoch 0, the leader had no epoch that old and answered (-1, -1), which reads as "no
    divergence": the follower kept its 20 stale records, took them as committed (high watermark 20) and never
    rejoined the ISR. Kafka's answer, (0, the start of the leader's first epoch), makes it truncate to 0."""
    now_ms = int(time.time() * 1000)
    follower_log, leader_log = _log(tmp_path / "f" / "t-0", 1), _log(tmp_path / "l" / "t-0", 0)
    follower = Partition("t", 0, TOPIC_ID, follower_log, 2, 1, 3, [1, 2], [2], local_id=1)
    leader = Partition("t", 0, TOPIC_ID, leader_log, 2, 1, 3, [1, 2], [2], local_id=2)
    leader.make_leader(now_ms)  # epoch 1 from offset 0
    for i in range(3):
        leader_log.append_as_leader(build_batch([(b"k", b"n%d" % i)]), 1, now_ms)
    rm = SimpleNamespace(maybe_expand_isr=lambda part, replica: None)
    fp = fetch_partition(follower, 1 << 20)
    pd = FetchResponse.PartitionData(partition_index=0)
    assert not follower_position(rm, leader, 1, fp, pd, 17, now_ms)
    assert (pd.diverging_epoch.epoch, pd.diverging_epoch.end_offset) == (0, 0)
    apply_fetched(follower, pd, 2)
    assert follower_log.log_end_offset == 0 and follower_log.leader_epoch_cache.latest_epoch == -1
    fp = fetch_partition(follower, 1 << 20)
    assert follower_position(rm, leader, 1, fp, FetchResponse.PartitionData(partition_index=0), 17, now_ms)
