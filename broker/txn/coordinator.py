"""The transaction coordinator: the broker that leads a transactional id's ``__transaction_state``
partition answers its INIT_PRODUCER_ID, ADD_PARTITIONS/OFFSETS_TO_TXN, END_TXN and the admin APIs.

Theory of operation
-------------------
The same leader-of-an-internal-partition pattern as committed offsets
(``broker/groups/offsets.py``), shared with it in ``broker/internal_topic.py``: an id lives in
partition ``crc32(id) % 5`` of the compacted topic ``__transaction_state``
(:func:`txn_state_topic_spec`); the leader of that partition is the id's coordinator; anyone
else answers ``NOT_COORDINATOR``. The state of every id of a partition is
rebuilt from the partition (:class:`TxnPartitionState`) the first time it is needed after this
broker became its leader in a new leader epoch; the read yields to other tasks between chunks,
and a request arriving meanwhile gets ``COORDINATOR_LOAD_IN_PROGRESS`` (retriable).

Every transition is computed by the pure functions of ``broker/txn/state.py``, appended with
``acks=all`` and installed in memory only once acknowledged, under a per-id *pending* mark: a
second request for an id with a transition in flight gets ``CONCURRENT_TRANSACTIONS``. The
appends go through ``ReadBarrier.write`` at once (concurrent appends share follower fetches and
fsyncs), and every read barrier waiting on the partition rides the next one (below). A
decided transaction (Prepare*) is finished by a *completion* task in the coordinator's own
nursery (started by :meth:`TxnCoordinator.run` inside the node's nursery): it writes the markers
(``broker/txn/markers.py``, retried until every partition answered) and then appends Complete*.
The task owns the id's pending mark until it ends; INIT_PRODUCER_ID and ADD_PARTITIONS/OFFSETS
wait for its ``done`` event, an END_TXN that wrote the Prepare* itself only for its ``marked``
event (every marker acknowledged: the Complete* append is off the answer's path — a lost one is
re-derived from the durable Prepare*), all bounded, so a timed-out request never stops a
completion. An END_TXN that finds the outcome already decided (Prepare* or Complete* with the same
producer id and epoch) cannot tell a retry from the producer's *next* transaction sent to a
deposed coordinator that does not know it yet: it answers only after an acks=all append of its
own (Complete*, or a re-append of the Complete* value), which a deposed leader cannot complete.
Reads answered from memory — a KIP-890 ``verify_only``, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS
— pass a read barrier first (``broker/read_barrier.py``, the same property: an ``acks=all``
append made after the read arrived — the next state write, or else a tombstone of the key
``[""]``), so a deposed coordinator cannot verify a partition for a transaction its successor
has already ended (txn chaos seed 25's class).

The background loop of :meth:`run` (every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``)
loads every partition this broker newly leads, resumes the completion of every id found in
Prepare* (a coordinator that failed between the decision and Complete*), and aborts every Ongoing
transaction past its ``timeout_ms`` (epoch bump, PrepareAbort, markers, CompleteAbort).

A new producer id comes from the active controller (INIT_PRODUCER_ID without a transactional id,
forwarded like a client's through ``broker/handlers/admin.py``). When ``__transaction_state``
does not exist yet, the first request creates it through the controller and answers
``COORDINATOR_NOT_AVAILABLE`` (retriable): the client finds the coordinator in METADATA next time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import trio
from rafka.broker.controller_channel import FORWARDED_KEY
from rafka.broker.groups.offsets import OFFSETS_TOPIC, offsets_partition
from rafka.broker.internal_topic import (
    InternalTopic,
    InternalTopicStatistics,
    LedPartition,
    internal_topic_spec,
    key_partition,
    replay_chunk,
)
from rafka.broker.read_barrier import ReadBarrier, ReadBarrierStatistics
from rafka.broker.txn import state as S
from rafka.broker.txn.markers import LocalHandler, MarkerWriter
from rafka.broker.txn.state import EndStep, TxnMetadata, TxnState
from rafka.log.batch import decode_records, iter_batches
from rafka.wire.errors import ErrorCode, Handler, RafkaError, answer_errors, error_for
from rafka.wire.protocol import ApiKey
from rafka.wire.wakeups import sleep_on_grid

__all__ = [
    "TXN_STATE_PARTITIONS",
    "TXN_STATE_TOPIC",
    "TxnCoordinator",
    "TxnCoordinatorStatistics",
    "TxnPartitionState",
    "txn_partition",
    "txn_state_topic_spec",
]

log = logging.getLogger("rafka.txn.coordinator")

TXN_STATE_TOPIC: Final = "__transaction_state"
TXN_STATE_PARTITIONS: Final = 5
MAX_TXN_PARTITIONS: Final = 10_000

TP = tuple[str, int]


def txn_partition(transactional_id: str, num_partitions: int = TXN_STATE_PARTITIONS) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (stable everywhere)."""
    return key_partition(transactional_id, num_partitions)


def txn_state_topic_spec(live_brokers: int) -> dict[str, Any]:
    """The CREATE_TOPICS entry for ``__transaction_state`` (as every internal topic's)."""
    return internal_topic_spec(TXN_STATE_TOPIC, live_brokers, TXN_STATE_PARTITIONS)


@dataclass(frozen=True, slots=True)
class TxnCoordinatorStatistics:
    """A snapshot of :class:`TxnCoordinator` (``statistics()``), for metrics and tests."""

    state_topic: InternalTopicStatistics
    transactional_ids: int  # in the loaded partitions
    pending: int  # ids with a transition in flight (completions included)
    completions_running: int  # decided transactions whose markers / Complete* are being written
    read_barrier: ReadBarrierStatistics


class TxnPartitionState:
    """The ids of one ``__transaction_state`` partition, as of ``leader_epoch``."""

    def __init__(self, index: int, leader_epoch: int) -> None:
        self.index = index
        self.leader_epoch = leader_epoch
        self.txns: dict[str, TxnMetadata] = {}
        self.pending: set[str] = set()
        self.done: dict[str, trio.Event] = {}  # ids with a running completion task
        self.marked: dict[str, trio.Event] = {}  # set once the markers of that task are acked
        self.loaded = trio.Event()

    def fold(self, buf: bytes) -> int:
        """Fold the whole batches of ``buf``; returns the next offset (0 if none is whole)."""
        nxt = 0
        for pos, h in iter_batches(buf):
            for rec in decode_records(buf, pos):
                if rec.key is None:
                    continue
                try:
                    tid = S.decode_key(rec.key)
                    md = S.decode_value(tid, rec.value)
                except Exception as exc:  # a foreign record must not break the coordinator
                    log.warning("skipping bad transaction record at %d: %s", rec.offset, exc)
                    continue
                if md is None:
                    self.txns.pop(tid, None)
                else:
                    self.txns[tid] = md
            nxt = h.last_offset + 1
        return nxt


class TxnCoordinator:
    """``handlers[api_key](body) -> body`` for INIT_PRODUCER_ID (with a transactional id) and
    api keys 40, 41, 42, 45, 46; :meth:`run` is its background work."""

    def __init__(self, replica_manager: Any, publisher: Any, channel: Any, *, pool: Any = None,
                 local_markers: LocalHandler | None = None,
                 wall_clock_ms: Callable[[], int] | None = None,
                 settings: dict[str, Any] | None = None) -> None:
        settings = settings or {}
        self.rm = replica_manager
        self.publisher = publisher
        self.channel = channel
        self.wall_clock_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self.max_timeout_ms: int = settings.get("transaction.max.timeout.ms", S.MAX_TXN_TIMEOUT_MS)
        self.check_interval_ms: int = settings.get(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms", 1000)
        self.request_timeout_ms: int = settings.get("transaction.request.timeout.ms", 30_000)
        self.append_timeout_ms: int = settings.get("transaction.append.timeout.ms", 10_000)
        self.markers = MarkerWriter(replica_manager.broker_id, lambda: self.rm.image, pool,
                                    local_markers)
        # the led partitions of __transaction_state (broker/internal_topic.py); ``states`` is
        # its state table: partition index -> the ids of the leader epoch it was loaded in
        self.state_topic: InternalTopic[TxnPartitionState] = InternalTopic(replica_manager,
                                                                           TXN_STATE_TOPIC)
        self.states = self.state_topic.states
        # the barrier's tombstone: "" is no transactional id (refused), the load pops nothing
        self.barrier = ReadBarrier(replica_manager, S.encode_key(""), timeout_s=self.append_timeout_ms / 1000,
                                   wall_clock_ms=lambda: self.wall_clock_ms())
        self._nursery: trio.Nursery | None = None
        self.handlers: dict[int, Handler] = {
            ApiKey.INIT_PRODUCER_ID: answer_errors(self.init_producer_id),
            ApiKey.ADD_PARTITIONS_TO_TXN: answer_errors(self.add_partitions_to_txn),
            ApiKey.ADD_OFFSETS_TO_TXN: answer_errors(self.add_offsets_to_txn),
            ApiKey.END_TXN: answer_errors(self.end_txn),
            ApiKey.DESCRIBE_TRANSACTIONS: answer_errors(self.describe_transactions),
            ApiKey.LIST_TRANSACTIONS: answer_errors(self.list_transactions),
        }

    def statistics(self) -> TxnCoordinatorStatistics:
        """What this coordinator holds now: the partitions it has loaded (none is loaded here,
        that takes awaits; :meth:`tick` loads the newly led ones)."""
        states = list(self.states.values())
        return TxnCoordinatorStatistics(
            state_topic=self.state_topic.statistics(),
            transactional_ids=sum(len(st.txns) for st in states),
            pending=sum(len(st.pending) for st in states),
            completions_running=sum(len(st.done) for st in states),
            read_barrier=self.barrier.statistics(),
        )

    # -- background --------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Completions and timeout aborts, until cancelled (the node's nursery)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    try:
                        await self.tick()
                    except Exception:  # the broker stays up; the next tick tries again
                        log.exception("transaction coordinator tick failed")
                    await sleep_on_grid(self.check_interval_ms / 1000)
            finally:
                self._nursery = None

    async def tick(self) -> None:
        """Load newly led partitions (resuming their decided transactions); abort timed-out ones."""
        now = self.wall_clock_ms()
        for st in await self._led_states():
            for tid, md in list(st.txns.items()):
                if S.timed_out(md, now) and tid not in st.pending:
                    log.info("transaction %r timed out after %d ms: aborting", tid, md.timeout_ms)
                    with contextlib.suppress(RafkaError):
                        await self._prepare(st, tid, S.timeout_abort(md, now))

    def _num_partitions(self) -> int:
        return self.state_topic.num_partitions()

    async def _led_states(self) -> list[TxnPartitionState]:
        out = []
        for i, p in self.state_topic.led():
            try:
                out.append(await self._state_of(i, p))
            except RafkaError:
                continue
        return out

    # -- coordinator lookup and loading -------------------------------------------------------

    async def _coordinator(self, transactional_id: str) -> TxnPartitionState:
        if not transactional_id:
            raise error_for(ErrorCode.INVALID_REQUEST, "empty transactional id")
        n = self._num_partitions()
        if n == 0:
            await self._create_topic()
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            f"{TXN_STATE_TOPIC} does not exist yet (being created)")
        return await self._state_of(txn_partition(transactional_id, n))

    def _leader(self, index: int) -> LedPartition:
        return self.state_topic.leader(index)

    def leads(self, transactional_id: str) -> bool:
        """True when this broker leads ``transactional_id``'s partition (loaded or not)."""
        n = self._num_partitions()
        if n == 0:
            return False
        try:
            self._leader(txn_partition(transactional_id, n))
        except RafkaError:
            return False
        return True

    async def _state_of(self, index: int, p: LedPartition | None = None) -> TxnPartitionState:
        """Partition ``index``'s state in the current leader epoch of ``p`` (looked up if None),
        loaded by a replay that yields between chunks (``COORDINATOR_LOAD_IN_PROGRESS`` to the
        requests arriving meanwhile)."""
        if p is None:
            p = self._leader(index)
        st = self.state_topic.current(index, p)
        if st is not None:
            if not st.loaded.is_set():
                raise error_for(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                f"loading {TXN_STATE_TOPIC}/{index}")
            return st
        st = self.states[index] = TxnPartitionState(index, p.leader_epoch)
        off = p.log.log_start_offset
        try:
            while self.states.get(index) is st and (
                    nxt := replay_chunk(p.log, off, st.fold)) is not None:
                off = nxt
                await trio.lowlevel.checkpoint()  # a big partition must not stall the event loop
        except Exception as exc:  # a corrupt or closed log: the next request loads again
            if self.states.get(index) is st:
                del self.states[index]
            log.error("loading %s/%d: %s", TXN_STATE_TOPIC, index, exc)
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot load {TXN_STATE_TOPIC}/{index}: {exc}"
                            ) from None
        if self.states.get(index) is not st:
            raise error_for(ErrorCode.NOT_COORDINATOR, f"{TXN_STATE_TOPIC}/{index} moved while loading")
        st.loaded.set()
        log.info("loaded %d transactional ids of %s/%d (leader epoch %d) up to offset %d",
                 len(st.txns), TXN_STATE_TOPIC, index, st.leader_epoch, off)
        for tid, md in st.txns.items():
            if md.is_prepared:  # decided by a previous coordinator, not completed
                self._start_completion(st, tid, md)
        return st

    async def _confirmed(self, st: TxnPartitionState) -> TxnPartitionState:
        """``st`` for a read answered from memory (verify_only, describe, list): only after a
        read barrier (``broker/read_barrier.py``) proved this broker still leads its partition in
        ``st``'s epoch — a deposed coordinator that does not know it yet must not answer."""
        p = self._leader(st.index)
        if p.leader_epoch != st.leader_epoch:
            raise error_for(ErrorCode.NOT_COORDINATOR, f"{TXN_STATE_TOPIC}/{st.index} moved")
        await self.barrier.confirm(p)
        if not self._current(st):
            raise error_for(ErrorCode.NOT_COORDINATOR, f"{TXN_STATE_TOPIC}/{st.index} moved")
        return st

    def _current(self, st: TxnPartitionState) -> bool:
        return self.states.get(st.index) is st and self.leads_epoch(st)

    def leads_epoch(self, st: TxnPartitionState) -> bool:
        try:
            return self._leader(st.index).leader_epoch == st.leader_epoch
        except RafkaError:
            return False

    async def _create_topic(self) -> None:
        if self.channel is None:
            return
        live = sum(1 for b in self.rm.image.cluster.brokers.values() if not b.fenced)
        body = {"topics": [txn_state_topic_spec(max(1, live))], "timeout_ms": 5000}
        with contextlib.suppress(RafkaError):
            answer = await self._controller(ApiKey.CREATE_TOPICS, body)
            log.info("creating %s: %s", TXN_STATE_TOPIC, answer)

    async def _controller(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        """The active controller's answer, forwarded as broker/handlers/admin.py does (bounded)."""
        with trio.move_on_after(self.request_timeout_ms / 1000):
            return await self.channel.request(api_key, {**body, FORWARDED_KEY: True},
                                              attempt_timeout_s=5.0)
        raise error_for(ErrorCode.REQUEST_TIMED_OUT, f"the controller did not answer {ApiKey(api_key).name}")

    async def _new_producer_id(self) -> int:
        if self.channel is None:
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no controller to allocate a producer id")
        try:
            answer = await self._controller(ApiKey.INIT_PRODUCER_ID, {})
        except RafkaError as exc:
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"allocating a producer id: {exc.message}"
                            ) from None
        if answer.get("error"):
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            f"allocating a producer id: {answer.get('message') or answer['error']}")
        return int(answer["producer_id"])

    # -- writes ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _pending(self, st: TxnPartitionState, tid: str) -> Iterator[None]:
        if tid in st.pending:
            raise error_for(ErrorCode.CONCURRENT_TRANSACTIONS,
                            f"another request for {tid!r} is in progress")
        st.pending.add(tid)
        try:
            yield
        finally:
            st.pending.discard(tid)

    async def _write(self, st: TxnPartitionState, md: TxnMetadata) -> None:
        """Append ``md`` with acks=all, then (only then) install it (``ReadBarrier.write``: the
        reads waiting on the partition's barrier ride this append, appended after they arrived)."""
        p = self._leader(st.index)
        if p.leader_epoch != st.leader_epoch or self.states.get(st.index) is not st:
            raise error_for(ErrorCode.NOT_COORDINATOR, f"{TXN_STATE_TOPIC}/{st.index} moved")
        await self.barrier.write(p, [(S.encode_key(md.transactional_id), S.encode_value(md))])
        if not self._current(st):
            raise error_for(ErrorCode.NOT_COORDINATOR, f"{TXN_STATE_TOPIC}/{st.index} moved")
        st.txns[md.transactional_id] = md

    async def _prepare(self, st: TxnPartitionState, tid: str, md: TxnMetadata) -> trio.Event:
        """Write the Prepare* value ``md`` and start its completion; returns its done event."""
        assert md.is_prepared
        with self._pending(st, tid):
            if self._nursery is None:
                raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is not running")
            await self._write(st, md)
        return self._start_completion(st, tid, md)

    def _start_completion(self, st: TxnPartitionState, tid: str, md: TxnMetadata) -> trio.Event:
        ev = st.done.get(tid)
        if ev is not None:
            return ev
        ev = st.done[tid] = trio.Event()
        st.marked[tid] = trio.Event()
        if self._nursery is None:  # not running (yet): tick() resumes it after the next load
            ev.set()
            st.done.pop(tid)
            st.marked.pop(tid).set()
            return ev
        st.pending.add(tid)
        self._nursery.start_soon(self._complete, st, tid, md, ev)
        return ev

    async def _complete(self, st: TxnPartitionState, tid: str, md: TxnMetadata, ev: trio.Event) -> None:
        """Markers, then Complete* — retried while this broker stays the coordinator."""
        attempt = 0
        try:
            await self.markers.write(md, st.leader_epoch, lambda: self._current(st))
            st.marked[tid].set()  # END_TXN may answer now (see end_txn)
            while self._current(st):
                try:
                    await self._write(st, S.complete(md, self.wall_clock_ms()))
                    log.info("transaction %r: %s", tid, st.txns[tid].state.wire_name)
                    return
                except RafkaError as exc:
                    log.warning("completing %r: %s; retrying", tid, exc)
                    await trio.sleep(min(1.0, 0.02 * 2 ** min(attempt, 6)))
                    attempt += 1
        except RafkaError as exc:
            log.info("completion of %r stopped: %s", tid, exc)
        except Exception:  # the broker stays up; the next load or tick resumes it
            log.exception("completion of %r failed", tid)
        finally:
            st.pending.discard(tid)
            st.done.pop(tid, None)
            marked = st.marked.pop(tid, None)
            if marked is not None:
                marked.set()
            ev.set()

    async def _confirm(self, st: TxnPartitionState, tid: str) -> None:
        """Re-append ``tid``'s current value with acks=all: succeeds only while this broker
        really leads the partition (a deposed leader's followers fetch elsewhere)."""
        with self._pending(st, tid):
            md = st.txns.get(tid)
            if md is None:
                raise error_for(ErrorCode.INVALID_TXN_STATE, f"no transaction for {tid!r}")
            await self._write(st, md)

    async def _wait_done(self, st: TxnPartitionState, tid: str, ev: trio.Event, timeout_ms: int,
                         code: ErrorCode) -> TxnMetadata:
        with trio.move_on_after(timeout_ms / 1000):
            await ev.wait()
            if not self._current(st):
                raise error_for(ErrorCode.NOT_COORDINATOR, f"{TXN_STATE_TOPIC}/{st.index} moved")
            return st.txns[tid]
        raise error_for(code, f"the transaction of {tid!r} did not complete within {timeout_ms} ms")

    # -- INIT_PRODUCER_ID ------------------------------------------------------------------

    async def init_producer_id(self, body: dict[str, Any]) -> dict[str, Any]:
        tid: str = body.get("transactional_id") or ""
        timeout_ms = body.get("transaction_timeout_ms")
        timeout_ms = S.validate_timeout(S.DEFAULT_TXN_TIMEOUT_MS if timeout_ms is None else timeout_ms,
                                        self.max_timeout_ms)
        pid, epoch = body.get("producer_id"), body.get("producer_epoch")
        expected = (pid, epoch) if pid is not None and pid >= 0 and epoch is not None else None
        for _ in range(4):  # Prepare* -> Complete*; Ongoing -> fenced abort; then bump
            st = await self._coordinator(tid)
            md = st.txns.get(tid)
            first = S.begin_init(md, expected)
            if first is None:
                with self._pending(st, tid):
                    new_pid = await self._new_producer_id() if S.needs_new_producer_id(md) else None
                    new = S.init_producer(md, tid, timeout_ms, self.wall_clock_ms(), expected=expected,
                                          new_producer_id=new_pid)
                    if new != md:
                        await self._write(st, new)
                return {"producer_id": new.producer_id, "producer_epoch": new.producer_epoch}
            assert md is not None
            if first is TxnState.ONGOING:
                fenced = S.fence_abort(md, self.wall_clock_ms())
                ev = await self._prepare(st, tid, fenced)
                done = await self._wait_done(st, tid, ev, self.request_timeout_ms,
                                             ErrorCode.CONCURRENT_TRANSACTIONS)
                if done.producer_epoch != md.producer_epoch and not S.needs_new_producer_id(done):
                    return {"producer_id": done.producer_id, "producer_epoch": done.producer_epoch}
                expected = (done.producer_id, done.producer_epoch)
                continue
            if tid in st.pending and tid not in st.done:
                raise error_for(ErrorCode.CONCURRENT_TRANSACTIONS, f"{tid!r}: a transition is in flight")
            await self._wait_done(st, tid, self._start_completion(st, tid, md),
                                  self.request_timeout_ms, ErrorCode.CONCURRENT_TRANSACTIONS)
        raise error_for(ErrorCode.CONCURRENT_TRANSACTIONS, f"{tid!r} keeps changing; retry")

    # -- ADD_PARTITIONS / ADD_OFFSETS --------------------------------------------------------

    async def add_partitions_to_txn(self, body: dict[str, Any]) -> dict[str, Any]:
        tid, pid, epoch = body["transactional_id"], body["producer_id"], body["producer_epoch"]
        tps = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
        if body.get("verify_only"):
            codes, txn_seq = await self.verify(tid, pid, epoch, tps)
            return {**_tp_body(codes), "txn_seq": txn_seq}
        image = self.rm.image
        unknown = {tp for tp in tps if image.topics.partition(*tp) is None}
        if unknown or len(tps) > MAX_TXN_PARTITIONS:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if unknown else ErrorCode.INVALID_REQUEST
            res = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                   else ErrorCode.INVALID_REQUEST for tp in tps}
            return {"error": int(code), "message": f"unknown partitions {sorted(unknown)}"
                    if unknown else f"more than {MAX_TXN_PARTITIONS} partitions", **_tp_body(res)}
        try:
            await self._add(tid, pid, epoch, tps)
        except RafkaError as exc:
            return {"error": int(exc.code), "message": exc.message,
                    **_tp_body(dict.fromkeys(tps, exc.code))}
        return _tp_body(dict.fromkeys(tps, ErrorCode.NONE))

    async def verify(self, tid: str, pid: int, epoch: int, tps: list[TP]
                     ) -> tuple[dict[TP, ErrorCode], int]:
        """``verify_only``: per partition NONE / INVALID_TXN_STATE (raises NOT_COORDINATOR etc.),
        and the number of the id's current transaction (``TxnMetadata.txn_seq``, -1: none)."""
        st = await self._confirmed(await self._coordinator(tid))
        md = st.txns.get(tid)
        return S.verify_partitions(md, pid, epoch, tps), -1 if md is None else md.txn_seq

    async def _add(self, tid: str, pid: int, epoch: int, tps: list[TP]) -> None:
        st = await self._coordinator(tid)
        ev = st.done.get(tid)
        if ev is not None:  # END_TXN answered before its Complete* landed: wait for it (bounded)
            await self._wait_done(st, tid, ev, self.request_timeout_ms, ErrorCode.CONCURRENT_TRANSACTIONS)
        with self._pending(st, tid):
            md = st.txns.get(tid)
            new = S.add_partitions(md, pid, epoch, tps, self.wall_clock_ms())
            if new is not md:
                await self._write(st, new)

    async def add_offsets_to_txn(self, body: dict[str, Any]) -> dict[str, Any]:
        t = self.rm.image.topics.by_name.get(OFFSETS_TOPIC)
        if t is None or not t.partitions:
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet")
        tp = (OFFSETS_TOPIC, offsets_partition(body["group_id"], len(t.partitions)))
        await self._add(body["transactional_id"], body["producer_id"], body["producer_epoch"], [tp])
        return {}

    # -- END_TXN ----------------------------------------------------------------------------

    async def end_txn(self, body: dict[str, Any]) -> dict[str, Any]:
        tid, commit = body["transactional_id"], bool(body["commit"])
        st = await self._coordinator(tid)
        md = st.txns.get(tid)
        if tid in st.pending and tid not in st.done:
            raise error_for(ErrorCode.CONCURRENT_TRANSACTIONS, f"{tid!r}: a transition is in flight")
        step, new = S.end_txn(md, body["producer_id"], body["producer_epoch"], commit, self.wall_clock_ms())
        if step is EndStep.DONE:
            # Not necessarily a retry of ours: the same producer id and epoch ending its *next*
            # transaction, begun at the current coordinator while this broker, deposed without
            # knowing it yet, still holds the previous one. Answer only after an acks=all append
            # (which a deposed leader cannot complete) showed this state is the current one.
            await self._confirm(st, tid)
            return {}
        if step is EndStep.PREPARE:
            ev = await self._prepare(st, tid, new)
            marked = st.marked.get(tid)
            if marked is not None:  # answer once every marker is acked, before Complete* lands
                with trio.move_on_after(self.request_timeout_ms / 1000):
                    await marked.wait()
                if not self._current(st):
                    raise error_for(ErrorCode.NOT_COORDINATOR, f"{TXN_STATE_TOPIC}/{st.index} moved")
                if marked.is_set() and not ev.is_set():
                    return {}  # the markers of the decision this request made durable
        else:
            # WAIT: a Prepare* this request did not write — a retry, or (same producer id and
            # epoch) the next transaction's END_TXN reaching a deposed coordinator that still
            # completes the previous one. Its markers prove nothing about this request's
            # transaction: answer only once Complete* landed with acks=all (txn chaos seed 5:
            # a deposed coordinator answered a commit with the previous transaction's markers,
            # the partition only the new transaction had was never committed).
            ev = self._start_completion(st, tid, new)
        done = await self._wait_done(st, tid, ev, self.request_timeout_ms, ErrorCode.REQUEST_TIMED_OUT)
        if done.is_prepared or done.commit != commit:
            raise error_for(ErrorCode.REQUEST_TIMED_OUT, f"{tid!r} is still {done.state.wire_name}")
        return {}

    # -- admin ------------------------------------------------------------------------------

    async def describe_transactions(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        for tid in body["transactional_ids"][:1000]:
            try:
                md = (await self._confirmed(await self._coordinator(tid))).txns.get(tid)
                if md is None:
                    raise error_for(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional id {tid!r}")
            except RafkaError as exc:
                out.append({"transactional_id": tid, "error": int(exc.code), "message": exc.message})
                continue
            out.append({"transactional_id": tid, "error": 0, "message": "",
                        "state": md.state.wire_name, "producer_id": md.producer_id,
                        "producer_epoch": md.producer_epoch, "timeout_ms": md.timeout_ms,
                        "txn_start_ms": md.txn_start_ms, "last_update_ms": md.last_update_ms,
                        "partitions": _tp_list(md.partitions)})
        return {"transactions": out}

    async def list_transactions(self, body: dict[str, Any]) -> dict[str, Any]:
        wanted = {TxnState.from_wire_name(s) for s in body.get("states") or []}
        out = []
        for st in await self._led_states():
            try:
                await self._confirmed(st)
            except RafkaError:  # deposed (or cannot tell): its successor lists these ids
                continue
            out += [{"transactional_id": md.transactional_id, "producer_id": md.producer_id,
                     "producer_epoch": md.producer_epoch, "state": md.state.wire_name}
                    for md in st.txns.values() if not wanted or md.state in wanted]
        return {"transactions": sorted(out, key=lambda e: e["transactional_id"])}


def _tp_list(tps: Any) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


def _tp_body(res: dict[TP, ErrorCode]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), code in res.items():
        by_topic.setdefault(t, []).append({"partition": p, "error": int(code)})
    return {"topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
