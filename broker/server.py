"""The trio TCP server: frames in, dispatch, responses out (in any order).

Theory of operation
-------------------
``Server.serve`` binds the listener and calls ``task_status.started(port)``; each accepted
connection runs in its own nursery (``_Connection.run``):

* one reader loop cuts frames (``wire.frame_reader.FrameReader``: large frames are received
  straight into a reused buffer) and starts one task per request (a PRODUCE: none, see below)
  in the connection's nursery, at most ``max_in_flight`` at a time (an excess request is answered at
  once with ``TOO_MANY_IN_FLIGHT``);
* **arrival order up to the first wait**: the reader starts a request's task, and before it
  starts the next one it waits until that task's handler has first suspended (or returned) —
  only if it has not yet: a request that arrives on its own finds its predecessor's prefix long
  done, so the reader does not spend a scheduler pass per request waiting for it. A handler's
  synchronous prefix — a produce's append, a fetch's first read — therefore runs in the order
  the requests arrived (trio starts tasks in no particular order), so pipelined produce
  batches for one partition land in the log in send order even with acks=1 and no
  idempotence. What comes after the first suspension (waiting for durability or replication,
  a fetch's long poll, a forwarded admin call) overlaps freely; answers leave in completion
  order (correlation ids match them up). ``_UntilFirstWait`` is the seam: it drives the
  handler coroutine inside the request's task exactly as ``await`` would, and reports its
  first suspension;
* **a PRODUCE has no task** (``broker/detached.py``): the reader steps its whole chain
  (``_run_request``: metrics, quotas, ACLs, dispatch, the append) inline, in arrival order, up
  to its wait for the partition; the partition wakes it through the listener's one
  ``Completer`` task, which writes the answer, many answers per scheduler pass. The ~8.5 µs a
  task costs per request is gone; what needs a task after all (a transactional produce's
  verification, a throttle hold, a send that would block) gets one from the connection's
  nursery at that point (``to_task``). A connection that ends gives up its parked produces
  (``close_all``). Since the reader does not yield for such a frame, it yields once after it
  when the frame arrived without a wait (``FrameReader.yields``);
* a request task calls ``dispatch(request)`` and writes the ``Reply`` under the connection's
  send lock, so responses leave in completion order, never interleaved. A small reply finds the
  lock free almost always and then goes out with one non-blocking write without taking it
  (``_send_now``); only a write that would block, or the rest of a partial one, waits for the lock
  and ``send_all``. The reader reads eagerly (``FrameReader(eager=True)``). Both spare trio's
  scheduler pass after a successful send or receive: ~30 µs of broker CPU per request on this
  VM (docs/performance.md);
* a reply is a msgpack head (``wire.protocol.encode_response_head``: requests are decoded and
  answers framed by the codec only, ``tests/protocol/test_codec_io.py`` compares the bytes)
  plus optional raw parts: ``bytes`` or a ``FileSlice`` (an owned
  duplicate of a segment's fd + position + length), which is written with ``os.sendfile``
  from the page cache straight to the non-blocking socket (``wait_writable`` when it would
  block); streams that are not sockets fall back to ``os.pread`` + ``send_all``. A reply whose
  raw parts total at most ``SMALL_REPLY_BYTES`` (16 KiB: a follower's or a tailing consumer's
  usual fetch) is instead gathered — its slices ``pread`` from the page cache — and written with
  its head in one send, so the receiver wakes once for the whole frame;

Limits: more than ``max_connections`` open connections, or more than ``max_connections_per_ip``
from one address (``security.connections.ConnectionCounter``, shared by a node's listeners when
the node passes one as ``connections``) → the new one gets a ``TOO_MANY_CONNECTIONS`` response
(correlation id −1) and is closed; a frame longer than
``max_frame_bytes`` → ``FRAME_TOO_LARGE`` (−1) and close (a frame's buffer grows as its bytes
arrive, within the listener's ``FrameBudget``: ``wire/frame_reader.py``); a connection that
completes no frame and has no request in flight for ``connections_max_idle_ms`` is closed; a payload that is not a request, an
unknown api or a body that fails its schema → an error response carrying the correlation id
when ``peek_correlation_id`` can read it (the framing is intact, so the connection stays open).
Any exception escaping a handler is logged and answered as ``UNKNOWN_SERVER_ERROR`` with its
message: a bad request never takes the broker down. A ``FileSlice`` that comes up short (the
segment was truncated under us) cannot be patched in a frame whose length is already on the
wire, so that connection is closed and the client retries.

Security (``Server.security``, a ``security.listener.ListenerSecurity``; None = PLAINTEXT, as
before): on a TLS listener each accepted stream first goes through ``security.tls.accept_tls``
(bounded by ``ssl.handshake.timeout.ms``); a plaintext client gets one ``TLS_REQUIRED`` frame
(correlation id −1) in clear and is closed, a failed handshake is closed. On a SASL listener the
connection starts unauthenticated: its frames may be at most
``sasl.max.unauthenticated.frame.bytes``, it must authenticate within
``sasl.authentication.timeout.ms`` (else it is closed), and every request but API_VERSIONS goes
to its ``security.sasl.SaslGate`` until that says authenticated; a gate error is answered and
the connection closed. Requests of an authenticated (or mutual-TLS) connection carry its
principal (``Request.principal``). With inter-broker security a peer node's certificate
(``User:node-<id>``) skips the SASL gate (``ListenerSecurity.skips_sasl``).

Throttling (byte-rate quotas, ``security/throttle.py``): an answer whose body carries
``throttle_time_ms > 0`` is held that long (at most ``MAX_THROTTLE_MS``) by its request's task
before it is sent, and the connection is *muted* until then — a frame that arrives meanwhile is
not dispatched before the throttle ends (the reader sleeps, so TCP pushes back on the client).
Only that connection waits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio
from rafka.broker.detached import Completer, Runner, forward, to_task
from rafka.security.connections import ConnectionCounter
from rafka.security.sasl import SASL_APIS, SaslGate
from rafka.security.tls import PlaintextOnTlsPortError, accept_tls, certificate_principal, peer_host
from rafka.wire.dispatch import _BYTES, Dispatch, FileSlice, Reply, error_body
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.frame_reader import FrameBudget, FrameReader
from rafka.wire.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    ApiKey,
    FrameTooLargeError,
    Request,
    decode_request,
    encode_response_head,
    peek_correlation_id,
)

if TYPE_CHECKING:
    from rafka.security.listener import ListenerSecurity

__all__ = ["FileSlice", "Reply", "Dispatch", "ServerLimits", "ServerStats", "Server", "error_body"]

log = logging.getLogger("rafka.server")

_SENDFILE_CHUNK = 4 * 1024 * 1024
# A reply whose raw parts total at most this goes out in one send (head + pread slices); larger
# ones stream the slices with sendfile. See _send_reply.
SMALL_REPLY_BYTES = 16 * 1024
MAX_THROTTLE_MS = 60_000  # the longest an answer is held for a quota (security/throttle.py)


_REFUSE_DRAIN_BYTES = 64 * 1024


async def refuse(stream: trio.abc.Stream, body: dict[str, Any], *, linger_s: float = 1.0) -> None:
    """Answer a connection we will not serve with one error frame (correlation id −1), then
    close it *gracefully*: half-close our side and read what the client already sent (bounded)
    before the caller closes. Closing with unread bytes in the receive buffer makes the kernel
    send a RST, which can destroy the error frame at the client before it is read — the client
    then saw NETWORK_EXCEPTION instead of the named refusal."""
    with trio.move_on_after(linger_s):
        try:
            await stream.send_all(encode_response_head(-1, body))
            send_eof = getattr(stream, "send_eof", None)
            if send_eof is not None:
                await send_eof()
            drained = 0
            while drained < _REFUSE_DRAIN_BYTES:
                chunk = await stream.receive_some(16384)
                if not chunk:
                    break
                drained += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_connections: int = 1000
    max_in_flight: int = 64
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_connections_per_ip: int = 1_000_000
    # a connection that completes no request and has none in flight for this long is closed
    # (Kafka's connections.max.idle.ms); a peer trickling a byte a second is idle too
    connections_max_idle_ms: int = 600_000
    # bytes a listener may reserve for partial large frames across its connections (FrameBudget)
    partial_frame_budget_bytes: int = 256 * 1024 * 1024


@dataclass(slots=True)
class ServerStats:
    connections_open: int = 0
    connections_accepted: int = 0
    connections_refused: int = 0
    requests: int = 0
    request_errors: int = 0
    handler_crashes: int = 0
    bytes_sendfile: int = 0
    bytes_copied: int = 0  # file slices of small replies, pread and sent with their head
    tls_refused: int = 0  # plaintext on a TLS port, failed or timed-out handshakes
    auth_failures: int = 0  # connections closed by the SASL gate or its deadline
    tls_connections: int = 0  # connections past the TLS handshake
    node_connections: int = 0  # of those, peer nodes by their certificate (inter-broker security)
    throttled: int = 0  # answers held for a byte-rate quota
    idle_closed: int = 0  # connections closed by connections.max.idle.ms
    sent_at_once: int = 0  # small answers written whole by one send, without a scheduler pass
    sent_queued: int = 0  # small answers (or their rest) that waited for the lock or the socket


class _ShortFileError(Exception):
    pass


# how _on_frame handled a frame
_ANSWERED = object()  # answered in the read loop (an error, SASL)
_STARTED = object()  # dispatched to a request task
_STEPPED = object()  # stepped by a runner, without a task (broker/detached.py)


def _nothing() -> None:
    pass


class _UntilFirstWait:
    """``await _UntilFirstWait(coro, on_wait)`` is ``await coro``, plus one call to ``on_wait()``
    when ``coro`` first suspends (yields a trio trap), returns or raises.

    The coroutine runs in the awaiting task, so trio sees nothing unusual: every trap it
    yields goes to the scheduler and every value or exception the scheduler sends back goes
    to the coroutine, exactly as ``yield from`` would do after the first step.
    """

    __slots__ = ("coro", "on_wait")

    def __init__(self, coro: Any, on_wait: Callable[[], None]) -> None:
        self.coro = coro
        self.on_wait = on_wait

    def __await__(self) -> Any:
        coro = self.coro
        try:
            trap = coro.send(None)
        except StopIteration as done:
            self.on_wait()
            return done.value
        except BaseException:
            self.on_wait()
            raise
        self.on_wait()
        return (yield from forward(coro, trap))


@dataclass
class Server:
    """One listener serving ``dispatch``. ``await nursery.start(server.serve)`` → bound port."""

    dispatch: Dispatch
    host: str = "127.0.0.1"
    port: int = 0
    limits: ServerLimits = field(default_factory=ServerLimits)
    stats: ServerStats = field(default_factory=ServerStats)
    security: ListenerSecurity | None = None
    connections: ConnectionCounter | None = None  # None: this listener's own, from ``limits``

    budget: FrameBudget = field(init=False)

    def __post_init__(self) -> None:
        # steps the task-less produce requests of every connection (broker/detached.py)
        self.completer = Completer()
        self.budget = FrameBudget(self.limits.partial_frame_budget_bytes)
        if self.connections is None:
            self.connections = ConnectionCounter(self.limits.max_connections,
                                                 self.limits.max_connections_per_ip)

    def statistics(self) -> ServerStats:
        return self.stats

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host, backlog=512)
        port = listeners[0].socket.getsockname()[1]
        log.info("listening on %s:%d", self.host, port)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.completer.run)
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started(port)

    async def _handle(self, stream: trio.abc.Stream) -> None:
        self.stats.connections_accepted += 1
        try:
            assert self.connections is not None
            ip = peer_host(stream)
            refused = self.connections.try_open(ip)
            if refused is not None:
                self.stats.connections_refused += 1
                await refuse(stream, error_body(ErrorCode.TOO_MANY_CONNECTIONS, refused))
                return
            self.stats.connections_open += 1
            try:
                if self.security is not None and self.security.ssl_context is not None:
                    tls = await self._accept_tls(stream, self.security.ssl_context)
                    if tls is None:
                        return
                    stream = tls
                await _Connection(self, stream).run()
            finally:
                self.stats.connections_open -= 1
                self.connections.close(ip)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                await trio.aclose_forcefully(stream)


    async def _accept_tls(self, stream: trio.abc.Stream, ctx: ssl.SSLContext) -> trio.abc.Stream | None:
        """The TLS stream of an accepted connection, or None (refused, answered, logged)."""
        assert self.security is not None
        with trio.move_on_after(self.security.config.handshake_timeout_ms / 1000):
            try:
                return await accept_tls(stream, ctx)
            except PlaintextOnTlsPortError as exc:
                self.stats.tls_refused += 1
                msg = "this listener speaks TLS: connect with security_protocol SSL or SASL_SSL"
                await refuse(exc.stream, error_body(ErrorCode.TLS_REQUIRED, msg))
                return None
            except (ssl.SSLError, trio.BrokenResourceError) as exc:
                self.stats.tls_refused += 1
                log.info("TLS handshake failed: %s", exc)
                return None
        self.stats.tls_refused += 1
        log.info("TLS handshake timed out")
        return None


class _Connection:
    def __init__(self, server: Server, stream: trio.abc.Stream) -> None:
        self.server = server
        self.stream = stream
        self.reader = FrameReader(stream, server.limits.max_frame_bytes, reuse=True,
                                  eager=True, budget=server.budget)
        self.send_lock = trio.Lock()
        self.sock = getattr(stream, "socket", None)  # plain TCP: answers try _send_now first
        self.in_flight = 0
        self.runners: set[Runner] = set()  # its task-less requests still parked (Home)
        self.prefix_done = trio.Event()  # the last started request's handler reached its first wait
        self.prefix_done.set()
        self.nursery: trio.Nursery | None = None
        self.principal: str | None = certificate_principal(stream)
        self.peer_host = peer_host(stream) if server.security is not None else None
        self.gate: SaslGate | None = None
        self.muted_until = 0.0  # trio time: no request is dispatched before it (quota throttle)
        sec = server.security
        if sec is not None and sec.config.uses_tls:
            server.stats.tls_connections += 1
        if sec is not None and sec.skips_sasl(self.principal):  # a peer node (mutual TLS)
            server.stats.node_connections += 1
        elif sec is not None and sec.config.uses_sasl:
            self.gate = SaslGate(sec.config.mechanisms, sec.credentials)
            self.reader.max_frame_bytes = min(server.limits.max_frame_bytes,
                                              sec.config.max_unauthenticated_frame_bytes)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            if self.gate is not None:
                nursery.start_soon(self._authentication_deadline)
            nursery.start_soon(self._idle_deadline)
            try:
                await self._read_loop(nursery)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                # the peer reset or the stream closed: this connection ends, nothing else
                # (raised inside the nursery it would leave as an ExceptionGroup, which the
                # caller's except clause does not match, and stop the whole listener)
                log.debug("connection closed while reading: %r", exc)
            finally:
                nursery.cancel_scope.cancel()
                self.close_all()

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        reader = self.reader
        yields = -1
        while True:
            try:
                payload = await reader.next_frame()
            except FrameTooLargeError as exc:
                await self._send_error(-1, ErrorCode.FRAME_TOO_LARGE, exc.message)
                return
            if payload is None:
                return
            if not self.prefix_done.is_set():
                # the previous request's synchronous prefix runs first (arrival order); a
                # handler that answers without suspending has also set its throttle by then
                await self.prefix_done.wait()
            if self.muted_until > trio.current_time():  # a throttled client: hold its next request
                await trio.sleep_until(self.muted_until)
            how = await self._on_frame(payload, nursery)
            if how is _ANSWERED or (how is _STEPPED and reader.yields == yields):
                # answered or stepped here (an error, SASL, a produce): the eager reader and
                # _send_now need not yield, so yield once per frame that arrived without a
                # wait, or a client sending nonstop would starve the rest (after a frame
                # dispatched to a task the loop waits for its prefix: _on_frame)
                await trio.lowlevel.checkpoint()
            yields = reader.yields

    async def _authentication_deadline(self) -> None:
        assert self.server.security is not None and self.gate is not None
        await trio.sleep(self.server.security.config.authentication_timeout_ms / 1000)
        if not self.gate.authenticated:
            self.server.stats.auth_failures += 1
            log.info("closing a connection that did not authenticate in time")
            self._close()

    async def _idle_deadline(self) -> None:
        """Close the connection once it went ``connections_max_idle_ms`` without completing a
        frame while no request of it was in flight (module docstring)."""
        idle_s = self.server.limits.connections_max_idle_ms / 1000
        seen, since = -1, trio.current_time()
        while True:
            if self.reader.frames != seen or self.in_flight:
                seen, since = self.reader.frames, trio.current_time()
            elif trio.current_time() - since >= idle_s:
                self.server.stats.idle_closed += 1
                log.info("closing a connection idle for %d ms", self.server.limits.connections_max_idle_ms)
                self._close()
                return
            await trio.sleep(min(idle_s, max(0.01, since + idle_s - trio.current_time())))

    def _unauthenticated(self) -> bool:
        return self.gate is not None and not self.gate.authenticated

    async def _on_frame(self, payload: bytes | memoryview, nursery: trio.Nursery) -> object:
        """Answer or dispatch one frame: ``_ANSWERED`` here, ``_STARTED`` in a request task,
        ``_STEPPED`` by a runner without a task (PRODUCE: broker/detached.py; its first step,
        the append included, runs here and now). A task started in this scheduler batch runs
        in the next one, so the read loop yields (waiting for its prefix) before it can start
        another: at most one start per pass and connection."""
        stats = self.server.stats
        stats.requests += 1
        try:
            req = decode_request(payload)  # type: ignore[arg-type]  # any buffer: msgpack reads it in place
        except RafkaError as exc:
            stats.request_errors += 1
            await self._send_error(peek_correlation_id(payload), exc.code, exc.message)  # type: ignore[arg-type]
            if self._unauthenticated():
                self._close()  # garbage before authentication: no second chance
            return _ANSWERED
        if req.api_key in SASL_APIS or (self._unauthenticated() and req.api_key != ApiKey.API_VERSIONS):
            await self._authenticate(req)
            return _ANSWERED
        if self.server.security is not None:
            req = dataclasses.replace(req, principal=self.principal, client_host=self.peer_host)
        if self.in_flight >= self.server.limits.max_in_flight:
            stats.request_errors += 1
            msg = f"more than {self.server.limits.max_in_flight} requests in flight on this connection"
            await self._send_error(req.correlation_id, ErrorCode.TOO_MANY_IN_FLIGHT, msg)
            return _ANSWERED
        self.in_flight += 1
        if req.api_key == ApiKey.PRODUCE:
            runner = Runner(self._run_request(req, _nothing), self, self.server.completer)
            self.runners.add(runner)
            runner.step()
            return _STEPPED
        first_wait = self.prefix_done = trio.Event()
        nursery.start_soon(self._run_request, req, first_wait.set)
        return _STARTED

    async def _run_request(self, req: Request, on_first_wait: Callable[[], None]) -> None:
        try:
            reply = await self._call(req, on_first_wait)
            if reply is not None:
                await self._hold_for_throttle(reply)
                await self._send_reply(req.correlation_id, reply)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, _ShortFileError) as exc:
            log.debug("connection closed while answering %d: %r", req.correlation_id, exc)
            self._close()
        except Exception:  # a reply we cannot encode: drop this connection, not the broker
            self.server.stats.handler_crashes += 1
            log.exception("cannot send the reply to correlation id %d", req.correlation_id)
            self._close()
        finally:
            on_first_wait()  # idempotent; covers a request that never reached its handler
            self.in_flight -= 1

    async def _hold_for_throttle(self, reply: Reply) -> None:
        """Sleep out the reply's ``throttle_time_ms`` and mute the connection until then."""
        throttle_ms = reply.body.get("throttle_time_ms")
        if not isinstance(throttle_ms, int) or throttle_ms <= 0:
            return
        until = trio.current_time() + min(throttle_ms, MAX_THROTTLE_MS) / 1000
        self.muted_until = max(self.muted_until, until)
        self.server.stats.throttled += 1
        await to_task()  # a sleep needs a task (broker/detached.py)
        try:
            await trio.sleep_until(until)
        except BaseException:
            reply.close()  # cancelled while held: the reply's file slices are ours to close
            raise

    async def _authenticate(self, req: Request) -> None:
        """A request the SASL gate answers (see the module docstring)."""
        if self.gate is None:
            await self._send_error(req.correlation_id, ErrorCode.ILLEGAL_SASL_STATE,
                                   "this listener does not use SASL")
            return
        answer = self.gate.handle(req.api_key, req.body)
        await self._send_reply(req.correlation_id, Reply(answer.body))
        if answer.close:
            self.server.stats.auth_failures += 1
            self._close()
        elif self.gate.authenticated:  # the SASL user, even over mutual TLS (as Kafka)
            self.principal = self.gate.principal
            self.reader.max_frame_bytes = self.server.limits.max_frame_bytes

    def _close(self) -> None:
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()

    # -- Home of the task-less requests (broker/detached.py) -----------------------------------

    def adopt(self, runner: Runner) -> None:
        """``runner``'s request needs a task from here on: one in this connection's nursery."""
        try:
            assert self.nursery is not None
            self.nursery.start_soon(self._run_adopted, runner)
        except RuntimeError:  # the connection is closing: its nursery takes no new task
            runner.close()

    async def _run_adopted(self, runner: Runner) -> None:
        await runner.adopted()

    def forget(self, runner: Runner) -> None:
        self.runners.discard(runner)

    def stray(self, runner: Runner, exc: BaseException) -> None:
        self.server.stats.handler_crashes += 1
        log.error("a task-less request broke the runner's rule; closing its connection",
                  exc_info=exc)
        self._close()

    def close_all(self) -> None:
        """The connection ended: give up the task-less requests still parked."""
        runners, self.runners = self.runners, set()
        for runner in runners:
            runner.close()

    async def _call(self, req: Request, on_first_wait: Callable[[], None]) -> Reply | None:
        try:
            if on_first_wait is _nothing:  # stepped by a runner: nobody waits for the prefix
                out = await self.server.dispatch(req)
            else:
                out = await _UntilFirstWait(self.server.dispatch(req), on_first_wait)
        except RafkaError as exc:
            self.server.stats.request_errors += 1
            return Reply(error_body(exc.code, exc.message))
        except Exception as exc:  # a bug in a handler must not take the broker down
            self.server.stats.handler_crashes += 1
            log.exception("handler for api %d (correlation id %d) failed", req.api_key, req.correlation_id)
            return Reply(error_body(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))
        if out is None:
            return None
        return out if isinstance(out, Reply) else Reply(out)

    async def _send_error(self, cid: int, code: int, message: str) -> None:
        await self._send_reply(cid, Reply(error_body(code, message)))

    async def _send_reply(self, cid: int, reply: Reply) -> None:
        try:
            raw_len = reply.raw_len
            head = encode_response_head(cid, reply.body, raw_len)
            if raw_len <= SMALL_REPLY_BYTES:
                # one write: head and records leave in one segment, so the receiver wakes once
                # (head + sendfile is two sends, and the reader's first wake-up finds half a
                # frame); small slices are pread from the page cache — a copy of at most
                # SMALL_REPLY_BYTES, cheaper than the second syscall and the second wake-up
                frame = self._gather(head, reply.raw)
                sent = self._send_now(frame)
                if sent == len(frame):
                    self.server.stats.sent_at_once += 1
                    return
                self.server.stats.sent_queued += 1
                await to_task()  # a lock and a wait for room need a task (broker/detached.py)
                async with self.send_lock:  # free if part was sent: taken without a wait
                    await self.stream.send_all(memoryview(frame)[sent:])
                return
            await to_task()
            async with self.send_lock:
                await self.stream.send_all(head)
                for part in reply.raw:
                    if not isinstance(part, _BYTES):
                        await self._send_file(part)
                    elif part:
                        await self.stream.send_all(part)
        finally:
            reply.close()

    def _send_now(self, frame: bytes) -> int:
        """Write what one non-blocking ``send`` takes of ``frame`` when nothing else is being
        sent on this connection; the bytes written (0: nothing, send the frame the ordinary
        way — a send in progress, a full socket buffer, or a TLS stream).

        ``send_all`` yields to trio's scheduler after a successful send and the send lock once
        more when taken: two scheduler passes (an ``epoll_wait`` each) per answer, paid three
        times per acks=all produce on a leader (its answer and two follower fetches). The
        caller finishes a partial send under the lock, which it then takes at once (it was
        free and nothing awaited since), so frames never interleave."""
        sock = self.sock
        if sock is None or self.send_lock.locked():
            return 0
        fd = sock.fileno()
        if fd < 0:
            return 0
        try:
            return os.write(fd, frame)
        except BlockingIOError:
            return 0

    def _gather(self, head: bytes, parts: Sequence[Any]) -> bytes:
        chunks = [head]
        for part in parts:
            if isinstance(part, _BYTES):
                chunks.append(part)
                continue
            data = os.pread(part.fd, part.length, part.position)
            if len(data) != part.length:
                raise _ShortFileError(f"segment ended {part.length - len(data)} bytes early")
            chunks.append(data)
            self.server.stats.bytes_copied += len(data)
        return b"".join(chunks)

    async def _send_file(self, part: Any) -> None:
        sock = getattr(self.stream, "socket", None)
        if sock is None:
            await self._send_file_copy(part)
            return
        out_fd = sock.fileno()
        offset, remaining = part.position, part.length
        while remaining > 0:
            try:
                n = os.sendfile(out_fd, part.fd, offset, min(remaining, _SENDFILE_CHUNK))
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                continue
            if n == 0:
                raise _ShortFileError(f"segment ended {remaining} bytes early")
            offset += n
            remaining -= n
            self.server.stats.bytes_sendfile += n
        await trio.lowlevel.checkpoint()

    async def _send_file_copy(self, part: Any) -> None:
        offset, remaining = part.position, part.length
        while remaining > 0:
            chunk = os.pread(part.fd, min(remaining, _SENDFILE_CHUNK), offset)
            if not chunk:
                raise _ShortFileError(f"segment ended {remaining} bytes early")
            await self.stream.send_all(chunk)
            offset += len(chunk)
            remaining -= len(chunk)
