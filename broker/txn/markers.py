"""The marker writer: a decided transaction's COMMIT/ABORT marker into each of its partitions.

Theory of operation
-------------------
``MarkerWriter.write(metadata, coordinator_epoch, still_valid)`` returns once every partition of
the transaction answered ``NONE`` to ``WRITE_TXN_MARKERS`` (the leader appended the control batch
with ``acks=all``), and never gives up before that while ``still_valid()`` holds — a decided
transaction must not be left half-written. Each round groups the partitions still missing by
their leader in this broker's metadata image, sends one request per leader concurrently (this
broker's own partitions through the local handler, the others over the node's
``ConnectionPool``), each bounded by ``attempt_timeout_s``, then backs off (capped) before the
next round for what is left. A partition whose topic is gone from the image (and whose leader
says ``UNKNOWN_TOPIC_OR_PARTITION``) was deleted: done. When ``still_valid()`` turns false (this
broker no longer leads the ``__transaction_state`` partition) it raises ``NOT_COORDINATOR``:
the new coordinator finishes the transaction when it loads the partition.

Duplicate markers are harmless (docs/transactions.md), so a round that timed out after a leader
appended is simply repeated.

Batching across transactions (as Kafka's marker channel): requests to one leader go through
that leader's channel, one at a time. A transaction's markers for that leader join the channel's
queue; whoever finds the channel idle sends *everything* queued as one WRITE_TXN_MARKERS (one
``markers`` entry per transaction, answered in the same order) and hands each waiter its own
entry of the answer. Markers queued while a request is out leave together in the next one, so a
lone transaction waits for nothing extra, and concurrent completions share requests — and, since
the leader appends all of a request's markers before it waits for their ``acks=all``, they share
the follower fetches and fsyncs that replicate them. A waiter cancelled (its attempt timed out)
before its markers left takes them out of the queue; a request that fails, or whose sender was
cancelled, answers every waiter of that request with nothing (their next round retries).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio
from rafka.broker.txn.state import TxnMetadata
from rafka.metadata.image import MetadataImage
from rafka.wire.connection import backoff_ms
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey

__all__ = ["MarkerWriter", "marker_body"]

log = logging.getLogger("rafka.txn.markers")

TP = tuple[str, int]
LocalHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def marker_body(md: TxnMetadata, coordinator_epoch: int, partitions: list[TP],
                timeout_ms: int, leader_epochs: Mapping[TP, int] | None = None) -> dict[str, Any]:
    """The WRITE_TXN_MARKERS request for ``partitions`` of ``md``'s decided transaction: with
    its number (``txn_seq``) and, when ``leader_epochs`` is given, each partition's leader epoch
    as this coordinator's image has it — so that a request delivered late, after the
    transaction ended, cannot close the producer's next one (``broker/handlers/txn_data.py``)."""
    topics: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        topics.setdefault(t, []).append(p)
    out = []
    for t, ps in topics.items():
        entry: dict[str, Any] = {"name": t, "partitions": ps}
        if leader_epochs is not None:
            entry["leader_epochs"] = [leader_epochs[(t, p)] for p in ps]
        out.append(entry)
    return {"markers": [{"producer_id": md.producer_id, "producer_epoch": md.producer_epoch,
                         "commit": md.commit, "coordinator_epoch": coordinator_epoch,
                         "txn_seq": md.txn_seq, "topics": out}],
            "timeout_ms": timeout_ms}


_UNANSWERED: Any = object()


class _Queued:
    """One transaction's marker entry for one leader, waiting in that leader's channel."""

    __slots__ = ("entry", "answer")

    def __init__(self, entry: dict[str, Any]) -> None:
        self.entry = entry
        self.answer: Any = _UNANSWERED  # the answer's entry for it, or None (no answer)


class _Channel:
    """The marker requests to one leader: at most one out, the rest queued for the next."""

    __slots__ = ("queue", "busy", "changed")

    def __init__(self) -> None:
        self.queue: list[_Queued] = []
        self.busy = False
        self.changed = trio.Event()  # set (and replaced) whenever a request ends


class MarkerWriter:
    def __init__(self, broker_id: int, image: Callable[[], MetadataImage], pool: Any,
                 local: LocalHandler | None, *, attempt_timeout_s: float = 5.0,
                 max_backoff_ms: int = 1000) -> None:
        self.broker_id = broker_id
        self.image = image
        self.pool = pool
        self.local = local
        self.attempt_timeout_s = attempt_timeout_s
        self.max_backoff_ms = max_backoff_ms
        self.rounds = 0
        self.requests = 0  # WRITE_TXN_MARKERS requests sent (local ones included)
        self.entries = 0  # transactions' marker entries they carried (> requests: batching)
        self._channels: dict[int, _Channel] = {}

    async def write(self, md: TxnMetadata, coordinator_epoch: int,
                    still_valid: Callable[[], bool]) -> None:
        remaining: set[TP] = set(md.partitions)
        attempt = 0
        while remaining:
            if not still_valid():
                raise error_for(ErrorCode.NOT_COORDINATOR,
                                f"lost the coordinator role of {md.transactional_id!r}")
            self.rounds += 1
            remaining -= await self._round(md, coordinator_epoch, remaining)
            if remaining:
                log.info("markers of %r (%s): %d partitions left, retrying",
                         md.transactional_id, md.state.wire_name, len(remaining))
                await trio.sleep(backoff_ms(attempt, 20, self.max_backoff_ms) / 1000)
                attempt += 1

    async def _round(self, md: TxnMetadata, coordinator_epoch: int, remaining: set[TP]) -> set[TP]:
        """One request per leader; returns the partitions that are done."""
        image = self.image()
        done: set[TP] = set()
        by_leader: dict[int, list[TP]] = {}
        epochs: dict[TP, int] = {}
        for tp in remaining:
            reg = image.topics.partition(*tp)
            if reg is None:
                done.add(tp)  # the topic (or partition) was deleted: nothing to mark
            elif reg.leader >= 0:
                by_leader.setdefault(reg.leader, []).append(tp)
                epochs[tp] = reg.leader_epoch
        async with trio.open_nursery() as nursery:
            for leader, tps in by_leader.items():
                nursery.start_soon(self._send, leader, md, coordinator_epoch, tps, epochs, done)
        return done

    async def _send(self, leader: int, md: TxnMetadata, coordinator_epoch: int, tps: list[TP],
                    epochs: Mapping[TP, int], done: set[TP]) -> None:
        entry = marker_body(md, coordinator_epoch, tps, 0, epochs)["markers"][0]
        m: dict[str, Any] | None = None
        with trio.move_on_after(self.attempt_timeout_s):
            m = await self._exchange(leader, entry)
        if m is None:
            return
        image = self.image()
        for t in m.get("topics") or []:
            for pd in t.get("partitions") or []:
                tp = (t["name"], pd["partition"])
                code = pd.get("error", 0)
                if code == ErrorCode.NONE or (code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                              and image.topics.partition(*tp) is None):
                    done.add(tp)

    async def _exchange(self, leader: int, entry: dict[str, Any]) -> dict[str, Any] | None:
        """``entry``'s answer from ``leader`` through its channel (module docstring): None when
        the request carrying it failed."""
        ch = self._channels.get(leader)
        if ch is None:
            ch = self._channels[leader] = _Channel()
        item = _Queued(entry)
        ch.queue.append(item)
        try:
            while item.answer is _UNANSWERED:
                if ch.busy:
                    await ch.changed.wait()
                else:
                    await self._flush(leader, ch)
        finally:
            if item in ch.queue:  # cancelled before it left
                ch.queue.remove(item)
            if not ch.busy and not ch.queue and self._channels.get(leader) is ch:
                del self._channels[leader]
        return item.answer

    async def _flush(self, leader: int, ch: _Channel) -> None:
        """Send everything queued in ``ch`` as one request; answer each entry's waiter."""
        batch, ch.queue = ch.queue, []
        ch.busy = True
        answers: list[Any] = []
        try:
            self.requests += 1
            self.entries += len(batch)
            body = {"markers": [q.entry for q in batch],
                    "timeout_ms": int(self.attempt_timeout_s * 1000)}
            try:
                answer = await self._request(leader, body)
            except Exception as exc:  # noqa: BLE001 - any failure: the waiters' rounds retry
                log.info("WRITE_TXN_MARKERS to broker %d: %s", leader, exc)
                answer = None
            if answer is not None:
                answers = list(answer.get("markers") or [])
                if answer.get("error") and not answers:
                    log.info("WRITE_TXN_MARKERS to broker %d refused: %s", leader,
                             answer.get("message") or answer["error"])
        finally:
            for i, q in enumerate(batch):  # in request order; a missing entry: no answer
                q.answer = answers[i] if i < len(answers) else None
            ch.busy = False
            ch.changed.set()
            ch.changed = trio.Event()

    def statistics(self) -> dict[str, int]:
        return {"rounds": self.rounds, "requests": self.requests, "entries": self.entries}

    async def _request(self, leader: int, body: dict[str, Any]) -> dict[str, Any] | None:
        if leader == self.broker_id and self.local is not None:
            return await self.local(body)
        reg = self.image().cluster.brokers.get(leader)
        if reg is None or self.pool is None:
            return None
        try:
            resp = await self.pool.request(reg.host, reg.port, ApiKey.WRITE_TXN_MARKERS, body)
        except BaseException:
            self.pool.discard(reg.host, reg.port)
            raise
        return resp.body
