"""FrameReader: memory follows the bytes that arrived, not the declared length (issue 24)."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing
from rafka.wire.frame_reader import FrameBudget, FrameReader
from rafka.wire.protocol import FrameTooLargeError

MiB = 1024 * 1024
pytestmark = pytest.mark.timeout(20)


async def _pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def test_a_declared_length_allocates_nothing_until_bytes_arrive() -> None:
    client, server = await _pair()
    budget = FrameBudget(4 * MiB)
    reader = FrameReader(server, 200 * MiB, reuse=True, eager=True, budget=budget)
    await client.send_all(struct.pack(">I", 100 * MiB) + b"x" * 1000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader.next_frame)
        await trio.sleep(0.1)
        # only the first (smallest) buffer is reserved for the partial frame
        assert budget.used_bytes == 16 * 1024
        nursery.cancel_scope.cancel()
    assert budget.used_bytes == 0


@pytest.mark.parametrize("n", [10, 64 * 1024, 300 * 1024, 3 * MiB + 7])
async def test_frames_arrive_whole_at_any_size(n: int) -> None:
    client, server = await _pair()
    budget = FrameBudget(64 * MiB)
    reader = FrameReader(server, 16 * MiB, reuse=True, budget=budget)
    payload = bytes(range(256)) * (n // 256) + b"z" * (n % 256)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, (struct.pack(">I", n) + payload) * 2)
        for _ in range(2):
            got = await reader.next_frame()
            assert got is not None and bytes(got) == payload
    assert budget.used_bytes == 0
    assert reader.frames == 2


async def test_the_budget_makes_a_second_large_frame_wait_for_the_first() -> None:
    budget = FrameBudget(1 * MiB)
    (c1, s1), (c2, s2) = await _pair(), await _pair()
    r1 = FrameReader(s1, 16 * MiB, budget=budget)
    r2 = FrameReader(s2, 16 * MiB, budget=budget)
    n = 1 * MiB
    got: list[bytes] = []

    async def read(r: FrameReader) -> None:
        frame = await r.next_frame()
        assert frame is not None
        got.append(bytes(frame[:1]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(c1.send_all, struct.pack(">I", n) + b"a" * (n // 2))
        nursery.start_soon(read, r1)
        await trio.sleep(0.1)
        nursery.start_soon(c2.send_all, struct.pack(">I", n) + b"b" * n)
        nursery.start_soon(read, r2)
        await trio.sleep(0.1)
        # r2 holds back: r1, the older frame, owns the budget and may exceed it
        assert got == [] and budget.waits >= 1
        nursery.start_soon(c1.send_all, b"a" * (n // 2))
    assert sorted(got) == [b"a", b"b"]
    assert budget.used_bytes == 0


async def test_a_cancelled_partial_frame_returns_its_reservation() -> None:
    client, server = await _pair()
    budget = FrameBudget(8 * MiB)
    reader = FrameReader(server, 16 * MiB, budget=budget)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, struct.pack(">I", 4 * MiB) + b"x" * MiB)
        with trio.move_on_after(0.2):
            await reader.next_frame()
        assert budget.used_bytes == 0
        nursery.cancel_scope.cancel()


async def test_too_large_is_refused_before_buffering() -> None:
    client, server = await _pair()
    reader = FrameReader(server, 1024)
    await client.send_all(struct.pack(">I", 2048))
    with pytest.raises(FrameTooLargeError):
        await reader.next_frame()


async def test_a_kept_buffer_is_reused_whole_for_the_next_large_frame() -> None:
    client, server = await _pair()
    reader = FrameReader(server, 16 * MiB, reuse=True)
    n = 1 * MiB
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, (struct.pack(">I", n) + b"x" * n) * 2)
        first = await reader.next_frame()
        kept = reader.big
        assert first is not None and len(kept) == n
        second = await reader.next_frame()
        assert second is not None and bytes(second[-1:]) == b"x"
        assert reader.big is kept  # no growth, no new buffer
