"""The C send path (``client/_sendpath.c``) mirrors the producer's Python enqueue path
(``Enqueue.stage`` + ``RecordAccumulator.append`` + ``ProducerBatch.add``) for speed: the same
records sent through each must leave identical batches — same partitions, record counts and
encoded bytes. Socket-free: an ``Enqueue`` over a cached metadata and an accumulator of its own.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from rafka.client.aio import fast_send
from rafka.client.aio._core import ClientCore
from rafka.client.aio.accumulator import ProducerBatch, RecordAccumulator
from rafka.client.aio.enqueue import NO_HEADERS, Enqueue, Gate
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.producer_config import ProducerConfig
from rafka.client.partitioner import make_partitioner

pytestmark = pytest.mark.skipif(not fast_send.ENABLED,
                                reason="client/_sendpath.c not built (or RAFKA_NO_SPEEDUPS set)")

TOPICS = {"a": 3, "b": 5}
TS0 = 1_700_000_000_000


def _enqueue(batch_size: int) -> Enqueue:
    core = ClientCore("127.0.0.1:1", client_id="mirror")
    core.metadata.update({
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 1}],
        "topics": [{"name": t, "error": 0, "partitions": [
            {"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1], "isr": [1]}
            for p in range(n)]} for t, n in TOPICS.items()]}, all_topics=True)
    config = ProducerConfig(batch_size=batch_size, buffer_memory=1 << 24)
    enq = Enqueue(config, core, make_partitioner(None), None, Gate())
    acc = RecordAccumulator(batch_size=batch_size, buffer_memory=config.buffer_memory,
                            linger_ms=60_000, wakeup=lambda: None, loop_thread=-1)
    enq.start(acc, -1, None)  # type: ignore[arg-type]  # never waits: no loop needed
    return enq


def _records(seed: int, n: int) -> list[tuple[Any, ...]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        topic = rnd.choice(list(TOPICS))
        key = rnd.choice([None, b"", b"k%d" % rnd.randrange(20), rnd.randbytes(rnd.randrange(40))])
        value = rnd.choice([None, b"", rnd.randbytes(rnd.randrange(300))])
        headers = rnd.choice([None, None, [], [("h", b"1")], [("trace", rnd.randbytes(8)), ("x", b"")]])
        partition = rnd.choice([None, None, None, rnd.randrange(TOPICS[topic])])
        ts = TS0 + i * rnd.randrange(0, 5)
        out.append((topic, value, key, headers, partition, ts))
    return out


def _batches(enq: Enqueue) -> list[tuple[str, int, int, bytes]]:
    assert enq.acc is not None
    out = []
    for b in enq.acc.drain(time.monotonic(), force=True):
        out.append((b.topic, b.partition, b.record_count, bytes(b.encode())))
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("batch_size", [600, 4096, 256 * 1024])
def test_c_send_path_and_python_enqueue_write_identical_batches(seed: int, batch_size: int) -> None:
    records = _records(seed, 400)

    python = _enqueue(batch_size)
    random.seed(seed)  # the sticky partitioner's choices
    py_futs = [python.send_threadsafe(*r) for r in records]

    c = _enqueue(batch_size)
    fallbacks = []

    def fallback(*args: Any, **kwargs: Any) -> FutureRecordMetadata:
        fallbacks.append(args)
        return c.send_threadsafe(*args, **kwargs)

    send = fast_send.sendpath.SendPath(c, fallback, FutureRecordMetadata, ProducerBatch,  # type: ignore[union-attr]
                                       NO_HEADERS).send
    random.seed(seed)
    c_futs = [send(*r) for r in records]

    assert len(fallbacks) < len(records) // 2  # most records took the C path
    assert _batches(c) == _batches(python)
    assert [(f._index, f._ts) for f in c_futs] == [(f._index, f._ts) for f in py_futs]
    assert [f._batch.partition for f in c_futs] == [f._batch.partition for f in py_futs]
