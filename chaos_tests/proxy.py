"""A TCP proxy per directed link that can pass, blackhole (both ways or one), reset or delay traffic.

Theory of operation
-------------------
The local backend cannot touch the kernel's packet path (no root, and no ``netem`` anyway),
so every node dials its peers through a :class:`LinkProxy` (one per directed link and
destination port).  The proxy accepts, connects upstream, and runs two one-way *pipes* per
connection.  A pipe is a reader task and a writer task joined by a bounded memory channel of
``(deliver_at, bytes)`` chunks, so delay keeps byte order and back-pressure stays bounded.

Modes (:class:`LinkMode`), switchable at any time with :meth:`LinkProxy.set_mode`:

``pass``   forward immediately.
``drop``   blackhole: nothing is forwarded in either direction and new connections are
           accepted but not connected upstream.  Bytes are held, not discarded — TCP would
           retransmit them after a real partition heals, and discarding mid-stream bytes would
           corrupt framing in a way no real network does.  Peers see silence and time out.
``reset``  every connection is aborted with a TCP RST (``SO_LINGER`` 0) and new ones are
           reset on accept, as ``iptables -j REJECT --reject-with tcp-reset`` would.
``delay``  each chunk is delivered ``delay_s`` after it was read (per direction).
``hold-forward`` / ``hold-reply``  a one-way partition: the bytes the dialling side sends
           (forward) or the bytes the dialled side sends back (reply) are held, the other
           direction passes; new connections are held as in ``drop``, since a one-way loss of
           packets also stops a TCP handshake.  One link's two proxies make an asymmetric
           partition between two nodes (``LocalBackend.cut_one_way``).

Limits: ``max_connections`` per proxy (extra connections are reset), ``chunk_bytes`` per read,
``queue_chunks`` per pipe.
"""

from __future__ import annotations

import enum
import socket
import struct
from dataclasses import dataclass, field

import trio

__all__ = ["LinkMode", "LinkProxy"]


class LinkMode(enum.Enum):
    PASS = "pass"
    DROP = "drop"
    RESET = "reset"
    DELAY = "delay"
    HOLD_FORWARD = "hold-forward"
    HOLD_REPLY = "hold-reply"


_HOLDS_NEW = (LinkMode.DROP, LinkMode.HOLD_FORWARD, LinkMode.HOLD_REPLY)


def _abort(stream: trio.SocketStream) -> None:
    """Close with RST instead of FIN."""
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    stream.socket.close()


@dataclass(eq=False)
class _Conn:
    client: trio.SocketStream
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    upstream: trio.SocketStream | None = None


class LinkProxy:
    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int,
                 *, name: str = "", max_connections: int = 256, chunk_bytes: int = 65536,
                 queue_chunks: int = 64) -> None:
        self.listen_host, self.listen_port = listen_host, listen_port
        self.target_host, self.target_port = target_host, target_port
        self.name = name or f"{listen_host}:{listen_port}->{target_host}:{target_port}"
        self.max_connections = max_connections
        self.chunk_bytes = chunk_bytes
        self.queue_chunks = queue_chunks
        self.mode = LinkMode.PASS
        self.delay_s = 0.0
        self._changed = trio.Event()
        self._conns: set[_Conn] = set()
        self._stats = {"accepted": 0, "reset": 0, "bytes": 0, "errors": 0}

    # ------------------------------------------------------------------ control
    def set_mode(self, mode: LinkMode | str, delay_s: float = 0.0) -> None:
        mode = LinkMode(mode)
        if delay_s < 0:
            raise ValueError("delay_s must be >= 0")
        self.mode, self.delay_s = mode, (delay_s if mode is LinkMode.DELAY else 0.0)
        if mode is LinkMode.RESET:
            for conn in list(self._conns):
                self._reset(conn)
        self._changed.set()
        self._changed = trio.Event()

    def statistics(self) -> dict[str, int | str]:
        return {**self._stats, "open": len(self._conns), "mode": self.mode.value}

    def _holds(self, forward: bool | None) -> bool:
        """Whether bytes of one direction (``forward``: dialler → target; None: a new
        connection's upstream dial) are held in the current mode."""
        if forward is None:
            return self.mode in _HOLDS_NEW
        return self.mode is LinkMode.DROP or self.mode is (
            LinkMode.HOLD_FORWARD if forward else LinkMode.HOLD_REPLY)

    async def _wait_open(self, forward: bool | None) -> None:
        while self._holds(forward):
            await self._changed.wait()

    # ------------------------------------------------------------------ serving
    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Listen and proxy until cancelled; ``nursery.start`` returns the bound port."""
        listeners = await trio.open_tcp_listeners(self.listen_port, host=self.listen_host)
        self.listen_port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.listen_port)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    def _reset(self, conn: _Conn) -> None:
        self._stats["reset"] += 1
        _abort(conn.client)
        if conn.upstream is not None:
            _abort(conn.upstream)
        conn.scope.cancel()

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            await self._proxy_conn(client)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            # one connection failed; the proxy keeps serving.  ``except*``: trio nurseries
            # raise ExceptionGroups, which a plain ``except`` would let through
            self._stats["errors"] += 1

    async def _proxy_conn(self, client: trio.SocketStream) -> None:
        conn = _Conn(client)
        self._stats["accepted"] += 1
        if self.mode is LinkMode.RESET or len(self._conns) >= self.max_connections:
            self._stats["reset"] += 1
            _abort(client)
            return
        self._conns.add(conn)
        try:
            with conn.scope:
                await self._wait_open(None)
                try:
                    conn.upstream = await trio.open_tcp_stream(self.target_host,
                                                               self.target_port)
                except OSError:
                    _abort(client)  # like a refused connection
                    return
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pipe, conn, client, conn.upstream, True)
                    nursery.start_soon(self._pipe, conn, conn.upstream, client, False)
        finally:
            self._conns.discard(conn)
            for s in (client, conn.upstream):
                if s is not None and s.socket.fileno() != -1:
                    with trio.CancelScope(shield=True):
                        await s.aclose()

    async def _pipe(self, conn: _Conn, src: trio.SocketStream, dst: trio.SocketStream,
                    forward: bool) -> None:
        send, recv = trio.open_memory_channel[tuple[float, bytes]](self.queue_chunks)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reader, src, send, forward)
                nursery.start_soon(self._writer, recv, dst, forward)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            conn.scope.cancel()  # one side broke: the connection is over

    async def _reader(self, src: trio.SocketStream,
                      send: trio.MemorySendChannel[tuple[float, bytes]], forward: bool) -> None:
        async with send:
            while True:
                await self._wait_open(forward)
                data = await src.receive_some(self.chunk_bytes)
                if not data:
                    return
                await send.send((trio.current_time() + self.delay_s, data))

    async def _writer(self, recv: trio.MemoryReceiveChannel[tuple[float, bytes]],
                      dst: trio.SocketStream, forward: bool) -> None:
        async with recv:
            async for deliver_at, data in recv:
                await trio.sleep_until(deliver_at)
                await self._wait_open(forward)
                await dst.send_all(data)
                self._stats["bytes"] += len(data)
            try:
                await dst.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
