"""PRODUCE, FETCH and LIST_OFFSETS: the data plane of a broker.

Theory of operation
-------------------
PRODUCE appends every partition's payload first (synchronously, on the trio thread: one
``os.write`` each, CRCs checked by the log, nothing appended when any batch of the payload is
bad), then waits for each partition's outcome — durable (flush policy) for ``acks=1``,
replicated to the ISR *and* durable for ``acks=all`` — within ``timeout_ms``. All partitions'
waits overlap because the work they wait for (group-commit flush, follower fetches) runs
elsewhere; waiting for them one after the other costs nothing. ``acks=0`` answers nothing.
A duplicate idempotent batch answers with the original offsets, once those are as
replicated/durable as this request's acks ask. A partition entry may carry
``current_leader_epoch``: an older epoch than the leader's is ``FENCED_LEADER_EPOCH``, a newer
one ``UNKNOWN_LEADER_EPOCH`` (as for fetch). An answer whose leader epoch ended while it waited
is ``NOT_LEADER_OR_FOLLOWER`` (the offsets may since hold other records).

Transactions (docs/transactions.md, "Partition leader"): ``txn_flags`` ORs the attributes of a
payload's batches with two struct reads per batch, so a plain or idempotent payload costs
nothing more. A payload with a control batch is refused (``INVALID_RECORD``: markers come from
coordinators only), a transactional one without the request's ``transactional_id`` too
(``INVALID_REQUEST``). A transactional batch that would *open* a transaction on its partition
(its producer has none open there with that epoch) needs a verified ``VerificationGuard``
(KIP-890 part 1): before the append loop, the produce creates the guard and asks the
coordinator through the ``TxnVerifier`` (``broker/txn/opening.py``), all such
partitions concurrently and bounded by ``timeout_ms``; the answer counts only if the guard is
still in place afterwards (a marker for that producer removes it). The synchronous append loop
then checks again, and refuses with ``INVALID_TXN_STATE`` what still lacks a verified guard.

FETCH reads whole batches (``FetchSlice``: owned fd + position + length) per partition, up to
the high watermark for consumers and the log end offset for followers, bounded by
``partition_max_bytes`` and the response's ``max_bytes`` (the first batch is always whole, as
KIP-74). A slice of at most ``SMALL_REPLY_BYTES`` (a tailing follower's or consumer's usual
answer) carries the bytes the log already read to check their CRCs and goes out as bytes: no
``dup``/``close`` of the segment's fd and no second ``pread`` by the server. Until ``min_bytes`` are available it long-polls: it sleeps on the partitions'
signals (``broker/fetch_wait.py``: fired on append, flush and HW moves) until one fires or
``max_wait_ms`` passes, then reads again. The reply's raw parts are the slices, written with
``sendfile``.
A follower fetch (``replica_id >= 0``) also reports the follower's position to the leader state
and is answered with ``diverging_epoch`` instead of data when its last fetched epoch shows
that its log diverged (KIP-101/279 via ``rafka.broker.replication.epochs.verify_follower_fetch``,
which also refuses, with ``INVALID_REQUEST``, a position it cannot verify: no last fetched
epoch above the log start).
Only a verified position reaches the leader state, so only that can move the high watermark. A follower naming an older
broker epoch than its registration in our metadata gets ``STALE_BROKER_EPOCH`` (a zombie
incarnation); one whose registration we do not know, or know fenced, is served but never
proposed into the ISR (``isr_eligible``, KIP-841/903).

With ``isolation_level`` 1 (read_committed) a consumer is served only below the partition's last
stable offset, and each partition's answer carries ``aborted_transactions`` — ``[producer_id,
first_offset]`` of the aborted transactions overlapping the served range — for the client to
filter (see docs/transactions.md for why the broker does not). Every consumer answer carries
``last_stable_offset``.

LIST_OFFSETS: ``-3`` max timestamp (the first record with the log's largest timestamp, below
the high watermark), ``-4`` earliest local (= earliest: nothing is tiered), ``-5`` latest
tiered (offset -1: nothing is tiered), ``-2`` earliest (log start), ``-1`` latest (high watermark; log end for
followers; the LSO with ``isolation_level`` 1), ``>= 0`` the first offset whose timestamp is at
least that (below the HW, or the LSO with ``isolation_level`` 1).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio
from rafka.broker.detached import to_task
from rafka.broker.error_map import wire_error
from rafka.broker.fetch_wait import wait_any
from rafka.broker.partition import Partition
from rafka.broker.replica_manager import ReplicaManager
from rafka.broker.replication.epochs import verify_follower_fetch
from rafka.broker.server import SMALL_REPLY_BYTES, Reply
from rafka.broker.txn.opening import opens_transaction, verify_opening
from rafka.log.batch import CONTROL_BIT, HEADER_SIZE, TRANSACTIONAL_BIT, iter_batches
from rafka.log.errors import DuplicateSequenceError
from rafka.log.partition_log import FetchSlice
from rafka.wire.errors import ErrorCode, RafkaError, error_for

if TYPE_CHECKING:
    from rafka.broker.txn.opening import TxnVerifier

__all__ = ["produce", "fetch", "list_offsets", "txn_flags", "fail_entry", "wait_outcomes"]

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_TXN_BITS = TRANSACTIONAL_BIT | CONTROL_BIT
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")


def _err(code: int | ErrorCode, message: str = "") -> dict[str, Any]:
    return {"error": int(code), "message": message or ErrorCode(code).name}


def fail_entry(entry: dict[str, Any], exc: BaseException) -> None:
    """Put ``exc`` as a partition's wire error into its answer (with the leader hint if any)."""
    code, msg = wire_error(exc)
    entry.update(error=int(code), message=msg)
    if isinstance(exc, RafkaError) and "leader_id" in exc.details:
        entry["leader_id"] = exc.details["leader_id"]


def _bad_isolation(body: Mapping[str, Any]) -> str | None:
    level = body.get("isolation_level")
    if level is None or level in (READ_UNCOMMITTED, READ_COMMITTED):
        return None
    return f"isolation_level {level} (use 0 read_uncommitted or 1 read_committed)"


# --------------------------------------------------------------------------- produce


async def produce(rm: ReplicaManager, body: Mapping[str, Any],
                  verifier: TxnVerifier | None = None) -> dict[str, Any] | None:
    acks = body["acks"]
    if acks not in (0, 1, -1):
        return None if acks == 0 else _err(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} (use 0, 1 or -1)")
    deadline = trio.current_time() + max(0, body["timeout_ms"]) / 1000
    tid: str | None = body.get("transactional_id")
    out: list[dict[str, Any]] = []
    todo: list[tuple[dict[str, Any], str, Mapping[str, Any], int]] = []
    openings: list[_Opening] = []
    for t in body["topics"]:
        parts: list[dict[str, Any]] = []
        out.append({"name": t["name"], "partitions": parts})
        for pd in t["partitions"]:
            entry: dict[str, Any] = {"partition": pd["partition"], "error": 0, "message": None,
                                     "base_offset": -1, "log_append_time": -1,
                                     "log_start_offset": -1}
            parts.append(entry)
            flags = txn_flags(pd["records"])
            if flags:  # rare: transactional (or refused control) batches
                try:
                    p = rm.get_leader(t["name"], pd["partition"], pd.get("current_leader_epoch"))
                    openings += [_Opening(entry, p, pid, pe)
                                 for pid, pe in _unverified_openings(p, pd["records"], flags, tid)]
                except Exception as exc:  # noqa: BLE001 - mapped per partition
                    fail_entry(entry, exc)
                    continue
            todo.append((entry, t["name"], pd, flags))
    if openings:
        await to_task()  # a cancel scope and a network wait need a task (broker/detached.py)
        with trio.move_on_at(deadline):
            await _verify_openings(verifier, tid or "", openings)
        for o in openings:
            if not o.done and not o.entry["error"]:
                o.entry.update(error=int(ErrorCode.REQUEST_TIMED_OUT),
                               message=f"{o.p.name}: transaction not verified within timeout_ms")
    waits: list[tuple[dict[str, Any], Partition, int, int]] = []
    for entry, topic, pd, flags in todo:
        if entry["error"]:
            continue
        try:
            p = rm.get_leader(topic, pd["partition"], pd.get("current_leader_epoch"))
            epoch = p.leader_epoch
            if flags and _unverified_openings(p, pd["records"], flags, tid):
                raise error_for(ErrorCode.INVALID_TXN_STATE,
                                f"{p.name}: the producer's transaction is not verified to "
                                "include this partition (or its marker arrived meanwhile)")
            info = rm.append(p, pd["records"], acks)
        except DuplicateSequenceError as exc:
            # the original's offsets; its answer still waits for the acks it asked for
            entry["base_offset"] = exc.base_offset
            waits.append((entry, p, exc.last_offset, epoch))
            continue
        except Exception as exc:  # noqa: BLE001 - mapped per partition
            fail_entry(entry, exc)
            continue
        entry.update(base_offset=info.base_offset, log_append_time=info.log_append_time,
                     log_start_offset=p.log.log_start_offset)
        # A duplicate (idempotent retry) answers with the original's offsets, but only once
        # those are as replicated/durable as this request's acks ask (as Kafka's purgatory):
        # the original may still be waiting for the ISR.
        waits.append((entry, p, info.last_offset, epoch))
    if acks == 0:
        return None
    await wait_outcomes(waits, acks, deadline)
    return {"topics": out}


async def wait_outcomes(waits: list[tuple[dict[str, Any], Partition, int, int]], acks: int,
                        deadline: float) -> None:
    """Wait (until the trio time ``deadline``) for each appended partition's outcome —
    ``(answer entry, partition, last offset, leader epoch of the append)`` — and write it into
    the entry; what is still undecided at the deadline is ``REQUEST_TIMED_OUT``."""
    for entry, p, last, epoch in waits:
        # the deadline is the partition's to keep (broker/produce_wait.py): no cancel scope here
        code = await p.wait_produce(last, acks, epoch, deadline=deadline)
        entry["error"] = int(code)
        if code == ErrorCode.REQUEST_TIMED_OUT:
            entry["message"] = f"{p.name}: not replicated/durable within timeout_ms"
        elif code:
            entry["message"] = f"{p.name}: {code.name}"


# --------------------------------------------------------------------------- transactional produce


def txn_flags(records: bytes | bytearray | memoryview) -> int:
    """The transactional/control attribute bits of a produce payload's batches, OR-ed (0 for a
    plain or idempotent payload): two struct reads per batch, no header parse. A malformed
    payload stops the scan early; the log refuses such a payload whole."""
    flags = 0
    pos, n = 0, len(records)
    while n - pos >= HEADER_SIZE:
        (length,) = _INT32.unpack_from(records, pos + 8)
        (attributes,) = _INT16.unpack_from(records, pos + 21)
        flags |= attributes
        if length <= 0:
            break
        pos += 12 + length
    return flags & _TXN_BITS


def _unverified_openings(p: Partition, records: bytes, flags: int,
                         transactional_id: str | None) -> list[tuple[int, int]]:
    """``(producer_id, producer_epoch)`` of the payload's transactional batches that would open a
    transaction on ``p`` and hold no verified guard there. Raises for a control batch and for
    a transactional batch in a request without ``transactional_id``."""
    if flags & CONTROL_BIT:
        raise error_for(ErrorCode.INVALID_RECORD, f"{p.name}: control batches (transaction "
                                                  "markers) are written by coordinators only")
    if not transactional_id:
        raise error_for(ErrorCode.INVALID_REQUEST, f"{p.name}: transactional batch in a produce "
                                                   "request without transactional_id")
    out: list[tuple[int, int]] = []
    for _pos, h in iter_batches(records):
        if (h.is_transactional and (h.producer_id, h.producer_epoch) not in out
                and opens_transaction(p, h.producer_id, h.producer_epoch)):
            out.append((h.producer_id, h.producer_epoch))
    return out


class _Opening:
    """One (partition, producer, epoch) of a produce request that must be verified."""

    __slots__ = ("entry", "p", "producer_id", "producer_epoch", "done")

    def __init__(self, entry: dict[str, Any], p: Partition, producer_id: int,
                 producer_epoch: int) -> None:
        self.entry = entry
        self.p = p
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.done = False


async def _verify_openings(verifier: TxnVerifier | None, transactional_id: str,
                           openings: list[_Opening]) -> None:
    async with trio.open_nursery() as nursery:
        for o in openings:
            nursery.start_soon(_verify_one, verifier, transactional_id, o)


async def _verify_one(verifier: TxnVerifier | None, transactional_id: str, o: _Opening) -> None:
    code, message = await verify_opening(verifier, transactional_id, o.p, o.producer_id,
                                         o.producer_epoch)
    o.done = True
    if code and not o.entry["error"]:
        o.entry.update(error=int(code), message=message)


# --------------------------------------------------------------------------- fetch


class _FetchState:
    def __init__(self, rm: ReplicaManager, body: Mapping[str, Any]) -> None:
        self.rm = rm
        self.replica_id: int = body["replica_id"]
        self.broker_epoch: int = body.get("broker_epoch") or -1
        self.max_bytes: int = max(0, body["max_bytes"])
        self.min_bytes: int = max(0, body["min_bytes"])
        self.topics = body["topics"]
        self.committed = self.replica_id < 0 and body.get("isolation_level") == READ_COMMITTED
        self.isr_eligible = False
        self.start_behind = False  # read_all
        if self.replica_id >= 0:
            reg = rm.image.cluster.brokers.get(self.replica_id)
            # KIP-841/903: only a registered, unfenced broker in the incarnation the metadata
            # knows may be proposed into the ISR (a restarted broker whose re-registration we
            # have not seen yet still fetches, but waits to rejoin).
            self.isr_eligible = (reg is not None and not reg.fenced
                                 and reg.epoch == self.broker_epoch)

    @property
    def consumer(self) -> bool:
        return self.replica_id < 0

    def stale_broker_epoch(self) -> str | None:
        """Why a follower fetch must be refused with STALE_BROKER_EPOCH: it names an older
        registration of that broker than the metadata holds (a zombie incarnation)."""
        if self.replica_id < 0 or self.broker_epoch < 0:
            return None
        reg = self.rm.image.cluster.brokers.get(self.replica_id)
        if reg is not None and self.broker_epoch < reg.epoch:
            return (f"broker {self.replica_id} fetches with broker epoch {self.broker_epoch}; "
                    f"its current registration has epoch {reg.epoch}")
        return None

    def read_all(self) -> tuple[list[dict[str, Any]], list[FetchSlice], int, list[Partition], bool]:
        # a follower fetch whose follower reported a log start below ours: answered at once,
        # so the follower moves its log start and a waiting DeleteRecords completes
        self.start_behind = False
        out: list[dict[str, Any]] = []
        slices: list[FetchSlice] = []
        parts: list[Partition] = []
        total = 0
        errors = False
        for t in self.topics:
            entries: list[dict[str, Any]] = []
            out.append({"name": t["name"], "partitions": entries})
            for pd in t["partitions"]:
                budget = min(pd["partition_max_bytes"], self.max_bytes - total)
                entry, sl, p = self._read_one(t["name"], pd, budget if total else max(budget, 1))
                entries.append(entry)
                if p is not None:
                    parts.append(p)
                if entry["error"]:
                    errors = True
                if sl is not None:
                    slices.append(sl)
                    total += sl.length
        return out, slices, total, parts, errors

    def _read_one(self, topic: str, pd: Mapping[str, Any], budget: int
                  ) -> tuple[dict[str, Any], FetchSlice | None, Partition | None]:
        entry: dict[str, Any] = {"partition": pd["partition"], "error": 0, "message": None,
                                 "high_watermark": -1, "log_start_offset": -1,
                                 "log_end_offset": -1, "diverging_epoch": None, "records_len": 0,
                                 "last_stable_offset": -1, "aborted_transactions": None}
        try:
            p = self.rm.get_leader(topic, pd["partition"], pd.get("current_leader_epoch"))
        except RafkaError as exc:
            fail_entry(entry, exc)
            return entry, None, None
        offset = pd["fetch_offset"]
        sl = None
        try:
            if not self.consumer:
                start = pd.get("log_start_offset")  # the follower's; None: not reported
                diverging = self._follower_check(p, offset, pd.get("last_fetched_epoch"), start)
                if start is not None and 0 <= start < p.log.log_start_offset:
                    self.start_behind = True
                if diverging is not None:
                    entry["diverging_epoch"] = diverging
                    return self._positions(entry, p), None, p
            if budget > 0:
                sl = p.read(offset, budget, consumer=self.consumer, committed=self.committed,
                            inline_max_bytes=SMALL_REPLY_BYTES)
            elif not p.log.log_start_offset <= offset <= p.log.log_end_offset:
                p.read(offset, 1, consumer=self.consumer)  # raises out of range
            if self.committed:
                entry["aborted_transactions"] = [] if sl is None else [
                    [pid, first] for pid, first in p.log.collect_aborted(offset, sl.last_offset + 1)]
        except Exception as exc:  # noqa: BLE001 - mapped per partition
            fail_entry(entry, exc)
        if sl is not None:
            entry["records_len"] = sl.length
        return self._positions(entry, p), sl, p

    def _follower_check(self, p: Partition, offset: int, last_epoch: int | None,
                        log_start: int | None = None) -> dict[str, int] | None:
        """The leader's verdict on this follower fetch (``verify_follower_fetch``): the
        diverging epoch to answer, or None after reporting the verified position — never an
        unverified one — to the leader state."""
        verdict = verify_follower_fetch(p.log.epochs, p.log.log_start_offset,
                                        p.log.log_end_offset, offset, last_epoch)
        if verdict.refused is not None:
            raise error_for(ErrorCode.INVALID_REQUEST, f"{p.name}: {verdict.refused}")
        if verdict.diverging is not None:
            return verdict.diverging.to_dict()
        if verdict.position is not None:
            p.on_follower_fetch(self.replica_id, verdict.position, self.broker_epoch,
                                self.isr_eligible, -1 if log_start is None else log_start)
        return None

    def _positions(self, entry: dict[str, Any], p: Partition) -> dict[str, Any]:
        entry.update(high_watermark=p.high_watermark, log_start_offset=p.log.log_start_offset,
                     log_end_offset=p.log.log_end_offset)
        if self.consumer:
            entry["last_stable_offset"] = p.last_stable_offset
        return entry


async def fetch(rm: ReplicaManager, body: Mapping[str, Any]) -> Reply:
    bad = _bad_isolation(body)
    if bad is not None:
        return Reply({**_err(ErrorCode.INVALID_REQUEST, bad), "topics": []}, [])
    st = _FetchState(rm, body)
    stale = st.stale_broker_epoch()
    if stale is not None:
        return Reply({**_err(ErrorCode.STALE_BROKER_EPOCH, stale), "topics": []}, [])
    max_wait_s = max(0, body["max_wait_ms"]) / 1000
    deadline = trio.current_time() + max_wait_s
    while True:
        out, slices, total, parts, errors = st.read_all()
        now = trio.current_time()
        if (total >= max(st.min_bytes, 1) or errors or now >= deadline or not parts
                or st.start_behind):
            # small slices already hold their bytes (read for the CRC check): sent as they are
            return Reply({"topics": out},
                         [sl if sl.data is None else sl.data for sl in slices])
        for sl in slices:
            sl.close()
        await wait_any([p.hw_changed if st.consumer else p.data_changed for p in parts],
                       deadline)


# --------------------------------------------------------------------------- list offsets


def list_offsets(rm: ReplicaManager, body: Mapping[str, Any]) -> dict[str, Any]:
    bad = _bad_isolation(body)
    if bad is not None:
        return {**_err(ErrorCode.INVALID_REQUEST, bad), "topics": []}
    replica = (body.get("replica_id") or -1) >= 0
    committed = not replica and body.get("isolation_level") == READ_COMMITTED
    out = []
    for t in body["topics"]:
        parts = []
        out.append({"name": t["name"], "partitions": parts})
        for pd in t["partitions"]:
            entry: dict[str, Any] = {"partition": pd["partition"], "error": 0, "message": None,
                                     "offset": -1, "timestamp": -1, "leader_epoch": -1}
            parts.append(entry)
            try:
                p = rm.get_leader(t["name"], pd["partition"], pd.get("current_leader_epoch"))
                entry["leader_epoch"] = p.leader_epoch
                ts = pd["timestamp"]
                if ts == -2:
                    entry["offset"] = p.log.log_start_offset
                elif ts == -1:
                    entry["offset"] = (p.log.log_end_offset if replica else
                                       p.last_stable_offset if committed else p.high_watermark)
                elif ts >= 0:
                    bound = (None if replica else
                             p.last_stable_offset if committed else p.high_watermark)
                    found = p.log.offset_for_timestamp(ts, bound)
                    if found is not None:
                        entry["offset"], entry["timestamp"] = found
                elif ts == -3:  # max timestamp (KIP-734): the first record carrying it
                    bound = (None if replica else
                             p.last_stable_offset if committed else p.high_watermark)
                    top = max((seg.max_timestamp for seg in p.log.segments), default=-1)
                    found = p.log.offset_for_timestamp(top, bound) if top >= 0 else None
                    if found is not None:
                        entry["offset"], entry["timestamp"] = found
                elif ts == -4:  # earliest local (KIP-405): no tiered storage, the log start
                    entry["offset"] = p.log.log_start_offset
                elif ts == -5:  # latest tiered (KIP-1005): nothing is tiered, none
                    pass
                else:
                    entry.update(error=int(ErrorCode.INVALID_REQUEST), message=f"bad timestamp {ts}")
            except Exception as exc:  # noqa: BLE001 - mapped per partition
                fail_entry(entry, exc)
    return {"topics": out}

