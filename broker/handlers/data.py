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

FETCH reads whole batches (``FetchSlice``: owned fd + position + length) per partition, up to
the high watermark for consumers and the log end offset for followers, bounded by
``partition_max_bytes`` and the response's ``max_bytes`` (the first batch is always whole, as
KIP-74). Until ``min_bytes`` are available it long-polls: it sleeps on the partitions'
``changed`` events (set on append, flush and HW moves) until one fires or ``max_wait_ms``
passes, then reads again. The reply's raw parts are the slices, written with ``sendfile``.
A follower fetch (``replica_id >= 0``) also reports the follower's position to the leader state
and is answered with ``diverging_epoch`` instead of data when its last fetched epoch shows
that its log diverged (KIP-101/279 via ``broker.replication.epochs``). A follower naming an older
broker epoch than its registration in our metadata gets ``STALE_BROKER_EPOCH`` (a zombie
incarnation); one whose registration we do not know, or know fenced, is served but never
proposed into the ISR (``isr_eligible``, KIP-841/903).

LIST_OFFSETS: ``-2`` earliest (log start), ``-1`` latest (high watermark; log end for
followers), ``>= 0`` the first offset whose timestamp is at least that (below the HW).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from broker.error_map import wire_error
from broker.errors import ErrorCode, RafkaError
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from broker.replication.epochs import find_divergence
from broker.server import Reply
from log.errors import DuplicateSequenceError
from log.partition_log import FetchSlice

__all__ = ["produce", "fetch", "list_offsets"]


def _err(code: int | ErrorCode, message: str = "") -> dict[str, Any]:
    return {"error": int(code), "message": message or ErrorCode(code).name}


# --------------------------------------------------------------------------- produce


async def produce(rm: ReplicaManager, body: Mapping[str, Any]) -> dict[str, Any] | None:
    acks = body["acks"]
    if acks not in (0, 1, -1):
        return None if acks == 0 else _err(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} (use 0, 1 or -1)")
    out: list[dict[str, Any]] = []
    waits: list[tuple[dict[str, Any], Partition, int, int]] = []
    for t in body["topics"]:
        parts: list[dict[str, Any]] = []
        out.append({"name": t["name"], "partitions": parts})
        for pd in t["partitions"]:
            entry: dict[str, Any] = {"partition": pd["partition"], "error": 0, "message": None,
                                     "base_offset": -1, "log_append_time": -1,
                                     "log_start_offset": -1}
            parts.append(entry)
            try:
                p = rm.get_leader(t["name"], pd["partition"], pd.get("current_leader_epoch"))
                epoch = p.leader_epoch
                info = rm.append(p, pd["records"], acks)
            except DuplicateSequenceError as exc:
                # the original's offsets; its answer still waits for the acks it asked for
                entry["base_offset"] = exc.base_offset
                waits.append((entry, p, exc.last_offset, epoch))
                continue
            except Exception as exc:  # noqa: BLE001 - mapped per partition
                code, msg = wire_error(exc)
                entry.update(error=int(code), message=msg)
                if isinstance(exc, RafkaError) and "leader_id" in exc.details:
                    entry["leader_id"] = exc.details["leader_id"]
                continue
            entry.update(base_offset=info.base_offset, log_append_time=info.log_append_time,
                         log_start_offset=p.log.log_start_offset)
            # A duplicate (idempotent retry) answers with the original's offsets, but only once
            # those are as replicated/durable as this request's acks ask (as Kafka's purgatory):
            # the original may still be waiting for the ISR.
            waits.append((entry, p, info.last_offset, epoch))
    if acks == 0:
        return None
    with trio.move_on_after(max(0, body["timeout_ms"]) / 1000):
        for entry, p, last, epoch in waits:
            code = await p.wait_produce(last, acks, epoch)
            entry["error"] = int(code)
            if code:
                entry["message"] = f"{p.name}: {code.name}"
            entry["done"] = True
    for entry, p, _, _ in waits:
        if not entry.pop("done", False):
            entry.update(error=int(ErrorCode.REQUEST_TIMED_OUT),
                         message=f"{p.name}: not replicated/durable within timeout_ms")
    return {"topics": out}


# --------------------------------------------------------------------------- fetch


class _FetchState:
    def __init__(self, rm: ReplicaManager, body: Mapping[str, Any]) -> None:
        self.rm = rm
        self.replica_id: int = body["replica_id"]
        self.broker_epoch: int = body.get("broker_epoch") or -1
        self.max_bytes: int = max(0, body["max_bytes"])
        self.min_bytes: int = max(0, body["min_bytes"])
        self.topics = body["topics"]
        self.isr_eligible = False
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
                                 "log_end_offset": -1, "diverging_epoch": None, "records_len": 0}
        try:
            p = self.rm.get_leader(topic, pd["partition"], pd.get("current_leader_epoch"))
        except RafkaError as exc:
            entry.update(error=int(exc.code), message=exc.message)
            if "leader_id" in exc.details:
                entry["leader_id"] = exc.details["leader_id"]
            return entry, None, None
        offset = pd["fetch_offset"]
        sl = None
        try:
            if not self.consumer:
                diverging = self._follower_check(p, offset, pd.get("last_fetched_epoch"))
                if diverging is not None:
                    entry["diverging_epoch"] = diverging
                    return self._positions(entry, p), None, p
            if budget > 0:
                sl = p.read(offset, budget, consumer=self.consumer)
            elif not p.log.log_start_offset <= offset <= p.log.log_end_offset:
                p.read(offset, 1, consumer=self.consumer)  # raises out of range
        except Exception as exc:  # noqa: BLE001 - mapped per partition
            code, msg = wire_error(exc)
            entry.update(error=int(code), message=msg)
        if sl is not None:
            entry["records_len"] = sl.length
        return self._positions(entry, p), sl, p

    def _follower_check(self, p: Partition, offset: int, last_epoch: int | None) -> dict[str, int] | None:
        if last_epoch is not None and last_epoch >= 0:
            div = find_divergence(p.log.epochs, p.log.log_end_offset, offset, last_epoch)
            if div is not None:
                return div.to_dict()
        p.on_follower_fetch(self.replica_id, offset, self.broker_epoch, self.isr_eligible)
        return None

    @staticmethod
    def _positions(entry: dict[str, Any], p: Partition) -> dict[str, Any]:
        entry.update(high_watermark=p.high_watermark, log_start_offset=p.log.log_start_offset,
                     log_end_offset=p.log.log_end_offset)
        return entry


async def fetch(rm: ReplicaManager, body: Mapping[str, Any]) -> Reply:
    st = _FetchState(rm, body)
    stale = st.stale_broker_epoch()
    if stale is not None:
        return Reply({**_err(ErrorCode.STALE_BROKER_EPOCH, stale), "topics": []}, [])
    max_wait_s = max(0, body["max_wait_ms"]) / 1000
    deadline = trio.current_time() + max_wait_s
    while True:
        out, slices, total, parts, errors = st.read_all()
        now = trio.current_time()
        if total >= max(st.min_bytes, 1) or errors or now >= deadline or not parts:
            return Reply({"topics": out}, slices)
        for sl in slices:
            sl.close()
        events = [p.hw_changed if st.consumer else p.data_changed for p in parts]
        with trio.move_on_at(deadline):
            await _wait_any(events)


async def _wait_any(events: list[trio.Event]) -> None:
    if len(events) == 1:
        await events[0].wait()
        return
    async with trio.open_nursery() as nursery:
        async def waiter(ev: trio.Event) -> None:
            await ev.wait()
            nursery.cancel_scope.cancel()

        for ev in events:
            nursery.start_soon(waiter, ev)


# --------------------------------------------------------------------------- list offsets


def list_offsets(rm: ReplicaManager, body: Mapping[str, Any]) -> dict[str, Any]:
    replica = (body.get("replica_id") or -1) >= 0
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
                    entry["offset"] = p.log.log_end_offset if replica else p.high_watermark
                elif ts >= 0:
                    found = p.log.offset_for_timestamp(ts, None if replica else p.high_watermark)
                    if found is not None:
                        entry["offset"], entry["timestamp"] = found
                else:
                    entry.update(error=int(ErrorCode.INVALID_REQUEST), message=f"bad timestamp {ts}")
            except Exception as exc:  # noqa: BLE001 - mapped per partition
                code, msg = wire_error(exc)
                entry.update(error=int(code), message=msg)
    return {"topics": out}

