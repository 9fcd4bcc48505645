"""The controller's topic admin APIs: CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS,
DESCRIBE_CONFIGS, ALTER_CONFIGS and ELECT_LEADERS, as functions of the ``ControllerService``
(``kraft/service.py`` registers them under its decision lock, as the other ``*_admin`` modules).

Theory of operation
-------------------
Each handler decides with the pure functions of :mod:`rafka.kraft.controller` on the current
image and proposes the records as one guarded command; answers carry ``metadata_offset`` (see
``kraft/service.py``).

Idempotent admin requests: CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS and ALTER_CONFIGS
may carry ``request_id`` — one id per *logical* client call, the same on every retry
(``client/aio/admin.py``). Each topic of the request gets its own proposal id
``<op>:<topic>:<request_id>`` (op = create / delete / partitions / configs, so ids cannot
collide across operations or topics), written by the same command as the records, so the
state machine's dedup table remembers it atomically with the change. Before deciding, the
controller looks the id up (``MetadataQuorum.applied_request``): a hit means an earlier
attempt was committed and its answer lost (controller change during the proposal, a forward
timing out), and the topic is answered with success — for a create with the topic's *current*
id and partitions from the image — instead of being decided again (TOPIC_ALREADY_EXISTS,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, or an INVALID_REPLICATION_FACTOR because a
broker is fenced now). The id is looked up again after a refused decision (the engine applies
on another thread; it publishes the dedup entry before the image). Kafka-like idempotence
means the answer is about *this request*: if the topic was since deleted (and perhaps
recreated by someone else), the retry of the original create still answers success (with
``topic_id`` None / the new topic's id) and creates nothing. The table is bounded (FIFO,
``DEFAULT_DEDUP_CAPACITY`` commands): a retry that comes after that many other commands is
decided afresh, as before. Without ``request_id`` nothing changes.

Refusals are decided once too. Before a topic of an idempotent request is answered with a
refusal (any error but NOT_CONTROLLER and REQUEST_TIMED_OUT, which decide nothing), the
controller commits a command under the topic's proposal id whose only record is a
``NoOp(error_code, message)``; the dedup table then remembers the id (with a marker saying it
was a refusal, ``kraft/state_machine.py``), and an earlier attempt still on its way — a forward
stuck in TCP behind a partition, arriving after the heal when the refusal's reason (a fenced
broker) is gone — is answered as a duplicate: the same refusal, nothing created (txn chaos
campaign seed 3: topic-created-after-fail, where the client was told "failed" for a create
that then happened). A later attempt reads the refusal from the log entry at the dedup hit's
offset; if that entry has been snapshotted away, it gets the same error code with a message
saying an earlier attempt was refused. The NoOp changes nothing in the image; it costs one Raft
commit per refused idempotent request (a rare event). If that commit fails, the answer is
what the failure says (NOT_CONTROLLER, REQUEST_TIMED_OUT), never a refusal that was not
recorded.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from rafka.kraft import controller as ctl
from rafka.kraft.quorum import OffsetOutOfRange, ProposeResult
from rafka.kraft.state_machine import refusal_id
from rafka.metadata import NoOp
from rafka.wire.errors import ErrorCode, RafkaError, error_for

if TYPE_CHECKING:
    from rafka.kraft.service import ControllerService

__all__ = ["create_topics", "delete_topics", "create_partitions", "describe_configs",
           "alter_configs", "elect_leaders"]

# client request ids (``request_id`` of the idempotent admin APIs): no ':' so that the
# derived per-topic id ``<op>:<topic>:<request_id>`` is unambiguous (topic names have none)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


# -- idempotent admin requests (see the module docstring) --------------------------


def client_request_id(body: Mapping[str, Any]) -> str | None:
    rid = body.get("request_id")
    if rid is None:
        return None
    if not isinstance(rid, str) or not _REQUEST_ID.match(rid):
        raise error_for(ErrorCode.INVALID_REQUEST,
                        "request_id must be 1-128 characters of [A-Za-z0-9._-]")
    return rid


def op_id(op: str, name: str, client_rid: str | None) -> str | None:
    """The proposal id of one topic of an idempotent request (None: not idempotent)."""
    return None if client_rid is None else f"{op}:{name}:{client_rid}"


async def applied(service: ControllerService, request_id: str | None) -> ProposeResult | None:
    """The original result if a command with this id was applied, once it is durable."""
    if request_id is None:
        return None
    hit = service._q().applied_request(request_id)
    if hit is not None:
        await service._q().wait_for_offset(hit.last_offset)
    return hit


def created(service: ControllerService, name: str) -> dict[str, Any]:
    """The success answer of a create, from the image (the topic as it is now)."""
    t = service._q().image().topics.by_name.get(name)
    if t is None:  # created by this request, deleted since
        return {"name": name, "error": 0, "message": "created by this request, since deleted",
                "topic_id": None, "num_partitions": -1, "replication_factor": -1}
    first = t.partitions.get(0)
    return {"name": name, "error": 0, "message": None, "topic_id": t.topic_id,
            "num_partitions": len(t.partitions),
            "replication_factor": len(first.target_replicas) if first is not None else 0}


def ok(name: str) -> dict[str, Any]:
    return {"name": name, "error": 0, "message": None}


async def topic_once(
    service: ControllerService, op: str, name: str, client_rid: str | None,
    decide: Callable[[str | None], Awaitable[dict[str, Any]]],
    replay: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """One topic of an admin request: ``decide(rid)``'s answer (``rid``: the topic's
    proposal id, ``op_id``) — or the outcome of a command with that id applied already,
    found before deciding or after a refusal (applied meanwhile; see the module
    docstring): ``replay(name)``, or the recorded refusal. A fresh refusal is recorded
    (``refuse``) before it is answered; NOT_CONTROLLER fails the whole request."""
    rid = op_id(op, name, client_rid)
    try:
        hit = await applied(service, rid)
        if hit is None:
            answer = await decide(rid)
            # decide's proposal may have been a duplicate of an earlier attempt's recorded
            # refusal (that attempt's commit was still pending when this one looked)
            if rid is None or service._q().applied_request(refusal_id(rid)) is None:
                return answer
            hit = await applied(service, rid)
            if hit is None:
                return answer
    except RafkaError as exc:
        if exc.code == ErrorCode.NOT_CONTROLLER:
            raise
        hit = await applied(service, rid)
        if hit is None:
            if service._active is not None and rid in service._active.undecided:
                # an earlier attempt's command may still commit: a refusal now could be
                # contradicted by it (txn chaos campaign seed 3: topic-created-after-fail)
                exc = error_for(ErrorCode.REQUEST_TIMED_OUT,
                                "an earlier attempt of this request is still being decided")
            if rid is None or exc.code == ErrorCode.REQUEST_TIMED_OUT:
                return service._per_item(name, exc)
            return await refuse(service, name, rid, exc, replay)
    assert rid is not None
    return outcome(service, name, rid, hit, replay)


async def refuse(
    service: ControllerService, name: str, rid: str, exc: RafkaError, replay: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """Answer ``exc`` for the topic once it is recorded under ``rid`` (a NoOp carrying it,
    see the module docstring), so that no other attempt of the request is decided
    otherwise. A failed commit answers its own error (NOT_CONTROLLER fails the request)."""
    marker = ctl.Decision([NoOp(error_code=int(exc.code), message=exc.message or "")])
    try:
        res = await service._propose(marker, request_id=rid)
    except RafkaError as err:
        if err.code == ErrorCode.NOT_CONTROLLER:
            raise
        hit = await applied(service, rid)
        if hit is not None:  # an attempt's command was applied meanwhile after all
            return outcome(service, name, rid, hit, replay)
        return service._per_item(name, error_for(
            ErrorCode.REQUEST_TIMED_OUT,
            f"the refusal of this request could not be recorded ({err.message}); retry"))
    if res.duplicate:  # another attempt's command came first: its outcome is the answer
        await service._q().wait_for_offset(res.last_offset)
        return outcome(service, name, rid, res, replay)
    return service._per_item(name, exc)


def outcome(
    service: ControllerService, name: str, rid: str, hit: ProposeResult, replay: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """The answer for a proposal id applied already (``hit``): ``replay(name)`` for an
    accepted command, the recorded refusal otherwise — read from the NoOp at the hit's
    offset, or named from the marker's code if that entry is below the log start."""
    marker = service._q().applied_request(refusal_id(rid))
    if marker is None:
        return replay(name)
    try:
        entries = service._q().read(hit.base_offset, 1)
    except OffsetOutOfRange:
        entries = []
    record = entries[0].record if entries else None
    if isinstance(record, NoOp) and record.error_code:
        return service._per_item(name, error_for(record.error_code, record.message))
    return service._per_item(name, error_for(
        marker.epoch,  # a marker's epoch slot holds the refusal's code (kraft/state_machine.py)
        "an earlier attempt of this request was refused (its message is no longer in the log)"))


# -- topics -----------------------------------------------------------------------


async def create_topics(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    validate_only = bool(body.get("validate_only"))
    client_rid = None if validate_only else client_request_id(body)

    async def create(t: dict[str, Any], rid: str | None) -> dict[str, Any]:
        name = t["name"]
        start, shift = service._placement()
        d = ctl.create_topic(
            service._q().image(), name, t["num_partitions"], t["replication_factor"],
            t.get("configs") or {}, uuid.uuid4().hex, start, shift,
            service.setting("num.partitions", 1), service.setting("default.replication.factor", 1),
        )
        if not validate_only:
            res = await service._propose(d, request_id=rid)
            if res.duplicate:  # an earlier attempt, still in flight above, won
                return created(service, name)
        parts = [r for r in d.records if r.record_type == "Partition"]
        return {
            "name": name, "error": 0, "message": None, "topic_id": d.records[0].topic_id,  # type: ignore[union-attr]
            "num_partitions": len(parts),
            "replication_factor": len(parts[0].replicas) if parts else 0,  # type: ignore[union-attr]
        }

    results = [await topic_once(service, "create", t["name"], client_rid,
                                functools.partial(create, t), functools.partial(created, service))
               for t in body["topics"]]
    return {"topics": results, "metadata_offset": service._q().committed_offset()}


async def delete_topics(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    client_rid = client_request_id(body)

    async def delete(name: str, rid: str | None) -> dict[str, Any]:
        await service._propose(ctl.delete_topic(service._q().image(), name), request_id=rid)
        return ok(name)

    results = [await topic_once(service, "delete", name, client_rid,
                                functools.partial(delete, name), ok)
               for name in body["topics"]]
    return {"topics": results, "metadata_offset": service._q().committed_offset()}


async def create_partitions(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    client_rid = client_request_id(body)

    async def grow(t: dict[str, Any], rid: str | None) -> dict[str, Any]:
        start, shift = service._placement()
        d = ctl.create_partitions(service._q().image(), t["name"], t["count"], start, shift)
        await service._propose(d, request_id=rid)
        return ok(t["name"])

    results = [await topic_once(service, "partitions", t["name"], client_rid,
                                functools.partial(grow, t), ok)
               for t in body["topics"]]
    return {"topics": results, "metadata_offset": service._q().committed_offset()}


async def describe_configs(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    results = []
    for name in body["topics"]:
        try:
            cfg = ctl.describe_configs(service._q().image(), name)
            results.append({"name": name, "error": 0, "message": None, "configs": cfg})
        except RafkaError as exc:
            results.append({**service._per_item(name, exc), "configs": {}})
    return {"topics": results}


async def alter_configs(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    client_rid = client_request_id(body)

    async def alter(t: dict[str, Any], rid: str | None) -> dict[str, Any]:
        d = ctl.alter_configs(service._q().image(), t["name"], t["configs"])
        if d:
            await service._propose(d, request_id=rid)
        return ok(t["name"])

    # deduped too: a retry must not undo a change someone made after the lost answer
    results = [await topic_once(service, "configs", t["name"], client_rid,
                                functools.partial(alter, t), ok)
               for t in body["topics"]]
    return {"topics": results, "metadata_offset": service._q().committed_offset()}


async def elect_leaders(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    active = service._require_active()
    topics = body.get("topics")
    parts = None
    if topics is not None:
        parts = [(t["name"], p) for t in topics for p in t["partitions"]]
    image = service._q().image()
    d = ctl.elect_leaders(image, body["election_type"], parts, active.state)
    if d:
        await service._propose(d)
    image = service._q().image()
    selected = parts if parts is not None else [
        (t.name, p) for t in image.topics.by_name.values() for p in t.partitions
    ]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for name, p in selected:
        reg = image.topics.partition(name, p)
        if reg is None:
            e = {"partition": p, "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "message": None}
        elif reg.leader == -1:
            e = {"partition": p, "error": int(ErrorCode.LEADER_NOT_AVAILABLE), "message": "no eligible leader"}
        else:
            e = {"partition": p, "error": 0, "message": None, "leader": reg.leader}
        by_topic.setdefault(name, []).append(e)
    return {"topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
            "metadata_offset": service._q().committed_offset()}
