"""``log.flush.inline.max.records`` (issue 26): the leader's group-commit fdatasync of a round
that small runs on the trio thread instead of a worker thread, and an acknowledged produce is still on disk. An in-process broker
on loopback, real PRODUCE requests; the partition log's ``flush`` is wrapped to record which
thread ran it (it still does the real fdatasync)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from rafka.log.batch import build_batch
from rafka.metadata.image import TopicPartition
from rafka.wire.protocol import ApiKey

from .harness import part, produce_body, running_broker


async def _watch_flush_threads(b: Any, conn: Any) -> tuple[Any, list[int]]:
    """Produce one record to ``t`` (the partition exists), then wrap its log's ``flush`` so that
    each call records the thread that ran it (the real fdatasync still runs): (log, threads)."""
    first = (await conn.request(ApiKey.PRODUCE, produce_body("t", build_batch(
        [(b"k", b"v", [], 1000)])))).body
    assert part(first)["error"] == 0
    log = b.rm.partitions[TopicPartition("t", 0)].log
    threads: list[int] = []
    real_flush = log.flush

    def flush() -> int:
        threads.append(threading.get_ident())
        return real_flush()

    log.flush = flush
    return log, threads


@pytest.mark.parametrize("inline", [True, False])
async def test_group_commit_flush_thread_follows_setting(tmp_path, inline: bool) -> None:  # type: ignore[no-untyped-def]
    settings: dict[str, Any] = {"log.flush.policy": "batch", "log.flush.inline.max.records": 1 if inline else 0}
    async with running_broker(tmp_path, topics={"t": 1}, **settings) as b, b.connect() as conn:
        log, threads = await _watch_flush_threads(b, conn)
        for i in range(5):
            body = (await conn.request(ApiKey.PRODUCE, produce_body("t", build_batch(
                [(b"k", b"v%d" % i, [], 1001 + i)])))).body
            assert part(body)["error"] == 0
            # acknowledged (acks=all, one replica): fsynced, whichever thread did it
            assert log.recovery_point == log.log_end_offset == 2 + i
        assert threads, "no group-commit round ran"
        on_loop = [t == threading.get_ident() for t in threads]
        assert all(on_loop) if inline else not any(on_loop)
        assert (b.rm.inline_flushes > 0) is inline


async def test_round_over_the_limit_goes_to_a_worker_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings: dict[str, Any] = {"log.flush.policy": "batch", "log.flush.inline.max.records": 1}
    async with running_broker(tmp_path, topics={"t": 1}, **settings) as b, b.connect() as conn:
        log, threads = await _watch_flush_threads(b, conn)
        five = build_batch([(b"k", b"v%d" % i, [], 1001 + i) for i in range(5)])
        body = (await conn.request(ApiKey.PRODUCE, produce_body("t", five))).body
        assert part(body)["error"] == 0
        assert log.recovery_point == log.log_end_offset == 6
        assert threads and threading.get_ident() not in threads


@pytest.mark.parametrize("records, inline", [(64, True), (65, False)])
async def test_follower_sync_thread_follows_its_own_limit(tmp_path, records: int,  # type: ignore[no-untyped-def]
                                                          inline: bool) -> None:
    """A follower's sync of a fetch answer (``_sync_follower_logs``, which the fetcher awaits
    before its next fetch) runs inline up to ``log.flush.follower.inline.max.records`` (default
    64) records, whatever the leader's limit (0 here: its rounds never run inline)."""
    settings: dict[str, Any] = {"log.flush.policy": "batch", "log.flush.inline.max.records": 0}
    async with running_broker(tmp_path, topics={"t": 1}, **settings) as b, b.connect() as conn:
        log, threads = await _watch_flush_threads(b, conn)
        b.rm._follower_records = records  # what the fetch answers appended since the last sync
        assert await b.rm._sync_follower_logs([("t", 0)]) == {("t", 0)}
        assert threads and (threading.get_ident() in threads) is inline
        assert log.recovery_point == log.log_end_offset
