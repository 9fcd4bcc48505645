"""The queue workload (Jepsen's Kafka queue test): idempotent producers, assign and group consumers.

Theory of operation
-------------------
One topic (``QueueSpec.topic``), RF 3, ``min.insync.replicas`` 2, several partitions.

* **Producers** (``producers`` tasks): ``acks="all"``, ``enable_idempotence=True``,
  ``retries=0`` and one record in flight, so the outcome of a send is the outcome of exactly
  one produce attempt (see :func:`~chaos_tests.workloads.common.classify_error`).  Each
  process cycles over every partition, sending unique integer values.  ``ok`` carries the
  offset; a definite error is ``fail``; a timeout or an ambiguous error is ``info`` and the
  process continues as a new process id with a new producer (new producer id).
* **Assign consumers**: ``assign`` every partition, poll, record ``[topic, partition, offset,
  value]``.  A consumer that errs or times out is replaced by a new process which seeks to
  the positions the old one reached and records an ``assign`` with those positions.
* **Group consumers** (when ``rafka.client.groups`` is available): ``Consumer(group_id=...)``
  subscribe, poll, ``commit`` the next offsets after every non-empty poll.  Rebalance
  callbacks run in the group member's task, concurrently with the process's poll, so they
  only mark the partitions *touched*; the process records an ``assign`` event (the whole new
  assignment) between its ops, and drops from a poll the records of partitions touched while
  that poll was in flight (those records were then not observed, which is always sound).
  With ``static_members`` (``chaos run --static-members``) each group slot gives the consumer
  processes it restarts one ``group_instance_id``: a replacement takes its predecessor's
  member place and partitions back without a rebalance, and nobody leaves on close.
* **Final reads** (:func:`final_reads`): after the heal, every partition is read from the
  beginning up to its high watermark with a fresh consumer (``f = "final-read"``).

Everything is bounded: each op by ``RunContext.op_timeout_s``, each process by the run's
deadline, client start/close by ``CLIENT_START_TIMEOUT_S``.

Which node answered (the ``node`` of an op, read from the client, so the same on every
backend; issue 28).  A ``send`` invoke carries the partition's leader as the producer knew it
then (None before its first metadata answer: a new producer's first send); its completion
carries the broker its PRODUCE went to (the sender's ``sent_to``, cleared before each send,
so with ``retries=0`` it is this record's one attempt), else the invoke's.  A ``commit``
completion carries the group coordinator the client used (``coordinator_node``'s cache: the
node that answered an ``ok``).  ``poll`` and ``final-read`` completions carry the partition
leader per the client's metadata when the op returned (the consumer does not say which
broker a fetch came from) — for a poll only when every partition it returned records of has
one leader, and per partition in the value's ``leaders``.  ``assign`` and ``subscribe`` are
client-side (no broker answers them): None.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from ..history import tp_key
from .common import RunContext, classify_error, decode_value, encode_value, error_name

__all__ = [
    "QueueSpec",
    "groups_available",
    "create_queue_topic",
    "producer_process",
    "assign_consumer_process",
    "group_consumer_process",
    "run_queue",
    "final_reads",
]

log = logging.getLogger("chaos.queue")

BACKOFF_S = 0.25
MAX_POLL_RECORDS = 500


@dataclass(frozen=True)
class QueueSpec:
    topic: str = "chaos-queue"
    partitions: int = 4
    replication_factor: int = 3
    min_insync_replicas: int = 2
    producers: int = 3
    assign_consumers: int = 1
    group_consumers: int = 2
    group: str = "chaos-group"
    # static membership (KIP-345): each group slot keeps one group_instance_id across the
    # consumer processes it restarts, so a restart takes its predecessor's partitions back
    static_members: bool = False
    send_pause_s: float = 0.0
    acks: str = "all"  # "1" only for the unsafe (checker-can-fail) runs
    topic_config: Mapping[str, str] = field(default_factory=dict)

    def tps(self) -> list[tuple[str, int]]:
        return [(self.topic, p) for p in range(self.partitions)]


def groups_available() -> str | None:
    """None when consumer groups work in this build, else why not."""
    try:
        import rafka.client  # noqa: F401  (importing client registers the group coordinator)
        from rafka.client.aio import AsyncConsumer
    except ImportError as exc:  # pragma: no cover - the client is part of the project
        return f"client not importable: {exc}"
    if AsyncConsumer.coordinator_factory is None:
        return "consumer groups are not implemented in this build (client.groups missing)"
    return None


def _tp(topic: str, partition: int) -> Any:
    from rafka.client import TopicPartition

    return TopicPartition(topic, partition)


async def create_queue_topic(ctx: RunContext, spec: QueueSpec, *, timeout_s: float = 60.0) -> None:
    """Create the topic (retrying until ``timeout_s``) and wait until every partition has a leader."""
    from rafka.client import AsyncAdmin

    config = {"min.insync.replicas": str(spec.min_insync_replicas), **spec.topic_config}
    with trio.fail_after(timeout_s):
        while True:
            try:
                async with AsyncAdmin(**ctx.client_options()) as admin:
                    try:
                        await admin.create_topic(spec.topic, spec.partitions,
                                                 spec.replication_factor, config=config)
                    except Exception as exc:  # noqa: BLE001
                        if error_name(exc) != "TOPIC_ALREADY_EXISTS":
                            raise
                    desc = await admin.describe_topic(spec.topic)
                    if len(desc.partitions) == spec.partitions and all(
                            p.leader >= 0 and len(p.isr) == spec.replication_factor
                            for p in desc.partitions):
                        return
            except trio.TooSlowError:
                raise
            except Exception as exc:  # noqa: BLE001
                log.info("topic %s not ready yet: %s", spec.topic, exc)
            await trio.sleep(0.5)


# --------------------------------------------------------------------------- producers

def _node_id(node: Any) -> int | None:
    return node if isinstance(node, int) and node >= 0 else None


def _leader_of(client: Any, topic: str, partition: int) -> int | None:
    """The partition's leader in the client's metadata, or None (unknown: no metadata yet, or
    invalidated by an error)."""
    try:
        return _node_id(client._core.metadata.leader(_tp(topic, partition)))
    except Exception:  # noqa: BLE001 - best effort annotation
        return None


def _sent_to(producer: Any) -> dict[Any, int] | None:
    # client/aio/sender.py: Sender.sent_to, the node of each partition's last attempt
    sent = getattr(getattr(producer, "_sender", None), "sent_to", None)
    return sent if isinstance(sent, dict) else None


def _produced_to(producer: Any, topic: str, partition: int) -> int | None:
    """The broker the producer's last PRODUCE for the partition was written to, or None."""
    sent = _sent_to(producer)
    return _node_id(sent.get(_tp(topic, partition))) if sent is not None else None


async def _send_one(ctx: RunContext, producer: Any, process: int, topic: str,
                    partition: int) -> str:
    """One recorded send; returns the completion type.  The completion's ``node`` is the
    broker the PRODUCE went to (module docstring), the invoke's the leader known before."""
    h = ctx.history
    value = ctx.next_value()
    sent = _sent_to(producer)
    if sent is not None:
        # nothing of this producer is in flight (one send at a time, retries=0), so the entry
        # is the previous send's: drop it, so that only this record's attempt sets it
        sent.pop(_tp(topic, partition), None)
    inv = h.invoke(process, "send", {"topic": topic, "partition": partition, "key": None,
                                     "value": value},
                   node=_leader_of(producer, topic, partition))
    fut = None
    with trio.move_on_after(ctx.op_timeout_s):
        try:
            fut = await producer.send(topic, encode_value(value), partition=partition)
        except Exception as exc:  # noqa: BLE001 - not queued: the record never left the client
            h.fail(inv, dict(inv.value, error=error_name(exc)))
            ctx.count("send-fail")
            return "fail"
        try:
            meta = await fut
        except Exception as exc:  # noqa: BLE001
            kind = classify_error(exc)
            h.complete(inv, kind, dict(inv.value, error=error_name(exc)),
                       node=_produced_to(producer, topic, partition))
            ctx.count(f"send-{kind}")
            return kind
        h.ok(inv, dict(inv.value, partition=meta.partition, offset=meta.offset),
             node=_produced_to(producer, topic, partition))
        ctx.count("send-ok")
        return "ok"
    h.info(inv, dict(inv.value, error="timeout"), node=_produced_to(producer, topic, partition))
    ctx.count("send-info")
    return "info"


async def producer_process(ctx: RunContext, spec: QueueSpec, slot: int) -> None:
    """Send until the deadline; a new process id (and producer) after every ``info``."""
    from rafka.client import AsyncProducer

    rng = random.Random(slot)
    i = slot
    while ctx.running():
        process = ctx.next_process()
        timeout_ms = int(ctx.op_timeout_s * 1000)
        try:
            async with AsyncProducer(
                    bootstrap_servers=ctx.bootstrap, client_id=f"chaos-producer-{process}",
                    acks="all" if spec.acks == "all" else int(spec.acks),
                    enable_idempotence=spec.acks == "all", retries=0, linger_ms=0,
                    max_block_ms=timeout_ms, request_timeout_ms=ctx.request_timeout_ms,
                    delivery_timeout_ms=timeout_ms, max_in_flight_requests_per_connection=1,
                    metadata_max_age_ms=5000) as producer:
                while ctx.running():
                    partition = i % spec.partitions
                    i += 1
                    kind = await _send_one(ctx, producer, process, spec.topic, partition)
                    if kind == "info":
                        break
                    if kind == "fail":
                        await trio.sleep(BACKOFF_S * rng.uniform(0.5, 1.5))
                    elif spec.send_pause_s:
                        await trio.sleep(spec.send_pause_s)
                await producer.close(flush=False)
        except Exception as exc:  # noqa: BLE001 - a broken client: start a new process
            log.info("producer %d: %r", process, exc)
            await trio.sleep(BACKOFF_S)


# --------------------------------------------------------------------------- consumers

def _records(batch: Mapping[Any, list[Any]], skip: set[tuple[str, int]] | None = None
             ) -> list[list[Any]]:
    out: list[list[Any]] = []
    for tp, recs in batch.items():
        if skip and (tp.topic, tp.partition) in skip:
            continue
        for r in recs:
            out.append([r.topic, r.partition, r.offset, decode_value(r.value)])
    return out


async def _poll(ctx: RunContext, consumer: Any, process: int,
                touched: set[tuple[str, int]] | None = None) -> tuple[str, list[list[Any]]]:
    h = ctx.history
    inv = h.invoke(process, "poll", {})
    with trio.move_on_after(ctx.op_timeout_s):
        try:
            batch = await consumer.poll(timeout_ms=min(1000, ctx.op_timeout_s * 500),
                                        max_records=MAX_POLL_RECORDS)
        except Exception as exc:  # noqa: BLE001 - the position is now unknown
            h.info(inv, {"error": error_name(exc)})
            ctx.count("poll-info")
            return "info", []
        skip = set(touched) if touched else None
        records = _records(batch, skip)
        positions = {}
        leaders: dict[str, int | None] = {}
        for tp in batch:
            if not skip or (tp.topic, tp.partition) not in skip:
                recs = batch[tp]
                if recs:
                    positions[tp_key(tp.topic, tp.partition)] = recs[-1].offset + 1
                    leaders[tp_key(tp.topic, tp.partition)] = _leader_of(consumer, tp.topic,
                                                                         tp.partition)
        nodes = set(leaders.values())
        value: dict[str, Any] = {"records": records, "positions": positions}
        if leaders:
            value["leaders"] = leaders
        h.ok(inv, value, node=nodes.pop() if len(nodes) == 1 else None)
        ctx.count("poll-ok")
        ctx.count("polled-records", len(records))
        return "ok", records
    h.info(inv, {"error": "timeout"})
    ctx.count("poll-info")
    return "info", []


async def assign_consumer_process(ctx: RunContext, spec: QueueSpec, slot: int, *,
                                  tps: list[tuple[str, int]] | None = None,
                                  consumer_options: Mapping[str, Any] | None = None,
                                  assign_extra: Mapping[str, Any] | None = None) -> None:
    """Poll every partition (or ``tps``) by ``assign``; a new process after an ``info``.

    ``consumer_options`` go to the consumer (the txn workload's ``isolation_level``) and
    ``assign_extra`` into every recorded ``assign`` value.
    """
    from rafka.client import AsyncConsumer

    positions: dict[tuple[str, int], int] = {}
    tps = spec.tps() if tps is None else tps
    while ctx.running():
        process = ctx.next_process()
        try:
            async with AsyncConsumer(bootstrap_servers=ctx.bootstrap,
                                     client_id=f"chaos-consumer-{process}",
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     fetch_max_wait_ms=200,
                                     request_timeout_ms=ctx.request_timeout_ms,
                                     metadata_max_age_ms=5000,
                                     **(consumer_options or {})) as consumer:
                consumer.assign([_tp(t, p) for t, p in tps])
                for (t, p), pos in positions.items():
                    consumer.seek(_tp(t, p), pos)
                value = {"partitions": [tp_key(t, p) for t, p in tps],
                         "positions": {tp_key(t, p): o for (t, p), o in positions.items()},
                         **(assign_extra or {})}
                inv = ctx.history.invoke(process, "assign", value)
                ctx.history.ok(inv)
                while ctx.running():
                    kind, records = await _poll(ctx, consumer, process)
                    for t, p, o, _v in records:
                        positions[(t, p)] = max(positions.get((t, p), 0), o + 1)
                    if kind != "ok":
                        break
        except Exception as exc:  # noqa: BLE001
            log.info("consumer %d: %r", process, exc)
            await trio.sleep(BACKOFF_S)


class _GroupTracker:
    """Rebalance callbacks → partitions touched since the process last recorded an assign."""

    def __init__(self) -> None:
        self.touched: set[tuple[str, int]] = set()
        self.changed = False

    def mark(self, tps: set[Any]) -> None:
        self.touched |= {(tp.topic, tp.partition) for tp in tps}
        self.changed = True


def _record_assign(ctx: RunContext, consumer: Any, process: int, tracker: _GroupTracker) -> None:
    if not tracker.changed:
        return
    tracker.changed = False
    tracker.touched.clear()
    parts = sorted(tp_key(tp.topic, tp.partition) for tp in consumer.assignment())
    inv = ctx.history.invoke(process, "assign", {"partitions": parts})
    ctx.history.ok(inv)
    ctx.count("rebalances")


def _coordinator_of(consumer: Any, group: str) -> int | None:
    """The group coordinator the consumer's last request went to, from the client's cache
    (``client/aio/coordinator.py``: set when FIND_COORDINATOR answered, dropped when the node
    failed a request), or None.  After a commit answered ``ok``: the node that answered."""
    try:
        from rafka.client.aio.coordinator import KEY_TYPE_GROUP, known_coordinator

        return _node_id(known_coordinator(consumer._core, KEY_TYPE_GROUP, group))
    except Exception:  # noqa: BLE001 - best effort annotation
        return None


async def _commit(ctx: RunContext, consumer: Any, process: int, group: str,
                  offsets: dict[tuple[str, int], int]) -> str:
    h = ctx.history
    value = {"group": group, "offsets": {tp_key(t, p): o for (t, p), o in offsets.items()}}
    inv = h.invoke(process, "commit", value)
    with trio.move_on_after(ctx.op_timeout_s):
        try:
            await consumer.commit({_tp(t, p): o for (t, p), o in offsets.items()})
        except Exception as exc:  # noqa: BLE001
            name = error_name(exc)
            kind = "fail" if name in ("FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID",
                                      "ILLEGAL_GENERATION", "STALE_MEMBER") \
                else classify_error(exc)
            h.complete(inv, kind, dict(value, error=name), node=_coordinator_of(consumer, group))
            ctx.count(f"commit-{kind}")
            return kind
        h.ok(inv, node=_coordinator_of(consumer, group))
        ctx.count("commit-ok")
        return "ok"
    h.info(inv, dict(value, error="timeout"), node=_coordinator_of(consumer, group))
    ctx.count("commit-info")
    return "info"


async def group_consumer_process(ctx: RunContext, spec: QueueSpec, slot: int) -> None:
    """Subscribe with ``group_id``; poll, commit after each non-empty poll."""
    while ctx.running():
        process = ctx.next_process()
        try:
            await _group_member(ctx, spec, process, slot)
        except Exception as exc:  # noqa: BLE001
            log.info("group consumer %d: %r", process, exc)
        await trio.sleep(BACKOFF_S)


async def _group_member(ctx: RunContext, spec: QueueSpec, process: int, slot: int) -> None:
    from rafka.client import AsyncConsumer

    h = ctx.history
    tracker = _GroupTracker()
    static = {"group_instance_id": f"chaos-static-{slot}"} if spec.static_members else {}
    async with AsyncConsumer(
            bootstrap_servers=ctx.bootstrap, client_id=f"chaos-group-{process}",
            group_id=spec.group, auto_offset_reset="earliest", enable_auto_commit=False,
            fetch_max_wait_ms=200, request_timeout_ms=ctx.request_timeout_ms,
            metadata_max_age_ms=5000, session_timeout_ms=6000,
            on_partitions_assigned=tracker.mark, on_partitions_revoked=tracker.mark,
            on_partitions_lost=tracker.mark, **static) as consumer:
        inv = h.invoke(process, "subscribe", {"topics": [spec.topic], "group": spec.group})
        outcome = "info"
        with trio.move_on_after(ctx.op_timeout_s):
            try:
                await consumer.subscribe([spec.topic])
                outcome = "ok"
            except Exception as exc:  # noqa: BLE001
                outcome = "error"
                h.info(inv, dict(inv.value, error=error_name(exc)))
        if outcome == "info":
            h.info(inv, dict(inv.value, error="timeout"))
        if outcome != "ok":
            return
        h.ok(inv)
        while ctx.running():
            _record_assign(ctx, consumer, process, tracker)
            kind, records = await _poll(ctx, consumer, process, tracker.touched)
            if kind != "ok":
                return
            _record_assign(ctx, consumer, process, tracker)
            if records:
                owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
                offsets: dict[tuple[str, int], int] = {}
                for t, p, o, _v in records:
                    if (t, p) in owned:
                        offsets[(t, p)] = max(offsets.get((t, p), 0), o + 1)
                if offsets and await _commit(ctx, consumer, process, spec.group,
                                             offsets) == "info":
                    return


# --------------------------------------------------------------------------- orchestration

async def run_queue(ctx: RunContext, spec: QueueSpec, *, groups: bool = True) -> dict[str, Any]:
    """Run producers and consumers until ``ctx.deadline``; returns notes for the report."""
    notes: dict[str, Any] = {}
    why_not = groups_available() if groups and spec.group_consumers else "disabled"
    if why_not is not None:
        notes["group_consumers"] = f"off: {why_not}"
        if groups and spec.group_consumers:
            log.warning("group workload off: %s", why_not)
    async with trio.open_nursery() as nursery:
        for i in range(spec.producers):
            nursery.start_soon(producer_process, ctx, spec, i)
        for i in range(spec.assign_consumers):
            nursery.start_soon(assign_consumer_process, ctx, spec, i)
        if why_not is None:
            for i in range(spec.group_consumers):
                nursery.start_soon(group_consumer_process, ctx, spec, i)
    return notes


async def _final_read_one(ctx: RunContext, topic: str, partition: int, timeout_s: float, *,
                          consumer_options: Mapping[str, Any] | None = None,
                          extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One final read; ``consumer_options`` go to the consumer, ``extra`` into the values.

    Complete = the consumer's position reached the end it was given (offsets of control
    records and of filtered aborted records are never returned, so the last record read may
    lie below ``end - 1``).
    """
    from rafka.client import AsyncConsumer

    h = ctx.history
    process = ctx.next_process()
    inv = h.invoke(process, "final-read", {"topic": topic, "partition": partition,
                                           **(extra or {})})
    records: list[list[Any]] = []
    end: int | None = None
    error: str | None = None
    pos = -1
    node: int | None = None
    with trio.move_on_after(timeout_s) as scope:
        try:
            async with AsyncConsumer(bootstrap_servers=ctx.bootstrap,
                                     client_id=f"chaos-final-{process}",
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     fetch_max_wait_ms=200,
                                     request_timeout_ms=ctx.request_timeout_ms,
                                     **(consumer_options or {})) as c:
                tp = _tp(topic, partition)
                c.assign([tp])
                await c.seek_to_beginning(tp)
                while end is None:
                    try:
                        end = (await c.end_offsets([tp]))[tp]
                    except Exception as exc:  # noqa: BLE001
                        error = error_name(exc)
                        await trio.sleep(0.5)
                while pos < end - 1:
                    batch = await c.poll(timeout_ms=1000, max_records=MAX_POLL_RECORDS)
                    got = _records(batch)
                    records.extend(got)
                    if got:
                        pos = max(pos, max(r[2] for r in got))
                        node = _leader_of(c, topic, partition)  # the leader that served it
                    elif await c.position(tp) >= end:
                        pos = end - 1
                        break
                if node is None:
                    node = _leader_of(c, topic, partition)
        except Exception as exc:  # noqa: BLE001
            error = error_name(exc)
    complete = end is not None and (pos >= end - 1 if end else True) \
        and not scope.cancelled_caught and error is None
    # Always ``ok``: what was read was read.  An incomplete read still counts as the final
    # read of the partition, so acked records past it are reported ``unseen`` (a liveness
    # failure the report must show), never silently skipped.
    h.ok(inv, {"records": records, "end": end, "complete": complete, **(extra or {}),
               **({"error": error} if error else {})}, node=node)
    return {"tp": tp_key(topic, partition), "records": len(records), "end": end,
            "complete": complete, "error": error}


async def final_reads(ctx: RunContext, spec: QueueSpec, *, timeout_s: float = 60.0
                      ) -> list[dict[str, Any]]:
    """Read every partition from the beginning to its high watermark (one at a time)."""
    out = []
    for topic, partition in spec.tps():
        out.append(await _final_read_one(ctx, topic, partition, timeout_s))
    return out
