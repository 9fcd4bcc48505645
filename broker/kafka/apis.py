"""Kafka API adapters: one Kafka request in, rafka's native dispatch, one Kafka answer out.

Theory of operation
-------------------
``SERVED`` is the one table of the Kafka listener: api key -> (lowest version, highest
version, adapter). ApiVersions answers from it, the codec checks versions against it, the
listener dispatches through it; docs/kafka-compat.md lists the same rows.

An adapter is ``async (ctx, request) -> dict | None``: it reads the ``kio`` request entity,
builds the body of the *native* request that means the same (``wire/apis.py`` SCHEMAS),
awaits it through ``context.call_native`` — the node's own dispatch, so forwarding to the
controller, the coordinators, quotas and the data plane are exactly those of the msgpack
listener — and
turns the native answer into nested dicts that ``codec.build`` shapes into the response
entity of the request's version (``None``: no response, produce with acks=0). The data
plane, topics and offsets are here; the classic group protocol in ``groups.py``,
transactions in ``txn.py``, the other admin APIs in ``admin.py``.

Error codes: rafka numbers its errors after Kafka's below 1000 (``wire/errors.py``), so
they pass through; rafka-only codes (>= 1000) answer ``UNKNOWN_SERVER_ERROR`` with the
message. Advertised addresses (METADATA, FIND_COORDINATOR) are the brokers' registered
Kafka listeners (``RegisterBroker.kafka_listener``); a broker without one is left out.

Produce is advertised from v0 (librdkafka turns compression off against a broker that
does not) but v0-2 (message sets of magic 0/1) are not served: the codec answers them as
an unsupported version, which closes the connection with a logged reason, as Kafka 4 does.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from rafka.broker.kafka import (
    acls,
    admin,
    admin_more,
    groups,
    quotas,
    sasl,
    scram_users,
    txn,
    txn_admin,
)
from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import (
    CORRUPT_MESSAGE,
    NO_AUTH_OPS,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_COMPRESSION_TYPE,
    KafkaContext,
    call_native,
    commit_error,
    kafka_address,
    kafka_error,
    ms,
)
from rafka.broker.kafka.file_records import close_all, take_file_records
from rafka.broker.kafka.records import (
    KafkaBatchError,
    UnsupportedCompressionError,
    accept_produce,
    to_kafka,
)
from rafka.broker.server import Reply
from rafka.wire.protocol import ApiKey

__all__ = ["KafkaContext", "SERVED", "served_versions", "kafka_error"]

log = logging.getLogger("rafka.kafka")

# --------------------------------------------------------------------------- ApiVersions


async def api_versions(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    return {"error_code": 0, "throttle_time": 0, "api_keys": served_versions()}


def served_versions() -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi, _) in sorted(SERVED.items())]


# --------------------------------------------------------------------------- Metadata


def _topic_id(raw: Any) -> uuid.UUID:
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        return uuid.UUID(bytes=bytes(raw))
    try:
        return uuid.UUID(str(raw))
    except (TypeError, ValueError):
        return uuid.UUID(int=0)


async def metadata(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    topics = req.body.topics
    body = {} if topics is None else {"topics": [t.name for t in topics if t.name is not None]}
    native = await call_native(ctx, req, ApiKey.METADATA, body)
    if _auto_create(ctx, req):
        missing = [t["name"] for t in native.get("topics") or []
                   if t.get("error") == UNKNOWN_TOPIC_OR_PARTITION and not t["name"].startswith("__")]
        if missing:  # Kafka's auto.create.topics.enable: created now, leaders come later
            await call_native(ctx, req, ApiKey.CREATE_TOPICS, {"topics": [
                {"name": n, "num_partitions": ctx.settings.get("num.partitions", 1),
                 "replication_factor": ctx.settings.get("default.replication.factor", 1)}
                for n in missing], "timeout_ms": 10_000})
            native = await call_native(ctx, req, ApiKey.METADATA, body)
    image = ctx.image()
    brokers = []
    for b in native.get("brokers") or []:
        addr = kafka_address(image, b["node_id"], ctx.listener)
        if addr is not None and not b.get("fenced"):
            brokers.append({"node_id": b["node_id"], "host": addr[0], "port": addr[1],
                            "rack": b.get("rack")})
    out_topics = []
    for t in native.get("topics") or []:
        parts = [{"error_code": kafka_error(p["error"]), "partition_index": p["partition"],
                  "leader_id": p["leader"], "leader_epoch": p["leader_epoch"],
                  "replica_nodes": p["replicas"], "isr_nodes": p["isr"], "offline_replicas": ()}
                 for p in t.get("partitions") or []]
        out_topics.append({"error_code": kafka_error(t.get("error")), "name": t["name"],
                           "topic_id": _topic_id(t.get("topic_id")),
                           "is_internal": bool(t.get("is_internal")), "partitions": parts,
                           "topic_authorized_operations": NO_AUTH_OPS})
    # admin requests go to the controller; any broker forwards them to rafka's controller
    return {"throttle_time": 0, "brokers": brokers, "cluster_id": native.get("cluster_id"),
            "controller_id": ctx.node_id, "topics": out_topics,
            "cluster_authorized_operations": NO_AUTH_OPS}


def _auto_create(ctx: KafkaContext, req: KafkaRequest) -> bool:
    """Whether this METADATA may create the missing topics it names (Kafka: the broker's
    auto.create.topics.enable and, from v4, the request's allow_auto_topic_creation)."""
    if not ctx.settings.get("auto.create.topics.enable", True) or req.body.topics is None:
        return False
    return bool(getattr(req.body, "allow_auto_topic_creation", True))


# --------------------------------------------------------------------------- Produce


async def produce(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any] | None:
    b = req.body
    refused: dict[tuple[str, int], tuple[int, str]] = {}
    topics = []
    for t in b.topic_data:
        parts = []
        for p in t.partition_data:
            try:
                # the log's append checks each batch's CRC: one pass, as for a native produce
                records = accept_produce(p.records or b"", check_crc=False)
            except UnsupportedCompressionError as exc:
                refused[(t.name, p.index)] = (UNSUPPORTED_COMPRESSION_TYPE, str(exc))
                continue
            except KafkaBatchError as exc:
                refused[(t.name, p.index)] = (CORRUPT_MESSAGE, str(exc))
                continue
            parts.append({"partition": p.index, "records": records})
        if parts:
            topics.append({"name": t.name, "partitions": parts})
    native: Any = {"topics": []}
    if topics:
        body = {"acks": b.acks, "timeout_ms": ms(b.timeout), "topics": topics}
        if b.transactional_id:
            body["transactional_id"] = b.transactional_id
        native = await call_native(ctx, req, ApiKey.PRODUCE, body)
    if b.acks == 0:
        return None
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    if native.get("error"):  # the whole request refused (e.g. INVALID_REQUIRED_ACKS)
        for t in topics:
            for p in t["partitions"]:
                answers[(t["name"], p["partition"])] = {"error": native["error"],
                                                        "message": native.get("message")}
    for t in native.get("topics") or []:
        for p in t["partitions"]:
            answers[(t["name"], p["partition"])] = p
    responses = []
    for t in b.topic_data:
        prs = []
        for p in t.partition_data:
            key = (t.name, p.index)
            if key in refused:
                code, msg = refused[key]
                prs.append({"index": p.index, "error_code": code, "base_offset": -1,
                            "log_append_time": None, "log_start_offset": -1,
                            "record_errors": (), "error_message": msg})
                continue
            a = answers.get(key, {"error": UNKNOWN_TOPIC_OR_PARTITION, "message": "no answer"})
            lat = a.get("log_append_time", -1)
            prs.append({"index": p.index, "error_code": kafka_error(a.get("error")),
                        "base_offset": a.get("base_offset", -1),
                        "log_append_time": None if lat is None or lat < 0 else
                        datetime.datetime.fromtimestamp(lat / 1000, datetime.UTC),
                        "log_start_offset": a.get("log_start_offset", -1),
                        "record_errors": (),
                        "error_message": a.get("message") if a.get("error") else None})
        responses.append({"name": t.name, "partition_responses": prs})
    # a byte-rate quota's delay (security/throttle.py), answered at once as KIP-219 has it: the
    # client backs off by itself and the listener mutes the connection meanwhile (listener.py)
    return {"responses": responses, "throttle_time": int(native.get("throttle_time_ms") or 0)}


# --------------------------------------------------------------------------- Fetch


async def fetch(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    plan = ctx.fetch_sessions.begin(b, req.api_version)  # KIP-227 (fetch_sessions.py)
    if plan.error:
        return plan.error_answer()
    body = {
        "replica_id": -1, "isolation_level": getattr(b, "isolation_level", 0),
        "max_wait_ms": ms(b.max_wait), "min_bytes": b.min_bytes,
        "max_bytes": getattr(b, "max_bytes", 0x7FFFFFFF),
        "topics": plan.topics,
    }
    reply = await call_native(ctx, req, ApiKey.FETCH, body)
    native, raw = (reply.body, list(reply.raw)) if isinstance(reply, Reply) else (reply, [])
    responses: list[dict[str, Any]] = []
    try:
        for t in native.get("topics") or []:
            parts: list[dict[str, Any]] = []
            responses.append({"topic": t["name"], "partitions": parts})
            for p in t["partitions"]:
                records: Any = b""
                if p.get("records_len"):
                    part = raw.pop(0)
                    # a large slice of the file: the listener sends its stored Kafka batches
                    # with sendfile, or reads it in after all (file_records.py)
                    records = take_file_records(part)
                    if records is None:
                        # a fresh bytearray this answer owns: to_kafka patches it in place (a
                        # raw part that is a view of the log's own memory must never be patched)
                        data = (bytearray(part) if isinstance(part, (bytes, bytearray, memoryview))
                                else part.read_bytearray())
                        records = to_kafka(data)
                aborted = p.get("aborted_transactions")
                parts.append({
                    "partition_index": p["partition"], "error_code": kafka_error(p["error"]),
                    "high_watermark": p["high_watermark"],
                    "last_stable_offset": p.get("last_stable_offset", -1),
                    "log_start_offset": p.get("log_start_offset", -1),
                    "aborted_transactions": None if aborted is None else [
                        {"producer_id": pid, "first_offset": first} for pid, first in aborted],
                    "preferred_read_replica": -1, "records": records})
    except BaseException:
        close_all({"responses": responses})
        raise
    finally:
        if isinstance(reply, Reply):
            reply.close()
    return {"throttle_time": int(native.get("throttle_time_ms") or 0),  # as for produce
            "error_code": kafka_error(native.get("error")),
            "session_id": plan.session_id, "responses": plan.finish(responses)}


# --------------------------------------------------------------------------- ListOffsets


async def list_offsets(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    body = {"replica_id": b.replica_id, "isolation_level": getattr(b, "isolation_level", 0),
            "topics": [{"name": t.name, "partitions": [
                {"partition": p.partition_index, "timestamp": p.timestamp,
                 **({"current_leader_epoch": p.current_leader_epoch}
                    if getattr(p, "current_leader_epoch", -1) >= 0 else {})}
                for p in t.partitions]} for t in b.topics]}
    native = await call_native(ctx, req, ApiKey.LIST_OFFSETS, body)
    return {"throttle_time": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition"], "error_code": kafka_error(p["error"]),
             "timestamp": p.get("timestamp", -1), "offset": p.get("offset", -1),
             "leader_epoch": p.get("leader_epoch", -1)} for p in t["partitions"]]}
        for t in native.get("topics") or []]}


# --------------------------------------------------------------------------- admin


async def create_topics(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    topics = []
    for t in b.topics:
        parts = t.num_partitions if t.num_partitions > 0 else ctx.settings.get("num.partitions", 1)
        rf = (t.replication_factor if t.replication_factor > 0
              else ctx.settings.get("default.replication.factor", 1))
        topics.append({"name": t.name, "num_partitions": parts, "replication_factor": rf,
                       "configs": {c.name: c.value for c in t.configs if c.value is not None}})
    native = await call_native(ctx, req, ApiKey.CREATE_TOPICS, {
        "topics": topics, "timeout_ms": ms(b.timeout),
        "validate_only": bool(getattr(b, "validate_only", False))})
    by_name = {t["name"]: t for t in native.get("topics") or []}
    out = []
    for t in topics:
        a = by_name.get(t["name"], {"error": native.get("error") or UNKNOWN_SERVER_ERROR,
                                    "message": native.get("message")})
        err = kafka_error(a.get("error"))
        out.append({"name": t["name"], "topic_id": _topic_id(a.get("topic_id")),
                    "error_code": err, "error_message": a.get("message") if err else None,
                    "num_partitions": a.get("num_partitions", t["num_partitions"]) if not err else -1,
                    "replication_factor": a.get("replication_factor", t["replication_factor"])
                    if not err else -1, "configs": None})
    return {"throttle_time": 0, "topics": out}


async def delete_topics(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    """By name (v1-5) or by name or topic id (v6+: an id not in the image is UNKNOWN_TOPIC_ID)."""
    if req.api_version >= 6:
        image = ctx.image()
        ids = {_topic_id(t.topic_id): t for t in image.topics.by_id.values()}
        asked = []  # (name or None, topic id or None)
        for t in req.body.topics:
            if t.name is not None:
                asked.append((t.name, t.topic_id))
            else:
                found = ids.get(t.topic_id)
                asked.append((None if found is None else found.name, t.topic_id))
    else:
        asked = [(n, None) for n in req.body.topic_names]
    names = [n for n, _ in asked if n is not None]
    native = await call_native(ctx, req, ApiKey.DELETE_TOPICS,
                               {"topics": names, "timeout_ms": ms(req.body.timeout)}) if names else {}
    by_name = {t["name"]: t for t in native.get("topics") or []}
    out = []
    for n, tid in asked:
        if n is None:
            out.append({"name": None, "topic_id": tid, "error_code": 100,  # UNKNOWN_TOPIC_ID
                        "error_message": f"no topic has id {tid}"})
            continue
        a = by_name.get(n, {"error": native.get("error") or UNKNOWN_SERVER_ERROR,
                            "message": native.get("message")})
        err = kafka_error(a.get("error"))
        out.append({"name": n, "topic_id": tid or uuid.UUID(int=0), "error_code": err,
                    "error_message": a.get("message") if err else None})
    return {"throttle_time": 0, "responses": out}


async def find_coordinator(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    key_type = getattr(b, "key_type", 0)
    keys = list(b.coordinator_keys) if req.api_version >= 4 else [b.key]
    native = await call_native(ctx, req, ApiKey.FIND_COORDINATOR, {"key_type": key_type, "keys": keys})
    image = ctx.image()
    coords = []
    for c in native.get("coordinators") or [{"key": k, "error": native.get("error"),
                                              "message": native.get("message"), "node_id": -1}
                                             for k in keys]:
        addr = kafka_address(image, c["node_id"], ctx.listener) if c.get("node_id", -1) >= 0 else None
        err = kafka_error(c.get("error"))
        if addr is None and not err:
            err = 15  # COORDINATOR_NOT_AVAILABLE: its broker has no Kafka listener
        coords.append({"key": c["key"], "node_id": c["node_id"] if addr else -1,
                       "host": addr[0] if addr else "", "port": addr[1] if addr else -1,
                       "error_code": err, "error_message": c.get("message") if err else None})
    if req.api_version >= 4:
        return {"throttle_time": 0, "coordinators": coords}
    one = coords[0]
    return {"throttle_time": 0, "error_code": one["error_code"],
            "error_message": one["error_message"], "node_id": one["node_id"],
            "host": one["host"], "port": one["port"]}


async def init_producer_id(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    b = req.body
    body: dict[str, Any] = {}
    if b.transactional_id:
        body["transactional_id"] = b.transactional_id
        body["transaction_timeout_ms"] = ms(b.transaction_timeout)
    if getattr(b, "producer_id", -1) >= 0:
        body.update(producer_id=b.producer_id, producer_epoch=b.producer_epoch)
    native = await call_native(ctx, req, ApiKey.INIT_PRODUCER_ID, body)
    return {"throttle_time": 0, "error_code": kafka_error(native.get("error")),
            "producer_id": native.get("producer_id", -1),
            "producer_epoch": native.get("producer_epoch", -1)}


# --------------------------------------------------------------------------- group offsets


async def offset_commit(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    """Commits of a consumer outside any group generation (``generation_id`` -1: assign()
    consumers, kcat, admin tools) map onto rafka's commit from outside the group; a member of
    a classic generation is not served yet (docs/kafka-compat.md)."""
    b = req.body
    generation = getattr(b, "generation_id_or_member_epoch", -1)
    body: dict[str, Any] = {
        "group_id": b.group_id, "member_epoch": generation if generation >= 0 else -1,
        "topics": groups.commit_topics(b)}
    fenced = groups.fenced_commit_answer(ctx, b, generation)
    if fenced is not None:
        return fenced
    if generation >= 0:  # a classic member: its current epoch (groups.py), may be newer
        member = groups.commit_member(ctx, b.group_id, b.member_id)
        body["member_id"] = b.member_id
        if member is not None:
            body["member_epoch"] = member.epoch
            if member.metadata_offset is not None:
                body["min_metadata_offset"] = member.metadata_offset
    native = await call_native(ctx, req, ApiKey.OFFSET_COMMIT, body)
    answers = {(t["name"], p["partition"]): p for t in native.get("topics") or []
               for p in t["partitions"]}
    top = native.get("error") or 0
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": commit_error(
                answers.get((t.name, p.partition_index), {}).get("error", top))}
            for p in t.partitions]} for t in b.topics]}


async def offset_fetch(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    """One group (v1-7) or several (v8+, KIP-709: each group one native OFFSET_FETCH)."""
    b = req.body
    stable = bool(getattr(b, "require_stable", False))
    if req.api_version >= 8:
        groups = []
        for g in b.groups:
            topics, top = await _fetch_group(ctx, req, g.group_id, g.topics, stable)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": top})
        return {"throttle_time": 0, "groups": groups}
    topics, top = await _fetch_group(ctx, req, b.group_id, b.topics, stable)
    if top and b.topics is not None and req.api_version < 2:  # no top-level error before v2
        topics = [{"name": t.name, "partitions": [
            {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": top} for i in t.partition_indexes]} for t in b.topics]
    return {"throttle_time": 0, "topics": topics, "error_code": top}


async def _fetch_group(ctx: KafkaContext, req: KafkaRequest, group_id: str, asked: Any,
                       require_stable: bool) -> tuple[list[dict[str, Any]], int]:
    body: dict[str, Any] = {"group_id": group_id, "require_stable": require_stable}
    known = groups.metadata_offset(ctx, group_id)
    if known is not None:  # classic members: the coordinator's image must have their assignments
        body["min_metadata_offset"] = known
    if asked is not None:
        body["topics"] = [{"name": t.name, "partitions": list(t.partition_indexes)}
                          for t in asked]
    native = await call_native(ctx, req, ApiKey.OFFSET_FETCH, body)
    return [{"name": t["name"], "partitions": [
        {"partition_index": p["partition"], "committed_offset": p.get("offset", -1),
         "committed_leader_epoch": p.get("leader_epoch", -1), "metadata": p.get("metadata") or "",
         "error_code": kafka_error(p.get("error"))} for p in t["partitions"]]}
        for t in native.get("topics") or []], kafka_error(native.get("error"))


Adapter = Callable[[KafkaContext, KafkaRequest], Awaitable[dict[str, Any] | None]]

# api key -> (lowest served version, highest served version, adapter)
SERVED: dict[int, tuple[int, int, Adapter]] = {
    0: (0, 9, produce),             # v0-2 advertised, refused (see the module docstring)
    1: (4, 12, fetch),              # v13+ names topics by id
    2: (1, 10, list_offsets),       # -3 max timestamp, -4 earliest local, -5 latest tiered
    3: (0, 12, metadata),
    8: (2, 8, offset_commit),        # v9+: KIP-848 member epochs
    9: (1, 8, offset_fetch),         # v8 batches groups; v9+: KIP-848 member epochs
    10: (0, 4, find_coordinator),
    11: (0, 7, groups.join_group),   # the classic protocol on controller-assigned groups
    12: (0, 4, groups.heartbeat),
    13: (0, 4, groups.leave_group),
    14: (0, 5, groups.sync_group),
    15: (0, 5, admin.describe_groups),
    16: (0, 4, admin.list_groups),
    17: (0, 1, sasl.sasl_handshake),     # the login itself: the listener and sasl.py
    18: (0, 3, api_versions),
    19: (2, 7, create_topics),
    20: (1, 6, delete_topics),      # v6 names topics by name or id
    21: (0, 2, admin_more.delete_records),
    22: (0, 4, init_producer_id),
    23: (2, 4, admin_more.offset_for_leader_epoch),
    24: (0, 3, txn.add_partitions_to_txn),  # v4+ is the brokers' batched verification form
    25: (0, 3, txn.add_offsets_to_txn),
    26: (0, 3, txn.end_txn),
    28: (0, 3, txn.txn_offset_commit),
    29: (1, 3, acls.describe_acls),
    30: (1, 3, acls.create_acls),
    31: (1, 3, acls.delete_acls),
    32: (1, 4, admin.describe_configs),
    33: (0, 2, admin.alter_configs),
    34: (1, 2, admin_more.alter_replica_log_dirs),
    35: (1, 4, admin_more.describe_log_dirs),
    36: (0, 2, sasl.sasl_authenticate),  # v1+: session_lifetime_ms 0 (no KIP-368)
    37: (0, 3, admin.create_partitions),
    42: (0, 2, admin.delete_groups),
    43: (0, 2, admin_more.elect_leaders),
    44: (0, 1, admin.incremental_alter_configs),
    45: (0, 1, admin_more.alter_partition_reassignments),
    46: (0, 0, admin_more.list_partition_reassignments),
    47: (0, 0, admin_more.offset_delete),
    48: (0, 1, quotas.describe_client_quotas),
    49: (0, 1, quotas.alter_client_quotas),
    50: (0, 0, scram_users.describe_user_scram_credentials),
    51: (0, 0, scram_users.alter_user_scram_credentials),
    55: (0, 2, admin_more.describe_quorum),
    60: (0, 1, admin.describe_cluster),
    61: (0, 0, txn_admin.describe_producers),
    65: (0, 0, txn_admin.describe_transactions),
    66: (0, 0, txn_admin.list_transactions),   # v1+: duration / transactional id filters
    75: (0, 0, admin_more.describe_topic_partitions),
}
# advertised but answered as unsupported: (api key, lowest version actually read)
READABLE_FROM: dict[int, int] = {0: 3}
