"""The follower side of replication: one fetcher task per (this broker → leader) link.

Theory of operation
-------------------
``ReplicaFetcherManager`` knows, for each partition this broker follows, the leader and the
leader epoch the metadata image names (``add_partitions`` / ``remove_partitions``, called by the
replica manager on every metadata delta). Partitions are grouped by leader; each leader gets one
fetcher task (as Kafka's ``ReplicaFetcherThread``) that loops:

1. build one FETCH for every partition it serves that is not backing off: ``replica_id`` = our
   id, ``broker_epoch``, per partition ``fetch_offset`` = local log end offset,
   ``last_fetched_epoch`` = the local epoch cache's latest epoch, ``current_leader_epoch`` = the
   epoch we believe in (the leader fences us if we are behind, says "unknown" if it is),
   ``log_start_offset`` = ours (a DeleteRecords on the leader waits until the in-sync followers
   report they moved theirs);
2. send it over the shared ``ConnectionPool`` (long poll: ``max_wait_ms``), bounded by
   ``max_wait_ms + request_timeout_ms``. A membership change for this link while the request
   is out (``add_partitions``: a partition added to it, or a new epoch / log for one it has)
   *interrupts* it: the wait for the answer is cancelled (the connection's slot is abandoned
   and the late answer dropped, never half-applied: everything after the wait is synchronous)
   and a new fetch naming the new set goes out at once. Without that, a partition moving to a
   leader we already long-poll waited for the poll to end (up to ``max_wait_ms``) before its
   first fetch, and the new leader's ISR — so ``acks=all`` — waited with it. Only the wait is
   cancellable, never the write (a half-written frame would break the shared connection). The
   leader still serves the abandoned poll until its ``max_wait_ms``, at offsets no newer than
   the next fetch names; only metadata changes cause one. ``remove_partitions`` does not
   interrupt: the answer is dropped by step 3;
3. handle each partition of the answer, synchronously (no ``await``), and only if the partition
   is still followed from *this* leader in *this* epoch (a response that raced a leadership
   change is dropped: a partition this broker now leads must never get a follower append):

   * ``diverging_epoch`` → ``epochs.truncation_offset`` (KIP-279) → ``log.truncate_to``; the next
     fetch names the new last epoch, so the two-step case iterates by itself. A cut at the log
     end still trims the epoch cache (an epoch started at the log end and never written);
   * records → ``log.append_as_follower(raw batches)``; then the follower HW is
     ``min(leader HW, local LEO)`` (``on_high_watermark``);
   * ``OFFSET_OUT_OF_RANGE`` with our end below the leader's log start → start over empty at
     the leader's log start (``truncate_fully_and_start_at``); above the leader's end (only
     possible for a log without epochs) → truncate to the leader's end;
   * any other error → back off that partition, capped exponential: ``backoff_ms`` doubling
     up to ``max_backoff_ms`` (``failures`` counts the run; an answer without error resets
     it). That includes the "metadata is behind" errors (not leader / unknown or fenced
     epoch / unknown partition): right after an election the follower often fetches from the
     new leader before that leader has applied the change that makes it leader, so these are
     retried soon (100 ms, 200 ms, …), not after a flat ``max_backoff_ms`` — the new leader's
     ISR and high watermark wait for this fetch. When our own image moves the partition
     (``add_partitions`` with a new leader or epoch) the backoff is dropped and the link woken
     (or its fetch interrupted, step 2): it is fetched at once.

4. durability before reporting: with ``sync_appended`` set, every partition the response
   appended to whose flush rule has ``fsync_acks`` (``needs_sync``: flush policy ``batch``, or
   the topic's ``flush.messages=1``; broker/flush_rule.py) is synced in one call (one
   worker-thread round: group commit, one fsync per partition per fetch response) *before* the
   next fetch names its new log end offset. The leader counts a follower's records in the high watermark only from that
   next fetch, so whatever ``acks=all`` acknowledged is on disk on every ISR member.

5. reassignment throttle (``set_throttle``, kraft/reassign.py): a partition this broker is
   being *added* to by a reassignment fetches at most ``throttle_bytes_per_s`` — each fetch
   asks for at most one second's worth, and after appending ``n`` bytes the partition waits
   (``backoff_until``, without counting a failure) until the bytes appended so far fit the
   rate. Normal followers and the other partitions of the link are not held back.

6. storage errors (disk full, EIO) on a follower append or truncation: the log is left exactly
   as it was (``PartitionLog`` appends are all or nothing), the partition backs off (capped
   exponential, ``max_backoff_ms``) and the same fetch offset is asked for again — once space
   is freed it catches up by itself. The first failure of a run is logged as a warning, the
   repeats at debug level; nothing ever leaves the link task.

A link with no partitions left ends its task (after its fetch in flight, if any, returns);
``add_partitions`` for a new leader starts one.
Everything runs in the nursery of ``run`` (structured concurrency: cancelling ``run`` stops every
link). Bounded: one request awaited per link (an interrupted one is abandoned, and the leader
ends it within its ``max_wait_ms``), ``max_bytes`` per response, ``partition_max_bytes`` per
partition, capped backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import trio
from rafka.broker.replication.epochs import EpochEndOffset, EpochLookup, truncation_offset
from rafka.log.errors import StorageError
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

__all__ = ["FollowerLog", "FollowerPartition", "ReplicaFetcherManager"]

log = logging.getLogger("rafka.replication.fetcher")

TP = tuple[str, int]

# Errors that mean "our metadata (or the leader's) is behind": the image will move us (and wake
# the partition), or the leader applies its election in a moment. Retried like the rest (capped
# exponential backoff); they are expected around every leader change, so logged quietly.
_WAIT_FOR_METADATA = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
})


class FollowerLog(Protocol):
    """What the fetcher needs of a ``log.partition_log.PartitionLog``."""

    epochs: Any  # EpochLookup + truncate_from_end(offset)

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> Any: ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def delete_records_before(self, offset: int) -> int: ...


@dataclass(slots=True)
class FollowerPartition:
    """Fetch state of one followed partition (one leader, one leader epoch)."""

    tp: TP
    leader_id: int
    leader_epoch: int
    log: FollowerLog
    high_watermark: int = 0
    backoff_until: float = 0.0  # trio time
    failures: int = 0
    unsynced: bool = False  # appended since the last ``sync_appended``: not reported yet
    throttle_bytes_per_s: int = 0  # reassignment catch-up limit (``set_throttle``; 0: none)
    throttle_next: float = 0.0  # trio time from which the throttle allows the next fetch

    def fetch_entry(self, partition_max_bytes: int) -> dict[str, Any]:
        epochs: EpochLookup = self.log.epochs
        if self.throttle_bytes_per_s:  # at most a second's worth (the leader sends >= 1 batch)
            partition_max_bytes = min(partition_max_bytes, self.throttle_bytes_per_s)
        return {"partition": self.tp[1], "fetch_offset": self.log.log_end_offset,
                "partition_max_bytes": partition_max_bytes,
                "current_leader_epoch": self.leader_epoch,
                "last_fetched_epoch": epochs.latest_epoch,
                "log_start_offset": self.log.log_start_offset}


_INTERRUPTED: Any = object()  # ``_request``'s answer when the link's partitions changed


class _Link:
    """State of one fetcher task (one leader) that ``add_partitions`` acts on."""

    __slots__ = ("wakeup", "changed", "waiting")

    def __init__(self) -> None:
        self.wakeup = trio.Event()  # set: the partitions changed (ends a backoff sleep)
        self.changed = False  # membership changed since this round's fetch set was taken
        self.waiting: trio.CancelScope | None = None  # the wait for the answer in flight

    def interrupt(self) -> None:
        self.changed = True
        self.wakeup.set()
        if self.waiting is not None:
            self.waiting.cancel()


class ReplicaFetcherManager:
    """Fetcher tasks for every leader this broker follows (see the module docstring).

    ``lookup_broker_address(broker_id)`` → ``(host, port)`` or None (unknown/fenced broker);
    ``broker_epoch`` is our registration epoch (an int or a callable returning it). Callbacks,
    all synchronous and on the trio thread: ``on_append(tp, append_info)``,
    ``on_high_watermark(tp, hw)``, ``on_truncate(tp, from_offset, to_offset, leader_epoch)``.
    """

    def __init__(self, broker_id: int, pool: Any,
                 lookup_broker_address: Callable[[int], tuple[str, int] | None], *,
                 broker_epoch: int | Callable[[], int] = -1,
                 max_wait_ms: int = 500, min_bytes: int = 1, max_bytes: int = 10 * 1024 * 1024,
                 partition_max_bytes: int = 1024 * 1024, request_timeout_ms: int = 30_000,
                 backoff_ms: int = 100, max_backoff_ms: int = 2_000,
                 on_append: Callable[[TP, Any], None] | None = None,
                 on_high_watermark: Callable[[TP, int], None] | None = None,
                 on_truncate: Callable[[TP, int, int, int], None] | None = None) -> None:
        self.broker_id = broker_id
        self.pool = pool
        self.lookup_broker_address = lookup_broker_address
        self._broker_epoch = broker_epoch
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.request_timeout_ms = request_timeout_ms
        self.backoff_ms = backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.on_append = on_append
        self.on_high_watermark = on_high_watermark
        self.on_truncate = on_truncate
        # ``await sync_appended([tp, ...]) -> {tp synced}``: make appended records durable before
        # the next fetch reports them (flush policy ``batch``); None: report at once.
        self.sync_appended: Callable[[list[TP]], Awaitable[set[TP]]] | None = None
        # ``needs_sync(tp)``: whether what was appended to ``tp`` must go through
        # ``sync_appended`` first (its flush rule, broker/flush_rule.py); None: every partition
        self.needs_sync: Callable[[TP], bool] | None = None
        self.partitions: dict[TP, FollowerPartition] = {}
        self._links: dict[int, _Link] = {}  # leader id -> its fetcher task's state
        self._nursery: trio.Nursery | None = None
        self.stats = {"fetches": 0, "errors": 0, "truncations": 0, "appended_batches_bytes": 0,
                      "interrupted": 0, "throttled": 0}

    @property
    def broker_epoch(self) -> int:
        be = self._broker_epoch
        return be() if callable(be) else be

    # -- membership --------------------------------------------------------------------------

    def add_partitions(self, parts: Mapping[TP, tuple[int, int, FollowerLog]]) -> None:
        """Follow ``tp`` from ``leader_id`` in ``leader_epoch`` (replacing any older state:
        a changed partition starts without backoff, and its link's fetch in flight, if any, is
        interrupted so that it is fetched at once)."""
        for tp, (leader_id, leader_epoch, plog) in parts.items():
            tp = (tp[0], tp[1])
            old = self.partitions.get(tp)
            if (old is not None and old.leader_id == leader_id
                    and old.leader_epoch == leader_epoch and old.log is plog):
                continue
            hw = old.high_watermark if old is not None else 0
            self.partitions[tp] = FollowerPartition(tp, leader_id, leader_epoch, plog,
                                                    min(hw, plog.log_end_offset))
            if old is not None and old.leader_id != leader_id:
                self._wake(old.leader_id)
            self._ensure_link(leader_id)
            link = self._links.get(leader_id)
            if link is not None:
                link.interrupt()

    def remove_partitions(self, tps: Iterable[TP]) -> None:
        """Stop following (we lead it now, or it moved, or it was deleted)."""
        for tp in tps:
            old = self.partitions.pop((tp[0], tp[1]), None)
            if old is not None:
                self._wake(old.leader_id)

    def set_throttle(self, tp: TP, bytes_per_s: int) -> None:
        """Limit the catch-up of a followed partition to ``bytes_per_s`` (0: none) — only a
        replica being added by a reassignment is throttled (``broker/replica_manager.py``)."""
        p = self.partitions.get((tp[0], tp[1]))
        if p is not None and p.throttle_bytes_per_s != bytes_per_s:
            p.throttle_bytes_per_s = max(0, bytes_per_s)
            if not p.throttle_bytes_per_s:
                p.backoff_until = min(p.backoff_until, trio.current_time())
                self._wake(p.leader_id)

    def _throttle(self, p: FollowerPartition, nbytes: int) -> None:
        """After ``nbytes`` appended to a throttled partition: its next fetch waits until the
        bytes so far fit the rate (a token bucket of one second's depth)."""
        now = trio.current_time()
        p.throttle_next = max(p.throttle_next, now - 1.0) + nbytes / p.throttle_bytes_per_s
        if p.throttle_next > now:
            p.backoff_until = max(p.backoff_until, p.throttle_next)
            self.stats["throttled"] += 1

    def high_watermark(self, tp: TP) -> int | None:
        p = self.partitions.get((tp[0], tp[1]))
        return None if p is None else p.high_watermark

    def _wake(self, leader_id: int) -> None:
        link = self._links.get(leader_id)
        if link is not None:
            link.wakeup.set()

    def _ensure_link(self, leader_id: int) -> None:
        if leader_id in self._links or self._nursery is None:
            return
        link = self._links[leader_id] = _Link()
        self._nursery.start_soon(self._run_link, leader_id, link)

    # -- tasks -------------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for leader_id in sorted({p.leader_id for p in self.partitions.values()}):
                self._ensure_link(leader_id)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None
                self._links.clear()

    def _serving(self, leader_id: int) -> list[FollowerPartition]:
        return [p for p in self.partitions.values() if p.leader_id == leader_id]

    async def _run_link(self, leader_id: int, link: _Link) -> None:
        failures = 0
        try:
            while True:
                link.changed = False
                serving = self._serving(leader_id)
                if not serving:
                    return
                now = trio.current_time()
                ready = [p for p in serving if p.backoff_until <= now]
                if any(p.unsynced for p in ready):
                    await self._sync(ready)
                    now = trio.current_time()
                    ready = [p for p in ready if not p.unsynced and p.backoff_until <= now]
                    if link.changed:
                        continue  # the set changed during the sync: take it again
                addr = self.lookup_broker_address(leader_id)
                if addr is None or not ready:
                    wake_at = (now + self.backoff_ms / 1000 if addr is None
                               else min(p.backoff_until for p in serving))
                    await self._sleep_until(link, wake_at)
                    continue
                ok = await self._fetch_once(leader_id, link, addr, ready)
                if ok is None:
                    continue  # interrupted: fetch the new set now
                if ok:
                    failures = 0
                else:
                    failures += 1
                    self.stats["errors"] += 1
                    await self._sleep_until(link, trio.current_time()
                                            + self._delay_ms(failures) / 1000)
        finally:
            if self._links.get(leader_id) is link:
                del self._links[leader_id]

    async def _sync(self, parts: list[FollowerPartition]) -> None:
        """Group commit of one fetch response: one ``sync_appended`` call for every partition
        it appended to. A partition whose sync failed backs off and is synced again (never
        fetched, so never reported) before its next fetch."""
        todo = [p for p in parts if p.unsynced]
        if not todo:
            return
        if self.sync_appended is None:
            synced = {p.tp for p in todo}
        else:
            try:
                synced = await self.sync_appended([p.tp for p in todo])
            except Exception as exc:  # noqa: BLE001 - retried before the next fetch
                log.warning("syncing followed partitions failed: %r", exc)
                synced = set()
        for p in todo:
            if p.tp in synced:
                p.unsynced = False
            else:
                self._backoff(p)

    @staticmethod
    async def _sleep_until(link: _Link, when: float) -> None:
        with trio.move_on_at(when):
            await link.wakeup.wait()
        if link.wakeup.is_set():
            link.wakeup = trio.Event()

    def _delay_ms(self, failures: int) -> int:
        return min(self.max_backoff_ms, self.backoff_ms * (2 ** min(failures - 1, 16)))

    def build_request(self, parts: list[FollowerPartition]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for p in parts:
            topics.setdefault(p.tp[0], []).append(p.fetch_entry(self.partition_max_bytes))
        return {"replica_id": self.broker_id, "broker_epoch": self.broker_epoch,
                "max_wait_ms": self.max_wait_ms, "min_bytes": self.min_bytes,
                "max_bytes": self.max_bytes,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

    async def _fetch_once(self, leader_id: int, link: _Link, addr: tuple[str, int],
                          parts: list[FollowerPartition]) -> bool | None:
        """One FETCH of ``parts``: True answered, False failed (the link backs off), None
        interrupted (``_Link.interrupt``; not a failure, the answer is dropped)."""
        body = self.build_request(parts)
        sent = {p.tp: p for p in parts}
        resp = None
        waiting = trio.CancelScope()
        with trio.move_on_after((self.max_wait_ms + self.request_timeout_ms) / 1000):
            try:
                resp = await self._request(link, waiting, addr, body)
            except RafkaError as exc:
                log.info("fetch from broker %d at %s:%d failed: %s", leader_id, *addr, exc)
                self.pool.discard(*addr)
                return False
            finally:
                link.waiting = None
        if resp is _INTERRUPTED:
            self.stats["interrupted"] += 1
            log.debug("fetch from broker %d interrupted: its partitions changed", leader_id)
            return None
        if resp is None:
            log.warning("fetch from broker %d timed out", leader_id)
            return False
        self.stats["fetches"] += 1
        code = resp.body.get("error", 0) or 0
        if code:
            log.info("fetch from broker %d refused: %s %s", leader_id, ErrorCode(code).name,
                     resp.body.get("message") or "")
            return False
        self.handle_response(leader_id, sent, resp.body, resp.raw)
        return True

    async def _request(self, link: _Link, waiting: trio.CancelScope, addr: tuple[str, int],
                       body: dict[str, Any]) -> Any:
        """Send ``body`` and wait for the answer; ``_INTERRUPTED`` if ``link`` was.

        Only the wait is interruptible: the request is written whole through the pool's
        connection (a frame cancelled half-written would break the shared connection), then
        abandoned if the link changed meanwhile."""
        conn = await self.pool.get(addr[0], addr[1])
        pending = await conn.send_request(ApiKey.FETCH, body)
        if link.changed:
            pending.abandon()
            return _INTERRUPTED
        link.waiting = waiting
        with waiting:
            return await pending.wait()
        return _INTERRUPTED

    # -- responses (synchronous: nothing may change between the checks and the appends) --------

    def handle_response(self, leader_id: int, sent: Mapping[TP, FollowerPartition],
                        body: Mapping[str, Any], raw: bytes | memoryview) -> None:
        raw = memoryview(raw)
        pos = 0
        for t in body.get("topics", ()):
            for entry in t.get("partitions", ()):
                n = int(entry.get("records_len") or 0)
                chunk = raw[pos:pos + n]
                pos += n
                tp = (t["name"], entry["partition"])
                p = self.partitions.get(tp)
                if p is None or p is not sent.get(tp) or p.leader_id != leader_id:
                    continue  # raced a metadata change: not ours to apply any more
                try:
                    self._handle_partition(p, entry, chunk)
                except Exception as exc:  # noqa: BLE001 - one bad partition must not stop the link
                    if isinstance(exc, StorageError) and p.failures > 0:
                        log.debug("%s/%d: follower append still failing: %s", *tp, exc)
                    elif isinstance(exc, StorageError):
                        log.warning("%s/%d: follower append failed, backing off and retrying "
                                    "(the log is unchanged): %s", *tp, exc)
                    else:
                        log.warning("%s/%d: follower fetch handling failed: %r", tp[0], tp[1], exc)
                    self._backoff(p)

    def _handle_partition(self, p: FollowerPartition, entry: Mapping[str, Any],
                          chunk: memoryview) -> None:
        code = ErrorCode(entry.get("error", 0) or 0)
        plog = p.log
        if code == ErrorCode.NONE:
            div = entry.get("diverging_epoch")
            if div:
                self._truncate(p, EpochEndOffset.from_dict(div))
                return
            if len(chunk):
                info = plog.append_as_follower(chunk)
                p.unsynced = self.needs_sync is None or self.needs_sync(p.tp)
                self.stats["appended_batches_bytes"] += len(chunk)
                if p.throttle_bytes_per_s:
                    self._throttle(p, len(chunk))
                if self.on_append is not None:
                    self.on_append(p.tp, info)
            p.failures = 0
            leader_hw = int(entry.get("high_watermark", -1))
            if leader_hw >= 0:
                self._set_hw(p, min(leader_hw, plog.log_end_offset))
            leader_start = int(entry.get("log_start_offset", -1))
            if leader_start > plog.log_start_offset:  # the leader deleted records (DeleteRecords)
                plog.delete_records_before(min(leader_start, plog.log_end_offset))
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = int(entry.get("log_start_offset", -1))
            leader_end = int(entry.get("log_end_offset", -1))
            leo = plog.log_end_offset
            if 0 <= leader_start and leo < leader_start:
                log.warning("%s/%d: our end %d is below the leader's log start %d: restarting "
                            "the log there", *p.tp, leo, leader_start)
                plog.truncate_fully_and_start_at(leader_start)
                self._after_truncate(p, leo, leader_start)
                return
            if 0 <= leader_end < leo:
                log.warning("%s/%d: our end %d is above the leader's end %d without epoch "
                            "evidence: truncating to it", *p.tp, leo, leader_end)
                plog.truncate_to(leader_end)
                self._after_truncate(p, leo, leader_end)
                return
        level = logging.DEBUG if p.failures and code in _WAIT_FOR_METADATA else logging.INFO
        log.log(level, "%s/%d: fetch from leader %d: %s %s (retry in %d ms)", *p.tp, p.leader_id,
                code.name, entry.get("message") or "", self._delay_ms(p.failures + 1))
        self._backoff(p)

    def _truncate(self, p: FollowerPartition, div: EpochEndOffset) -> None:
        plog = p.log
        leo = plog.log_end_offset
        t = truncation_offset(plog.epochs, leo, div)
        if t.offset < leo:
            plog.truncate_to(t.offset)
        else:
            plog.epochs.truncate_from_end(t.offset)  # an empty trailing epoch
        log.info("%s/%d: diverging epoch %s from leader %d (epoch %d): truncated %d -> %d%s",
                 *p.tp, div, p.leader_id, p.leader_epoch, leo, plog.log_end_offset,
                 "" if t.complete else " (and asking again)")
        self._after_truncate(p, leo, plog.log_end_offset)

    def _after_truncate(self, p: FollowerPartition, from_offset: int, to_offset: int) -> None:
        self.stats["truncations"] += 1
        if p.high_watermark > to_offset:
            self._set_hw(p, to_offset)
        if self.on_truncate is not None:
            self.on_truncate(p.tp, from_offset, to_offset, p.leader_epoch)

    def _set_hw(self, p: FollowerPartition, hw: int) -> None:
        if hw != p.high_watermark:
            p.high_watermark = hw
            if self.on_high_watermark is not None:
                self.on_high_watermark(p.tp, hw)

    def _backoff(self, p: FollowerPartition) -> None:
        p.failures += 1
        p.backoff_until = trio.current_time() + self._delay_ms(p.failures) / 1000

    def statistics(self) -> dict[str, Any]:
        return {**self.stats, "partitions": len(self.partitions), "links": len(self._links)}
