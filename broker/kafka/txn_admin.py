"""Kafka's transaction admin APIs on rafka's coordinators and partition leaders.

Theory of operation: as every adapter (``apis.py``), one native request each, answered by
the same node parts as for the msgpack listener:

* DescribeProducers (61) → native DESCRIBE_PRODUCERS: the producers a partition's leader
  tracks (its producer state), each with its open transaction's first offset (−1: none); the
  coordinator epoch of a producer is not kept by a rafka leader (answered −1).
* DescribeTransactions (65) → native DESCRIBE_TRANSACTIONS: ids this broker coordinates
  (others: NOT_COORDINATOR, as Kafka; clients find the coordinator first).
* ListTransactions (66) → native LIST_TRANSACTIONS: the ids this broker coordinates (clients
  ask every broker); state filters Kafka does not know are answered in
  ``unknown_state_filters``, producer id filters are applied here.
"""

from __future__ import annotations

import datetime
from typing import Any

from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import KafkaContext, call_native, kafka_error
from rafka.wire.protocol import ApiKey

__all__ = ["describe_producers", "describe_transactions", "list_transactions"]

KAFKA_TXN_STATES = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                              "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"})


async def describe_producers(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    native = await call_native(ctx, req, ApiKey.DESCRIBE_PRODUCERS, {"topics": [
        {"name": t.name, "partitions": list(t.partition_indexes)} for t in b.topics]})
    answers = {(t["name"], p["partition"]): p for t in native.get("topics") or []
               for p in t["partitions"]}
    top = {"error": native.get("error") or 3, "message": native.get("message")}
    out = []
    for t in b.topics:
        parts = []
        for i in t.partition_indexes:
            a = answers.get((t.name, i), top)
            err = kafka_error(a.get("error"))
            parts.append({"partition_index": i, "error_code": err,
                          "error_message": a.get("message") if err else None,
                          "active_producers": [] if err else [
                              {"producer_id": x["producer_id"],
                               "producer_epoch": x.get("producer_epoch", -1),
                               "last_sequence": x.get("last_sequence", -1),
                               "last_timestamp": x.get("last_timestamp", -1),
                               "coordinator_epoch": -1,
                               "current_txn_start_offset": -1 if x.get("txn_first_offset") is None
                               else x["txn_first_offset"]}
                              for x in a.get("producers") or []]})
        out.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": out}


def _when(ms_since_epoch: int | None) -> datetime.datetime:
    return datetime.datetime.fromtimestamp((-1 if ms_since_epoch is None else ms_since_epoch)
                                           / 1000, datetime.UTC)


async def describe_transactions(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    ids = list(req.body.transactional_ids)
    native = await call_native(ctx, req, ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ids})
    by_id = {t["transactional_id"]: t for t in native.get("transactions") or []}
    out = []
    for i in ids:
        t = by_id.get(i, {"error": native.get("error") or -1})
        err = kafka_error(t.get("error"))
        out.append({"error_code": err, "transactional_id": i,
                    "transaction_state": t.get("state", "") if not err else "",
                    "transaction_timeout": t.get("timeout_ms", 0) if not err else 0,
                    "transaction_start_time": _when(t.get("txn_start_ms") if not err else -1),
                    "producer_id": t.get("producer_id", -1) if not err else -1,
                    "producer_epoch": t.get("producer_epoch", -1) if not err else -1,
                    "topics": [{"topic": p["name"], "partitions": p["partitions"]}
                               for p in t.get("partitions") or []] if not err else []})
    return {"throttle_time": 0, "transaction_states": out}


async def list_transactions(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    asked = list(b.state_filters)
    unknown = [s for s in asked if s not in KAFKA_TXN_STATES]
    known = [s for s in asked if s in KAFKA_TXN_STATES]
    if asked and not known:  # only states Kafka does not know: nothing matches
        return {"throttle_time": 0, "error_code": 0, "unknown_state_filters": unknown,
                "transaction_states": []}
    native = await call_native(ctx, req, ApiKey.LIST_TRANSACTIONS,
                               {"states": known} if known else {})
    pids = set(b.producer_id_filters)
    return {"throttle_time": 0, "error_code": kafka_error(native.get("error")),
            "unknown_state_filters": unknown, "transaction_states": [
                {"transactional_id": t["transactional_id"], "producer_id": t["producer_id"],
                 "transaction_state": t["state"]}
                for t in native.get("transactions") or []
                if not pids or t["producer_id"] in pids]}
