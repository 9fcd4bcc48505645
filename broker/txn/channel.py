"""Request channels: one request at a time per destination broker, the rest batched into the next.

Theory of operation
-------------------
The coordinator's marker writer (``broker/txn/markers.py``: WRITE_TXN_MARKERS to partition
leaders) and the partition leader's verifier (``broker/txn/verify.py``: ADD_PARTITIONS_TO_TXN
``verify_only`` to coordinators) both send one small *entry* per transaction to another broker,
and under load many transactions do so at once. :class:`BatchingChannels` gives each
destination (a broker id for the markers, a ``__transaction_state`` partition for the
verifications) one channel with at most one request out: ``await exchange(dest, entry)`` queues
the entry; whoever finds the channel idle sends *everything* queued as one request (the owner's
``send(dest, entries) -> answers``, one answer per entry, in order) and hands each waiter its
own answer. Entries queued while a request is out leave together in the next one, so a lone
entry waits for nothing extra and concurrent ones share a request (as Kafka's marker channel
and its batched verification, KIP-890).

A waiter cancelled before its entry left takes it out of the queue. A request that fails
(raises, or answers fewer entries), or whose sender was cancelled, answers every waiter of that
request with ``None``: the caller decides whether to retry. Channels with nothing queued and
nothing out are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

__all__ = ["BatchingChannels"]

log = logging.getLogger("rafka.txn.channel")

Send = Callable[[int, list[Any]], Awaitable[list[Any] | None]]

_UNANSWERED: Any = object()


class _Queued:
    """One entry waiting in a channel."""

    __slots__ = ("entry", "answer")

    def __init__(self, entry: Any) -> None:
        self.entry = entry
        self.answer: Any = _UNANSWERED  # its answer, or None (no answer)


class _Channel:
    """The requests to one destination: at most one out, the rest queued for the next."""

    __slots__ = ("queue", "busy", "changed")

    def __init__(self) -> None:
        self.queue: list[_Queued] = []
        self.busy = False
        self.changed = trio.Event()  # set (and replaced) whenever a request ends


class BatchingChannels:
    """``await exchange(dest, entry)`` → that entry's answer (None: the request failed)."""

    def __init__(self, send: Send, what: str = "request") -> None:
        self.send = send
        self.what = what
        self.requests = 0  # requests sent
        self.entries = 0  # entries they carried (> requests: batching)
        self._channels: dict[int, _Channel] = {}

    def queued(self, dest: int) -> int:
        """Entries waiting for the next request to ``dest`` (tests, statistics)."""
        ch = self._channels.get(dest)
        return len(ch.queue) if ch is not None else 0

    async def exchange(self, dest: int, entry: Any) -> Any:
        ch = self._channels.get(dest)
        if ch is None:
            ch = self._channels[dest] = _Channel()
        item = _Queued(entry)
        ch.queue.append(item)
        try:
            while item.answer is _UNANSWERED:
                if ch.busy:
                    await ch.changed.wait()
                else:
                    await self._flush(dest, ch)
        finally:
            if item in ch.queue:  # cancelled before it left
                ch.queue.remove(item)
            if not ch.busy and not ch.queue and self._channels.get(dest) is ch:
                del self._channels[dest]
        return item.answer

    async def _flush(self, dest: int, ch: _Channel) -> None:
        """Send everything queued in ``ch`` as one request; answer each entry's waiter."""
        batch, ch.queue = ch.queue, []
        ch.busy = True
        answers: list[Any] = []
        try:
            self.requests += 1
            self.entries += len(batch)
            try:
                answers = list(await self.send(dest, [q.entry for q in batch]) or [])
            except Exception as exc:  # noqa: BLE001 - any failure: the waiters decide
                log.info("%s (channel %d): %s", self.what, dest, exc)
        finally:
            for i, q in enumerate(batch):  # in request order; a missing entry: no answer
                q.answer = answers[i] if i < len(answers) else None
            ch.busy = False
            ch.changed.set()
            ch.changed = trio.Event()

    def statistics(self) -> dict[str, int]:
        return {"requests": self.requests, "entries": self.entries}
