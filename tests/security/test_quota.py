"""The byte-rate tracker and quota book (security/quota.py), with time passed in by hand."""

from __future__ import annotations

import pytest
from rafka.security.quota import QuotaBook, RateTracker


def test_under_the_quota_nothing_is_throttled():
    t = RateTracker(1000, window_ms=1000, samples=11)
    for s in range(20):
        assert t.record(900, s * 1000) == 0


def test_a_burst_is_throttled_back_to_the_quota():
    t = RateTracker(1000, window_ms=1000, samples=11)
    delay = t.record(5000, 0)  # 5000 bytes in the first window: rate 5000/s over 1 s
    assert delay == 4000  # (5000 - 1000) / 1000 * 1000 ms
    # a client that waits out its throttle and sends again is held near the quota
    now, sent = delay, 5000
    for _ in range(50):
        delay = t.record(1000, now)
        sent += 1000
        now += max(delay, 1)
    assert 0.9 * 1000 <= sent * 1000 / now <= 1.1 * 1000


def test_old_windows_are_forgotten_and_measured_bytes_reported():
    t = RateTracker(100, window_ms=100, samples=3)
    t.record(1000, 0)
    assert t.window_bytes(50) == {0: 1000}
    assert t.record(10, 1000) == 0  # the burst is out of the span
    assert t.window_bytes(1000) == {1000: 10}


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        RateTracker(0)


def test_the_user_quota_wins_and_other_clients_are_unaffected():
    quotas = {("user", "User:alice"): 1000.0, ("client-id", "etl"): 10.0}
    book = QuotaBook(quotas.get)
    assert book.key_for("User:alice", "etl") == ("user", "User:alice")
    assert book.key_for("User:bob", "etl") == ("client-id", "etl")
    assert book.key_for("User:bob", "other") is None
    assert book.record("User:alice", "etl", 3000, 0) > 0
    assert book.record("User:bob", "other", 10**9, 0) == 0  # no quota: never throttled
    quotas[("user", "User:alice")] = 10**6  # a changed quota starts a fresh tracker
    book.invalidate()
    assert book.record("User:alice", "etl", 3000, 10) == 0
