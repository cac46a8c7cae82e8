"""Client quota arithmetic: KIP-55's lookup order, Kafka's Rate over sampled windows, the throttle time formula
and the controller mutation token bucket (kbroker/server/client_quotas.py, kbroker/server/sampled_rate.py)."""

from __future__ import annotations

import pytest

from kbroker.server.client_quotas import QuotaManager, client_throttles, lookup_quota, throttle_time_ms
from kbroker.server.sampled_rate import SampledRate
from kbroker.protocol.api_keys import ApiKey


ALL_LEVELS = {
    (("client-id", "c1"), ("user", "alice")): {"k": 1.0},
    (("client-id", None), ("user", "alice")): {"k": 2.0},
    (("user", "alice"),): {"k": 3.0},
    (("client-id", "c1"), ("user", None)): {"k": 4.0},
    (("client-id", None), ("user", None)): {"k": 5.0},
    (("user", None),): {"k": 6.0},
    (("client-id", "c1"),): {"k": 7.0},
    (("client-id", None),): {"k": 8.0},
}


def test_lookup_follows_kip_55_precedence():
    quotas = dict(ALL_LEVELS)
    expected_tags = [("alice", "c1"), ("alice", "c1"), ("alice", ""), ("alice", "c1"), ("alice", "c1"),
                     ("alice", ""), ("", "c1"), ("", "c1")]
    for level in range(1, 9):
        bound, tags = lookup_quota(quotas, "k", "alice", "c1")
        assert bound == level
        assert tags == expected_tags[level - 1]
        # drop the winning entity: the next level wins
        del quotas[next(e for e, v in quotas.items() if v["k"] == level)]
    assert lookup_quota(quotas, "k", "alice", "c1") is None


def test_lookup_is_per_key_and_defaults_apply_to_others():
    quotas = {(("user", "alice"),): {"producer_byte_rate": 10.0},
              (("client-id", None),): {"producer_byte_rate": 99.0, "consumer_byte_rate": 20.0}}
    assert lookup_quota(quotas, "producer_byte_rate", "alice", "x") == (10.0, ("alice", ""))
    assert lookup_quota(quotas, "consumer_byte_rate", "alice", "x") == (20.0, ("", "x"))
    assert lookup_quota(quotas, "producer_byte_rate", "bob", "x") == (99.0, ("", "x"))
    assert lookup_quota(quotas, "request_percentage", "bob", "x") is None


def test_throttle_time_formula():
    # Kafka: (observed - quota) / quota x window
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5000
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0
    assert throttle_time_ms(50.0, 100.0, 10_000) == 0
    assert throttle_time_ms(1.0, 0.0, 11_000) == 11_000


def test_kafka_rate_assumes_quiet_windows_before_the_first_sample():
    r = SampledRate(11, 1000, kafka_rate=True)
    r.record(1000, 0)
    assert r.window_size_ms(0) == 10_000 and r.measure(0) == 100.0
    r.record(1000, 5500)
    assert r.window_size_ms(5500) == 10_500  # 5.5 s with 5 full windows: 5 more added
    # the first sample is dropped 11 s after it began; from 5.5 s to 12.5 s, 7 full windows, completed to 10
    assert r.measure(12_500) == pytest.approx(100.0)
    simple = SampledRate(11, 1000)
    simple.record(1000, 0)
    assert simple.measure(0) == 1000.0  # SimpleRate: at least one window


def test_kafka_rate_keeps_window_num_samples_and_unrecord():
    r = SampledRate(3, 1000, kafka_rate=True)
    for t in range(0, 6000, 1000):
        r.record(10, t)
    assert r.total(5000) == 30  # three samples kept
    r.unrecord(10, 5000)
    assert r.total(5000) == 20


def test_quota_manager_throttles_a_greedy_client_to_its_bound_in_the_long_run():
    now = [0.0]
    m = QuotaManager("producer_byte_rate", 11, 1000.0, lambda: now[0])
    sent = 0
    while now[0] < 120:
        ms = m.record(1_000_000, ("", "c"), 100_000)
        sent += 100_000
        now[0] += max(ms / 1000.0, 0.01)
    assert sent / now[0] == pytest.approx(1_000_000, rel=0.1)


def test_token_bucket_of_controller_mutations():
    now = [0.0]
    m = QuotaManager("controller_mutation_rate", 11, 1000.0, lambda: now[0])
    assert m.take_tokens(1.0, ("", "c"), 10, strict=True) == (True, 0)  # 11 -> 1
    assert m.take_tokens(1.0, ("", "c"), 10, strict=True) == (True, 0)  # 1 -> -9: taken, strict: not throttled
    assert m.take_tokens(1.0, ("", "c"), 1, strict=True) == (False, 9000)  # below 0: refused
    assert m.take_tokens(1.0, ("", "c"), 1, strict=False) == (True, 10_000)  # permissive: taken
    now[0] = 10.0
    assert m.take_tokens(1.0, ("", "c"), 0, strict=True) == (True, 0)  # refilled at 1/s


def test_which_versions_throttle_themselves():
    assert not client_throttles(ApiKey.PRODUCE, 5) and client_throttles(ApiKey.PRODUCE, 6)
    assert not client_throttles(ApiKey.FETCH, 7) and client_throttles(ApiKey.FETCH, 8)
    assert client_throttles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0)


def test_throttle_time_is_bounded_by_the_quota_window():
    now = [0.0]
    m = QuotaManager("producer_byte_rate", 11, 1000.0, lambda: now[0])
    assert m.record(1.0, ("", "c"), 10_000_000) == 11_000  # (rate - 1) / 1 x 10 s would be days


def test_request_time_throttle_is_bounded_by_one_sample_window():
    """Kafka bounds a request_percentage throttle by quota.window.size.seconds (one sample), not the whole window."""
    now = [0.0]
    m = QuotaManager("request_percentage", 11, 1000.0, lambda: now[0])
    assert m.record(0.001, ("", "c"), 500.0) == 1000
