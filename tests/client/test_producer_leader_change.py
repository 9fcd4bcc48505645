"""The producer retries a batch at once when its partition's leader changed during the retry
backoff (Kafka's KIP-951), and refreshes metadata while it waits out a long backoff — so a
failover is noticed within ~100 ms instead of at the next (up to 1 s later) attempt.

Socket-free: the producer's ``Sender`` is built on its own and its ``_dispatch`` runs with
``_produce`` replaced by a recorder.
"""

from __future__ import annotations

import time
from typing import Any

from rafka.client.aio._core import ClientCore
from rafka.client.aio.accumulator import PartitionState, RecordAccumulator
from rafka.client.aio.enqueue import Gate
from rafka.client.aio.producer_config import ProducerConfig
from rafka.client.aio.sender import _BACKOFF_REFRESH_S, Sender, Wakeup
from rafka.client.types import TopicPartition

TP = TopicPartition("t", 0)


def _producer(leader: int) -> tuple[Sender, list[int], PartitionState]:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=10_000, linger_ms=0,
                            wakeup=lambda: None, loop_thread=-1)
    config = ProducerConfig(acks=1, enable_idempotence=False, retry_backoff_ms=20)
    p = Sender(acc, ClientCore("127.0.0.1:1", client_id="t"), None, config=config, gate=Gate(), wakeup=Wakeup())
    p.core.metadata.update({
        "brokers": [{"node_id": n, "host": "127.0.0.1", "port": n} for n in (1, 2, 3)],
        "topics": [{"name": "t", "error": 0, "partitions": [
            {"partition": 0, "leader": leader, "leader_epoch": 1, "replicas": [1, 2, 3],
             "isr": [1, 2, 3]}]}]}, all_topics=True)
    sent: list[int] = []

    async def produce(node: int, group: list[Any]) -> None:
        sent.append(node)
        for st, b in group:
            st.done(b)

    p._produce = produce  # type: ignore[method-assign]
    p._prepare = lambda st, b: None  # type: ignore[method-assign]
    p.nursery = object()  # type: ignore[assignment]
    acc.append("t", 0, None, b"v", [], 0, 1, 1)
    (b,) = acc.drain(time.monotonic(), force=True)
    st = p.parts[TP] = PartitionState()
    b.attempts = 7
    st.requeue(b, retry_at=time.monotonic() + 1.0)  # the 1 s backoff after attempts at node 1
    p.sent_to[TP] = 1
    return p, sent, st


async def test_same_leader_waits_out_the_backoff_and_metadata_is_refreshed_meanwhile() -> None:
    p, sent, st = _producer(leader=1)
    now = time.monotonic()
    await p._dispatch(now)
    assert sent == [] and st.retry
    assert p._waiting_out_backoff(now)  # the sender refreshes metadata every _BACKOFF_REFRESH_S
    assert not p._waiting_out_backoff(st.retry[0].retry_at - _BACKOFF_REFRESH_S / 2)


async def test_new_leader_gets_the_batch_without_backoff() -> None:
    p, sent, st = _producer(leader=2)
    await p._dispatch(time.monotonic())
    assert sent == [2] and not st.retry
    assert p.sent_to[TP] == 2
