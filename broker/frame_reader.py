"""Cutting length-prefixed frames off a trio stream with as few copies as possible.

Theory of operation
-------------------
The framing is ``broker.protocol.FrameDecoder``'s (4-byte big-endian length, then the payload);
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
the next, and yields after a frame it answers itself), so a socket that always has data cannot
starve the other tasks.
A declared length above ``max_frame_bytes`` raises ``FrameTooLargeError`` before anything of it
is buffered.

``reuse=True`` (the broker: ``decode_request`` copies whatever it keeps) keeps that buffer for
the next large frame, up to ``_REUSE_MAX_BYTES`` — zero-filling and faulting in a fresh
megabyte per request cost about as much as the copy it saves. The client cannot reuse: a fetch
response's raw part is handed out as views of its frame.
"""

from __future__ import annotations

import os
import ssl
import struct

import trio
from rafka.broker.protocol import DEFAULT_MAX_FRAME_BYTES, FrameTooLargeError

__all__ = ["FrameReader"]

_READ_CHUNK = 256 * 1024
_DIRECT_MIN_BYTES = 64 * 1024  # frames this large are received straight into their own buffer
_REUSE_MAX_BYTES = 8 * 1024 * 1024  # with reuse, that buffer is kept for frames up to this size
_LEN = struct.Struct(">I")


class FrameReader:
    """Frames off one trio stream: ``await next_frame()`` → payload, ``None`` at end of stream."""

    __slots__ = ("stream", "sock", "tls", "buf", "pos", "max_frame_bytes", "big", "reuse",
                 "eager")

    def __init__(self, stream: trio.abc.Stream, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 *, reuse: bool = False, eager: bool = False) -> None:
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

    async def _fill(self) -> bool:
        if self.eager:
            data = await self._receive_eager()
        else:
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
                return await self.stream.receive_some(_READ_CHUNK)
            try:
                return os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                pass
            except OSError as exc:  # as receive_some would (a reset connection...)
                raise trio.BrokenResourceError(f"socket read failed: {exc!r}") from exc
            await trio.lowlevel.wait_readable(sock)

    async def next_frame(self) -> bytes | memoryview | None:
        """The next frame's payload, or None at end of stream (a partial frame is dropped).
        With ``reuse``, a memoryview payload lies in a buffer the next call overwrites."""
        while len(self.buf) - self.pos < 4:
            if not await self._fill():
                return None
        buf, pos = self.buf, self.pos
        (n,) = _LEN.unpack_from(buf, pos)
        if n > self.max_frame_bytes:
            raise FrameTooLargeError(f"frame of {n} bytes exceeds the limit of {self.max_frame_bytes} bytes")
        have = len(buf) - pos - 4
        if have < n and n >= _DIRECT_MIN_BYTES:
            if self.reuse and n <= _REUSE_MAX_BYTES:
                if len(self.big) < n:
                    self.big = bytearray(n)
                frame = self.big
            else:
                frame = bytearray(n)
            mv = memoryview(frame)[:n]
            mv[:have] = memoryview(buf)[pos + 4:]
            buf.clear()
            self.pos = 0
            while have < n:
                if self.sock is not None:
                    got = await self.sock.recv_into(mv[have:])
                else:  # TLS: one decrypted record per receive, copied once into the frame
                    data = await self.stream.receive_some(min(n - have, _READ_CHUNK))
                    got = len(data)
                    mv[have:have + got] = data
                    if got and self.tls is not None and have + got < n:
                        got += _drain_tls(self.tls, mv, have + got, n)
                if not got:
                    return None
                have += got
            return mv
        while len(self.buf) - self.pos < 4 + n:
            if not await self._fill():
                return None
        buf, pos = self.buf, self.pos
        frame_bytes = bytes(memoryview(buf)[pos + 4:pos + 4 + n])
        self.pos = pos + 4 + n
        if self.pos == len(buf):
            buf.clear()
            self.pos = 0
        return frame_bytes


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
