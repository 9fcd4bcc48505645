"""Kafka's transaction APIs mapped onto rafka's transaction coordinator (docs/transactions.md).

Theory of operation: rafka already has Kafka's transaction model — a coordinator per
transactional id (leader of its ``__transaction_state`` partition), partitions and group
offsets added to the transaction, markers written by the coordinator, KIP-890 verification on
the partition leaders — so each Kafka request is one native request with the same fields:
AddPartitionsToTxn (v0-3: the client's form; v4+ is the brokers' batched form, not served),
AddOffsetsToTxn, EndTxn and TxnOffsetCommit (offsets pending until the marker). InitProducerId
with a transactional id and Produce with one are in ``apis.py``; FindCoordinator with key type
1 finds the coordinator. The batches a Kafka producer writes keep their transactional bit and
producer fields through the conversion (``records.py``), and a Kafka read_committed fetch gets
the native answer's aborted transactions, so a transaction works the same whichever protocol
wrote it.
"""

from __future__ import annotations

from typing import Any

from rafka.broker.kafka import groups
from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import call_native, commit_error, kafka_error
from rafka.wire.protocol import ApiKey

__all__ = ["add_partitions_to_txn", "add_offsets_to_txn", "end_txn", "txn_offset_commit"]

COORDINATOR_NOT_AVAILABLE = 15


async def add_partitions_to_txn(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    b = req.body
    topics = [{"name": t.name, "partitions": list(t.partitions)} for t in b.v3_and_below_topics]
    native = await call_native(ctx, req, ApiKey.ADD_PARTITIONS_TO_TXN, {
        "transactional_id": b.v3_and_below_transactional_id,
        "producer_id": b.v3_and_below_producer_id,
        "producer_epoch": b.v3_and_below_producer_epoch, "topics": topics})
    answers = {(t["name"], p["partition"]): p.get("error") for t in native.get("topics") or []
               for p in t["partitions"]}
    top = native.get("error") or 0
    return {"throttle_time": 0, "results_by_topic_v3_and_below": [
        {"name": t["name"], "results_by_partition": [
            {"partition_index": p, "partition_error_code": kafka_error(
                answers.get((t["name"], p), top) or top)} for p in t["partitions"]]}
        for t in topics]}


async def add_offsets_to_txn(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    b = req.body
    body = {"transactional_id": b.transactional_id, "producer_id": b.producer_id,
            "producer_epoch": b.producer_epoch, "group_id": b.group_id}
    native = await call_native(ctx, req, ApiKey.ADD_OFFSETS_TO_TXN, body)
    if native.get("error") == COORDINATOR_NOT_AVAILABLE:
        # no __consumer_offsets yet: Kafka adds the group's partition without it; rafka's
        # FIND_COORDINATOR of the group creates it (as the node), then the add is retried once
        await call_native(ctx, req, ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": [b.group_id]})
        native = await call_native(ctx, req, ApiKey.ADD_OFFSETS_TO_TXN, body)
    return {"throttle_time": 0, "error_code": kafka_error(native.get("error"))}


async def end_txn(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    b = req.body
    native = await call_native(ctx, req, ApiKey.END_TXN, {
        "transactional_id": b.transactional_id, "producer_id": b.producer_id,
        "producer_epoch": b.producer_epoch, "commit": bool(b.committed)})
    return {"throttle_time": 0, "error_code": kafka_error(native.get("error"))}


async def txn_offset_commit(ctx: Any, req: KafkaRequest) -> dict[str, Any]:

    b = req.body
    body: dict[str, Any] = {
        "transactional_id": b.transactional_id, "group_id": b.group_id,
        "producer_id": b.producer_id, "producer_epoch": b.producer_epoch, "member_epoch": -1,
        "topics": groups.commit_topics(b)}
    generation = getattr(b, "generation_id", -1)
    fenced = groups.fenced_commit_answer(ctx, b, generation)
    if fenced is not None:
        return fenced
    if generation >= 0:  # a classic member's consume-transform-produce (KIP-447)
        member = groups.commit_member(ctx, b.group_id, b.member_id)
        body.update(member_id=b.member_id, member_epoch=generation)
        if member is not None:
            body["member_epoch"] = member.epoch
            if member.metadata_offset is not None:
                body["min_metadata_offset"] = member.metadata_offset
    native = await call_native(ctx, req, ApiKey.TXN_OFFSET_COMMIT, body)
    answers = {(t["name"], p["partition"]): p.get("error") for t in native.get("topics") or []
               for p in t["partitions"]}
    top = native.get("error") or 0
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": commit_error(
                answers.get((t.name, p.partition_index), top) or top)} for p in t.partitions]}
        for t in b.topics]}
