"""LIST_OFFSETS for the consumer and the admin: earliest, latest, by time.

``list_offsets(core, {tp: timestamp})`` groups the partitions by leader (one request per
broker, concurrently), retries partitions whose leader moved after a metadata refresh (up to
``attempts`` rounds, with backoff), and returns ``{tp: (offset, timestamp)}``. Timestamp
``-2`` = earliest (log start), ``-1`` = latest (high watermark; with ``isolation_level=1``,
read_committed, the last stable offset), ``≥ 0`` = first offset whose timestamp is ≥ it (offset
-1 when there is none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
from rafka.client.aio._core import REFRESH_CODES, ClientCore
from rafka.client.types import TopicPartition
from rafka.wire.connection import backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey

__all__ = ["EARLIEST", "LATEST", "list_offsets"]

EARLIEST = -2
LATEST = -1


async def list_offsets(core: ClientCore, wanted: Mapping[TopicPartition, int], *,
                       attempts: int = 10, isolation_level: int = 0) -> dict[TopicPartition, tuple[int, int]]:
    todo = dict(wanted)
    out: dict[TopicPartition, tuple[int, int]] = {}
    last: RafkaError | None = None
    for attempt in range(attempts):
        if not todo:
            return out
        if attempt or any(core.metadata.leader(tp) < 0 for tp in todo):
            if attempt:
                await trio.sleep(backoff_ms(attempt - 1, core.retry_backoff_ms, 1000) / 1000)
            core.invalidate()
            try:
                await core.refresh_metadata({tp.topic for tp in todo})
            except RafkaError as exc:
                last = exc
                continue
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp, ts in todo.items():
            leader = core.metadata.leader(tp)
            if leader < 0:
                code = core.metadata.topic_errors.get(tp.topic)
                if code and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # e.g. not authorized
                    raise error_for(code, f"{tp.topic}-{tp.partition}: {ErrorCode(code).name.lower()}")
                if code or (
                        tp.topic in core.metadata.topics and tp.partition not in core.metadata.topics[tp.topic]):
                    raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition} does not exist")
                last = error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp.topic}-{tp.partition} has no leader")
                continue
            by_node.setdefault(leader, {})[tp] = ts
        errors: list[RafkaError] = []

        async def one(node: int, parts: dict[TopicPartition, int], errors: list[RafkaError]) -> None:
            topics: dict[str, list[dict[str, Any]]] = {}
            for tp, ts in parts.items():
                topics.setdefault(tp.topic, []).append({"partition": tp.partition, "timestamp": ts})
            body: dict[str, Any] = {"replica_id": -1,
                                    "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}
            if isolation_level:
                body["isolation_level"] = isolation_level
            try:
                resp = await core.request_node(node, ApiKey.LIST_OFFSETS, body)
                resp.raise_for_error()
            except RafkaError as exc:
                errors.append(exc)
                return
            for t in resp.body.get("topics") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["name"], int(p["partition"]))
                    code = p.get("error") or 0
                    if code:
                        err = error_for(code, f"{tp.topic}-{tp.partition}: {p.get('message') or ''}")
                        if code in REFRESH_CODES or err.retriable:
                            core.metadata.invalidate_leader(tp)
                        errors.append(err)
                        continue
                    off = p.get("offset")
                    out[tp] = (-1 if off is None else int(off), int(p.get("timestamp") or -1))
                    todo.pop(tp, None)

        async with trio.open_nursery() as nursery:
            for node, parts in by_node.items():
                nursery.start_soon(one, node, parts, errors)
        for err in errors:
            if not (err.retriable or err.code in REFRESH_CODES):
                raise err
            last = err
    if todo:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in list(todo)[:5])
        raise last or error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"no offsets for {names}")
    return out
