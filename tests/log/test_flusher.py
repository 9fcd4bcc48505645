"""Flusher: group commit under policy "batch", the other policies, errors and shutdown."""

from __future__ import annotations

import pytest
import trio

from log.errors import StorageError
from log.flusher import Flusher

from .conftest import make_batch


async def test_group_commit(open_log):
    log = open_log()
    flusher = Flusher("batch")
    acked: list[int] = []

    async def produce() -> None:
        info = log.append(make_batch(1), 0)
        await flusher.wait_durable(log, info.last_offset + 1)
        assert log.recovery_point > info.last_offset
        acked.append(info.last_offset)

    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        with trio.fail_after(30):
            async with trio.open_nursery() as producers:
                for _ in range(50):
                    producers.start_soon(produce)
        nursery.cancel_scope.cancel()
    assert sorted(acked) == list(range(50)) and log.recovery_point == 50
    assert 1 <= log.fsync_count < 25, log.fsync_count  # many waiters, few fsyncs


async def test_policy_none_and_flush_now(open_log):
    log = open_log()
    flusher = Flusher("none")
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        log.append(make_batch(3), 0)
        await flusher.wait_durable(log, 3)  # returns at once: the OS decides
        assert log.recovery_point == 0
        assert await flusher.flush_now(log) == 3
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("policy", ["messages", "interval"])
async def test_messages_and_interval_policies(open_log, policy):
    log = open_log()
    flusher = Flusher(policy, flush_messages=10, flush_ms=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        flusher.register(log)
        for _ in range(4):
            log.append(make_batch(3), 0)
            flusher.appended(log, 3)
        with trio.fail_after(10):
            while log.recovery_point < 9:
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    assert log.fsync_count >= 1


async def test_flush_error_reaches_waiters(open_log, monkeypatch):
    log = open_log()
    flusher = Flusher("batch")

    def broken_flush() -> int:
        raise StorageError("boom", OSError(28, "No space left on device"))

    monkeypatch.setattr(log, "flush", broken_flush)
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        log.append(make_batch(1), 0)
        with pytest.raises(StorageError, match="disk full"):
            await flusher.wait_durable(log, 1)
        nursery.cancel_scope.cancel()


async def test_stopping_wakes_waiters(open_log):
    log = open_log()
    flusher = Flusher("batch")
    log.append(make_batch(1), 0)
    errors: list[BaseException] = []

    async def waiter() -> None:
        try:
            await flusher.wait_durable(log, 1)
        except trio.ClosedResourceError as exc:
            errors.append(exc)

    async with trio.open_nursery() as outer:
        outer.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as scope:
            scope.cancel()
            await flusher.run()
    assert len(errors) == 1
