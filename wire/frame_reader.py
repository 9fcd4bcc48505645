"""Cutting length-prefixed frames off a trio stream with as few copies as possible.

Theory of operation
-------------------
The framing is ``wire.protocol.FrameDecoder``'s (4-byte big-endian length, then the payload),
and so is the code that reads and checks each length (``wire.protocol.read_frame_length``);
this is its I/O twin for the two hot readers, the broker's connection loop and the client's
``Connection``. Small frames are cut out of a shared receive buffer (one copy each). A frame
of at least ``_DIRECT_MIN_BYTES`` that has not fully arrived gets its own buffer and the rest of
it is received straight into that buffer with ``recv_into``: a 1 MiB payload is copied from the
kernel once, instead of into a chunk, the decoder's buffer, a slice and ``bytes`` of the slice.
A TLS stream (``trio.SSLStream``: no socket to ``recv_into``) hands out one decrypted 16 KiB
record per receive; each is copied straight into the frame's buffer (the client's CPU per
record of a TLS fetch −20 %, docs/performance.md "Security"). Each ``receive_some`` of an
``SSLStream`` also costs one trip through trio's scheduler, even when the next records are
already in its incoming memory BIO (one transport receive brings up to 64 KiB = 4 records), so
after each receive ``_drain_tls`` decrypts every record already buffered straight into the
frame with ``SSLObject.read(n, buffer)`` until it wants more input — synchronously, no await,
so no other task touches the ``SSLObject`` meanwhile; anything unusual (an error, a
close_notify) just stops the drain and the next ``receive_some`` meets it the ordinary way.
The ``SSLObject`` is trio's private ``SSLStream._ssl_object`` (trio 0.35); without it the
reader falls back to one record per ``receive_some``.
``eager=True`` (the broker's connection loop) reads a plain TCP socket with a non-blocking
``os.read`` and waits for readability only when nothing is there: trio's ``receive_some``
yields to the scheduler once more *after* a successful receive, one extra scheduler pass (an
``epoll_wait``) per request a broker handles. Only for a caller that yields
per frame anyway (the broker waits for each request's handler to start before it dispatches
the next, and yields after a frame it answers itself or steps without a task unless the reader
yielded for it: ``yields``), so a socket that always has data cannot starve the other tasks.
A declared length above ``max_frame_bytes`` raises ``FrameTooLargeError`` before anything of it
is buffered.

Memory follows the bytes that arrived, never the length a peer declared (issue 24): a large
frame's buffer starts at ``_GROW_MIN_BYTES`` (or what already arrived) and doubles only when
it is full, so a peer that sends a 100 MiB prefix and nothing else costs 16 KiB, not 100 MiB.
An optional ``FrameBudget`` (one per listener) bounds the bytes reserved for partial large
frames across all its connections: a reader that would exceed it waits for another frame to
complete (back-pressure: it stops reading, TCP pushes back on the sender) instead of
allocating. The oldest partial frame always proceeds, so partial frames never wait for each
other forever and a frame larger than the budget is slow, not impossible. Reservations are
released when the frame completes or the reader is cancelled.

``reuse=True`` (the broker: ``decode_request`` copies whatever it keeps) keeps that buffer for
the next large frame, up to ``_REUSE_MAX_BYTES`` — zero-filling and faulting in a fresh
megabyte per request cost about as much as the copy it saves. The client cannot reuse: a fetch
response's raw part is handed out as views of its frame.
"""

from __future__ import annotations

import os
import ssl

import trio
from rafka.wire.protocol import DEFAULT_MAX_FRAME_BYTES, read_frame_length

__all__ = ["FrameReader", "FrameBudget"]

_READ_CHUNK = 256 * 1024
_DIRECT_MIN_BYTES = 64 * 1024  # frames this large are received straight into their own buffer
_REUSE_MAX_BYTES = 8 * 1024 * 1024  # with reuse, that buffer is kept for frames up to this size
# a large frame's first buffer (or what already arrived, if more); it doubles as bytes arrive.
# Small: a peer that declares 100 MiB and trickles costs this much per connection
# (bench/bench_preauth.py: 200 slowloris connections cost 50 MiB of RSS at 256 KiB).
_GROW_MIN_BYTES = 16 * 1024


class FrameBudget:
    """Bytes a listener may hold in partial large frames across its connections (see above).

    Each partial frame holds a ticket (its arrival order). A reservation that would exceed the
    limit waits — unless its frame is the oldest one holding bytes: that one always proceeds,
    so frames that each hold part of the budget never wait for one another forever (the
    overshoot is at most one frame)."""

    __slots__ = ("limit_bytes", "used_bytes", "waits", "_lot", "_held", "_next_ticket")

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        self.waits = 0  # times a reader had to wait for room (back-pressure applied)
        self._lot = trio.lowlevel.ParkingLot()
        self._held: dict[int, int] = {}  # ticket -> bytes reserved (insertion order = age)
        self._next_ticket = 0

    def ticket(self) -> int:
        self._next_ticket += 1
        return self._next_ticket

    def _oldest(self, ticket: int) -> bool:
        return next(iter(self._held), ticket) == ticket

    async def acquire(self, ticket: int, n: int) -> None:
        """Reserve ``n`` more bytes for frame ``ticket``, waiting while that would exceed the
        limit and an older frame holds bytes."""
        while self.used_bytes + n > self.limit_bytes and not self._oldest(ticket):
            self.waits += 1
            await self._lot.park()
        self.used_bytes += n
        self._held[ticket] = self._held.get(ticket, 0) + n

    def release(self, ticket: int) -> None:
        """The frame ``ticket`` completed or was abandoned: its bytes are free again."""
        n = self._held.pop(ticket, 0)
        self.used_bytes -= n
        assert self.used_bytes >= 0, "released more than reserved"
        self._lot.unpark_all()


class FrameReader:
    """Frames off one trio stream: ``await next_frame()`` → payload, ``None`` at end of stream."""

    __slots__ = ("stream", "sock", "tls", "buf", "pos", "max_frame_bytes", "big", "reuse",
                 "eager", "budget", "frames", "yields", "grow_min_bytes")

    def __init__(self, stream: trio.abc.Stream, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 *, reuse: bool = False, eager: bool = False,
                 budget: FrameBudget | None = None, grow_min_bytes: int = _GROW_MIN_BYTES) -> None:
        self.stream = stream
        self.sock = getattr(stream, "socket", None)  # a trio socket for SocketStreams
        self.eager = eager and self.sock is not None  # see the module docstring
        # the SSLObject of a trio.SSLStream, drained without a scheduler trip (_drain_tls)
        self.tls = getattr(stream, "_ssl_object", None) if isinstance(stream, trio.SSLStream) else None
        self.buf = bytearray()
        self.pos = 0  # start of unconsumed bytes in buf
        self.max_frame_bytes = max_frame_bytes
        self.reuse = reuse
        self.big = bytearray()  # with reuse: the buffer for large frames up to _REUSE_MAX_BYTES
        self.budget = budget
        self.frames = 0  # complete frames returned (the server's idle clock reads it)
        # receives that went through trio's scheduler (a caller that answers frames without
        # yielding checks it: a frame that arrived without one must be followed by a yield)
        self.yields = 0
        # a large frame's first buffer: a client that trusts its broker may pass the frame limit
        # (one buffer of the declared size, the pre-issue-24 behaviour)
        self.grow_min_bytes = grow_min_bytes

    async def _fill(self) -> bool:
        if self.eager:
            data = await self._receive_eager()
        else:
            self.yields += 1
            data = await self.stream.receive_some(_READ_CHUNK)
        if not data:
            return False
        if self.pos:
            del self.buf[:self.pos]  # compact (at most once per receive)
            self.pos = 0
        self.buf += data
        return True

    async def _receive_eager(self) -> bytes:
        """``receive_some`` without its scheduler pass after a successful read (see above)."""
        sock = self.sock
        assert sock is not None
        while True:
            fd = sock.fileno()
            if fd < 0:  # closed under us: receive_some raises the stream's own error
                self.yields += 1
                return await self.stream.receive_some(_READ_CHUNK)
            try:
                return os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                pass
            except OSError as exc:  # as receive_some would (a reset connection...)
                raise trio.BrokenResourceError(f"socket read failed: {exc!r}") from exc
            self.yields += 1
            await trio.lowlevel.wait_readable(sock)

    async def next_frame(self) -> bytes | memoryview | None:
        """The next frame's payload, or None at end of stream (a partial frame is dropped).
        With ``reuse``, a memoryview payload lies in a buffer the next call overwrites."""
        while len(self.buf) - self.pos < 4:
            if not await self._fill():
                return None
        buf, pos = self.buf, self.pos
        n = read_frame_length(buf, pos, self.max_frame_bytes)  # the codec's framing rule
        have = len(buf) - pos - 4
        if have < n and n >= _DIRECT_MIN_BYTES:
            return await self._large_frame(n, have)
        while len(self.buf) - self.pos < 4 + n:
            if not await self._fill():
                return None
        buf, pos = self.buf, self.pos
        frame_bytes = bytes(memoryview(buf)[pos + 4:pos + 4 + n])
        self.pos = pos + 4 + n
        if self.pos == len(buf):
            buf.clear()
            self.pos = 0
        self.frames += 1
        return frame_bytes

    async def _large_frame(self, n: int, have: int) -> memoryview | None:
        """Receive the rest of an ``n``-byte frame (``have`` bytes already in ``buf``) straight
        into a buffer that grows as the bytes arrive (module docstring)."""
        reuse = self.reuse and n <= _REUSE_MAX_BYTES
        # capacity filled before the next doubling; a kept buffer (reuse) is used whole: its
        # memory exists already, and a steady stream of 1 MiB produces is received as before
        size = min(n, max(self.grow_min_bytes, have, len(self.big) if reuse else 0))
        reserved = 0
        ticket = self.budget.ticket() if self.budget is not None else 0
        try:
            reserved = await self._reserve(ticket, size, reserved)
            frame = self.big if reuse and len(self.big) >= size else bytearray(size)
            frame[:have] = memoryview(self.buf)[self.pos + 4:]
            self.buf.clear()
            self.pos = 0
            while have < n:
                if have == size and len(frame) < n:
                    size = min(n, 2 * size)
                    reserved = await self._reserve(ticket, size, reserved)
                    grown = bytearray(size)  # a new buffer: the caller may still hold a view of the old
                    grown[:have] = memoryview(frame)[:have]
                    frame = grown
                elif have == size:
                    size = n  # a reused buffer already large enough
                    reserved = await self._reserve(ticket, size, reserved)
                got = await self._receive_into(frame, have, size)
                if not got:
                    return None
                have += got
        finally:
            if self.budget is not None:
                self.budget.release(ticket)
        if reuse:
            self.big = frame
        self.frames += 1
        return memoryview(frame)[:n]

    async def _reserve(self, ticket: int, size: int, reserved: int) -> int:
        if self.budget is not None and size > reserved:
            await self.budget.acquire(ticket, size - reserved)
        return size

    async def _receive_into(self, frame: bytearray, have: int, size: int) -> int:
        """Bytes received into ``frame[have:size]`` (0 at end of stream)."""
        mv = memoryview(frame)
        if self.sock is not None:
            return await self.sock.recv_into(mv[have:size])
        # TLS: one decrypted record per receive, copied once into the frame
        data = await self.stream.receive_some(min(size - have, _READ_CHUNK))
        got = len(data)
        mv[have:have + got] = data
        if got and self.tls is not None and have + got < size:
            got += _drain_tls(self.tls, mv, have + got, size)
        return got


def _drain_tls(tls: ssl.SSLObject, mv: memoryview, have: int, n: int) -> int:
    """Decrypt records already in ``tls``'s incoming BIO into ``mv[have:n]``; bytes added."""
    start = have
    try:
        while have < n:
            got = tls.read(n - have, mv[have:])
            if not got:
                break
            have += got
    except (ssl.SSLError, ValueError):  # SSLWantReadError: needs more input; others: see above
        pass
    return have - start
