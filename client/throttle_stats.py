"""What the brokers said about this client's byte-rate quota: ``throttle_time_ms`` of the
PRODUCE / FETCH answers (docs/security.md, "Quotas").

A broker answers a client over its quota with ``throttle_time_ms > 0`` and has already held
the answer that long (and not read the connection's next request meanwhile), so the client
need not wait again; ``ThrottleMeter`` only counts it for ``statistics()`` of the producer and
the consumer: the last value seen, the largest, how many answers were throttled and the total.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ThrottleMeter"]


@dataclass(slots=True)
class ThrottleMeter:
    last_ms: int = 0
    max_ms: int = 0
    throttled: int = 0
    total_ms: int = 0

    def observe(self, body: Mapping[str, Any]) -> None:
        t = body.get("throttle_time_ms")
        if not isinstance(t, int) or isinstance(t, bool):
            return
        self.last_ms = t
        if t > 0:
            self.throttled += 1
            self.total_ms += t
            self.max_ms = max(self.max_ms, t)

    def statistics(self) -> dict[str, int]:
        return {"throttle_time_ms": self.last_ms, "throttle_time_ms_max": self.max_ms,
                "throttled_responses": self.throttled, "throttle_time_ms_total": self.total_ms}
