"""DELETE_RECORDS on a partition leader: Kafka's DeleteRecords, natively.

Theory of operation: per partition of the request this broker must lead, the offset (``-1``:
the high watermark) must lie within ``[log start, high watermark]`` (else OFFSET_OUT_OF_RANGE,
as Kafka: a record not yet committed cannot be deleted), and the topic must have the
``delete`` cleanup policy (a compact-only topic: POLICY_VIOLATION, as Kafka). The leader's log
start offset then moves there (``PartitionLog.delete_records_before``: checkpointed, whole
segments below deleted). Followers learn it from the ``log_start_offset`` of their next fetch
answer and move theirs too (``broker/replication/fetcher.py``), and every follower fetch
reports the follower's own log start back (``FETCH`` ``log_start_offset``). As Kafka does, the
answer waits until the partition's *low watermark* — the smallest log start offset of the
leader and its in-sync followers (``Partition.low_watermark``) — has reached the offset, and
answers that low watermark: once a DeleteRecords is answered, no in-sync replica still serves
the deleted records. The wait is bounded by the request's ``timeout_ms`` (default
``DEFAULT_TIMEOUT_MS``); past it the partition answers REQUEST_TIMED_OUT (the leader's log
start has moved all the same), and a leader that loses its leadership meanwhile answers
NOT_LEADER_OR_FOLLOWER. The move wakes the followers' parked fetches, and a follower fetch
that reports a log start below the leader's is answered at once, so the wait is two quick
fetch round trips rather than a long poll (``bench/delete_records_wait.py``). The deletion
itself runs on the event loop, as retention does (a checkpoint write and renames).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
from rafka.broker.handlers.data import fail_entry
from rafka.broker.partition import Partition
from rafka.broker.replica_manager import ReplicaManager
from rafka.wire.errors import ErrorCode

__all__ = ["delete_records", "DEFAULT_TIMEOUT_MS"]

DEFAULT_TIMEOUT_MS = 10_000  # below the clients' request timeouts (30 s)


async def delete_records(rm: ReplicaManager, body: Mapping[str, Any]) -> dict[str, Any]:
    waiting: list[tuple[dict[str, Any], Partition, int]] = []
    out = []
    for t in body["topics"]:
        parts: list[dict[str, Any]] = []
        out.append({"name": t["name"], "partitions": parts})
        for pd in t["partitions"]:
            entry: dict[str, Any] = {"partition": pd["partition"], "error": 0, "message": None,
                                     "low_watermark": -1}
            parts.append(entry)
            try:
                p = rm.get_leader(t["name"], pd["partition"])
                offset = pd["offset"]
                hw = p.high_watermark
                target = hw if offset == -1 else offset
                if not 0 <= target <= hw:
                    entry.update(error=int(ErrorCode.OFFSET_OUT_OF_RANGE), message=(
                        f"offset {offset} is above the high watermark {hw} (or negative)"))
                elif not p.log.config.delete:
                    entry.update(error=int(ErrorCode.POLICY_VIOLATION), message=(
                        "records cannot be deleted from a topic without cleanup.policy=delete"))
                else:  # an offset already below the log start is a no-op, as Kafka
                    waiting.append((entry, p, p.delete_records_before(target)))
            except Exception as exc:  # noqa: BLE001 - mapped per partition
                fail_entry(entry, exc)
    timeout_ms = body.get("timeout_ms")
    with trio.move_on_after((DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms) / 1000):
        for _entry, p, start in waiting:
            await _wait_low_watermark(p, start)
    for entry, p, start in waiting:
        low = p.low_watermark()
        if not p.is_leader:
            entry.update(error=int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                         message=f"{p.name}: no longer the leader")
        elif low < start:
            entry.update(error=int(ErrorCode.REQUEST_TIMED_OUT), message=(
                f"{p.name}: the in-sync replicas' log start offsets did not all reach {start} "
                f"in time (lowest known: {low}); the leader's has"))
        else:
            entry["low_watermark"] = low
    return {"topics": out}


async def _wait_low_watermark(p: Partition, start: int) -> None:
    """Until every in-sync replica's log start is at least ``start`` (or ``p`` stops leading)."""
    while p.is_leader and p.low_watermark() < start:
        await p.starts_changed.wait()
