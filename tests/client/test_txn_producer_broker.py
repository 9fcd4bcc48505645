"""The transactional producer against a real single broker (tests/client/conftest.py).

Commit makes records visible to read_committed readers, abort and a failing ``transaction()``
block leave them invisible, a second producer with the same transactional id fences the first,
and offsets sent to the transaction are committed only with it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest
import trio
from rafka.client import Admin, AsyncProducer, Consumer, Producer
from rafka.client.errors import (
    MessageTooLargeError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionTimedOutError,
)
from rafka.client.types import ConsumerRecord, GroupMetadata, TopicPartition

pytestmark = pytest.mark.timeout(300)


def read(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[ConsumerRecord]:
    """Everything below each partition's end (high watermark, or LSO for read_committed)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    got: list[ConsumerRecord] = []
    with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation) as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        deadline = time.monotonic() + 60
        while any(c.position(tp) < end for tp, end in ends.items()):
            assert time.monotonic() < deadline, f"{topic}: stuck before {ends}"
            for recs in c.poll(timeout_ms=200).values():
                got.extend(recs)
    return got


def values(records: list[ConsumerRecord]) -> set[bytes]:
    return {r.value for r in records if r.value is not None}


def tid() -> str:
    return f"txn-{uuid.uuid4().hex[:8]}"


def test_commit_is_visible_abort_and_failed_block_are_not(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(3)
    with Producer(bootstrap, transactional_id=tid(), linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(30):
            p.send(topic, f"c{i}".encode(), partition=i % 3)
        p.commit_transaction()

        p.begin_transaction()
        futs = [p.send(topic, f"a{i}".encode(), partition=i % 3) for i in range(30)]
        p.flush()  # in the log, then aborted: present for read_uncommitted only
        assert all(f.result(timeout=30).offset >= 0 for f in futs)
        p.abort_transaction()

        with pytest.raises(ZeroDivisionError):
            with p.transaction():
                for i in range(10):
                    p.send(topic, f"x{i}".encode(), partition=i % 3)
                p.flush()
                raise ZeroDivisionError

        with p.transaction():  # the producer goes on after both aborts
            p.send(topic, b"last", partition=1)

    committed = values(read(bootstrap, topic, 3, "read_committed"))
    assert committed == {f"c{i}".encode() for i in range(30)} | {b"last"}
    everything = values(read(bootstrap, topic, 3, "read_uncommitted"))
    assert {f"a{i}".encode() for i in range(30)} <= everything
    assert {f"x{i}".encode() for i in range(10)} <= everything


@contextlib.contextmanager
def zombie_and_successor(bootstrap: str, topic: str) -> Iterator[tuple[Producer, Producer]]:
    """(old, new): old has partition 0 in an open transaction when new's init_transactions()
    aborts it and bumps the epoch — old is a zombie."""
    same = tid()
    with Producer(bootstrap, transactional_id=same, linger_ms=1) as old:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie-0", partition=0)
        old.flush()  # partition 0 is in its open transaction
        with Producer(bootstrap, transactional_id=same, linger_ms=1) as new:
            new.init_transactions()
            yield old, new


def test_a_new_incarnation_fences_the_old_one(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    with zombie_and_successor(bootstrap, topic) as (old, new):
        old.send(topic, b"zombie-1", partition=0)
        old.send(topic, b"zombie-2", partition=1)
        with pytest.raises(ProducerFencedError):
            old.commit_transaction()
        with pytest.raises(ProducerFencedError):
            old.send(topic, b"zombie-3")  # fatal: every later call
        with pytest.raises(ProducerFencedError):
            old.begin_transaction()
        with new.transaction():
            new.send(topic, b"alive", partition=1)
    assert values(read(bootstrap, topic, 2, "read_committed")) == {b"alive"}


def test_offsets_sent_to_the_transaction_commit_only_with_it(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Producer(bootstrap, transactional_id=tid(), linger_ms=1) as p, \
            Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False) as c:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"out", partition=0)
        p.send_offsets_to_transaction({tp0: 5, tp1: 7}, GroupMetadata(group))
        assert c.committed(tp0) is None  # pending until the commit marker
        p.abort_transaction()
        assert c.committed(tp0) is None and c.committed(tp1) is None

        with p.transaction():
            p.send(topic, b"out", partition=0)
            p.send_offsets_to_transaction({tp0: 5, tp1: 7}, group)
        assert (c.committed(tp0), c.committed(tp1)) == (5, 7)


def test_a_failed_batch_fails_the_commit_and_the_abort_goes_on(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1, {"max.message.bytes": "2000"})
    with Producer(bootstrap, transactional_id=tid(), linger_ms=1) as p:
        p.init_transactions()
        epoch = p.statistics()["producer_epoch"]
        p.begin_transaction()
        p.send(topic, b"before", partition=0)
        p.flush()
        p.send(topic, b"x" * 5000, partition=0)  # refused by the broker: too large
        with pytest.raises(MessageTooLargeError):
            p.commit_transaction()
        with pytest.raises(MessageTooLargeError):
            p.send(topic, b"more")  # abortable: nothing but abort now
        p.abort_transaction()
        assert p.statistics()["producer_epoch"] == epoch + 1  # its sequence was lost: new epoch
        with p.transaction():
            p.send(topic, b"after", partition=0)
    assert values(read(bootstrap, topic, 1, "read_committed")) == {b"after"}


def test_a_timed_out_transaction_is_aborted_and_the_producer_reinitialises(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    me = tid()
    with Producer(bootstrap, transactional_id=me, linger_ms=1, transaction_timeout_ms=1000) as p, \
            Admin(bootstrap) as admin:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"late", partition=0)
        p.flush()
        deadline = time.monotonic() + 60
        while admin.describe_transactions([me])[me].state != "CompleteAbort":
            assert time.monotonic() < deadline, "the coordinator never aborted the transaction"
            time.sleep(0.2)
        p.send(topic, b"later", partition=0)
        with pytest.raises(TransactionTimedOutError):
            p.commit_transaction()
        p.abort_transaction()  # then INIT_PRODUCER_ID with the old id and epoch (KIP-360)
        with p.transaction():
            p.send(topic, b"on time", partition=0)
    assert values(read(bootstrap, topic, 1, "read_committed")) == {b"on time"}


def test_async_transaction_block_commits_or_aborts(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)

    async def main() -> None:
        async with AsyncProducer(bootstrap, transactional_id=tid(), linger_ms=1) as p:
            await p.init_transactions()
            with pytest.raises(KeyError):
                async with p.transaction():
                    futs = [await p.send(topic, b"dropped", partition=i % 2) for i in range(4)]
                    raise KeyError("boom")
            for f in futs:  # never sent: failed by the abort
                with pytest.raises(TransactionAbortedError):
                    await f
            async with p.transaction():
                await p.send(topic, b"kept-0", partition=0)
                await p.send(topic, b"kept-1", partition=1)
            assert p.statistics()["transaction_state"] == "Ready"

    trio.run(main)
    assert values(read(bootstrap, topic, 2, "read_committed")) == {b"kept-0", b"kept-1"}
    assert b"dropped" not in values(read(bootstrap, topic, 2, "read_uncommitted"))


@pytest.mark.parametrize("path", ["send", "flush", "commit", "abort"])
def test_a_fenced_producer_raises_one_error_type_on_every_path(bootstrap: str, make_topic, path: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 25: a zombie's commit raised ProducerFencedError but its send after the fence
    failed with InvalidTxnStateError / InvalidProducerEpochError, so users had to catch both.
    The partition's refusal is checked with the coordinator first: every path now raises
    ProducerFencedError — the record's future, flush, a later send, commit and abort."""
    topic = make_topic(1)
    with zombie_and_successor(bootstrap, topic) as (old, _new):
        fut = old.send(topic, b"zombie-1", partition=0)  # accepted locally, refused by the leader
        with pytest.raises(ProducerFencedError):
            if path == "send":
                fut.result(timeout=30)
            elif path == "flush":
                old.flush()
            elif path == "commit":
                old.commit_transaction()
            else:
                old.abort_transaction()
        with pytest.raises(ProducerFencedError):  # and on every later call
            old.send(topic, b"zombie-2", partition=0)
        with pytest.raises(ProducerFencedError):
            old.abort_transaction()
