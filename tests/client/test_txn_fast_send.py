"""Transactional sends on the C fast path (``client/_sendpath.c``) against the Python path, on a
real single-node broker (tests/client/conftest.py); issue 12.

A transactional producer's record goes through C when its partition has an open batch and the
producer is in a transaction (``Gate.txn_sending``, kept by ``TransactionManager._to``). Each test
runs with ``path="c"`` and ``path="python"`` (the sync ``send_threadsafe``, or ``AsyncProducer``
without its ``_loop_send``) and checks the same outcome: which calls went through Python, what
commits, what an abort leaves (nothing for read_committed, the flushed records for
read_uncommitted), the named error of a send once the transaction failed — with the batch it
would have joined still open, so only the state check stands between the record and the
batch — and a fenced producer's sends.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio
from rafka.client import AsyncProducer, Producer
from rafka.client.aio import fast_send
from rafka.client.aio.enqueue import Enqueue
from rafka.client.errors import (
    IllegalTxnStateError,
    MessageTooLargeError,
    ProducerFencedError,
    TransactionAbortedError,
)

from tests.client.test_txn_producer_broker import read, values

pytestmark = pytest.mark.timeout(300)

PATHS = ["c", "python"]
LONG = {"linger_ms": 60_000, "batch_size": 1 << 20}  # batches stay open until a flush


def _skip_without_c(path: str) -> None:
    if path == "c" and not fast_send.ENABLED:
        pytest.skip("client/_sendpath.c not built (or RAFKA_NO_SPEEDUPS set)")


def _tid() -> str:
    return f"tfs-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def python_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the sends that reached Python: ``send_threadsafe`` (sync) and ``Enqueue.send``
    (``AsyncProducer.send``'s Python path); patched before any producer binds its path."""
    calls: list[str] = []
    sync, loop_send = AsyncProducer.send_threadsafe, Enqueue.send

    def send_threadsafe(self: AsyncProducer, *args: Any, **kwargs: Any) -> Any:
        calls.append("sync")
        return sync(self, *args, **kwargs)

    async def enqueue_send(self: Enqueue, *args: Any) -> Any:
        calls.append("async")
        return await loop_send(self, *args)

    monkeypatch.setattr(AsyncProducer, "send_threadsafe", send_threadsafe)
    monkeypatch.setattr(Enqueue, "send", enqueue_send)
    return calls


def _sync(bootstrap: str, path: str, transactional_id: str) -> Producer:
    _skip_without_c(path)
    p = Producer(bootstrap, transactional_id=transactional_id, **LONG)
    if path == "python":
        p.send = p._async.send_threadsafe  # type: ignore[method-assign]
    assert (fast_send.sendpath is not None and isinstance(
        getattr(p.send, "__self__", None), fast_send.sendpath.SendPath)) == (path == "c")
    return p


@pytest.mark.parametrize("path", PATHS)
def test_commit_and_abort_as_python(bootstrap: str, make_topic: Any, path: str,
                                    python_calls: list[str]) -> None:
    topic = make_topic(3)
    with _sync(bootstrap, path, _tid()) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(60):
            p.send(topic, b"c%d" % i, partition=i % 3)
        # the first record of each partition opens its batch (Python); the rest are appends
        assert python_calls.count("sync") == (3 if path == "c" else 60)
        p.commit_transaction()

        p.begin_transaction()
        futs = [p.send(topic, b"a%d" % i, partition=i % 3) for i in range(60)]
        p.flush()  # in the log, then aborted
        assert all(f.result(timeout=30).offset >= 0 for f in futs)
        p.abort_transaction()

        p.begin_transaction()
        unsent = [p.send(topic, b"u%d" % i, partition=i % 3) for i in range(30)]
        p.abort_transaction()  # still in open batches: dropped, never sent
        for f in unsent:
            with pytest.raises(TransactionAbortedError):
                f.result(timeout=30)

        with p.transaction():  # goes on after the aborts
            p.send(topic, b"last", partition=1)
    assert values(read(bootstrap, topic, 3, "read_committed")) == (
        {b"c%d" % i for i in range(60)} | {b"last"})
    everything = values(read(bootstrap, topic, 3, "read_uncommitted"))
    assert {b"a%d" % i for i in range(60)} <= everything
    assert not {b"u%d" % i for i in range(30)} & everything


def _two_topics(make_topic: Any) -> tuple[str, str]:
    """A topic for ordinary records, and one whose max.message.bytes refuses a 2 KB record (a
    single-record batch the broker refuses fails the transaction: ABORTABLE_ERROR)."""
    return make_topic(1), make_topic(1, {"max.message.bytes": "1000"})


SMALL_BATCHES = {"linger_ms": 60_000, "batch_size": 1500}  # a 2 KB record closes its batch at once


@pytest.mark.parametrize("path", PATHS)
def test_a_send_after_the_transaction_failed_is_refused_as_in_python(
        bootstrap: str, make_topic: Any, path: str, python_calls: list[str]) -> None:
    ok, small = _two_topics(make_topic)
    _skip_without_c(path)
    with Producer(bootstrap, transactional_id=_tid(), **SMALL_BATCHES) as p:
        if path == "python":
            p.send = p._async.send_threadsafe  # type: ignore[method-assign]
        with pytest.raises(IllegalTxnStateError):
            p.send(ok, b"before init", partition=0)
        p.init_transactions()
        with pytest.raises(IllegalTxnStateError):
            p.send(ok, b"before begin", partition=0)
        p.begin_transaction()
        p.send(ok, b"opens", partition=0)
        p.send(ok, b"appended", partition=0)
        batch = p._async._enqueue.acc._open[ok][0]  # ok's batch stays open: linger 60 s, room left
        with pytest.raises(MessageTooLargeError):
            p.send(small, b"x" * 2000, partition=0).result(timeout=30)
        assert p._async._txn.state.value == "AbortableError"
        assert p._async._enqueue.acc._open[ok][0] is batch and batch.record_count == 2
        calls = python_calls.count("sync")
        with pytest.raises(MessageTooLargeError):  # the transaction's error, as check_send
            p.send(ok, b"refused", partition=0)
        assert batch.record_count == 2 and python_calls.count("sync") == calls + 1  # C handed it on
        p.abort_transaction()
        with p.transaction():
            p.send(ok, b"next", partition=0)
            p.send(ok, b"next-2", partition=0)
    assert values(read(bootstrap, ok, 1, "read_committed")) == {b"next", b"next-2"}


@pytest.mark.parametrize("path", PATHS)
def test_a_fenced_producer_is_fenced_as_in_python(bootstrap: str, make_topic: Any,
                                                  path: str) -> None:
    topic = make_topic(2)
    same = _tid()
    with _sync(bootstrap, path, same) as old:
        old.init_transactions()
        old.begin_transaction()
        zombies = [old.send(topic, b"zombie-%d" % i, partition=i % 2) for i in range(10)]
        with Producer(bootstrap, transactional_id=same, linger_ms=1) as new:
            new.init_transactions()  # bumps the epoch: the old producer does not know yet
            zombies += [old.send(topic, b"zombie-late-%d" % i, partition=i % 2) for i in range(10)]
            with pytest.raises(ProducerFencedError):
                old.commit_transaction()
            for f in zombies:
                assert f.exception(timeout=30) is not None
            with pytest.raises(ProducerFencedError):
                old.send(topic, b"zombie-after", partition=0)
            with new.transaction():
                new.send(topic, b"alive", partition=1)
    assert values(read(bootstrap, topic, 2, "read_committed")) == {b"alive"}


@pytest.mark.parametrize("path", PATHS)
def test_async_send_in_a_transaction_as_in_python(bootstrap: str, make_topic: Any, path: str,
                                                  python_calls: list[str]) -> None:
    ok, small = _two_topics(make_topic)
    _skip_without_c(path)

    async def main() -> None:
        async with AsyncProducer(bootstrap, transactional_id=_tid(), **SMALL_BATCHES) as p:
            assert (p._loop_send is not None) == fast_send.ENABLED
            if path == "python":
                p._loop_send = None
            await p.init_transactions()
            with pytest.raises(IllegalTxnStateError):
                await p.send(ok, b"before begin", partition=0)
            await p.begin_transaction()
            calls = python_calls.count("async")
            futs = [await p.send(ok, b"r%d" % i, partition=0) for i in range(20)]
            assert python_calls.count("async") - calls == (1 if path == "c" else 20)
            batch = p._enqueue.acc._open[ok][0]
            too_big = await p.send(small, b"x" * 2000, partition=0)
            with pytest.raises(MessageTooLargeError):
                await too_big
            with pytest.raises(MessageTooLargeError):
                await p.send(ok, b"refused", partition=0)
            assert p._enqueue.acc._open[ok][0] is batch and batch.record_count == 20
            await p.abort_transaction()
            for f in futs:
                with pytest.raises(TransactionAbortedError):
                    await f
            async with p.transaction():
                for i in range(5):
                    await p.send(ok, b"c%d" % i, partition=0)

    trio.run(main)
    assert values(read(bootstrap, ok, 1, "read_committed")) == {b"c%d" % i for i in range(5)}
