"""The ``txn`` workload: transactional writers, read_committed / read_uncommitted readers, and
a consume-transform-produce pipeline (checked by :mod:`rafka.chaos_tests.checkers_txn`).

Theory of operation
-------------------
Topics (RF 3, ``min.insync.replicas`` 2): ``TxnSpec.topics`` for the writers, and an input and
an output topic for the transform.

* **Writers** (``writers`` tasks, transactional id ``chaos-txn-w<slot>`` each, kept across
  restarts so ``init_transactions`` fences the previous incarnation and aborts what it left
  open): each transaction writes one unique value to each of 2–4 random partitions of the
  writer topics, waits until every send is acknowledged (so the records are in the log: an
  abort right after ``send`` would only drop batches still in the producer, and aborts would
  never be tested) and then commits, or, with probability ``abort_probability``, aborts.  One op
  ``f = "txn"``: invoke ``{"writes": [[topic, partition, value], ...], "abort": bool}``; ok
  ``{"writes": [[topic, partition, value, offset], ...], "commit_ns": t}`` once
  ``commit_transaction`` returned (``commit_ns`` = history time just before the producer asked
  to commit); ``fail`` when the commit was never requested (aborted on purpose, or an error
  before the commit: such a transaction can only be aborted); ``info`` when the commit raised
  (outcome unknown).  After anything but a clean commit or a clean abort the process continues
  under a new process id with a new producer (same transactional id).
* **Readers**: ``assign`` consumers over every partition, ``read_committed`` ones and
  ``read_uncommitted`` ones (the latter must see aborted values: the proof that aborts are
  real).  The isolation level is in each recorded ``assign`` value.
* **Transform**: a feeder sends unique values to the input topic (the queue workload's
  idempotent producer, ``f = "send"``); one group member (``read_committed``) polls them and in
  one transaction writes ``"t:" + value`` to the output topic (partition = input partition mod
  the output's partitions) and sends the consumed offsets with
  ``send_offsets_to_transaction``.  One op ``f = "transform"`` per transaction: invoke
  ``{"group", "consumed": [[topic, partition, offset, value]...], "writes": [[topic,
  partition, value]...], "offsets": {"t/p": next}, "in_txn": bool}``, completions as for
  ``txn``.  After a commit the member "crashes" (is replaced by a new one, which resumes from
  the group's committed offsets) with probability ``crash_probability``, so replays happen.
  **Unsafe** (``unsafe_offsets_outside_txn``): the offsets are committed with the plain
  ``consumer.commit()`` *after* the transaction; a crash in between replays committed input,
  which ``transform-exactly-once`` (and ``duplicate``) must report.
* **Final reads** (:func:`txn_final_reads`): per partition, wait (bounded) until the last
  stable offset reaches the high watermark, then read it in both isolation levels (the
  read_committed value carries the ``hw`` seen before); then record the transform group's
  committed offsets (``f = "group-offsets"``).
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from ..history import tp_key
from .common import RunContext, classify_error, decode_value, encode_value, error_name
from .queue import (
    BACKOFF_S,
    QueueSpec,
    _final_read_one,
    _tp,
    assign_consumer_process,
    create_queue_topic,
    producer_process,
)

__all__ = [
    "TxnSpec",
    "create_txn_topics",
    "writer_process",
    "transform_process",
    "run_txn",
    "txn_final_reads",
]

log = logging.getLogger("chaos.txn")

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
TRANSFORM_MAX_RECORDS = 20


@dataclass(frozen=True)
class TxnSpec:
    topics: tuple[str, ...] = ("chaos-txn-a", "chaos-txn-b")
    partitions: int = 3  # per topic (writer, input and output topics alike)
    replication_factor: int = 3
    min_insync_replicas: int = 2
    writers: int = 3
    committed_readers: int = 1
    uncommitted_readers: int = 1
    min_writes: int = 2
    max_writes: int = 4
    abort_probability: float = 0.2
    transaction_timeout_ms: int = 10_000
    transform: bool = True
    input_topic: str = "chaos-txn-in"
    output_topic: str = "chaos-txn-out"
    group: str = "chaos-txn-etl"
    feed_pause_s: float = 0.05
    crash_probability: float = 0.1
    unsafe_offsets_outside_txn: bool = False
    topic_config: Mapping[str, str] = field(default_factory=dict)  # every topic of the workload's

    @property
    def topic(self) -> str:
        """The topic the nemesis's ``@leader`` and the recovery wait look at."""
        return self.topics[0]

    def writer_tps(self) -> list[tuple[str, int]]:
        return [(t, p) for t in self.topics for p in range(self.partitions)]

    def all_topics(self) -> list[str]:
        extra = [self.input_topic, self.output_topic] if self.transform else []
        return [*self.topics, *extra]

    def tps(self) -> list[tuple[str, int]]:
        return [(t, p) for t in self.all_topics() for p in range(self.partitions)]

    def queue_spec(self, topic: str) -> QueueSpec:
        return QueueSpec(topic=topic, partitions=self.partitions,
                         replication_factor=self.replication_factor,
                         min_insync_replicas=self.min_insync_replicas, producers=1,
                         send_pause_s=self.feed_pause_s, topic_config=self.topic_config)


async def create_txn_topics(ctx: RunContext, spec: TxnSpec, *, timeout_s: float = 60.0) -> None:
    for topic in spec.all_topics():
        await create_queue_topic(ctx, spec.queue_spec(topic), timeout_s=timeout_s)


async def _maybe_await(x: Any) -> Any:
    """``begin_transaction`` is local (sync in Kafka's client); accept either shape."""
    return await x if inspect.isawaitable(x) else x


def _producer(ctx: RunContext, spec: TxnSpec, transactional_id: str, process: int) -> Any:
    from rafka.client import AsyncProducer

    timeout_ms = int(ctx.op_timeout_s * 1000)
    return AsyncProducer(bootstrap_servers=ctx.bootstrap, client_id=f"chaos-txn-{process}",
                         transactional_id=transactional_id,
                         transaction_timeout_ms=spec.transaction_timeout_ms, acks="all",
                         enable_idempotence=True, linger_ms=0, max_block_ms=timeout_ms,
                         request_timeout_ms=ctx.request_timeout_ms,
                         delivery_timeout_ms=timeout_ms, metadata_max_age_ms=5000)


async def _init(ctx: RunContext, producer: Any) -> None:
    with trio.fail_after(2 * ctx.op_timeout_s):
        await producer.init_transactions()


async def _offsets_of(futures: list[Any]) -> list[int | None]:
    """Offsets of the already-acknowledged sends of a transaction."""
    out: list[int | None] = []
    for fut in futures:
        off = None
        with trio.move_on_after(0.5):
            try:
                off = (await fut).offset
            except Exception:  # noqa: BLE001 - unknown: the checkers then use the final reads
                off = None
        out.append(off)
    return out


async def _run_txn(ctx: RunContext, producer: Any, process: int, f: str,
                   value: dict[str, Any], *, abort: bool = False,
                   offsets: tuple[dict[Any, int], Any] | None = None) -> str:
    """One recorded transaction: begin, send ``value["writes"]``, (offsets), commit or abort.

    Returns ``ok``, ``aborted`` (a clean intended abort), ``fail`` or ``info``.
    """
    h = ctx.history
    inv = h.invoke(process, f, value)
    writes = value["writes"]
    stage, commit_ns = "begin", None
    futures: list[Any] = []
    with trio.move_on_after(2 * ctx.op_timeout_s):
        try:
            await _maybe_await(producer.begin_transaction())
            stage = "send"
            for t, p, v in writes:
                futures.append(await producer.send(t, encode_value(v), partition=p))
            for fut in futures:  # in the log before deciding: an abort then has data to abort
                await fut
            if offsets is not None:
                await producer.send_offsets_to_transaction(*offsets)
            if abort:
                stage = "abort"
                await producer.abort_transaction()
                h.fail(inv, dict(value, aborted=True))
                ctx.count(f"{f}-aborted")
                return "aborted"
            stage = "commit"
            commit_ns = h.now_ns()
            await producer.commit_transaction()
        except Exception as exc:  # noqa: BLE001
            kind = "info" if stage == "commit" else "fail"
            h.complete(inv, kind, dict(value, error=error_name(exc), stage=stage,
                                       commit_ns=commit_ns))
            ctx.count(f"{f}-{kind}")
            return kind
        got = await _offsets_of(futures)
        h.ok(inv, dict(value, writes=[[t, p, v, o] for (t, p, v), o in zip(writes, got,
                                                                           strict=True)],
                       commit_ns=commit_ns))
        ctx.count(f"{f}-ok")
        return "ok"
    kind = "info" if stage == "commit" else "fail"
    h.complete(inv, kind, dict(value, error="timeout", stage=stage, commit_ns=commit_ns))
    ctx.count(f"{f}-{kind}")
    return kind


# --------------------------------------------------------------------------- writers

async def writer_process(ctx: RunContext, spec: TxnSpec, slot: int) -> None:
    """Transactions until the deadline; a new process id (and producer) after a failure."""
    rng = random.Random(1000 + slot)
    tps = spec.writer_tps()
    while ctx.running():
        process = ctx.next_process()
        try:
            async with _producer(ctx, spec, f"chaos-txn-w{slot}", process) as producer:
                await _init(ctx, producer)
                while ctx.running():
                    n = rng.randint(spec.min_writes, min(spec.max_writes, len(tps)))
                    writes = [[t, p, ctx.next_value()] for t, p in rng.sample(tps, n)]
                    abort = rng.random() < spec.abort_probability
                    kind = await _run_txn(ctx, producer, process, "txn",
                                          {"writes": writes, "abort": abort}, abort=abort)
                    if kind not in ("ok", "aborted"):
                        break
                await producer.close(flush=False)
        except Exception as exc:  # noqa: BLE001 - a broken client: start a new process
            log.info("txn writer %d: %r", process, exc)
        await trio.sleep(BACKOFF_S * rng.uniform(0.5, 1.5))


# --------------------------------------------------------------------------- transform

async def transform_process(ctx: RunContext, spec: TxnSpec) -> None:
    """The consume-transform-produce member; replaced by a new member after each "crash"."""
    rng = random.Random(77)
    while ctx.running():
        process = ctx.next_process()
        try:
            await _transform_member(ctx, spec, process, rng)
        except Exception as exc:  # noqa: BLE001
            log.info("transform %d: %r", process, exc)
        await trio.sleep(BACKOFF_S)


async def _subscribe(ctx: RunContext, consumer: Any, process: int, spec: TxnSpec) -> bool:
    h = ctx.history
    inv = h.invoke(process, "subscribe", {"topics": [spec.input_topic], "group": spec.group,
                                          "isolation": READ_COMMITTED})
    with trio.move_on_after(ctx.op_timeout_s):
        try:
            await consumer.subscribe([spec.input_topic])
        except Exception as exc:  # noqa: BLE001
            h.info(inv, dict(inv.value, error=error_name(exc)))
            return False
        h.ok(inv)
        return True
    h.info(inv, dict(inv.value, error="timeout"))
    return False


async def _commit_outside(ctx: RunContext, consumer: Any, process: int, group: str,
                          positions: dict[Any, int]) -> str:
    """The unsafe variant's plain offset commit (recorded as ``commit``)."""
    h = ctx.history
    value = {"group": group, "offsets": {tp_key(tp.topic, tp.partition): o
                                         for tp, o in positions.items()}}
    inv = h.invoke(process, "commit", value)
    with trio.move_on_after(ctx.op_timeout_s):
        try:
            await consumer.commit(positions)
        except Exception as exc:  # noqa: BLE001
            kind = classify_error(exc)
            h.complete(inv, kind, dict(value, error=error_name(exc)))
            return kind
        h.ok(inv)
        return "ok"
    h.info(inv, dict(value, error="timeout"))
    return "info"


async def _transform_member(ctx: RunContext, spec: TxnSpec, process: int,
                            rng: random.Random) -> None:
    from rafka.client import AsyncConsumer

    async with AsyncConsumer(
            bootstrap_servers=ctx.bootstrap, client_id=f"chaos-transform-{process}",
            group_id=spec.group, isolation_level=READ_COMMITTED,
            auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=200,
            request_timeout_ms=ctx.request_timeout_ms, metadata_max_age_ms=5000,
            session_timeout_ms=6000) as consumer, \
            _producer(ctx, spec, "chaos-txn-transform", process) as producer:
        await _init(ctx, producer)
        if not await _subscribe(ctx, consumer, process, spec):
            return
        while ctx.running():
            batch: dict[Any, list[Any]] = {}
            with trio.move_on_after(ctx.op_timeout_s):
                batch = await consumer.poll(timeout_ms=500, max_records=TRANSFORM_MAX_RECORDS)
            records = [r for recs in batch.values() for r in recs]
            if not records:
                continue
            consumed = [[r.topic, r.partition, r.offset, decode_value(r.value)] for r in records]
            positions = {tp: recs[-1].offset + 1 for tp, recs in batch.items() if recs}
            value = {"group": spec.group, "consumed": consumed,
                     "writes": [[spec.output_topic, p % spec.partitions, f"t:{v}"]
                                for _t, p, _o, v in consumed],
                     "offsets": {tp_key(tp.topic, tp.partition): o
                                 for tp, o in positions.items()},
                     "in_txn": not spec.unsafe_offsets_outside_txn}
            offsets = None if spec.unsafe_offsets_outside_txn else (
                positions, consumer.group_metadata())
            kind = await _run_txn(ctx, producer, process, "transform", value, offsets=offsets)
            if kind != "ok" or rng.random() < spec.crash_probability:
                ctx.count("transform-restarts")
                return  # the next member resumes from the group's committed offsets
            if spec.unsafe_offsets_outside_txn and await _commit_outside(
                    ctx, consumer, process, spec.group, positions) != "ok":
                return


# --------------------------------------------------------------------------- orchestration

async def run_txn(ctx: RunContext, spec: TxnSpec) -> dict[str, Any]:
    """Run writers, readers and the transform until ``ctx.deadline``; notes for the report."""
    writer_tps = spec.writer_tps()
    reader_tps = [*writer_tps, *((spec.output_topic, p) for p in range(spec.partitions)
                                 if spec.transform)]
    readers = ([READ_COMMITTED] * spec.committed_readers
               + [READ_UNCOMMITTED] * spec.uncommitted_readers)
    async with trio.open_nursery() as nursery:
        for i in range(spec.writers):
            nursery.start_soon(writer_process, ctx, spec, i)
        for i, iso in enumerate(readers):
            nursery.start_soon(functools.partial(
                assign_consumer_process, ctx, spec.queue_spec(spec.topic), i, tps=reader_tps,
                consumer_options={"isolation_level": iso}, assign_extra={"isolation": iso}))
        if spec.transform:
            nursery.start_soon(producer_process, ctx, spec.queue_spec(spec.input_topic), 0)
            nursery.start_soon(transform_process, ctx, spec)
    return {"txn_unsafe": "offsets committed outside the transaction"
            if spec.unsafe_offsets_outside_txn else None}


async def _stable_hw(ctx: RunContext, topic: str, partition: int, timeout_s: float
                     ) -> int | None:
    """Wait until LSO == HW (bounded); returns the high watermark last seen."""
    from rafka.client import AsyncConsumer

    tp = _tp(topic, partition)
    hw: int | None = None
    with trio.move_on_after(timeout_s):
        async with AsyncConsumer(bootstrap_servers=ctx.bootstrap,
                                 request_timeout_ms=ctx.request_timeout_ms,
                                 isolation_level=READ_UNCOMMITTED) as ru, \
                AsyncConsumer(bootstrap_servers=ctx.bootstrap,
                              request_timeout_ms=ctx.request_timeout_ms,
                              isolation_level=READ_COMMITTED) as rc:
            while True:
                try:
                    hw = (await ru.end_offsets([tp]))[tp]
                    if (await rc.end_offsets([tp]))[tp] >= hw:
                        return hw
                except Exception as exc:  # noqa: BLE001
                    log.info("end offsets of %s/%d: %r", topic, partition, exc)
                await trio.sleep(0.5)
    return hw


async def _record_group_offsets(ctx: RunContext, spec: TxnSpec) -> None:
    from rafka.client import AsyncConsumer

    h = ctx.history
    process = ctx.next_process()
    inv = h.invoke(process, "group-offsets", {"group": spec.group})
    offsets: dict[str, int] = {}
    with trio.move_on_after(4 * ctx.op_timeout_s):
        try:
            async with AsyncConsumer(bootstrap_servers=ctx.bootstrap, group_id=spec.group,
                                     enable_auto_commit=False,
                                     request_timeout_ms=ctx.request_timeout_ms) as c:
                for p in range(spec.partitions):
                    got = await c.committed(_tp(spec.input_topic, p))
                    offsets[tp_key(spec.input_topic, p)] = 0 if got is None else int(got)
        except Exception as exc:  # noqa: BLE001
            h.fail(inv, {"group": spec.group, "error": error_name(exc)})
            return
        h.ok(inv, {"group": spec.group, "offsets": offsets})
        return
    h.fail(inv, {"group": spec.group, "error": "timeout"})


async def txn_final_reads(ctx: RunContext, spec: TxnSpec, *, timeout_s: float = 60.0
                          ) -> list[dict[str, Any]]:
    """Every partition in both isolation levels once its transactions are decided."""
    out = []
    stable_wait_s = 2 * spec.transaction_timeout_ms / 1000 + 5
    for topic, partition in spec.tps():
        hw = await _stable_hw(ctx, topic, partition, stable_wait_s)
        for iso in (READ_COMMITTED, READ_UNCOMMITTED):
            extra = {"isolation": iso, **({"hw": hw} if iso == READ_COMMITTED else {})}
            got = await _final_read_one(ctx, topic, partition, timeout_s,
                                        consumer_options={"isolation_level": iso}, extra=extra)
            out.append(dict(got, isolation=iso, hw=hw))
    if spec.transform:
        await _record_group_offsets(ctx, spec)
    return out


def unsafe(spec: TxnSpec) -> TxnSpec:
    """The checker-can-fail variant: transform offsets committed outside the transaction."""
    return replace(spec, unsafe_offsets_outside_txn=True, crash_probability=0.3)
