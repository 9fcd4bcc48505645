"""Kafka admin APIs mapped onto rafka's partitions, elections, quorum and reassignments.

Theory of operation: as every adapter (``apis.py``), each reads the ``kio`` request and puts
one native request through the node's dispatch, or — for what only this broker's replicas
know — reads its ``ReplicaManager`` (``KafkaContext.replicas``), never writing through it:

* DeleteRecords (21) → native DELETE_RECORDS on this broker, which must lead each partition
  (clients send each partition to its leader; elsewhere NOT_LEADER_OR_FOLLOWER, as Kafka).
* OffsetDelete (47) → native OFFSET_DELETE on the group's coordinator: the partitions'
  committed offsets are tombstoned; a topic a member subscribes to is GROUP_SUBSCRIBED_TO_TOPIC.
* OffsetForLeaderEpoch (23) → the partition's leader-epoch cache (``log/epoch_cache.py``):
  the largest epoch ≤ the asked one and its end offset (KIP-101/279). Replica id −2 (Kafka's
  debugging replica) may ask any replica, everyone else the leader.
* ElectLeaders (43) → native ELECT_LEADERS; a partition whose leader is already the preferred
  replica (unclean: that has a leader) answers ELECTION_NOT_NEEDED without an election, as
  Kafka does; a preferred election that left another leader PREFERRED_LEADER_NOT_AVAILABLE.
* DescribeQuorum (55) → native DESCRIBE_QUORUM (the active controller answers, any node
  forwards): rafka's Raft quorum shown as the ``__cluster_metadata`` partition 0, its metadata
  offsets as log end offsets, its voters' client listeners as the v2 node endpoints.
* Alter/ListPartitionReassignments (45, 46) → the native reassignment APIs (KIP-455 there).
  rafka applies a request's moves all or nothing, so a refused request answers its error on
  every partition.
* DescribeTopicPartitions (75) → native METADATA, sorted by topic then partition, cut at
  ``response_partition_limit`` partitions with a ``next_cursor`` where the next page starts.
* DescribeLogDirs (35), AlterReplicaLogDirs (34): a rafka broker keeps every replica in one
  directory (its ``data_dir``), so it describes that one log dir (sizes from its logs, disk
  totals from the file system) and "moves" a replica only into the dir it is already in (a
  no-op, no error); any other path is LOG_DIR_NOT_FOUND.

ACLs: what is read from the replicas does not pass the dispatch, so its authorizer is asked
first with a native request needing the same right — a METADATA of the topics (describe on
each: OffsetForLeaderEpoch) or a LIST_PARTITION_REASSIGNMENTS of no topic (describe on the
cluster: DescribeLogDirs). AlterReplicaLogDirs changes nothing, and is not checked.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import (
    NO_AUTH_OPS,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaContext,
    call_native,
    kafka_error,
    ms,
)
from rafka.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from rafka.metadata import TopicPartition
from rafka.wire.errors import RafkaError
from rafka.wire.protocol import ApiKey

__all__ = ["delete_records", "offset_delete", "offset_for_leader_epoch", "elect_leaders", "describe_quorum",
           "alter_partition_reassignments", "list_partition_reassignments",
           "describe_topic_partitions", "describe_log_dirs", "alter_replica_log_dirs"]

REPLICA_NOT_AVAILABLE = 9
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REPLICATION_FACTOR = 38
LOG_DIR_NOT_FOUND = 57
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELECTION_NOT_NEEDED = 84
DEBUGGING_REPLICA = -2
METADATA_TOPIC = "__cluster_metadata"


# --------------------------------------------------------------------------- DeleteRecords


async def delete_records(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    native = await call_native(ctx, req, ApiKey.DELETE_RECORDS, {
        "topics": [{"name": t.name, "partitions": [
            {"partition": p.partition_index, "offset": p.offset} for p in t.partitions]}
            for t in b.topics], "timeout_ms": ms(b.timeout)})
    answers = {(t["name"], p["partition"]): p for t in native.get("topics") or []
               for p in t["partitions"]}
    top = native.get("error") or UNKNOWN_TOPIC_OR_PARTITION
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "low_watermark": answers.get((t.name, p.partition_index), {}).get("low_watermark", -1),
             "error_code": kafka_error(answers.get((t.name, p.partition_index), {"error": top})
                                      .get("error"))}
            for p in t.partitions]} for t in b.topics]}


# --------------------------------------------------------------------------- OffsetDelete


async def offset_delete(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    native = await call_native(ctx, req, ApiKey.OFFSET_DELETE, {
        "group_id": b.group_id, "topics": [
            {"name": t.name, "partitions": [p.partition_index for p in t.partitions]}
            for t in b.topics]})
    top = kafka_error(native.get("error"))
    answers = {(t["name"], p["partition"]): p for t in native.get("topics") or []
               for p in t["partitions"]}
    return {"throttle_time": 0, "error_code": top, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": 0 if top else kafka_error(
                answers.get((t.name, p.partition_index), {"error": -1}).get("error"))}
            for p in t.partitions]} for t in b.topics]}


# --------------------------------------------------------------------------- OffsetForLeaderEpoch


def _epoch_end(ctx: KafkaContext, replica_id: int, topic: str, p: Any) -> dict[str, Any]:
    out = {"partition": p.partition, "error_code": 0, "leader_epoch": UNDEFINED_EPOCH,
           "end_offset": UNDEFINED_EPOCH_OFFSET}
    current = p.current_leader_epoch if getattr(p, "current_leader_epoch", -1) >= 0 else None
    try:
        rm = ctx.replicas
        if rm is None:
            raise RuntimeError("this node has no replicas")
        if replica_id == DEBUGGING_REPLICA:
            part = rm.get(topic, p.partition)
        else:
            part = rm.get_leader(topic, p.partition, current)
        epoch, end = part.log.epochs.end_offset_for(p.leader_epoch)
        out.update(leader_epoch=epoch, end_offset=end)
    except RafkaError as exc:
        out["error_code"] = kafka_error(int(exc.code))
    except RuntimeError:
        out["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
    return out


async def offset_for_leader_epoch(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    replica_id = getattr(b, "replica_id", -1)
    denied = await _denied_topics(ctx, req, [t.topic for t in b.topics])
    return {"throttle_time": 0, "topics": [
        {"topic": t.topic, "partitions": [
            {"partition": p.partition, "error_code": TOPIC_AUTHORIZATION_FAILED,
             "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_EPOCH_OFFSET}
            if t.topic in denied else _epoch_end(ctx, replica_id, t.topic, p)
            for p in t.partitions]} for t in b.topics]}


async def _denied_topics(ctx: KafkaContext, req: KafkaRequest, names: list[str]) -> set[str]:
    """The topics this client may not describe: the answer is read from the broker's replicas,
    not through the dispatch, so the dispatch's authorizer is asked with a METADATA of them."""
    if not names:
        return set()
    native = await call_native(ctx, req, ApiKey.METADATA, {"topics": sorted(set(names))})
    return {t["name"] for t in native.get("topics") or []
            if t.get("error") == TOPIC_AUTHORIZATION_FAILED}


async def _cluster_describe_denied(ctx: KafkaContext, req: KafkaRequest) -> bool:
    """Whether this client lacks describe on the cluster (asked through the dispatch's
    authorizer with a LIST_PARTITION_REASSIGNMENTS of no topic, which reads the image only)."""
    native = await call_native(ctx, req, ApiKey.LIST_PARTITION_REASSIGNMENTS, {"topics": []})
    return native.get("error") == CLUSTER_AUTHORIZATION_FAILED


# --------------------------------------------------------------------------- ElectLeaders


async def elect_leaders(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    election = getattr(b, "election_type", 0)
    image = ctx.image()
    if b.topic_partitions is None:
        asked = [(t.name, p) for t in sorted(image.topics.by_name.values(), key=lambda t: t.name)
                 for p in sorted(t.partitions)]
    else:
        asked = [(t.topic, p) for t in b.topic_partitions for p in t.partitions]
    results: dict[tuple[str, int], tuple[int, str | None]] = {}
    todo: dict[str, list[int]] = {}
    for topic, p in asked:
        reg = image.topics.partition(topic, p)
        if reg is None:
            results[(topic, p)] = (UNKNOWN_TOPIC_OR_PARTITION, "no such partition")
        elif (election == 0 and reg.replicas and reg.leader == reg.replicas[0]) or (
                election == 1 and reg.leader >= 0):
            results[(topic, p)] = (ELECTION_NOT_NEEDED, "leader is already "
                                   + ("the preferred replica" if election == 0 else "elected"))
        else:
            todo.setdefault(topic, []).append(p)
    top = 0
    if todo:
        native = await call_native(ctx, req, ApiKey.ELECT_LEADERS, {
            "election_type": election,
            "topics": [{"name": n, "partitions": ps} for n, ps in todo.items()]})
        top = kafka_error(native.get("error"))
        after = ctx.image()
        answered = {(t["name"], p["partition"]): p for t in native.get("topics") or []
                    for p in t["partitions"]}
        for topic, ps in todo.items():
            for p in ps:
                a = answered.get((topic, p), {"error": top or -1, "message": native.get("message")})
                err = kafka_error(a.get("error"))
                reg = after.topics.partition(topic, p)
                if not err and election == 0 and reg is not None and reg.replicas and \
                        a.get("leader", reg.leader) != reg.replicas[0]:
                    err, a = PREFERRED_LEADER_NOT_AVAILABLE, {
                        "message": f"preferred replica {reg.replicas[0]} is not eligible"}
                results[(topic, p)] = (err, a.get("message") if err else None)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (err, msg) in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_id": p, "error_code": err, "error_message": msg})
    return {"throttle_time": 0, "error_code": 0 if asked else top,
            "replica_election_results": [{"topic": n, "partition_result": ps}
                                         for n, ps in by_topic.items()]}


# --------------------------------------------------------------------------- DescribeQuorum


def _replica(v: dict[str, Any]) -> dict[str, Any]:
    return {"replica_id": v["id"], "replica_directory_id": uuid.UUID(int=0),
            "log_end_offset": v.get("metadata_offset", -1) if v.get("metadata_offset") is not None
            else -1, "last_fetch_timestamp": -1, "last_caught_up_timestamp": -1}


async def describe_quorum(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    asked = [(t.topic_name, p.partition_index) for t in req.body.topics for p in t.partitions]
    native = await call_native(ctx, req, ApiKey.DESCRIBE_QUORUM, {})
    err = kafka_error(native.get("error"))
    topics = []
    for name, index in asked:
        if (name, index) != (METADATA_TOPIC, 0):
            part = {"partition_index": index, "error_code": UNKNOWN_TOPIC_OR_PARTITION,
                    "error_message": f"the quorum is {METADATA_TOPIC}-0", "leader_id": -1,
                    "leader_epoch": -1, "high_watermark": -1, "current_voters": (),
                    "observers": ()}
        else:
            part = {"partition_index": 0, "error_code": err,
                    "error_message": native.get("message") if err else None,
                    "leader_id": native.get("leader_id", -1) if not err else -1,
                    "leader_epoch": native.get("epoch", -1) if not err else -1,
                    "high_watermark": native.get("high_watermark", -1) if not err else -1,
                    "current_voters": [_replica(v) for v in native.get("voters") or []],
                    "observers": [_replica(v) for v in native.get("observers") or []]}
        topics.append({"topic_name": name, "partitions": [part]})
    nodes = []
    for v in native.get("voters") or []:
        host, _, port = str(v.get("rpc") or "").rpartition(":")
        if host and port.isdigit():
            nodes.append({"node_id": v["id"], "listeners": [
                {"name": "CONTROLLER", "host": host, "port": int(port)}]})
    return {"error_code": 0, "error_message": None, "topics": topics, "nodes": nodes}


# --------------------------------------------------------------------------- reassignments


async def alter_partition_reassignments(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    image = ctx.image()
    keep_rf = not getattr(b, "allow_replication_factor_change", True)
    refused: dict[tuple[str, int], tuple[int, str]] = {}
    moves = []
    for t in b.topics:
        for p in t.partitions:
            reg = image.topics.partition(t.name, p.partition_index)
            if reg is None:
                refused[(t.name, p.partition_index)] = (UNKNOWN_TOPIC_OR_PARTITION, "no such partition")
            elif keep_rf and p.replicas is not None and len(p.replicas) != len(reg.replicas):
                refused[(t.name, p.partition_index)] = (INVALID_REPLICATION_FACTOR, (
                    f"{len(p.replicas)} replicas instead of {len(reg.replicas)} and "
                    "allow_replication_factor_change is false"))
            else:
                moves.append({"topic": t.name, "partition": p.partition_index,
                              "replicas": None if p.replicas is None else list(p.replicas)})
    err, msg = 0, None
    if moves and not refused:  # rafka applies a request all or nothing
        native = await call_native(ctx, req, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "partitions": moves, "timeout_ms": ms(b.timeout)})
        err, msg = kafka_error(native.get("error")), native.get("message")
    elif moves:
        err, msg = 39, "another partition of this request was refused"  # INVALID_REPLICA_ASSIGNMENT
    def outcome(topic: str, index: int) -> dict[str, Any]:
        code, text = refused.get((topic, index), (err, msg))
        return {"partition_index": index, "error_code": code,
                "error_message": text if code else None}

    return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": [
        {"name": t.name, "partitions": [outcome(t.name, p.partition_index) for p in t.partitions]}
        for t in b.topics]}


async def list_partition_reassignments(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    body: dict[str, Any] = {}
    if b.topics is not None:
        body["topics"] = [{"name": t.name, "partitions": list(t.partition_indexes)} for t in b.topics]
    native = await call_native(ctx, req, ApiKey.LIST_PARTITION_REASSIGNMENTS, body)
    err = kafka_error(native.get("error"))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for r in native.get("reassignments") or []:
        by_topic.setdefault(r["topic"], []).append({
            "partition_index": r["partition"], "replicas": r["replicas"],
            "adding_replicas": r.get("adding_replicas") or (),
            "removing_replicas": r.get("removing_replicas") or ()})
    return {"throttle_time": 0, "error_code": err,
            "error_message": native.get("message") if err else None,
            "topics": [{"name": n, "partitions": ps} for n, ps in sorted(by_topic.items())]}


# --------------------------------------------------------------------------- DescribeTopicPartitions


async def describe_topic_partitions(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    from rafka.broker.kafka.apis import _topic_id  # the one topic-id reading (no import cycle)

    b = req.body
    names = sorted({t.name for t in b.topics})
    native = await call_native(ctx, req, ApiKey.METADATA, {"topics": names} if names else {})
    found = {t["name"]: t for t in native.get("topics") or []}
    order = names or sorted(found)
    cursor = b.cursor
    if cursor is not None:
        order = [n for n in order if n >= cursor.topic_name]
    limit = max(1, min(b.response_partition_limit, 2000))
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in order:
        t = found.get(name)
        err = UNKNOWN_TOPIC_OR_PARTITION if t is None else kafka_error(t.get("error"))
        parts = sorted((t or {}).get("partitions") or [], key=lambda p: p["partition"])
        if cursor is not None and name == cursor.topic_name:
            parts = [p for p in parts if p["partition"] >= cursor.partition_index]
        room = limit - sum(len(x["partitions"]) for x in topics)
        if room <= 0 or (len(parts) > room):
            if room > 0:
                topics.append(_dtp_topic(name, t, err, parts[:room], _topic_id))
            next_cursor = {"topic_name": name,
                           "partition_index": parts[max(room, 0)]["partition"]}
            break
        topics.append(_dtp_topic(name, t, err, parts, _topic_id))
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}


def _dtp_topic(name: str, t: dict[str, Any] | None, err: int, parts: list[dict[str, Any]],
               topic_id: Any) -> dict[str, Any]:
    return {"error_code": err, "name": name,
            "topic_id": topic_id(None if t is None else t.get("topic_id")),
            "is_internal": bool(t and t.get("is_internal")),
            "topic_authorized_operations": NO_AUTH_OPS,
            "partitions": [{"error_code": kafka_error(p["error"]), "partition_index": p["partition"],
                            "leader_id": p["leader"], "leader_epoch": p["leader_epoch"],
                            "replica_nodes": p["replicas"], "isr_nodes": p["isr"],
                            "eligible_leader_replicas": None, "last_known_elr": None,
                            "offline_replicas": ()} for p in parts]}


# --------------------------------------------------------------------------- log dirs


def _log_dir(ctx: KafkaContext) -> str | None:
    rm = ctx.replicas
    return None if rm is None else os.path.realpath(rm.data_dir)


async def describe_log_dirs(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    rm, path = ctx.replicas, _log_dir(ctx)
    if await _cluster_describe_denied(ctx, req):  # Kafka: describe on the cluster
        return {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED, "results": []}
    if rm is None or path is None:
        return {"throttle_time": 0, "error_code": 0, "results": []}
    wanted = None if req.body.topics is None else {
        (t.topic, p) for t in req.body.topics for p in t.partitions}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, p in sorted(rm.partitions.items()):
        if p.deleted or (wanted is not None and (tp.topic, tp.partition) not in wanted):
            continue
        try:
            size, lag = p.log.size_bytes, max(0, p.high_watermark - p.log.log_end_offset)
        except Exception:  # noqa: BLE001 - a log closed under us: left out
            continue
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "partition_size": size, "offset_lag": lag,
            "is_future_key": False})
    try:
        disk = shutil.disk_usage(path)
        total, usable = disk.total, disk.free
    except OSError:
        total = usable = -1
    return {"throttle_time": 0, "error_code": 0, "results": [{
        "error_code": 0, "log_dir": path, "total_bytes": total, "usable_bytes": usable,
        "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}]}


async def alter_replica_log_dirs(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    rm, here = ctx.replicas, _log_dir(ctx)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for d in req.body.dirs:
        same = here is not None and os.path.realpath(d.path) == here
        for t in d.topics:
            for p in t.partitions:
                hosted = rm is not None and rm.partitions.get(TopicPartition(t.name, p)) is not None
                code = (LOG_DIR_NOT_FOUND if not same
                        else 0 if hosted else REPLICA_NOT_AVAILABLE)
                by_topic.setdefault(t.name, []).append({"partition_index": p, "error_code": code})
    return {"throttle_time": 0, "results": [{"topic_name": n, "partitions": ps}
                                            for n, ps in by_topic.items()]}
