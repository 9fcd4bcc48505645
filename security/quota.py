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

``QuotaBook`` maps a quota key to its tracker, created on first use from the configured quota
(``quota_of(entity) -> bytes/s | None``: None = unlimited). Which configured entity applies to
a request is Kafka's precedence (``quota_levels``), first hit wins::

    (user, client-id) > (user, default client-id) > user > (default user, client-id)
    > (default user, default client-id) > default user > client-id > default client-id

with entities keyed as ``metadata.quotas.entity_key`` (``("user", U)``, ``("client-id", C)``,
``("user", U, "client-id", C)``; ``DEFAULT`` = "<default>"). User levels apply only to
authenticated connections (a principal). The tracker is keyed by the *concrete* names at the
matched level, so a default quota holds each user / client id to it separately (Kafka's quota
metric tags). The resolution is cached per (principal, client id) — one dict lookup per request
— until ``invalidate()`` (the owner calls it when the configured quotas change). A throttle is
capped at ``max_throttle_ms`` (default: the span of the samples), idle trackers are dropped
once there are more than ``max_trackers``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT", "RateTracker", "QuotaBook", "QuotaKey", "quota_levels"]

QuotaKey = tuple[str, ...]  # ("user", "User:alice"), ("client-id", "etl-1") or both
DEFAULT = "<default>"  # metadata.quotas.DEFAULT
_MISS = object()


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


def quota_levels(principal: str | None, client_id: str | None
                 ) -> list[tuple[QuotaKey, QuotaKey]]:
    """(configured entity to look up, tracker key if it applies), in Kafka's precedence."""
    c = client_id or ""
    both = ("user", principal, "client-id", c) if principal else ()
    out: list[tuple[QuotaKey, QuotaKey]] = []
    if principal:
        out += [(("user", principal, "client-id", c), both),
                (("user", principal, "client-id", DEFAULT), both),
                (("user", principal), ("user", principal)),
                (("user", DEFAULT, "client-id", c), both),
                (("user", DEFAULT, "client-id", DEFAULT), both),
                (("user", DEFAULT), ("user", principal))]
    return out + [(("client-id", c), ("client-id", c)), (("client-id", DEFAULT), ("client-id", c))]


@dataclass
class QuotaBook:
    """One kind of quota (produce or fetch) for a node: trackers per quota key."""

    quota_of: Callable[[QuotaKey], float | None]
    window_ms: int = 1000
    samples: int = 11
    trackers: dict[QuotaKey, RateTracker] = field(default_factory=dict)
    max_throttle_ms: int | None = None  # None: window_ms * samples
    max_trackers: int = 10_000
    _resolved: dict[tuple[str | None, str | None], Any] = field(default_factory=dict)

    def invalidate(self) -> None:
        """The configured quotas changed: resolve every (principal, client id) again."""
        self._resolved.clear()

    def resolve(self, principal: str | None, client_id: str | None) -> tuple[QuotaKey, float] | None:
        """The tracker key and quota that apply to this principal / client id, or None."""
        hit = self._resolved.get((principal, client_id), _MISS)
        if hit is _MISS:
            hit = None
            for entity, key in quota_levels(principal, client_id):
                quota = self.quota_of(entity)
                if quota is not None and quota > 0:
                    hit = (key, quota)
                    break
            if len(self._resolved) >= self.max_trackers:
                self._resolved.clear()
            self._resolved[(principal, client_id)] = hit
        return hit  # type: ignore[return-value]

    def key_for(self, principal: str | None, client_id: str | None) -> QuotaKey | None:
        """The tracker key whose quota applies (Kafka's precedence), or None."""
        hit = self.resolve(principal, client_id)
        return None if hit is None else hit[0]

    def record(self, principal: str | None, client_id: str | None, nbytes: int, now_ms: int) -> int:
        """Throttle time (ms) for a request of ``nbytes`` from this principal / client id."""
        hit = self.resolve(principal, client_id)
        if hit is None:
            return 0
        key, quota = hit
        t = self.trackers.get(key)
        if t is None or t.quota_bytes_per_s != quota:  # new, or the quota was changed
            if t is None and len(self.trackers) >= self.max_trackers:
                self._prune(now_ms)
            t = self.trackers[key] = RateTracker(quota, self.window_ms, self.samples)
        cap = self.max_throttle_ms if self.max_throttle_ms is not None else self.window_ms * self.samples
        return min(t.record(nbytes, now_ms), cap)

    def _prune(self, now_ms: int) -> None:
        for key, t in list(self.trackers.items()):
            if not t.window_bytes(now_ms):
                del self.trackers[key]
