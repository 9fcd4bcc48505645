"""The transactional producer's client side: ``TransactionManager`` (docs/transactions.md).

Theory of operation
-------------------
A producer with a ``transactional_id`` owns one ``TransactionManager``. Its state is a small
table (``_NEXT``) walked by the producer's calls, as Kafka's client does::

    UNINITIALIZED ─init─► INITIALIZING ─► READY ─begin─► IN_TRANSACTION ─commit─► COMMITTING ─► READY
                                            ▲                 │    └─abort─► ABORTING ─► READY
                                            │                 ▼                 ▲
                                            └──────────── ABORTABLE_ERROR ─abort┘
    any state ─fenced─► FATAL_ERROR (every later call raises the fatal error)

The pure part — state, the partitions the coordinator has acknowledged, error classification
(``classify``) — does no I/O and is tested without a broker. The I/O part talks to the id's
*coordinator*: the leader of ``__transaction_state`` partition ``crc32(id) % 5``, which any broker
names through FIND_COORDINATOR (``client/aio/coordinator.py``; the broker creates the topic when
it does not exist yet and answers COORDINATOR_NOT_AVAILABLE meanwhile; on a secured cluster the
lookup needs describe on the id: ``TransactionalIdAuthorizationFailedError`` otherwise). Every coordinator call is retried — coordinator
re-found, exponential backoff — on retriable answers (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, timeouts, broken connections) for at most
``max(transaction_timeout_ms, request_timeout_ms)``; after that the call raises
``KafkaTimeoutError`` and the state is left as it was, so calling it again resumes it (END_TXN is
idempotent on the coordinator).

Partitions join the transaction from the sender (``want``/``add_partitions``): a partition's
batches stay queued until the coordinator acknowledged ADD_PARTITIONS_TO_TXN for it; every
partition waiting meanwhile goes into the next request (one request in flight, as Kafka). The
sender asks as soon as a partition has a batch in the accumulator (``want_open``), i.e. at the
first ``send`` to it, so the request overlaps the linger and the rest of the sends.
``send_offsets`` adds the group (ADD_OFFSETS_TO_TXN), then writes the offsets to the group's
coordinator (TXN_OFFSET_COMMIT, ``client.groups.coordinator_request``). ``commit`` flushes every
batch, then sends END_TXN(commit) — only when the coordinator holds an open transaction (some
partition or group was added; otherwise there is nothing to end). ``abort`` drops the batches not
sent yet, waits for those in flight, sends END_TXN(abort), then bumps the epoch when it must.

Errors, as Kafka's client classifies them:

* *fatal* — PRODUCER_FENCED, INVALID_PRODUCER_EPOCH or INVALID_TXN_STATE from the coordinator,
  INVALID_PRODUCER_ID_MAPPING, …: a newer incarnation owns the id (``ProducerFencedError``);
  every later call raises it; only ``close()`` is left.
* *abortable* — a failed batch, a refused offset commit, TRANSACTION_TIMED_OUT: the current
  transaction cannot commit; ``abort_transaction()`` then carries on. After
  TRANSACTION_TIMED_OUT, or when a batch that had a sequence number was lost, the abort
  re-initialises with INIT_PRODUCER_ID(id, producer id, epoch) (KIP-360): a fresh epoch whose
  sequences start at 0.
* a batch refused by a partition with INVALID_PRODUCER_EPOCH / PRODUCER_FENCED, or with
  INVALID_TXN_STATE (the leader's verification with the coordinator failed, KIP-890), is
  ambiguous: the coordinator may have bumped the epoch to fence us, or aborted our transaction
  on its timeout, or neither. ``commit`` asks the coordinator (KIP-588): an ADD_PARTITIONS_TO_TXN
  of a partition already in the transaction changes nothing and answers PRODUCER_FENCED (fatal),
  TRANSACTION_TIMED_OUT (abortable, re-init) or NONE (the batch's own error, abortable). So
  that a fenced producer raises one error type on every path, the first such refusal starts
  that probe at once in the background (``batch_failed``); the refused batches' results, and
  ``send`` / ``flush`` / ``commit`` / ``abort`` meanwhile, wait for its answer, then raise
  ``ProducerFencedError`` when it says fenced.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import trio
from rafka.client.aio._core import REFRESH_CODES, ClientCore
from rafka.client.aio.coordinator import (
    KEY_TYPE_GROUP,
    KEY_TYPE_TRANSACTION,
    coordinator_node,
    forget_coordinator,
)
from rafka.client.errors import (
    IllegalTxnStateError,
    KafkaTimeoutError,
    TransactionAbortedError,
)
from rafka.client.types import (
    GroupMetadata,
    OffsetAndMetadata,
    TopicPartition,
    commit_offsets,
)
from rafka.wire.connection import backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_class, error_for
from rafka.wire.protocol import ApiKey

__all__ = ["ErrorKind", "ProducerHooks", "TransactionManager", "TxnState", "classify"]

ProducerFencedError = error_class(ErrorCode.PRODUCER_FENCED)
TransactionTimedOutError = error_class(ErrorCode.TRANSACTION_TIMED_OUT)


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "Committing"
    ABORTING = "Aborting"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


S = TxnState
# the state machine as data: state -> the states a call may move it to (FATAL_ERROR: from any)
_NEXT: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset({S.INITIALIZING}),
    S.INITIALIZING: frozenset({S.READY}),
    S.READY: frozenset({S.IN_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.COMMITTING, S.ABORTING, S.ABORTABLE_ERROR}),
    S.COMMITTING: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.ABORTING: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.ABORTING, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(),
}


class ErrorKind(enum.Enum):
    RETRIABLE = "retriable"  # find the coordinator again, back off, retry
    ABORTABLE = "abortable"  # this transaction must be aborted; the producer goes on
    BUMP = "abortable, epoch bump"  # abortable; the abort re-initialises (KIP-360)
    FENCED_OR_TIMED_OUT = "ask the coordinator"  # a partition saw a newer epoch (KIP-588)
    FATAL = "fatal"  # the producer can only be closed


_FATAL: frozenset[int] = frozenset({
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNKNOWN_API,
})
_FENCING: frozenset[int] = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
_SUSPECT: frozenset[int] = _FENCING | {ErrorCode.INVALID_TXN_STATE}  # from a partition leader


def classify(exc: BaseException, *, from_partition: bool = False) -> ErrorKind:
    """How the transactional producer treats ``exc``: from the coordinator, or (with
    ``from_partition``) a produce answer that failed a batch for good."""
    if isinstance(exc, TransactionAbortedError):
        return ErrorKind.ABORTABLE
    code = exc.code if isinstance(exc, RafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
    if from_partition:
        return ErrorKind.FENCED_OR_TIMED_OUT if code in _SUSPECT else ErrorKind.ABORTABLE
    if code in _FATAL:
        return ErrorKind.FATAL
    if code == ErrorCode.TRANSACTION_TIMED_OUT:
        return ErrorKind.BUMP
    if isinstance(exc, RafkaError) and (exc.retriable or code in REFRESH_CODES):
        return ErrorKind.RETRIABLE
    return ErrorKind.ABORTABLE


def _fresh(exc: RafkaError) -> RafkaError:
    """A new instance of ``exc`` to raise again (a stored one would grow its traceback)."""
    return type(exc)(exc.message, **exc.details)


class SendGate(Protocol):
    txn_sending: bool  # state is IN_TRANSACTION: what the C send path reads (client/_sendpath.c)


class ProducerHooks(Protocol):
    """What the manager needs of its producer: the producer's ``Sender`` implements it
    (``client/aio/sender.py``); the pure tests record the calls."""

    core: ClientCore
    gate: SendGate

    async def flush(self) -> None: ...

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None: ...

    def drop_unsent(self, err: BaseException) -> None: ...

    def set_fatal(self, err: BaseException) -> None: ...

    def wakeup(self) -> None: ...

    def start_soon(self, fn: Callable[[], Awaitable[None]]) -> None: ...


class TransactionManager:
    """State and coordinator calls of one transactional producer (module docstring)."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, *,
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100) -> None:
        if not transactional_id or not isinstance(transactional_id, str):
            raise error_for(ErrorCode.INVALID_CONFIG, "transactional_id must be a non-empty string")
        if transaction_timeout_ms <= 0:
            raise error_for(ErrorCode.INVALID_CONFIG,
                            f"transaction_timeout_ms must be positive, not {transaction_timeout_ms}")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.call_bound_ms = max(transaction_timeout_ms, request_timeout_ms)
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[TopicPartition] = set()  # acknowledged by the coordinator
        self.wanted: set[TopicPartition] = set()  # have batches, not added yet
        self.started = False  # the coordinator holds an open transaction (partitions/offsets added)
        self.error: RafkaError | None = None  # the abortable or fatal error of the current state
        self.epoch_bump = False  # the abort must re-initialise (KIP-360)
        self.epoch_suspect = False  # a partition refused our epoch (fenced, or timed out)
        self._adding: trio.Event | None = None  # set when the ADD_PARTITIONS in flight ends
        self._adding_tps: frozenset[TopicPartition] = frozenset()  # ... and its partitions
        self._producer: ProducerHooks | None = None
        # a partition refused our epoch: the coordinator is being asked whether we are fenced
        # (set when the answer is in), and the failed batches' results wait for that answer
        self._resolved: trio.Event | None = None
        self._held: list[tuple[Any, BaseException]] = []
        # one coordinator call at a time (``_call``), as Kafka's client queues its requests
        self._calls = trio.Lock()

    def bind(self, producer: ProducerHooks) -> None:
        self._producer = producer
        producer.gate.txn_sending = self.state is TxnState.IN_TRANSACTION

    # ------------------------------------------------------------------ pure state

    def _to(self, state: TxnState) -> None:
        if state is not TxnState.FATAL_ERROR and state not in _NEXT[self.state]:
            raise IllegalTxnStateError(f"transactional id {self.transactional_id!r}: cannot go from "
                                       f"{self.state.value} to {state.value}")
        self.state = state
        if self._producer is not None:  # the C send path's copy of check_send's test
            self._producer.gate.txn_sending = state is TxnState.IN_TRANSACTION

    def _refuse(self, what: str) -> RafkaError:
        """The error for calling ``what`` in the current state."""
        if self.state in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR) and self.error is not None:
            return _fresh(self.error)
        hint = {TxnState.UNINITIALIZED: "call init_transactions() first",
                TxnState.READY: "call begin_transaction() first"}.get(self.state, "")
        return IllegalTxnStateError(f"{what} is not allowed in state {self.state.value}"
                                    + (f": {hint}" if hint else ""))

    def check_send(self) -> None:
        """``send`` may add a record to the transaction (raises the named error otherwise)."""
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._refuse("send")

    def begin(self) -> None:
        if self.state is not TxnState.READY:
            raise self._refuse("begin_transaction")
        self._to(TxnState.IN_TRANSACTION)

    def want(self, tp: TopicPartition) -> bool:
        """The sender has a batch for ``tp``, which the coordinator has not acknowledged: note it
        for the next ADD_PARTITIONS_TO_TXN. False: the transaction failed, the batch cannot go."""
        if self.state is not TxnState.IN_TRANSACTION:
            return False
        if tp not in self._adding_tps:
            self.wanted.add(tp)
        return True

    def want_open(self, tps: Iterable[TopicPartition]) -> None:
        """Partitions that have a batch still lingering in the accumulator: add them now, so
        ADD_PARTITIONS_TO_TXN overlaps the linger and the sends instead of following them."""
        if self.state is TxnState.IN_TRANSACTION:
            for tp in tps:
                if tp not in self.partitions and tp not in self._adding_tps:
                    self.wanted.add(tp)

    def take_wanted(self) -> list[TopicPartition]:
        """Partitions for one ADD_PARTITIONS_TO_TXN (none while one is in flight)."""
        if self._adding is not None or not self.wanted:
            return []
        out = sorted(self.wanted)
        self.wanted.clear()
        self._adding = trio.Event()
        self._adding_tps = frozenset(out)
        return out

    def batch_failed(self, exc: BaseException, sequenced: bool, result: Any = None) -> bool:
        """A batch of the transaction failed for good (``sequenced``: it had a sequence number,
        which the partition may or may not have taken — only a new epoch is safe after it).

        True: the error may mean we are fenced — the coordinator is asked in the background
        and ``result`` (the batch's ``BatchResult``) is completed once it has answered, with
        ``ProducerFencedError`` if we are: one fatal error type on every path."""
        if sequenced:
            self.epoch_bump = True
        suspect = classify(exc, from_partition=True) is ErrorKind.FENCED_OR_TIMED_OUT
        if self.state is TxnState.IN_TRANSACTION and isinstance(exc, RafkaError):
            if suspect:
                self.epoch_suspect = True
            self.error = exc
            self._to(TxnState.ABORTABLE_ERROR)
        if not suspect or result is None or self._producer is None:
            return False
        if not (self.epoch_suspect or self._resolved is not None):
            return False  # the answer is in already: the batch's own error stands
        self._held.append((result, exc))
        if self._resolved is None:
            self._resolved = trio.Event()
            self._producer.start_soon(self._resolve_in_background)
        return True

    async def _resolve_in_background(self) -> None:
        try:
            if self.epoch_suspect:
                with contextlib.suppress(RafkaError):
                    await self._resolve_epoch()
        finally:
            fenced = self.state is TxnState.FATAL_ERROR and isinstance(self.error, ProducerFencedError)
            held, self._held = self._held, []
            for result, err in held:
                result.complete(error=_fresh(self.error) if fenced and self.error else err)
            ev, self._resolved = self._resolved, None
            if ev is not None:
                ev.set()

    @property
    def resolving(self) -> bool:
        """A suspected fence is being checked with the coordinator."""
        return self._resolved is not None

    async def suspicion_settled(self) -> None:
        """Wait until a suspected fence has been resolved with the coordinator (no-op when none
        is pending); then ``FATAL_ERROR`` says whether we are fenced."""
        ev = self._resolved
        if ev is not None:
            await ev.wait()

    def raise_if_fenced(self) -> None:
        if self.state is TxnState.FATAL_ERROR and self.error is not None:
            raise _fresh(self.error)

    def failed(self, exc: RafkaError, *, during_init: bool = False) -> RafkaError:
        """Record a coordinator call's error; returns what to raise. A timeout of the call itself
        leaves the state as it was (calling again resumes)."""
        kind = classify(exc)
        if isinstance(exc, KafkaTimeoutError) or kind is ErrorKind.RETRIABLE:
            return exc
        if kind is ErrorKind.FATAL or during_init:
            if exc.code in _FENCING:
                exc = ProducerFencedError(f"transactional id {self.transactional_id!r}: {exc.message}")
            self.error = exc
            self._to(TxnState.FATAL_ERROR)
            if self._producer is not None:
                self._producer.set_fatal(exc)
            return _fresh(exc)
        if kind is ErrorKind.BUMP:
            self.epoch_bump = True
        self.error = exc
        if self.state is not TxnState.ABORTING or kind is ErrorKind.BUMP:
            self._to(TxnState.ABORTABLE_ERROR)
        return _fresh(exc)

    def _finish(self) -> None:
        self.partitions.clear()
        self.wanted.clear()
        self.started = False
        self.error = None
        self.epoch_suspect = False
        self._to(TxnState.READY)

    def statistics(self) -> dict[str, Any]:
        return {"transaction_state": self.state.value,
                "transaction_partitions": len(self.partitions)}

    # ------------------------------------------------------------------ coordinator I/O

    @property
    def _hooks(self) -> ProducerHooks:
        if self._producer is None:
            raise IllegalTxnStateError("the transaction manager is not bound to a producer")
        return self._producer

    async def _call(self, api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` to the coordinator, retried on retriable answers up to ``call_bound_ms``.

        One call at a time per producer: the coordinator answers a second request for the id
        while the first is being written with CONCURRENT_TRANSACTIONS, and the loser's backoff
        (2 × ``retry_backoff_ms``) then dominated an exactly-once loop — the sender's
        ADD_PARTITIONS_TO_TXN for the outputs and ``send_offsets_to_transaction``'s
        ADD_OFFSETS_TO_TXN always met (``bench/txn_offsets_cost.py``: 214-216 ms of a 230 ms
        transaction). Queued behind each other they do not collide."""
        async with self._calls:
            return await self._call_alone(api, body)

    async def _call_alone(self, api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
        core = self._hooks.core
        deadline = time.monotonic() + self.call_bound_ms / 1000
        attempt = 0
        while True:
            try:
                node = await coordinator_node(core, KEY_TYPE_TRANSACTION, self.transactional_id)
                resp = await core.request_node(node, api, body)
                resp.raise_for_error()
                return resp.body
            except RafkaError as exc:
                if classify(exc) is not ErrorKind.RETRIABLE:
                    raise
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"{api.name} for transactional id {self.transactional_id!r} "
                                            f"did not succeed within {self.call_bound_ms} ms: {exc}") from exc
                if exc.code != ErrorCode.CONCURRENT_TRANSACTIONS:  # the coordinator may have moved
                    forget_coordinator(core, KEY_TYPE_TRANSACTION, self.transactional_id)
                    core.invalidate()
            attempt += 1
            await trio.sleep(backoff_ms(attempt, self.retry_backoff_ms, 1000) / 1000)

    def _ids(self) -> dict[str, Any]:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch}

    async def _init_producer_id(self, *, bump: bool) -> None:
        body: dict[str, Any] = {"transactional_id": self.transactional_id,
                                "transaction_timeout_ms": self.transaction_timeout_ms}
        if bump:
            body.update(producer_id=self.producer_id, producer_epoch=self.producer_epoch)
        answer = await self._call(ApiKey.INIT_PRODUCER_ID, body)
        self.producer_id = int(answer["producer_id"])
        self.producer_epoch = int(answer["producer_epoch"])
        self.epoch_bump = False
        self._hooks.set_producer_id(self.producer_id, self.producer_epoch)

    async def init(self) -> None:
        """INIT_PRODUCER_ID: fences older incarnations of the id and ends what they left open."""
        if self.state is TxnState.UNINITIALIZED:
            self._to(TxnState.INITIALIZING)
        elif self.state is not TxnState.INITIALIZING:  # INITIALIZING: an earlier call timed out
            raise self._refuse("init_transactions")
        try:
            await self._init_producer_id(bump=False)
        except RafkaError as exc:
            raise self.failed(exc, during_init=True) from None
        self._to(TxnState.READY)

    async def add_partitions(self, tps: list[TopicPartition]) -> None:
        """The sender's task for the partitions of ``take_wanted()``: ADD_PARTITIONS_TO_TXN,
        then wake the sender (their batches may go now, or fail)."""
        ev = self._adding
        try:
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            answer = await self._call(ApiKey.ADD_PARTITIONS_TO_TXN, {
                **self._ids(), "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
            for t in answer.get("topics") or ():
                for p in t.get("partitions") or ():
                    if p.get("error"):
                        raise error_for(p["error"], f"adding {t['name']}-{p['partition']} to the transaction")
            self.partitions.update(tps)
            self.started = True
        except RafkaError as exc:
            err = self.failed(exc)
            if self.state is TxnState.IN_TRANSACTION:  # the call timed out: failed() kept the state
                self.error = err
                self._to(TxnState.ABORTABLE_ERROR)  # the batches of these partitions fail
        finally:
            self._adding = None
            self._adding_tps = frozenset()
            if ev is not None:
                ev.set()
            self._hooks.wakeup()

    async def _adds_settled(self) -> None:
        while self._adding is not None:
            await self._adding.wait()

    async def send_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                           group_metadata: GroupMetadata | str) -> None:
        """ADD_OFFSETS_TO_TXN, then TXN_OFFSET_COMMIT to the group's coordinator: the offsets
        commit with the transaction (and are dropped if it aborts)."""
        from rafka.client.groups import coordinator_request, offsets_body  # noqa: I001  (groups imports client.aio)

        if self.state is not TxnState.IN_TRANSACTION:
            raise self._refuse("send_offsets_to_transaction")
        gm = GroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        if not gm.group_id:
            raise error_for(ErrorCode.INVALID_REQUEST, "send_offsets_to_transaction needs a group id")
        core = self._hooks.core
        try:
            try:  # has __consumer_offsets made if missing; refused if we may not describe the group
                await coordinator_node(core, KEY_TYPE_GROUP, gm.group_id)
            except RafkaError as exc:
                if not exc.retriable:
                    raise  # still being made: ADD_OFFSETS_TO_TXN is retried until it is there
            await self._call(ApiKey.ADD_OFFSETS_TO_TXN, {**self._ids(), "group_id": gm.group_id})
            self.started = True
            member = gm.member_epoch >= 0
            answer = await coordinator_request(core, gm.group_id, ApiKey.TXN_OFFSET_COMMIT, {
                **self._ids(), "group_id": gm.group_id,
                "member_id": gm.member_id or None if member else None,
                "member_epoch": gm.member_epoch if member else -1,
                "min_metadata_offset": gm.min_metadata_offset if member and gm.min_metadata_offset >= 0 else None,
                "topics": offsets_body(commit_offsets(offsets))})
            for t in answer.get("topics") or ():
                for p in t.get("partitions") or ():
                    if p.get("error"):
                        raise error_for(p["error"], p.get("message")
                                        or f"transactional commit of {t['name']}-{p['partition']}")
        except RafkaError as exc:
            # a timeout or a coordinator that stayed unreachable keeps the state: calling again
            # is safe (both requests are idempotent), and so is aborting
            raise self.failed(exc) from None

    async def _end(self, commit: bool) -> None:
        try:
            await self._call(ApiKey.END_TXN, {**self._ids(), "commit": commit})
        except RafkaError as exc:
            raise self.failed(exc) from None

    async def commit(self) -> None:
        """Flush every batch, then END_TXN(commit); raises the first batch error instead (the
        transaction must then be aborted)."""
        if self.state is TxnState.IN_TRANSACTION:
            await self._hooks.flush()
            await self._adds_settled()
        await self.suspicion_settled()
        if self.state is TxnState.ABORTABLE_ERROR and self.epoch_suspect:
            await self._resolve_epoch()
        if self.state is TxnState.IN_TRANSACTION:
            self._to(TxnState.COMMITTING)
        elif self.state is not TxnState.COMMITTING:  # COMMITTING: an earlier call timed out
            raise self._refuse("commit_transaction")
        if self.started:
            await self._end(commit=True)
        self._finish()

    async def _resolve_epoch(self) -> None:
        """A partition refused our epoch or our transaction: ask the coordinator whether we are
        fenced (fatal) or timed out (abortable, re-init) — an ADD_PARTITIONS_TO_TXN of a
        partition already added changes nothing. Otherwise the batch's error stands."""
        self.epoch_suspect = False
        probe = sorted(self.partitions)[:1]
        if not probe:
            return
        try:
            await self._call(ApiKey.ADD_PARTITIONS_TO_TXN, {
                **self._ids(), "topics": [{"name": probe[0].topic, "partitions": [probe[0].partition]}]})
        except RafkaError as exc:
            if classify(exc) in (ErrorKind.FATAL, ErrorKind.BUMP):
                raise self.failed(exc) from None
            # no clear answer (or another error): the batch's own error stands

    async def abort(self) -> None:
        """Drop unsent batches, wait for those in flight, END_TXN(abort), re-init if needed.
        A suspected fence is resolved first: a fenced producer's abort raises
        ``ProducerFencedError`` like every other call."""
        await self.suspicion_settled()
        if self.state is TxnState.ABORTABLE_ERROR and self.epoch_suspect:
            try:
                await self._resolve_epoch()
            except RafkaError:
                if self.state is TxnState.FATAL_ERROR:
                    raise  # fenced; a timed-out transaction is aborted (and re-initialised) below
        if self.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            self._to(TxnState.ABORTING)
        elif self.state is not TxnState.ABORTING:  # ABORTING: an earlier call timed out
            raise self._refuse("abort_transaction")
        hooks = self._hooks
        hooks.drop_unsent(TransactionAbortedError(
            f"transactional id {self.transactional_id!r}: the transaction was aborted before the batch was sent"))
        await hooks.flush()
        await self._adds_settled()
        if self.started:
            await self._end(commit=False)
            self.started = False
        if self.epoch_bump:
            try:
                await self._init_producer_id(bump=True)
            except RafkaError as exc:
                raise self.failed(exc, during_init=not isinstance(exc, KafkaTimeoutError)) from None
        self._finish()

    async def end_block(self, failed: bool) -> None:
        """The end of a ``transaction()`` block: abort after an exception (unless the producer is
        fenced, when nothing is left to do), else commit — and if the commit fails with an
        abortable error, abort too and raise the commit's error."""
        if failed:
            if self.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
                await self.abort()
            return
        try:
            await self.commit()
        except RafkaError:
            if self.state is TxnState.ABORTABLE_ERROR:
                await self.abort()
            raise
