"""One pipelined TCP connection to a rafka node, and a pool of them (trio).

Theory of operation
-------------------
``Connection`` wraps a trio stream: it numbers requests (correlation ids) and matches
responses to their waiters; every byte it writes is the codec's (``wire.protocol``'s
``RequestEncoder``; ``tests/protocol/test_codec_io.py`` compares them on loopback) and every
frame it reads is decoded by ``decode_response``. ``request()`` writes a frame and waits for
the response with the same correlation id; any number of callers may have requests in flight
at once (bounded by ``max_in_flight``), so one connection carries a whole
pipeline. A single reader task, started in the nursery of whoever opened the connection
(``await nursery.start(conn.run)`` or the ``connect()`` context manager), reads frames
(``wire.frame_reader.FrameReader``: a large fetch response is received straight into its own
buffer, whose views the consumer keeps) and wakes the waiters. When the stream breaks, every waiter gets ``NetworkExceptionError`` and the
connection is marked closed; callers (usually ``ConnectionPool``) open a new one.

A response with correlation id −1 is the broker refusing the whole connection (too many
connections, a frame too large, ``TLS_REQUIRED`` on a TLS port): every waiter gets that named
error. With ``security=`` (a ``security.client.ClientSecurity``: kafka-python's
``security_protocol`` and friends) ``connect`` and ``ConnectionPool`` speak TLS and/or log in
with SASL/SCRAM before a connection is handed out; a failed login closes it and raises the
broker's named error.

No ``timeout=`` parameters: callers wrap requests in ``trio.fail_after`` / ``move_on_after``.
A request cancelled while in flight simply abandons its slot; the late response is dropped.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Any, Protocol, cast

import trio
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.frame_reader import FrameReader
from rafka.wire.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    RequestEncoder,
    Response,
    decode_response,
    frame_prefix,
)
from rafka.wire.responses import ErrorFields


class ClientSecurity(Protocol):
    """What a connection needs of its security settings (``security.client.ClientSecurity`` is
    the implementation): wrap the stream (TLS) before the reader starts, log in (SASL) after.
    Structural, so the wire package does not import ``security``."""

    @property
    def uses_sasl(self) -> bool: ...

    async def wrap(self, stream: trio.abc.Stream, host: str) -> trio.abc.Stream: ...

    async def login(self, conn: Connection) -> str | None: ...

__all__ = ["Connection", "ConnectionPool", "PendingResponse", "connect", "parse_address", "parse_bootstrap",
           "ambient_setup_timeout", "setup_timeout_ms", "CONNECTION_SETUP_TIMEOUT_MS"]

_SPLIT_WRITE_BYTES = 64 * 1024  # smaller frames go out as one write (length prefix joined)
_REFUSAL_GRACE_S = 0.5  # how long a failed write waits for the reader's named refusal


def parse_address(addr: str) -> tuple[str, int]:
    """'host:port' → (host, port), with a clear error."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bad address {addr!r}: expected HOST:PORT")
    return host, int(port)


def parse_bootstrap(servers: str | list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = [parse_address(s) for s in items if s.strip()]
    if not out:
        raise ValueError("bootstrap_servers is empty")
    return out


class _Waiter:
    __slots__ = ("event", "response", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: Response | None = None
        self.error: BaseException | None = None


class Connection:
    """A pipelined request/response connection. Start ``run`` in a nursery before use."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        address: tuple[str, int] = ("?", 0),
        client_id: str = "rafka-python",
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_in_flight: int = 64,
    ) -> None:
        self.stream = stream
        self.address = address
        self._next_cid = 0
        self._max_frame_bytes = max_frame_bytes
        # the codec's request encoder (one reused buffer): used under _send_lock, or by
        # send_request_nowait, which does not yield between packing and writing
        self._encoder = RequestEncoder(client_id)
        self._waiters: dict[int, _Waiter] = {}
        self._slots = trio.Semaphore(max_in_flight)
        # a Semaphore, not a Lock: a frame send_request_nowait began may be finished by another task
        self._send_lock = trio.Semaphore(1)
        self._closed_error: BaseException | None = None
        self._closed_event = trio.Event()
        self._cancel_scope = trio.CancelScope()

    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The reader loop; returns when the connection closes."""
        task_status.started()
        # the broker is trusted with memory: a large response gets one buffer of its size
        reader = FrameReader(self.stream, self._max_frame_bytes, grow_min_bytes=self._max_frame_bytes)
        with self._cancel_scope:
            try:
                while True:
                    payload = await reader.next_frame()
                    if payload is None:
                        raise error_for(ErrorCode.NETWORK_EXCEPTION, f"{self._where()} closed the connection")
                    resp = decode_response(payload)  # type: ignore[arg-type]  # any buffer
                    if resp.correlation_id == -1:
                        # the broker refuses the connection itself: a named error for all
                        refusal = cast(ErrorFields, resp.body)
                        if refusal.get("error"):
                            raise error_for(refusal["error"], f"{self._where()}: "
                                            f"{refusal.get('message') or ''}")
                    waiter = self._waiters.pop(resp.correlation_id, None)
                    if waiter is not None:
                        waiter.response = resp
                        waiter.event.set()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._fail_all(transport_error(self._where(), exc))
            except RafkaError as exc:
                self._fail_all(exc)
        if self._closed_error is None:
            self._fail_all(error_for(ErrorCode.NETWORK_EXCEPTION, f"{self._where()}: connection closed"))
        with contextlib.suppress(Exception):
            await self.stream.aclose()

    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def _fail_all(self, exc: BaseException) -> None:
        if self._closed_error is None:
            self._closed_error = exc
            self._closed_event.set()
        for waiter in self._waiters.values():
            waiter.error = exc
            waiter.event.set()
        self._waiters.clear()

    async def request(self, api_key: int, body: dict[str, Any]) -> Response:
        """Send one request and wait for its response (errors in the body are not raised):
        ``send_request`` then ``PendingResponse.wait`` — the write is immediate when it can be,
        and the in-flight slot is held until the response (or a cancellation) frees it."""
        return await (await self.send_request(api_key, body)).wait()

    async def send_request(self, api_key: int, body: dict[str, Any]) -> PendingResponse:
        """Write one request now and return a handle to await its response later.

        Requests written by successive ``send_request`` calls from one task reach the wire in
        call order (``request`` from many tasks does not promise that: tasks start in any
        order). The in-flight slot is held until ``PendingResponse.wait`` returns.
        """
        if self._closed_error is not None:
            raise self._closed_error
        # Written at once when it can be (send_request_nowait: a free slot, no write in
        # progress, a frame under _SPLIT_WRITE_BYTES, room in the socket buffer): the slot
        # semaphore's, the send lock's and send_all's scheduler passes, which wait for nothing,
        # are skipped. A caller already cancelled sends nothing either way.
        await trio.lowlevel.checkpoint_if_cancelled()
        pending = self.send_request_nowait(api_key, body)
        if pending is not None:
            return pending
        await self._slots.acquire()
        waiter = _Waiter()
        cid = self._take_cid()
        self._waiters[cid] = waiter
        try:
            await self._send(api_key, cid, body)
        except BaseException:
            self._waiters.pop(cid, None)
            self._slots.release()
            raise
        return PendingResponse(self, cid, waiter)

    def send_request_nowait(self, api_key: int, body: dict[str, Any]) -> PendingResponse | None:
        """``send_request`` without a wait: the request is written now, with one non-blocking
        write, or not at all (``None``: a TLS stream, a closed connection, no free in-flight
        slot, a write in progress, a frame of ``_SPLIT_WRITE_BYTES`` or more, or a full socket
        buffer — use ``send_request``). Nothing yields, so no other task runs between the
        caller's decision and the request reaching the wire (the consumer writes its next
        FETCH this way before it decodes the previous answer: docs/performance.md). If the
        socket takes only part of the frame, the send lock stays held and
        ``PendingResponse.wait`` writes the rest first."""
        sock = getattr(self.stream, "socket", None)
        if (self._closed_error is not None or sock is None or self._send_lock.value == 0
                or self._slots.value == 0):
            return None
        fd = sock.fileno()
        if fd < 0:
            return None
        cid = self._next_cid
        # the codec's frame (RequestEncoder), or None from _SPLIT_WRITE_BYTES on
        frame = self._encoder.frame(api_key, cid, body, split_at=_SPLIT_WRITE_BYTES)
        if frame is None:
            return None
        try:
            sent = os.write(fd, frame)
        except OSError:  # would block, or broken: send_request meets it the ordinary way
            return None
        self._take_cid()
        self._slots.acquire_nowait()
        waiter = _Waiter()
        self._waiters[cid] = waiter
        pending = PendingResponse(self, cid, waiter)
        if sent < len(frame):
            self._send_lock.acquire_nowait()  # no other frame may start before the rest
            pending._rest = memoryview(frame)[sent:]
        return pending

    async def _finish_send(self, rest: memoryview) -> None:
        """Write the rest of a frame ``send_request_nowait`` began (its send lock held); a
        failure or cancellation leaves a partial frame on the wire, so the connection fails."""
        try:
            await self.stream.send_all(rest)
        except BaseException as exc:
            err = error_for(ErrorCode.NETWORK_EXCEPTION, f"{self._where()}: request cut short: {exc!r}")
            self._fail_all(err)
            self._cancel_scope.cancel()
            if isinstance(exc, (trio.BrokenResourceError, trio.ClosedResourceError, OSError)):
                raise err from None
            raise
        finally:
            self._send_lock.release()

    async def send_only(self, api_key: int, body: dict[str, Any]) -> None:
        """Send a request that gets no response (produce with acks=0)."""
        if self._closed_error is not None:
            raise self._closed_error
        await self._send(api_key, self._take_cid(), body)

    def _take_cid(self) -> int:
        """The next correlation id (a waiter in ``_waiters`` marks one still unanswered)."""
        cid = self._next_cid
        self._next_cid = (cid + 1) & 0x7FFFFFFF
        return cid

    async def _send(self, api_key: int, cid: int, body: dict[str, Any]) -> None:
        """Encode and write one request frame — the codec's bytes (``RequestEncoder``, as
        ``wire.protocol.encode_request``) — under the send lock: a large request (a produce
        payload) is copied once, into the encoder's reused buffer, and written from it in two
        parts, with no fresh megabyte-sized allocation (on this kind of VM, faulting those in
        cost more than the copies themselves)."""
        try:
            async with self._send_lock:
                frame = self._encoder.frame(api_key, cid, body, split_at=_SPLIT_WRITE_BYTES)
                if frame is not None:
                    await self.stream.send_all(frame)
                else:  # the encoder's buffer holds the payload
                    with self._encoder.payload() as view:
                        await self.stream.send_all(frame_prefix(len(view)))
                        await self.stream.send_all(view)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            # A broker that refuses the connection (TOO_MANY_CONNECTIONS, TLS_REQUIRED, …)
            # writes one named error frame and closes; our write can fail before the reader has
            # taken that frame from the receive buffer. Give the reader a moment to report it,
            # rather than a bare NETWORK_EXCEPTION.
            with trio.move_on_after(_REFUSAL_GRACE_S):
                await self._closed_event.wait()
            if self._closed_error is not None:
                raise self._closed_error from None
            err = transport_error(self._where(), exc)
            self._fail_all(err)
            self._cancel_scope.cancel()
            raise err from None

    async def aclose(self) -> None:
        self._fail_all(error_for(ErrorCode.NETWORK_EXCEPTION, f"{self._where()}: connection closed"))
        self._cancel_scope.cancel()
        with contextlib.suppress(Exception):
            await self.stream.aclose()


class PendingResponse:
    """A request already written by ``Connection.send_request``; ``await wait()`` once."""

    __slots__ = ("_conn", "_cid", "_waiter", "_released", "_rest")

    def __init__(self, conn: Connection, cid: int, waiter: _Waiter) -> None:
        self._conn = conn
        self._cid = cid
        self._waiter = waiter
        self._released = False
        self._rest: memoryview | None = None  # of a frame send_request_nowait began

    async def wait(self) -> Response:
        try:
            if self._rest is not None:
                rest, self._rest = self._rest, None
                await self._conn._finish_send(rest)
            await self._waiter.event.wait()
        finally:
            self.abandon()
        if self._waiter.error is not None:
            raise self._waiter.error
        assert self._waiter.response is not None
        return self._waiter.response

    def abandon(self) -> None:
        """Give up on the response (frees the in-flight slot; a late response is dropped).
        A request ``send_request_nowait`` only began writing cannot be finished any more:
        its connection fails."""
        if self._rest is not None:
            self._rest = None
            conn = self._conn
            conn._fail_all(error_for(ErrorCode.NETWORK_EXCEPTION, f"{conn._where()}: request cut short"))
            conn._cancel_scope.cancel()
            conn._send_lock.release()
        if not self._released:
            self._released = True
            self._conn._waiters.pop(self._cid, None)
            self._conn._slots.release()


# getaddrinfo's answers that a retry cannot change (EAI_AGAIN, a DNS server that did not
# answer, is left retriable)
_NO_SUCH_NAME = frozenset(getattr(socket, n) for n in ("EAI_NONAME", "EAI_FAIL", "EAI_NODATA") if hasattr(socket, n))


# Kafka's socket.connection.setup.timeout.ms: a host that drops our SYNs (a dead machine, a
# firewalled or vanished container IP) would otherwise hold a connect for the kernel's SYN
# retries (about two minutes), or for a whole request timeout when a caller bounds it, before
# the next bootstrap address is tried.
CONNECTION_SETUP_TIMEOUT_MS = 10_000

# a setting the CLI's ``--timeout`` makes ambient for every client a command builds (as
# security/client.py's ambient_security), read when a ``ClientCore`` is constructed
_AMBIENT_SETUP_TIMEOUT_MS: ContextVar[int | None] = ContextVar("rafka_setup_timeout_ms", default=None)


@contextlib.contextmanager
def ambient_setup_timeout(timeout_ms: int | None) -> Iterator[None]:
    """Within the block, a client built without ``connection_setup_timeout_ms`` uses ``timeout_ms``."""
    token = _AMBIENT_SETUP_TIMEOUT_MS.set(timeout_ms)
    try:
        yield
    finally:
        _AMBIENT_SETUP_TIMEOUT_MS.reset(token)


def setup_timeout_ms(given: int | None = None) -> int:
    """``given``, else the ambient ``--timeout``, else ``CONNECTION_SETUP_TIMEOUT_MS``."""
    if given is not None:
        return given
    ambient = _AMBIENT_SETUP_TIMEOUT_MS.get()
    return CONNECTION_SETUP_TIMEOUT_MS if ambient is None else ambient


# TLS alerts a server sends when it refuses this side's certificate. With TLS 1.3 the client's
# handshake is over before the server checks the client certificate, so the refusal arrives
# on the first read or write, not in the handshake.
_CERTIFICATE_ALERTS = ("CERTIFICATE_REQUIRED", "BAD_CERTIFICATE", "UNKNOWN_CA",
                       "CERTIFICATE_UNKNOWN", "CERTIFICATE_EXPIRED", "CERTIFICATE_REVOKED",
                       "UNSUPPORTED_CERTIFICATE", "ACCESS_DENIED", "HANDSHAKE_FAILURE")


def transport_error(where: str, exc: BaseException) -> RafkaError:
    """The named error for a broken connection: TLS_HANDSHAKE_FAILED when the peer refused
    our certificate (a TLS alert in the cause chain, issue 24), else NETWORK_EXCEPTION."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            reason = str(getattr(seen, "reason", "") or seen)
            if any(alert in reason.upper() for alert in _CERTIFICATE_ALERTS):
                return error_for(ErrorCode.TLS_HANDSHAKE_FAILED,
                                 f"{where} refused this node's or client's TLS certificate ({reason}); "
                                 "check that it is signed by the CA the peer trusts")
        seen = seen.__cause__ or seen.__context__
    return error_for(ErrorCode.NETWORK_EXCEPTION, f"{where}: {exc}")


async def _open(host: str, port: int, *, security: ClientSecurity | None = None,
                setup_timeout_ms: float = CONNECTION_SETUP_TIMEOUT_MS, **kw: Any) -> Connection:
    """Connect; a failure is BROKER_NOT_AVAILABLE, with ``details["unresolvable"]`` set when
    the host name does not exist (``ClientCore.request_any`` gives up on those at once).
    With ``security`` the TLS handshake is done too (the SASL login needs the reader running:
    ``_start``). TCP connect and TLS handshake together get ``setup_timeout_ms``."""
    with trio.move_on_after(setup_timeout_ms / 1000):
        return await _open_within(host, port, security, kw)
    raise error_for(ErrorCode.BROKER_NOT_AVAILABLE,
                    f"cannot connect to {host}:{port}: no answer within {setup_timeout_ms:.0f} ms "
                    "(connection setup timeout)")


async def _open_within(host: str, port: int, security: ClientSecurity | None,
                       kw: dict[str, Any]) -> Connection:
    try:
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    except socket.gaierror as exc:
        if exc.errno in _NO_SUCH_NAME:
            raise error_for(ErrorCode.BROKER_NOT_AVAILABLE, f"cannot resolve host {host} ({exc.strerror})",
                            unresolvable=host) from None
        raise error_for(ErrorCode.BROKER_NOT_AVAILABLE, f"cannot connect to {host}:{port}: {exc}") from None
    except OSError as exc:
        raise error_for(ErrorCode.BROKER_NOT_AVAILABLE,
                        f"cannot connect to {host}:{port}: {_connect_reason(exc)}") from None
    try:
        stream.setsockopt(6, 1, 1)  # TCP_NODELAY: requests are whole frames already
    except OSError:
        pass
    if security is not None:
        try:
            stream = await security.wrap(stream, host)
        except BaseException:  # a failed or timed-out handshake must not leak the socket
            await trio.aclose_forcefully(stream)
            raise
    return Connection(stream, address=(host, port), **kw)


def _connect_reason(exc: OSError) -> str:
    """Why a connect failed: trio's "all attempts to connect … failed" keeps the per-address
    errors (``Connection refused``…) in its cause; name those instead."""
    cause = exc.__cause__
    inner = list(cause.exceptions) if isinstance(cause, BaseExceptionGroup) else [cause] if cause else []
    reasons = [os.strerror(e.errno) if e.errno else str(e) for e in inner if isinstance(e, OSError)]
    return ", ".join(dict.fromkeys(reasons)) if reasons else str(exc)


async def _start(nursery: trio.Nursery, conn: Connection, security: ClientSecurity | None) -> None:
    """Start ``conn``'s reader in ``nursery`` and log in (SASL); a failed login closes it."""
    await nursery.start(conn.run)
    if security is not None and security.uses_sasl:
        try:
            await security.login(conn)
        except BaseException:
            await conn.aclose()
            raise


@contextlib.asynccontextmanager
async def connect(host: str, port: int, **kw: Any) -> AsyncIterator[Connection]:
    """``async with connect(host, port) as conn: await conn.request(...)``.

    An error raised in the block leaves it as itself: the reader's nursery would otherwise hand
    it on inside an exception group, and ``except NetworkException`` (or ``OSError``) around
    the block would miss a connection reset while a request waited — as the quorum describe's
    per-voter ask did. A group of more than one error (the block's and the reader's) stays a
    group."""
    conn = await _open(host, port, **kw)
    try:
        async with trio.open_nursery() as nursery:
            await _start(nursery, conn, kw.get("security"))
            try:
                yield conn
            finally:
                await conn.aclose()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise


class ConnectionPool:
    """At most one live connection per address, opened on demand, reader tasks in ``nursery``."""

    def __init__(self, nursery: trio.Nursery, **conn_kw: Any) -> None:
        self._nursery = nursery
        self._kw = conn_kw
        self._conns: dict[tuple[str, int], Connection] = {}
        self._locks: dict[tuple[str, int], trio.Lock] = {}

    async def get(self, host: str, port: int) -> Connection:
        key = (host, port)
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return conn
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            conn = self._conns.get(key)
            if conn is None or conn.closed:
                conn = await _open(host, port, **self._kw)
                await _start(self._nursery, conn, self._kw.get("security"))
                self._conns[key] = conn
            return conn

    def get_nowait(self, host: str, port: int) -> Connection | None:
        """The open connection to ``host:port``, or None (``get`` opens one)."""
        conn = self._conns.get((host, port))
        return None if conn is None or conn.closed else conn

    async def request(self, host: str, port: int, api_key: int, body: dict[str, Any]) -> Response:
        conn = await self.get(host, port)
        return await conn.request(api_key, body)

    def discard(self, host: str, port: int) -> None:
        conn = self._conns.pop((host, port), None)
        if conn is not None:
            self._nursery.start_soon(conn.aclose)

    async def aclose(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            await conn.aclose()


def backoff_ms(attempt: int, base_ms: int = 50, max_ms: int = 1000) -> float:
    """Exponential backoff for retries, capped."""
    return min(max_ms, base_ms * math.pow(2, min(attempt, 16)))
