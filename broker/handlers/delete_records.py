"""DELETE_RECORDS on a partition leader: Kafka's DeleteRecords, natively.

Theory of operation: per partition of the request this broker must lead, the offset (``-1``:
the high watermark) must lie within ``[log start, high watermark]`` (else OFFSET_OUT_OF_RANGE,
as Kafka: a record not yet committed cannot be deleted), and the topic must have the
``delete`` cleanup policy (a compact-only topic: POLICY_VIOLATION, as Kafka). The leader's log
start offset then moves there (``PartitionLog.delete_records_before``: checkpointed, whole
segments below deleted) and the answer is the partition's new ``low_watermark``. Followers
learn it from the ``log_start_offset`` of their next fetch answer and move theirs too
(``broker/replication/fetcher.py``); the leader does not wait for them (Kafka does: its low
watermark is the lowest of the replicas'), so a follower may still hold the deleted records for
a fetch round. Runs on the event loop, as retention does (a checkpoint write and renames).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rafka.broker.handlers.data import fail_entry
from rafka.broker.replica_manager import ReplicaManager
from rafka.wire.errors import ErrorCode

__all__ = ["delete_records"]


def delete_records(rm: ReplicaManager, body: Mapping[str, Any]) -> dict[str, Any]:
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
                    entry["low_watermark"] = p.log.delete_records_before(target)
            except Exception as exc:  # noqa: BLE001 - mapped per partition
                fail_entry(entry, exc)
    return {"topics": out}
