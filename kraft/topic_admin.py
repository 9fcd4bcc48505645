"""The controller's topic admin APIs: CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS,
DESCRIBE_CONFIGS, ALTER_CONFIGS and ELECT_LEADERS (``HANDLERS``, served by ``kraft/service.py``
under its decision lock, as the other ``*_admin`` modules).

Theory of operation
-------------------
The ``decide_*`` functions are pure: one topic of the request (or the whole body) and the
current image in — plus, where they need one, a placement, a topic id and the defaults the
caller drew — the ``Decision`` of :mod:`rafka.kraft.controller` and the topic's answer out, or
the refusal raised. The handlers see the service through its narrow
:class:`~rafka.kraft.admin_context.AdminContext`: ``_each_topic`` decides each topic on the
image as it is then, proposes the records as one guarded command, and answers the topics
together with ``metadata_offset`` (see ``kraft/service.py``).

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from rafka.kraft import controller as ctl
from rafka.kraft.admin_context import AdminContext, HandlerTable, per_item_error
from rafka.kraft.quorum import OffsetOutOfRange, ProposeResult
from rafka.kraft.state_machine import refusal_id
from rafka.metadata import MetadataImage, NoOp
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey

__all__ = ["HANDLERS", "alter_configs", "create_partitions", "create_topics",
           "decide_alter_configs", "decide_create_partitions", "decide_create_topic",
           "decide_delete_topic", "decide_describe_configs", "decide_elect_leaders",
           "delete_topics", "describe_configs", "elect_leaders", "elect_leaders_answer"]

# client request ids (``request_id`` of the idempotent admin APIs): no ':' so that the
# derived per-topic id ``<op>:<topic>:<request_id>`` is unambiguous (topic names have none)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

Item = TypeVar("Item")
Answer = dict[str, Any]


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


async def applied(ctx: AdminContext, request_id: str | None) -> ProposeResult | None:
    """The original result if a command with this id was applied, once it is durable."""
    if request_id is None:
        return None
    hit = ctx.require_quorum().applied_request(request_id)
    if hit is not None:
        await ctx.require_quorum().wait_for_offset(hit.last_offset)
    return hit


def created_answer(image: MetadataImage, name: str) -> Answer:
    """The success answer of a create, from the image (the topic as it is now)."""
    t = image.topics.by_name.get(name)
    if t is None:  # created by this request, deleted since
        return {"name": name, "error": 0, "message": "created by this request, since deleted",
                "topic_id": None, "num_partitions": -1, "replication_factor": -1}
    first = t.partitions.get(0)
    return {"name": name, "error": 0, "message": None, "topic_id": t.topic_id,
            "num_partitions": len(t.partitions),
            "replication_factor": len(first.target_replicas) if first is not None else 0}


def ok(name: str) -> Answer:
    return {"name": name, "error": 0, "message": None}


async def topic_once(
    ctx: AdminContext, op: str, name: str, client_rid: str | None,
    decide: Callable[[str | None], Awaitable[Answer]],
    replay: Callable[[str], Answer],
) -> Answer:
    """One topic of an admin request: ``decide(rid)``'s answer (``rid``: the topic's
    proposal id, ``op_id``) — or the outcome of a command with that id applied already,
    found before deciding or after a refusal (applied meanwhile; see the module
    docstring): ``replay(name)``, or the recorded refusal. A fresh refusal is recorded
    (``refuse``) before it is answered; NOT_CONTROLLER fails the whole request."""
    rid = op_id(op, name, client_rid)
    try:
        hit = await applied(ctx, rid)
        if hit is None:
            answer = await decide(rid)
            # decide's proposal may have been a duplicate of an earlier attempt's recorded
            # refusal (that attempt's commit was still pending when this one looked)
            if rid is None or ctx.require_quorum().applied_request(refusal_id(rid)) is None:
                return answer
            hit = await applied(ctx, rid)
            if hit is None:
                return answer
    except RafkaError as exc:
        if exc.code == ErrorCode.NOT_CONTROLLER:
            raise
        hit = await applied(ctx, rid)
        if hit is None:
            if rid is not None and ctx.in_doubt(rid):
                # an earlier attempt's command may still commit: a refusal now could be
                # contradicted by it (txn chaos campaign seed 3: topic-created-after-fail)
                exc = error_for(ErrorCode.REQUEST_TIMED_OUT,
                                "an earlier attempt of this request is still being decided")
            if rid is None or exc.code == ErrorCode.REQUEST_TIMED_OUT:
                return per_item_error(name, exc)
            return await refuse(ctx, name, rid, exc, replay)
    assert rid is not None
    return outcome(ctx, name, rid, hit, replay)


async def refuse(
    ctx: AdminContext, name: str, rid: str, exc: RafkaError, replay: Callable[[str], Answer],
) -> Answer:
    """Answer ``exc`` for the topic once it is recorded under ``rid`` (a NoOp carrying it,
    see the module docstring), so that no other attempt of the request is decided
    otherwise. A failed commit answers its own error (NOT_CONTROLLER fails the request)."""
    marker = ctl.Decision([NoOp(error_code=int(exc.code), message=exc.message or "")])
    try:
        res = await ctx.propose(marker, request_id=rid)
    except RafkaError as err:
        if err.code == ErrorCode.NOT_CONTROLLER:
            raise
        hit = await applied(ctx, rid)
        if hit is not None:  # an attempt's command was applied meanwhile after all
            return outcome(ctx, name, rid, hit, replay)
        return per_item_error(name, error_for(
            ErrorCode.REQUEST_TIMED_OUT,
            f"the refusal of this request could not be recorded ({err.message}); retry"))
    if res.duplicate:  # another attempt's command came first: its outcome is the answer
        await ctx.require_quorum().wait_for_offset(res.last_offset)
        return outcome(ctx, name, rid, res, replay)
    return per_item_error(name, exc)


def outcome(
    ctx: AdminContext, name: str, rid: str, hit: ProposeResult, replay: Callable[[str], Answer],
) -> Answer:
    """The answer for a proposal id applied already (``hit``): ``replay(name)`` for an
    accepted command, the recorded refusal otherwise — read from the NoOp at the hit's
    offset, or named from the marker's code if that entry is below the log start."""
    q = ctx.require_quorum()
    marker = q.applied_request(refusal_id(rid))
    if marker is None:
        return replay(name)
    try:
        entries = q.read(hit.base_offset, 1)
    except OffsetOutOfRange:
        entries = []
    record = entries[0].record if entries else None
    if isinstance(record, NoOp) and record.error_code:
        return per_item_error(name, error_for(record.error_code, record.message))
    return per_item_error(name, error_for(
        marker.epoch,  # a marker's epoch slot holds the refusal's code (kraft/state_machine.py)
        "an earlier attempt of this request was refused (its message is no longer in the log)"))


async def _each_topic(
    ctx: AdminContext, op: str, body: Mapping[str, Any], items: Sequence[Item],
    name_of: Callable[[Item], str],
    decide: Callable[[MetadataImage, Item], tuple[ctl.Decision, Answer]],
    replay: Callable[[str], Answer] = ok, *, write: bool = True,
) -> Answer:
    """The handlers' loop: each item (one topic) decided on the image as it is then
    (``decide``) and its records proposed under the topic's proposal id, through
    ``topic_once``; a proposal that turns out a duplicate of an earlier attempt answers
    ``replay(name)``. ``write=False`` (validate only) decides, proposes nothing, and is
    not idempotent."""
    client_rid = client_request_id(body) if write else None

    async def one(item: Item, rid: str | None) -> Answer:
        d, answer = decide(ctx.require_quorum().image(), item)
        if d and write:
            res = await ctx.propose(d, request_id=rid)
            if res.duplicate:  # an earlier attempt, still in flight above, won
                return replay(name_of(item))
        return answer

    results = [await topic_once(ctx, op, name_of(item), client_rid, functools.partial(one, item),
                                replay)
               for item in items]
    return {"topics": results, "metadata_offset": ctx.require_quorum().committed_offset()}


def _name(t: Mapping[str, Any]) -> str:
    return t["name"]


def _same(name: str) -> str:
    return name


# -- pure decisions ---------------------------------------------------------------


def decide_create_topic(
    image: MetadataImage, t: Mapping[str, Any], topic_id: str, start_index: int, shift: int,
    default_partitions: int = 1, default_replication_factor: int = 1,
) -> tuple[ctl.Decision, Answer]:
    """CREATE_TOPICS, one topic (``{name, num_partitions, replication_factor, configs}``;
    -1: the default): its records and answer."""
    d = ctl.create_topic(
        image, t["name"], t["num_partitions"], t["replication_factor"], t.get("configs") or {},
        topic_id, start_index, shift, default_partitions, default_replication_factor,
    )
    parts = [r for r in d.records if r.record_type == "Partition"]
    return d, {
        "name": t["name"], "error": 0, "message": None,
        "topic_id": d.records[0].topic_id,  # type: ignore[union-attr]
        "num_partitions": len(parts),
        "replication_factor": len(parts[0].replicas) if parts else 0,  # type: ignore[union-attr]
    }


def decide_delete_topic(image: MetadataImage, name: str) -> tuple[ctl.Decision, Answer]:
    return ctl.delete_topic(image, name), ok(name)


def decide_create_partitions(image: MetadataImage, t: Mapping[str, Any], start_index: int,
                             shift: int) -> tuple[ctl.Decision, Answer]:
    """CREATE_PARTITIONS, one topic (``{name, count}``: the new total)."""
    return ctl.create_partitions(image, t["name"], t["count"], start_index, shift), ok(t["name"])


def decide_alter_configs(image: MetadataImage, t: Mapping[str, Any]) -> tuple[ctl.Decision, Answer]:
    """ALTER_CONFIGS, one topic (``{name, configs}``; a None value removes the key). The
    decision may hold no record (nothing changes): then nothing is proposed."""
    return ctl.alter_configs(image, t["name"], t["configs"]), ok(t["name"])


def decide_describe_configs(image: MetadataImage, body: Mapping[str, Any]) -> Answer:
    """DESCRIBE_CONFIGS: a read, answered per topic (nothing to propose)."""
    results = []
    for name in body["topics"]:
        try:
            cfg = ctl.describe_configs(image, name)
            results.append({"name": name, "error": 0, "message": None, "configs": cfg})
        except RafkaError as exc:
            results.append({**per_item_error(name, exc), "configs": {}})
    return {"topics": results}


def decide_elect_leaders(image: MetadataImage, body: Mapping[str, Any], state: ctl.ControllerState
                         ) -> tuple[ctl.Decision, list[tuple[str, int]] | None]:
    """ELECT_LEADERS: the decision and the partitions the body names (None: all of them)."""
    topics = body.get("topics")
    parts = None
    if topics is not None:
        parts = [(t["name"], p) for t in topics for p in t["partitions"]]
    return ctl.elect_leaders(image, body["election_type"], parts, state), parts


def elect_leaders_answer(image: MetadataImage, parts: list[tuple[str, int]] | None) -> Answer:
    """ELECT_LEADERS' answer from the image after the decision applied: per partition its
    leader, or why it has none."""
    selected = parts if parts is not None else [
        (t.name, p) for t in image.topics.by_name.values() for p in t.partitions
    ]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for name, p in selected:
        reg = image.topics.partition(name, p)
        e: dict[str, Any]
        if reg is None:
            e = {"partition": p, "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "message": None}
        elif reg.leader == -1:
            e = {"partition": p, "error": int(ErrorCode.LEADER_NOT_AVAILABLE), "message": "no eligible leader"}
        else:
            e = {"partition": p, "error": 0, "message": None, "leader": reg.leader}
        by_topic.setdefault(name, []).append(e)
    return {"topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


# -- handlers ---------------------------------------------------------------------


async def create_topics(ctx: AdminContext, body: dict[str, Any]) -> Answer:
    def decide(image: MetadataImage, t: Mapping[str, Any]) -> tuple[ctl.Decision, Answer]:
        start, shift = ctx.placement()
        return decide_create_topic(image, t, uuid.uuid4().hex, start, shift,
                                   ctx.setting("num.partitions", 1),
                                   ctx.setting("default.replication.factor", 1))

    def replay(name: str) -> Answer:
        return created_answer(ctx.require_quorum().image(), name)

    return await _each_topic(ctx, "create", body, body["topics"], _name, decide, replay,
                             write=not body.get("validate_only"))


async def delete_topics(ctx: AdminContext, body: dict[str, Any]) -> Answer:
    return await _each_topic(ctx, "delete", body, body["topics"], _same, decide_delete_topic)


async def create_partitions(ctx: AdminContext, body: dict[str, Any]) -> Answer:
    def decide(image: MetadataImage, t: Mapping[str, Any]) -> tuple[ctl.Decision, Answer]:
        start, shift = ctx.placement()
        return decide_create_partitions(image, t, start, shift)

    return await _each_topic(ctx, "partitions", body, body["topics"], _name, decide)


async def describe_configs(ctx: AdminContext, body: dict[str, Any]) -> Answer:
    return decide_describe_configs(ctx.require_quorum().image(), body)


async def alter_configs(ctx: AdminContext, body: dict[str, Any]) -> Answer:
    # deduped too: a retry must not undo a change someone made after the lost answer
    return await _each_topic(ctx, "configs", body, body["topics"], _name, decide_alter_configs)


async def elect_leaders(ctx: AdminContext, body: dict[str, Any]) -> Answer:
    state = ctx.active_state()
    q = ctx.require_quorum()
    d, parts = decide_elect_leaders(q.image(), body, state)
    if d:
        await ctx.propose(d)
    return {**elect_leaders_answer(q.image(), parts), "metadata_offset": q.committed_offset()}


HANDLERS: HandlerTable = {
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.CREATE_PARTITIONS: create_partitions,
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.ALTER_CONFIGS: alter_configs,
    ApiKey.ELECT_LEADERS: elect_leaders,
}
