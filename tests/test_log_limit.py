"""kbroker.log_limit.LogLimiter: one line per key and interval, the rest counted."""

from kbroker.log_limit import LogLimiter


def test_one_line_per_key_and_interval_with_the_count_of_the_rest():
    lim = LogLimiter(10)
    assert lim.allow("a", 0) == (0, None)
    assert [lim.allow("a", t) for t in (1, 5, 9)] == [None, None, None]
    assert lim.allow("b", 9) == (0, None)  # keys are apart
    assert lim.allow("a", 10) == (3, 10)
    assert lim.allow("a", 12) is None
    assert lim.forget(lambda k: k == "a") == [("a", 1)]
    assert lim.allow("a", 13) == (0, None)


def test_keys_are_bounded():
    lim = LogLimiter(10, max_keys=3)
    for i, k in enumerate("abc"):
        lim.allow(k, i)
    lim.allow("d", 20)  # a, b, c quiet for an interval: forgotten
    assert lim.allow("a", 21) == (0, None) and lim.allow("d", 21) is None
