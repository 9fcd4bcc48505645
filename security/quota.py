"""Byte-rate quotas: how much a principal / client id may produce or fetch per second, and how
long to hold its response when it went over (Kafka's throttle_time_ms). Sans I/O: time is
passed in (``now_ms``), so tests drive it by hand.

Theory of operation
-------------------
``RateTracker`` keeps the bytes of the last ``samples`` windows of ``window_ms`` each (a ring
of counters; a window older than the span is forgotten when its slot is reused). The observed
rate is the bytes of the live windows over the time they cover, the current window counted
whole (so a burst at start-up is not divided by a few milliseconds). ``record(nbytes, now_ms)`` adds the
bytes and returns the delay that brings the rate back to the quota — as Kafka computes it::

    throttle_ms = (rate - quota) / quota * span_ms        (0 when rate <= quota)

where ``span_ms`` is the time the live windows cover. The broker holds the response that long
and reports it as ``throttle_time_ms``; a client that keeps sending is thus held near its
quota, and one client's throttle delays only its own responses.

``QuotaBook`` maps a quota key (``("user", principal)`` or ``("client-id", client_id)``; the
user quota wins, as in Kafka) to its tracker, created on first use from the configured quota
(``quota_of(key) -> bytes/s | None``: None = unlimited).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["RateTracker", "QuotaBook", "QuotaKey"]

QuotaKey = tuple[str, str]  # ("user", "User:alice") or ("client-id", "etl-1")


@dataclass
class RateTracker:
    quota_bytes_per_s: float
    window_ms: int = 1000
    samples: int = 11
    _counts: list[int] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)  # window index of each slot, -1 = empty
    first_ms: int | None = None

    def __post_init__(self) -> None:
        if self.quota_bytes_per_s <= 0 or self.window_ms <= 0 or self.samples < 2:
            raise ValueError("quota, window_ms must be positive and samples >= 2")
        self._counts = [0] * self.samples
        self._starts = [-1] * self.samples

    def _slot(self, now_ms: int) -> int:
        w = now_ms // self.window_ms
        i = w % self.samples
        if self._starts[i] != w:  # reuse the slot of a window that fell out of the span
            self._starts[i], self._counts[i] = w, 0
        return i

    def window_bytes(self, now_ms: int) -> dict[int, int]:
        """Bytes per live window (window start in ms → bytes): what the broker measured."""
        oldest = now_ms // self.window_ms - self.samples + 1
        return {w * self.window_ms: c for w, c in zip(self._starts, self._counts, strict=True)
                if w >= oldest and c}

    def _span_ms(self, now_ms: int) -> int:
        oldest = now_ms // self.window_ms - self.samples + 1
        live = [w for w in self._starts if w >= oldest]
        start = min(live) * self.window_ms if live else now_ms
        if self.first_ms is not None:
            start = max(start, self.first_ms)
        return now_ms - start + self.window_ms  # the current window counted whole

    def rate(self, now_ms: int) -> float:
        """Observed bytes per second over the live windows."""
        total = sum(self.window_bytes(now_ms).values())
        return total * 1000 / self._span_ms(now_ms)

    def record(self, nbytes: int, now_ms: int) -> int:
        """Count ``nbytes`` now; the throttle time (ms) the caller should apply."""
        if self.first_ms is None:
            self.first_ms = now_ms
        self._counts[self._slot(now_ms)] += nbytes
        rate = self.rate(now_ms)
        if rate <= self.quota_bytes_per_s:
            return 0
        return int((rate - self.quota_bytes_per_s) / self.quota_bytes_per_s * self._span_ms(now_ms))


@dataclass
class QuotaBook:
    """One kind of quota (produce or fetch) for a node: trackers per quota key."""

    quota_of: Callable[[QuotaKey], float | None]
    window_ms: int = 1000
    samples: int = 11
    trackers: dict[QuotaKey, RateTracker] = field(default_factory=dict)

    def key_for(self, principal: str | None, client_id: str | None) -> QuotaKey | None:
        """The key whose quota applies (the user's over the client id's), or None."""
        for key in ((("user", principal),) if principal else ()) + (
                (("client-id", client_id),) if client_id else ()):
            if self.quota_of(key) is not None:
                return key
        return None

    def record(self, principal: str | None, client_id: str | None, nbytes: int, now_ms: int) -> int:
        """Throttle time (ms) for a request of ``nbytes`` from this principal / client id."""
        key = self.key_for(principal, client_id)
        if key is None:
            return 0
        quota = self.quota_of(key)
        assert quota is not None
        t = self.trackers.get(key)
        if t is None or t.quota_bytes_per_s != quota:  # new, or the quota was changed
            t = self.trackers[key] = RateTracker(quota, self.window_ms, self.samples)
        return t.record(nbytes, now_ms)
