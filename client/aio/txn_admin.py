"""Transaction administration on the client: list, describe, producers, operator abort.

Theory of operation (docs/transactions.md, "Wire")
--------------------------------------------------
These are the functions behind ``AsyncAdmin.list_transactions`` & co. and ``rafka
transactions``; each takes an open :class:`~client.aio._core.ClientCore`.

* ``list_transactions`` asks **every** broker (LIST_TRANSACTIONS): each knows only the ids it
  coordinates. The answers are merged; an id reported twice (a coordinator moving while we
  ask) keeps the entry with the higher producer epoch.
* ``describe_transactions`` sends DESCRIBE_TRANSACTIONS to each id's coordinator — the leader of
  ``__transaction_state`` partition ``crc32(id) % partitions``, named by FIND_COORDINATOR
  (``client/aio/coordinator.py``; describe on the id on a secured cluster). An id no coordinator
  knows is ``TransactionalIdNotFoundError``.
* ``describe_producers`` asks a partition's leader (DESCRIBE_PRODUCERS) for its producers:
  epoch, last sequence, and ``txn_first_offset`` (≥ 0 while that producer has an open
  transaction on the partition — what keeps the last stable offset back).
* ``abort_transaction`` is the operator's way out of a *hanging* transaction (one its
  coordinator will never end, e.g. after the coordinator lost its state): it first checks with
  DESCRIBE_PRODUCERS that the producer has an open transaction there, then asks the leader to
  write an ABORT marker (WRITE_TXN_MARKERS, ``coordinator_epoch`` −1, the producer's epoch).

Every request is retried — metadata refreshed, with backoff — on retriable errors (leader or
coordinator moves, COORDINATOR_LOAD_IN_PROGRESS) until ``core.request_timeout_ms`` has passed;
other errors are raised as their named ``RafkaError`` subclasses.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NamedTuple, TypeVar

import trio
from rafka.client.aio._core import REFRESH_CODES, ClientCore
from rafka.client.aio.coordinator import KEY_TYPE_TRANSACTION, coordinator_node, forget_coordinator
from rafka.client.types import TopicPartition
from rafka.wire.connection import backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey

__all__ = [
    "ProducerState",
    "TransactionDescription",
    "TransactionListing",
    "abort_transaction",
    "describe_producers",
    "describe_transactions",
    "list_transactions",
]

T = TypeVar("T")


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str  # Kafka's spelling: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort
    coordinator_id: int


class TransactionDescription(NamedTuple):
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    txn_start_ms: int  # -1 when no transaction is open
    last_update_ms: int
    partitions: list[TopicPartition]
    coordinator_id: int


class ProducerState(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    txn_first_offset: int  # -1: no open transaction on the partition


async def _retrying(core: ClientCore, fn: Callable[[], Awaitable[T]]) -> T:
    """``fn()`` until it returns, retrying retriable errors until request_timeout_ms."""
    deadline = time.monotonic() + core.request_timeout_ms / 1000
    attempt = 0
    while True:
        try:
            return await fn()
        except RafkaError as exc:
            if not (exc.retriable or exc.code in REFRESH_CODES) or time.monotonic() >= deadline:
                raise
        core.invalidate()
        attempt += 1
        await trio.sleep(backoff_ms(attempt, core.retry_backoff_ms, 1000) / 1000)


def _check(code: int | None, message: str | None, what: str) -> None:
    if code:
        raise error_for(code, f"{what}: {message}" if message else what)


# --------------------------------------------------------------------------- transactions


async def list_transactions(core: ClientCore, states: Iterable[str] | None = None) -> list[TransactionListing]:
    """Every transactional id the cluster's coordinators know (optionally only in ``states``)."""
    wanted = None if states is None else sorted(set(states))
    await _retrying(core, core.refresh_metadata)
    found: dict[str, TransactionListing] = {}

    async def one(node: int) -> None:
        async def ask() -> list[dict[str, Any]]:
            resp = await core.request_node(node, ApiKey.LIST_TRANSACTIONS, {"states": wanted})
            resp.raise_for_error()
            return list(resp.body.get("transactions") or [])

        for t in await _retrying(core, ask):
            item = TransactionListing(str(t["transactional_id"]), int(t.get("producer_id", -1)),
                                      int(t.get("producer_epoch", -1)), str(t.get("state", "")), node)
            old = found.get(item.transactional_id)
            if old is None or item.producer_epoch > old.producer_epoch:
                found[item.transactional_id] = item

    async with trio.open_nursery() as nursery:
        for node in sorted(core.metadata.brokers):
            nursery.start_soon(one, node)
    return [found[k] for k in sorted(found)]


async def describe_transactions(core: ClientCore, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
    """State, producer id/epoch, timeout, start time and partitions of each id, from its
    coordinator. Raises the first id's error that is not retriable (e.g. not found)."""
    ids = list(dict.fromkeys(transactional_ids))
    out: dict[str, TransactionDescription] = {}

    async def one(tid: str) -> None:
        async def ask() -> TransactionDescription:
            node = await coordinator_node(core, KEY_TYPE_TRANSACTION, tid)
            try:
                resp = await core.request_node(node, ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})
                resp.raise_for_error()
            except RafkaError:
                forget_coordinator(core, KEY_TYPE_TRANSACTION, tid)  # may have moved: ask again
                raise
            for t in resp.body.get("transactions") or []:
                if t.get("transactional_id") == tid:
                    _check(t.get("error"), t.get("message"), f"transactional id {tid!r}")
                    return _description(t, node)
            raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for transactional id {tid!r}")

        out[tid] = await _retrying(core, ask)

    async with trio.open_nursery() as nursery:
        for tid in ids:
            nursery.start_soon(one, tid)
    return {tid: out[tid] for tid in ids}


def _description(t: dict[str, Any], node: int) -> TransactionDescription:
    parts = sorted(TopicPartition(e["name"], int(p)) for e in t.get("partitions") or () for p in e["partitions"])
    start = t.get("txn_start_ms")
    return TransactionDescription(
        str(t["transactional_id"]), str(t.get("state", "")), int(t.get("producer_id", -1)),
        int(t.get("producer_epoch", -1)), int(t.get("timeout_ms", 0) or 0),
        -1 if start is None else int(start), int(t.get("last_update_ms", -1) or -1), parts, node)


# --------------------------------------------------------------------------- partitions


async def _leader_request(core: ClientCore, tp: TopicPartition, api: ApiKey,
                          body: dict[str, Any]) -> dict[str, Any]:
    """Send ``body`` to ``tp``'s leader once; → the response body (callers retry)."""
    await core.wait_for_topic(tp.topic, core.request_timeout_ms)
    if tp.partition not in (core.metadata.topics.get(tp.topic) or ()):
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition} does not exist")
    leader = core.metadata.leader(tp)
    if leader < 0:
        raise error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp.topic}-{tp.partition} has no leader")
    resp = await core.request_node(leader, api, body)
    resp.raise_for_error()
    return resp.body


def _partition_entry(topics: Iterable[dict[str, Any]] | None, tp: TopicPartition) -> dict[str, Any]:
    for t in topics or ():
        if t.get("name") == tp.topic:
            for p in t.get("partitions") or ():
                if int(p.get("partition", -1)) == tp.partition:
                    return p
    raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {tp.topic}-{tp.partition}")


async def describe_producers(core: ClientCore, tp: TopicPartition) -> list[ProducerState]:
    """The producers the leader of ``tp`` tracks, by producer id."""
    tp = TopicPartition(*tp)

    async def ask() -> list[ProducerState]:
        body = await _leader_request(core, tp, ApiKey.DESCRIBE_PRODUCERS,
                                        {"topics": [{"name": tp.topic, "partitions": [tp.partition]}]})
        p = _partition_entry(body.get("topics"), tp)
        _check(p.get("error"), p.get("message"), f"{tp.topic}-{tp.partition}")
        return sorted(ProducerState(int(x["producer_id"]), int(x.get("producer_epoch", -1)),
                                     int(x.get("last_sequence", -1)), int(x.get("last_timestamp", -1)),
                                     int(x.get("txn_first_offset", -1)))
                       for x in p.get("producers") or ())

    return await _retrying(core, ask)


async def abort_transaction(core: ClientCore, tp: TopicPartition, producer_id: int,
                            producer_epoch: int | None = None) -> ProducerState:
    """Write an ABORT marker for ``producer_id``'s open transaction on ``tp`` (operator tool).

    The epoch defaults to the producer's current one there. Raises ``InvalidTxnStateError``
    when that producer has no open transaction on ``tp``; returns its state before the abort."""
    tp = TopicPartition(*tp)
    found = {p.producer_id: p for p in await describe_producers(core, tp)}
    state = found.get(producer_id)
    if state is None or state.txn_first_offset < 0:
        raise error_for(ErrorCode.INVALID_TXN_STATE,
                        f"producer {producer_id} has no open transaction on {tp.topic}-{tp.partition}")
    epoch = state.producer_epoch if producer_epoch is None else producer_epoch
    body = {"markers": [{"producer_id": producer_id, "producer_epoch": epoch, "commit": False,
                         "coordinator_epoch": -1,
                         "topics": [{"name": tp.topic, "partitions": [tp.partition]}]}],
            "timeout_ms": core.request_timeout_ms}

    async def ask() -> None:
        resp = await _leader_request(core, tp, ApiKey.WRITE_TXN_MARKERS, body)
        for m in resp.get("markers") or ():
            if int(m.get("producer_id", -1)) == producer_id:
                p = _partition_entry(m.get("topics"), tp)
                _check(p.get("error"), p.get("message"), f"abort marker on {tp.topic}-{tp.partition}")
                return
        raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"no marker answer for producer {producer_id}")

    await _retrying(core, ask)
    return state
