"""Small group-commit rounds fsync on the trio thread, large ones in a worker thread
(``broker.replica_manager.flush_parts``, ``PartitionLog.flush_is_small``).

Real logs on disk and an in-process broker on loopback with real PRODUCE requests: whichever
thread runs it, an acknowledged record is fsynced (the recovery point reaches it).
"""

from __future__ import annotations

import threading
from typing import Any

import trio
from rafka.broker.protocol import ApiKey
from rafka.broker.replica_manager import INLINE_FLUSH_MAX_BYTES
from rafka.log.batch import build_batch
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog
from rafka.metadata.image import TopicPartition

from .harness import part, produce_body, running_broker

SMALL = build_batch([(b"k", b"v" * 100, [], 1000)])
BIG = build_batch([(b"k", b"v" * 990, [], 1000 + i) for i in range(40)])  # ~40 KB
assert len(SMALL) <= INLINE_FLUSH_MAX_BYTES < len(BIG)


def test_flush_is_small_only_for_a_small_tail_of_the_active_segment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = PartitionLog.open(tmp_path / "p", LogConfig.from_dict({"segment.bytes": "60000"}))
    try:
        log.flush()  # the new directory and epoch file are synced: nothing left
        assert log.flush_is_small(INLINE_FLUSH_MAX_BYTES)
        log.append(SMALL, 0)
        assert log.flush_is_small(INLINE_FLUSH_MAX_BYTES)
        assert not log.flush_is_small(len(SMALL) - 1)
        log.append(BIG, 0)
        assert not log.flush_is_small(INLINE_FLUSH_MAX_BYTES)
        log.flush()
        assert log.flush_is_small(INLINE_FLUSH_MAX_BYTES)
        assert len(log.segments) == 1
        log.append(BIG, 0)  # past 60 KB: rolls a new segment
        assert len(log.segments) == 2
        assert not log.flush_is_small(INLINE_FLUSH_MAX_BYTES)
        log.flush()
        log.append(SMALL, 0)
        assert log.flush_is_small(INLINE_FLUSH_MAX_BYTES)
        log.flush()
        assert log.flush_is_small(INLINE_FLUSH_MAX_BYTES)
        assert log.recovery_point == log.log_end_offset
    finally:
        log.close()


async def test_small_rounds_flush_on_the_trio_thread_large_ones_in_a_worker(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with running_broker(tmp_path, topics={"t": 1}, **{"log.flush.policy": "batch"}) as b, \
            b.connect() as conn:
        log = b.rm.partitions[TopicPartition("t", 0)].log
        threads: list[int] = []
        real_flush = log.flush

        def flush() -> Any:  # the real fsync; records which thread ran it
            threads.append(threading.get_ident())
            return real_flush()

        log.flush = flush  # type: ignore[method-assign]
        trio_thread = threading.get_ident()
        for value, inline in ((SMALL, True), (BIG, False), (SMALL, True)):
            threads.clear()
            with trio.fail_after(30):
                resp = await conn.request(ApiKey.PRODUCE, produce_body("t", value, acks=1))
            assert part(resp.body)["error"] == 0, resp.body
            assert threads and all((t == trio_thread) == inline for t in threads), (inline, threads)
            assert log.recovery_point == log.log_end_offset  # acknowledged = fsynced
