"""The producer's sender: one trio task that turns closed batches into PRODUCE requests.

Theory of operation
-------------------
``AsyncProducer`` (``client/aio/producer.py``) composes three collaborators: the enqueue path
(``client/aio/enqueue.py``: every ``send`` variant appends through it to the
``RecordAccumulator``), the ``TransactionManager`` (``client/aio/transactions.py``, only with a
``transactional_id``) and this ``Sender``, built when the producer starts as
``Sender(accumulator, core, txn, config=..., gate=..., wakeup=...)``. The sender owns the state
it uses — per-partition queues (``PartitionState``), requests in flight per broker, the producer
id and epoch — and reads only its constructor's arguments. Its ``run`` task, in the producer's
nursery, loops:

1. drain closed and lingered batches from the accumulator into per-partition ``PartitionState``
   queues;
2. for every partition whose leader is known and that may send (``max_in_flight``, retry
   ordering), take one batch, assign its idempotent sequence and build its bytes once
   (``log.batch.build_batch``, lz4 when asked);
3. group the batches by leader broker — all partitions led by one broker travel in one PRODUCE
   request (up to ``max_request_size``) — and start one request task per group; a broker has at
   most ``max_in_flight_requests_per_connection`` requests in flight, pipelined on one
   connection;
4. sleep until woken (a batch closed or was created, a response came back) or until the next
   linger / retry deadline.

Response handling per partition: success settles the batch (``BatchResult``) and frees its
memory; DUPLICATE_SEQUENCE_NUMBER counts as success (the broker already has it);
OUT_OF_ORDER_SEQUENCE_NUMBER is retried when an earlier batch of the partition is still
unacknowledged (the usual consequence of that earlier batch failing) and fatal otherwise;
retriable errors (NOT_LEADER_OR_FOLLOWER, timeouts, broken connections…) invalidate the
metadata and retry the batch with the same sequence after ``retry_backoff_ms``, as long as
``retries`` and ``delivery_timeout_ms`` allow; anything else fails the batch. ``acks=0``
requests get no response: their batches settle as sent, with offset -1.

MESSAGE_TOO_LARGE (the topic's ``max.message.bytes``; the leader checks it before appending, so
nothing of the batch was written and none of its sequences used) on a batch of several records
splits it, as Kafka's producer does (``_split``): into parts that fit the broker's limit when
its answer names it ("record batch of N bytes exceeds max.message.bytes=L", which also gives the
ratio of wire bytes to the accumulator's estimate), else into halves; the parts keep record
order, take over the original's sequences, and go ahead of every later batch of the partition
(``PartitionState.requeue_split``); a part refused again is split again. The futures already
returned follow their records into the parts (``BatchResult.split_into``). Only a single-record
batch fails, with ``MessageTooLargeError`` (code MESSAGE_TOO_LARGE); its sequence is given back and later batches of the
partition renumbered (``PartitionState.release_sequences``), so later records still go
through.

A new producer id when the broker forgot ours (an idempotent producer without transactions,
as Kafka's KIP-360 does with an epoch bump): UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER
that fails a batch for good means the partition's leader holds no state that continues our
sequences — it dropped the producer after ``expiration_ms`` idle (24 h), the topic was deleted
and created again, or a sequence gap — and every later batch of the partition would be refused
the same way, forever. The batch fails with that error; then the sender stops taking *new*
batches (those without a sequence) on every partition, lets every batch that has one (in
flight or to retry) reach its outcome under the old id, and only then asks for a new producer
id (``INIT_PRODUCER_ID``), restarts every partition's sequences at 0 and goes on. No batch is
ever sent under two producer ids, so the reset cannot duplicate a record: whatever the broker
appended under the old id stays deduplicated by it. ``producer_id_resets`` counts them.

Leader changes during a retry backoff (the backoff doubles per attempt, up to 1 s): while a
batch waits out a backoff longer than ``_BACKOFF_REFRESH_S``, the sender refreshes the
metadata that often, and a batch whose partition is now led by another broker than the one its
last attempt went to is retried at once (as Kafka's KIP-951). Without it a producer that had
met a dead leader for a while learned of the new one only at its next attempt, up to a second
after the failover, and then still waited out one more backoff.

Everything here runs in the producer's trio loop; ``Wakeup`` is the one entry other threads
use (the accumulator calls it when a ``send_threadsafe`` or a C ``send`` creates or closes a
batch). The ``Gate`` (``client/aio/enqueue.py``) is the state the sender shares with the
enqueue path: ``closed`` (drain everything) and ``fatal`` (the producer id was refused).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from rafka.client.aio._core import REFRESH_CODES, ClientCore
from rafka.client.aio.accumulator import (
    PartitionState,
    ProducerBatch,
    RecordAccumulator,
    record_size,
)
from rafka.client.aio.producer_config import ProducerConfig
from rafka.client.aio.transactions import TransactionManager
from rafka.client.errors import KafkaTimeoutError
from rafka.client.throttle_stats import ThrottleMeter
from rafka.client.types import TopicPartition
from rafka.wire.connection import PendingResponse, backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey, Response

if TYPE_CHECKING:
    from rafka.client.aio.enqueue import Gate

__all__ = ["Sender", "Wakeup"]


class Wakeup:
    """Wakes the sender task from any thread: the accumulator calls it when a batch closes
    or is created (``RecordAccumulator(wakeup=...)``), answers and the transaction manager
    when a partition may go. ``start`` tells it the loop's thread and token."""

    def __init__(self) -> None:
        self.event = trio.Event()
        self.loop_thread = 0
        self.token: trio.lowlevel.TrioToken | None = None

    def start(self, loop_thread: int, token: trio.lowlevel.TrioToken) -> None:
        self.loop_thread = loop_thread
        self.token = token

    def __call__(self) -> None:
        if threading.get_ident() == self.loop_thread:
            self.event.set()
        elif self.token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self.token.run_sync_soon(self.event.set)

    def rearm(self) -> trio.Event:
        """A fresh event for the sender's next sleep."""
        self.event = trio.Event()
        return self.event


class Sender:
    """The producer's sender (module docstring): owns the per-partition send state, the
    requests in flight, the producer id / epoch; reads the accumulator, the client core, the
    transaction manager (``None`` without a ``transactional_id``) and the producer's ``Gate``.
    Also what ``TransactionManager`` calls back (``transactions.ProducerHooks``)."""

    def __init__(self, acc: RecordAccumulator, core: ClientCore, txn: TransactionManager | None,
                 *, config: ProducerConfig, gate: Gate, wakeup: Wakeup) -> None:
        self.acc = acc
        self.core = core
        self.txn = txn
        self.config = config
        self.gate = gate
        self.wakeup = wakeup
        self.parts: dict[TopicPartition, PartitionState] = {}
        self.node_inflight: dict[int, int] = {}
        self.sent_to: dict[TopicPartition, int] = {}  # node of a partition's last attempt
        self.backoff_refresh_at = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.pid_reset_wanted = False  # the broker forgot our producer id (module docstring)
        self.producer_id_resets = 0
        self.flushing = 0  # flush() calls waiting: drain every batch, lingering or not
        self.batches_split = 0  # batches split after MESSAGE_TOO_LARGE (statistics)
        self.throttle = ThrottleMeter()  # the brokers' throttle_time_ms (byte-rate quotas)
        self.nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery) -> None:
        """Run the sender task (and later its request tasks) in ``nursery``."""
        self.nursery = nursery
        nursery.start_soon(self.run)

    def start_soon(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the producer's nursery (the transaction manager's fence check)."""
        assert self.nursery is not None
        self.nursery.start_soon(fn)

    def _wake(self) -> None:
        self.wakeup.event.set()

    def _open_partitions(self) -> list[TopicPartition]:
        """The partitions with a batch still open (lingering) in the accumulator."""
        return [TopicPartition(t, p) for t, p in self.acc.open_partitions()]

    # ------------------------------------------------------------------ what the producer asks

    async def flush(self) -> None:
        """Wait until every record appended before this call is acknowledged or has failed;
        a fenced transactional producer's flush raises ``ProducerFencedError``."""
        self.gate.check_open()
        pending = list(self.acc.incomplete)
        if pending:
            self.flushing += 1
            self.wakeup()
            try:
                for res in pending:
                    await res.wait_async()
            finally:
                self.flushing -= 1
        if self.txn is not None:
            await self.txn.suspicion_settled()
            self.txn.raise_if_fenced()

    def statistics(self) -> dict[str, Any]:
        acc = self.acc
        return {
            "buffer_used_bytes": acc.used,
            "incomplete_batches": len(acc.incomplete),
            "requests_in_flight": sum(self.node_inflight.values()),
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "producer_id_resets": self.producer_id_resets,
            "batches_split": self.batches_split,
            **self.throttle.statistics(),
            **(self.txn.statistics() if self.txn is not None else {}),
        }

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id / epoch (transactions): every partition's sequences restart at 0."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        for st in self.parts.values():
            st.next_seq = 0

    def set_fatal(self, err: BaseException) -> None:
        """Fenced (or no producer id): every later call raises ``err``; batches not sent yet
        fail with it."""
        self.gate.fatal = err
        self.drop_unsent(err)

    def drop_unsent(self, err: BaseException) -> None:
        """Fail every batch not in flight: still in the accumulator, queued, or to retry."""
        for batch in self.acc.drain(0, force=True):
            self._settle(batch, error=err)
        for st in self.parts.values():
            for b in [*st.pending, *st.retry]:
                self._settle(b, error=err)
            st.pending.clear()
            st.retry.clear()

    def fail_everything(self, err: BaseException) -> None:
        """The producer closed: every batch, in flight or not, fails with ``err``."""
        self.drop_unsent(err)
        for st in self.parts.values():
            for b in st.inflight:
                b.result.complete(error=err)
                self.acc.release(b)
            st.inflight.clear()

    # ------------------------------------------------------------------ the task

    async def run(self) -> None:
        """The sender task: loops until the producer's nursery is cancelled."""
        assert self.nursery is not None
        acc = self.acc
        cfg = self.config
        if cfg.enable_idempotence and self.txn is None:  # transactions: init_transactions()
            await self._init_producer_id()
            if self.gate.fatal is not None:
                return
        while True:
            wake = self.wakeup.rearm()
            now = time.monotonic()
            for batch in acc.drain(now, force=self.flushing > 0 or self.gate.closed, hold=self._hold):
                tp = TopicPartition(batch.topic, batch.partition)
                st = self.parts.get(tp)
                if st is None:
                    st = self.parts[tp] = PartitionState()
                st.pending.append(batch)
            if self.txn is not None:
                self.txn.want_open(self._open_partitions())
            self._expire(now)
            if self.pid_reset_wanted and not any(st.inflight or st.retry for st in self.parts.values()):
                await self._reset_producer_id()
                if self.gate.fatal is not None:
                    return
            need_meta = await self._dispatch(now)
            if need_meta:
                self.nursery.start_soon(self._refresh_for_sender)
            deadline = self._next_deadline()
            timeout = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            if need_meta:
                timeout = min(timeout, cfg.retry_backoff_ms / 1000)
            elif self._waiting_out_backoff(now):  # has its leader changed meanwhile?
                if now >= self.backoff_refresh_at:
                    self.backoff_refresh_at = now + _BACKOFF_REFRESH_S
                    self.nursery.start_soon(self._refresh_for_sender)
                timeout = min(timeout, max(0.0, self.backoff_refresh_at - now))
            acc.wake_armed = True
            if acc.has_closed():
                acc.wake_armed = False
                continue
            with trio.move_on_after(timeout):
                await wake.wait()
            acc.wake_armed = False

    def _waiting_out_backoff(self, now: float) -> bool:
        """Does a batch wait for a retry more than ``_BACKOFF_REFRESH_S`` from now?"""
        return any((t := st.next_ready_time()) is not None and t - now > _BACKOFF_REFRESH_S
                   for st in self.parts.values())

    def _hold(self, topic: str, partition: int) -> bool:
        """Keep this partition's open batch filling: it could not be sent now anyway (earlier
        batches of the partition are queued, or its leader has ``max_in_flight`` requests out).
        Draining it would queue a small batch; holding it lets the backlog travel in big ones
        (as Kafka's accumulator drains only partitions whose node is ready)."""
        st = self.parts.get(TopicPartition(topic, partition))
        if st is not None and (st.pending or st.retry):
            return True
        leader = self.core.metadata.leader(TopicPartition(topic, partition))
        return leader >= 0 and self.node_inflight.get(leader, 0) >= self.config.max_in_flight

    def _next_deadline(self) -> float | None:
        candidates = [d for d in (self.acc.next_deadline(self._hold),) if d is not None]
        for st in self.parts.values():
            t = st.next_ready_time()
            if t is not None:
                candidates.append(t)
        return min(candidates) if candidates else None

    async def _refresh_for_sender(self) -> None:
        with contextlib.suppress(RafkaError):
            await self.core.refresh_metadata()
        self._wake()

    async def _init_producer_id(self) -> None:
        attempt = 0
        while True:
            try:
                resp = await self.core.request_any(ApiKey.INIT_PRODUCER_ID, {})
                resp.raise_for_error()
                self.producer_id = int(resp.body["producer_id"])
                self.producer_epoch = int(resp.body["producer_epoch"])
                return
            except RafkaError as exc:
                if not exc.retriable and not isinstance(exc, KafkaTimeoutError) and exc.code not in REFRESH_CODES:
                    self.gate.fatal = exc  # later sends raise it; the sender stops
                    self.fail_everything(exc)
                    return
                attempt += 1
                await trio.sleep(backoff_ms(attempt, self.config.retry_backoff_ms, 1000) / 1000)

    async def _reset_producer_id(self) -> None:
        """Every sequenced batch has its outcome: a new producer id, sequences from 0."""
        await self._init_producer_id()
        if self.gate.fatal is None:
            self.set_producer_id(self.producer_id, self.producer_epoch)
            self.pid_reset_wanted = False
            self.producer_id_resets += 1

    def _expire(self, now: float) -> None:
        """Fail batches older than delivery_timeout_ms that are not in flight."""
        limit = now - self.config.delivery_timeout_ms / 1000
        for tp, st in self.parts.items():
            expired = [b for b in (*st.pending, *st.retry) if b.created < limit]
            for b in expired:
                if b in st.retry:
                    st.retry.remove(b)
                else:
                    st.pending.remove(b)
                self._settle(b, error=KafkaTimeoutError(
                    f"{tp.topic}-{tp.partition}: {b.record_count} records expired after "
                    f"delivery_timeout_ms={self.config.delivery_timeout_ms} ({b.attempts} attempts)"))

    async def _dispatch(self, now: float) -> bool:
        """Start produce requests for every sendable batch; True if some leader is unknown.

        Rounds: each takes at most one batch per partition (one partition entry per request),
        grouped by leader; repeat while something was sendable. Requests are *written* here,
        in order (so a partition's batches reach its leader in sequence order), and their
        responses awaited by one task per request.
        """
        assert self.nursery is not None
        meta = self.core.metadata
        need_meta = False
        txn = self.txn
        while True:
            by_node: dict[int, list[tuple[PartitionState, ProducerBatch]]] = {}
            for tp, st in self.parts.items():
                if not (st.pending or st.retry):
                    continue
                if self.pid_reset_wanted and not st.retry:
                    continue  # new batches wait for the new producer id (module docstring)
                if txn is not None and tp not in txn.partitions:  # not in the transaction yet
                    if not txn.want(tp):  # and never will be: the transaction failed
                        err = txn.error or error_for(ErrorCode.INVALID_TXN_STATE, "no open transaction")
                        for b in [*st.pending, *st.retry]:
                            self._settle(b, error=type(err)(err.message, **err.details))
                        st.pending.clear()
                        st.retry.clear()
                    continue
                leader = meta.leader(tp)
                if leader < 0:
                    need_meta = True
                    continue
                if self.node_inflight.get(leader, 0) >= self.config.max_in_flight:
                    continue
                if st.retry and self.sent_to.get(tp, leader) != leader:
                    for b in st.retry:  # a new leader: no backoff for it (Kafka's KIP-951)
                        b.retry_at = min(b.retry_at, now)
                batch = st.next_to_send(now, self.config.max_in_flight)
                if batch is not None:
                    self.sent_to[tp] = leader
                    by_node.setdefault(leader, []).append((st, batch))
            if txn is not None and (adds := txn.take_wanted()):  # one ADD_PARTITIONS for them all
                self.nursery.start_soon(txn.add_partitions, adds)
            if not by_node:
                return need_meta
            for node, items in by_node.items():
                while items:
                    if self.node_inflight.get(node, 0) >= self.config.max_in_flight:
                        for st, batch in reversed(items):  # not prepared yet: put back in front
                            if batch.attempts:
                                st.retry.insert(0, batch)
                            else:
                                st.pending.appendleft(batch)
                        break
                    group: list[tuple[PartitionState, ProducerBatch]] = []
                    size = 0
                    while items and (not group or size + items[0][1].size <= self.config.max_request_size):
                        st, batch = items.pop(0)
                        self._prepare(st, batch)
                        size += len(batch.payload or b"")
                        group.append((st, batch))
                    self.node_inflight[node] = self.node_inflight.get(node, 0) + 1
                    for st, batch in group:
                        batch.after_earlier = bool(st.inflight)
                        st.sent(batch)
                    await self._produce(node, group)

    def _prepare(self, st: PartitionState, batch: ProducerBatch) -> None:
        if batch.payload is None:
            if self.config.enable_idempotence:
                st.assign_sequence(batch)
                batch.producer_epoch = self.producer_epoch
            batch.payload = batch.encode(
                compression=self.config.compression,
                producer_id=self.producer_id if self.config.enable_idempotence else -1,
                producer_epoch=self.producer_epoch if self.config.enable_idempotence else -1,
                base_sequence=batch.base_sequence, transactional=self.txn is not None)
        batch.attempts += 1

    async def _produce(self, node: int, group: list[tuple[PartitionState, ProducerBatch]]) -> None:
        """Write one PRODUCE request (in the sender task); a child task awaits the answer."""
        assert self.nursery is not None and self.core.pool is not None
        topics: dict[str, list[dict[str, Any]]] = {}
        for _, b in group:
            topics.setdefault(b.topic, []).append({"partition": b.partition, "records": b.payload})
        body = {"acks": self.config.acks, "timeout_ms": self.config.request_timeout_ms,
                "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}
        if self.txn is not None:
            body["transactional_id"] = self.txn.transactional_id
        try:
            host, port = self.core.send_only_node(node)
            with trio.fail_after(self.config.request_timeout_ms / 1000):
                conn = await self.core.pool.get(host, port)
                if self.config.acks == 0:
                    await conn.send_only(int(ApiKey.PRODUCE), body)
                else:
                    pending = await conn.send_request(int(ApiKey.PRODUCE), body)
        except (RafkaError, KeyError, trio.TooSlowError) as exc:
            err = exc if isinstance(exc, RafkaError) else error_for(
                ErrorCode.NETWORK_EXCEPTION, f"cannot send to broker {node}: {exc!r}")
            self.node_inflight[node] -= 1
            for st, b in group:
                self._failed(st, b, err)
            return
        if self.config.acks == 0:
            self.node_inflight[node] -= 1
            for st, b in group:
                st.done(b)
                self._settle(b, base_offset=-1)
            return
        self.nursery.start_soon(self._await_response, node, (host, port), group, pending)

    async def _await_response(self, node: int, addr: tuple[str, int],
                              group: list[tuple[PartitionState, ProducerBatch]], pending: PendingResponse) -> None:
        resp: Response | None = None
        try:
            with trio.move_on_after(self.config.request_timeout_ms / 1000):
                resp = await pending.wait()
            if resp is not None:
                resp.raise_for_error()
            else:
                pending.abandon()
                assert self.core.pool is not None
                self.core.pool.discard(*addr)
                raise error_for(ErrorCode.REQUEST_TIMED_OUT,
                                f"PRODUCE to broker {node} got no answer within {self.config.request_timeout_ms} ms")
        except RafkaError as exc:
            if exc.code in REFRESH_CODES:
                self.core.invalidate()
            for st, b in group:
                self._failed(st, b, exc)
            return
        finally:
            self.node_inflight[node] -= 1
            self._wake()
        assert resp is not None
        self.throttle.observe(resp.body)
        results = {(t["name"], p["partition"]): p for t in resp.body.get("topics") or []
                   for p in t.get("partitions") or []}
        for st, b in group:
            r = results.get((b.topic, b.partition))
            if r is None:
                self._failed(st, b, error_for(ErrorCode.UNKNOWN_SERVER_ERROR, "partition missing from the produce response"))
                continue
            code = r.get("error") or 0
            if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                st.done(b)
                self._settle(b, base_offset=int(r.get("base_offset", -1)),
                             log_append_time=int(r.get("log_append_time") or -1))
            else:
                self._failed(st, b, error_for(code, r.get("message") or ""))

    def _failed(self, st: PartitionState, b: ProducerBatch, exc: RafkaError) -> None:
        tp = TopicPartition(b.topic, b.partition)
        now = time.monotonic()
        retriable = exc.retriable or exc.code in REFRESH_CODES
        if exc.code in _SEQUENCE_REFUSED:
            # an earlier batch was unacknowledged when this one was sent (or still is): it
            # probably failed first, so go again in sequence order; otherwise it is fatal
            retriable = b.after_earlier or st.has_earlier(b)
        if exc.code in REFRESH_CODES:
            self.core.metadata.invalidate_leader(tp)
            self.core.invalidate()
        expired = now - b.created > self.config.delivery_timeout_ms / 1000
        if exc.code == ErrorCode.MESSAGE_TOO_LARGE and b.record_count > 1 and not expired:
            self._split(st, b, exc, now)
            return
        if retriable and b.attempts <= self.config.retries and not expired:
            st.requeue(b, now + backoff_ms(b.attempts - 1, self.config.retry_backoff_ms, 1000) / 1000)
            return
        st.done(b)
        if (exc.code in _SEQUENCE_REFUSED and self.txn is None
                and self.config.enable_idempotence):
            self.pid_reset_wanted = True  # the broker forgot us: a new id (module docstring)
        if exc.code in _NOT_APPENDED:
            # the broker refused the batch without appending it: give its sequences back (and
            # move later batches' down), or the partition's next batch would leave a gap the
            # broker refuses for good (UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER)
            st.release_sequences(b)
        if exc.message and f"{b.topic}-{b.partition}" not in exc.message:
            exc = type(exc)(f"{b.topic}-{b.partition}: {exc.message}", **exc.details)
        self._settle(b, error=exc)

    def _split(self, st: PartitionState, b: ProducerBatch, exc: RafkaError, now: float) -> None:
        """Split a batch the broker refused as too large (nothing appended) and queue the parts
        ahead of the partition's later batches; see the module docstring."""
        st.done(b)
        starts = _split_points(b, exc.message or "")
        parts = self.acc.split(b, starts)
        self.batches_split += 1
        st.requeue_split(parts, now)
        self._wake()

    def _settle(self, b: ProducerBatch, *, base_offset: int = -1, log_append_time: int = -1,
                error: BaseException | None = None) -> None:
        if error is not None and self.txn is not None:
            if self.txn.batch_failed(error, b.base_sequence >= 0, b.result):
                self.acc.release(b)  # completed once the coordinator says whether we are fenced
                return
        b.result.complete(base_offset, log_append_time, error)
        self.acc.release(b)


# while a batch waits out a longer retry backoff, refresh the metadata this often (seconds)
_BACKOFF_REFRESH_S = 0.1

# the leader refused the batch's sequence: a gap before it, or a producer id it no longer knows
_SEQUENCE_REFUSED = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID})

# answers that mean the leader validated the batch and appended nothing. NOT_ENOUGH_REPLICAS
# is the up-front min-ISR refusal (broker/replication/state.py ``check_produce``; an append
# that loses its ISR afterwards answers NOT_ENOUGH_REPLICAS_AFTER_APPEND instead): without it
# here, a batch failing for good with it (``retries=0``, or out of retries while the ISR was
# short) left a sequence gap, and every later batch of the partition was refused for good
# (UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER; chaos queue seeds 3 and 5, session 21).
# Not NOT_LEADER_OR_FOLLOWER or a timeout: those can follow an append.
_NOT_APPENDED = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
                           ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_RECORD,
                           ErrorCode.INVALID_TIMESTAMP, ErrorCode.NOT_ENOUGH_REPLICAS})


_TOO_LARGE_RE = re.compile(r"batch of (\d+) bytes exceeds max\.message\.bytes=(\d+)")
_BATCH_OVERHEAD = 61 + 16  # v2 batch header + the records array's msgpack framing, roughly


def _split_points(b: ProducerBatch, message: str) -> list[int]:
    """First record index of each part of a too-large batch of at least two records: parts of
    at most the broker's limit (scaled by the answer's wire bytes / our estimate, with a margin)
    when the answer names it, else two halves by estimated size. At least two parts, never an
    empty one, record order kept."""
    rows = b.records
    sizes = [record_size(r[2], r[3], r[4]) for r in rows]
    m = _TOO_LARGE_RE.search(message)
    if m is not None and b.size > 0:
        wire, limit = int(m.group(1)), int(m.group(2))
        ratio = max(wire / b.size, 0.01)
        target = (limit - _BATCH_OVERHEAD) / ratio * 0.9
        starts = [0]
        acc = 0
        for i, sz in enumerate(sizes):
            if acc and acc + sz > target:
                starts.append(i)
                acc = 0
            acc += sz
        if len(starts) > 1:
            return starts
    half = sum(sizes) / 2
    acc = 0
    for i, sz in enumerate(sizes[:-1]):
        acc += sz
        if acc >= half:
            return [0, i + 1]
    return [0, len(rows) - 1]


