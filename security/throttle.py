"""Byte-rate quotas enforced on a node: PRODUCE and FETCH bytes counted per principal / client
id, and the answer of a client over its quota held back (Kafka's throttle_time_ms).

Theory of operation
-------------------
``ClientQuotas(image_of)`` keeps two ``security.quota.QuotaBook`` — produce
(``producer_byte_rate``) and fetch (``consumer_byte_rate``) — whose configured quotas are the
``ClientQuota`` records of the current metadata image (``metadata/quotas.py``; Kafka's
precedence of user / client id / defaults is ``security.quota.quota_levels``). When
``image.quotas`` is another object than the one last seen, both books forget their cached
resolutions (a changed quota starts a fresh tracker).

``ClientQuotas.wrap(dispatch)`` is the node's dispatch with quotas (``rafka/node.py`` wraps both
listeners). Per request:

* anything but PRODUCE and a consumer's FETCH (follower fetches, ``replica_id >= 0``, are
  replication, never throttled) → straight through;
* the (principal, client id) pair is resolved — one dict lookup when it was seen before. No
  quota applies → straight through: an unquoted client pays one lookup and nothing else;
* PRODUCE: the record bytes of the request (the ``records`` of every partition) are counted
  after the append; FETCH: the raw bytes of the reply. The tracker's throttle (capped at the
  span of its samples, 11 s by default) goes into the answer as ``throttle_time_ms``
  (0 when under the quota).

The wait itself is the server's (``broker/server.py``): an answer with ``throttle_time_ms > 0``
is sent that much later, and the connection reads no further request until then — a throttled
client holds only its own connection (the reader and this request's task sleep; other
connections are untouched). A PRODUCE with ``acks=0`` has no answer: its bytes count, but only
the client's next answered request can be held.

``usage(now_ms)`` lists what this node measured: per (kind, tracker key) the quota, the bytes
of each live window, how many answers were throttled and for how long in total
(``DESCRIBE_CLIENT_QUOTAS`` returns it; ``rafka quota list`` prints it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from rafka.security.quota import QuotaBook, QuotaKey
from rafka.wire.protocol import ApiKey, Request

if TYPE_CHECKING:
    from rafka.metadata import MetadataImage
    from rafka.wire.dispatch import Dispatch

__all__ = ["ClientQuotas", "ThrottleStats", "produce_bytes"]


@dataclass(slots=True)
class ThrottleStats:
    throttled: int = 0  # answers with throttle_time_ms > 0
    throttle_time_ms_total: int = 0


def produce_bytes(body: dict[str, Any]) -> int:
    """The record bytes of a PRODUCE body (validated by the protocol's schema)."""
    return sum(len(p["records"]) for t in body["topics"] for p in t["partitions"])


def _monotonic_ms() -> int:
    return int(trio.current_time() * 1000)


class ClientQuotas:
    """The produce and fetch quotas of one node (see the module docstring)."""

    def __init__(self, image_of: Callable[[], MetadataImage], *, window_ms: int = 1000,
                 samples: int = 11, clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.image_of = image_of
        self.clock_ms = clock_ms
        self._seen: Any = None

        def configured(key: str) -> Callable[[QuotaKey], float | None]:
            return lambda entity: self.image_of().quotas.get(entity, key)

        self.produce = QuotaBook(configured("producer_byte_rate"), window_ms, samples)
        self.fetch = QuotaBook(configured("consumer_byte_rate"), window_ms, samples)
        self.stats: dict[tuple[str, QuotaKey], ThrottleStats] = {}

    def _book(self, req: Request) -> tuple[str, QuotaBook] | None:
        if req.api_key == ApiKey.PRODUCE:
            kind, book = "produce", self.produce
        elif req.api_key == ApiKey.FETCH and req.body.get("replica_id", -1) < 0:
            kind, book = "fetch", self.fetch
        else:
            return None
        quotas = self.image_of().quotas
        if quotas is not self._seen:  # a new image of the quotas: resolve everyone again
            self._seen = quotas
            self.produce.invalidate()
            self.fetch.invalidate()
        if book.resolve(req.principal, req.client_id or None) is None:
            return None
        return kind, book

    def record(self, kind: str, book: QuotaBook, req: Request, nbytes: int) -> int:
        """Count ``nbytes`` of ``req``; its throttle time (ms)."""
        throttle = book.record(req.principal, req.client_id or None, nbytes, self.clock_ms())
        if throttle > 0:
            key = book.key_for(req.principal, req.client_id or None)
            if key is not None:
                st = self.stats.get((kind, key))
                if st is None:
                    if len(self.stats) >= book.max_trackers:
                        self.stats.clear()
                    st = self.stats[(kind, key)] = ThrottleStats()
                st.throttled += 1
                st.throttle_time_ms_total += throttle
        return throttle

    def wrap(self, dispatch: Dispatch) -> Dispatch:
        async def run(req: Request) -> Any:
            which = self._book(req)
            if which is None:
                return await dispatch(req)
            kind, book = which
            out = await dispatch(req)
            if out is None:  # acks=0: counted, nothing to hold
                if kind == "produce":
                    self.record(kind, book, req, produce_bytes(req.body))
                return out
            body = out if isinstance(out, dict) else getattr(out, "body", None)
            if not isinstance(body, dict):
                return out
            nbytes = produce_bytes(req.body) if kind == "produce" else int(getattr(out, "raw_len", 0))
            body["throttle_time_ms"] = self.record(kind, book, req, nbytes) if nbytes else 0
            return out

        return run

    def usage(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """What this node measured, per (kind, tracker key) (module docstring)."""
        now = self.clock_ms() if now_ms is None else now_ms
        out = []
        for kind, book in (("produce", self.produce), ("fetch", self.fetch)):
            for key, t in sorted(book.trackers.items()):
                st = self.stats.get((kind, key), ThrottleStats())
                out.append({"kind": kind, "entity": list(key), "quota": t.quota_bytes_per_s,
                            "window_bytes": sorted([w, b] for w, b in t.window_bytes(now).items()),
                            "window_ms": t.window_ms, "throttle_count": st.throttled,
                            "throttle_time_ms_total": st.throttle_time_ms_total})
        return out
