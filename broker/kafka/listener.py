"""The Kafka listener: a trio TCP server speaking Kafka's wire protocol beside rafka's own.

Theory of operation
-------------------
``KafkaListener.serve`` binds ``kafka.listener`` (``task_status.started(port)`` once bound)
and runs one task per connection inside its nursery, at most ``max_connections`` at a time
(past that a new connection is closed at once) and closed when idle for
``connections.max.idle.ms`` (no whole request within it). A connection cuts frames with the
native ``wire.frame_reader.FrameReader`` (Kafka's framing is rafka's), which refuses a
negative length (read unsigned) or one above ``max_frame_bytes`` before buffering any of it —
the connection is then closed, as Kafka does — then decodes each frame (``codec.decode_request`` against ``apis.SERVED``),
and starts one task per request, at most ``max_in_flight`` (16) unanswered per connection (the
reader then waits: backpressure, not an error). As in the native server
(``broker/server.py``), the reader starts the next request only once the previous handler
first suspended (``_UntilFirstWait``), so every handler's synchronous prefix — a produce's
CRC check and append — runs in arrival order: pipelined batches of one partition land in the
log in send order. What follows (waiting for acks=all replication, a fetch's long poll)
overlaps, so a client with several produce requests in flight (librdkafka) is not held to one
replication round trip per request. Answers are written in request order (Kafka clients
match answers to requests by order as well as by correlation id): on plain TCP by the handler
that completes the oldest owed answer, with non-blocking writes, and by a writer task only for
what would block, for TLS streams and for the close (``_Pipe``); a fetch's long poll therefore
still delays the answers queued behind it on that connection. Idleness is watched by a task
that sleeps until the deadline (``_idle_deadline``), not by a timeout around each read.

Secured listeners (``KafkaListener(protocol=...)``: SSL, SASL_PLAINTEXT, SASL_SSL; configured
from the node's ``[security]`` table, ``start_kafka_listeners``): a TLS listener first runs the
TLS handshake (``security.tls.accept_tls``, bounded by ``ssl.handshake.timeout.ms``; a
plaintext client is closed with a logged reason). On a SASL listener a connection starts
unauthenticated — ``sasl.KafkaSasl`` holds its login — and until it has logged in its frames
may be at most ``sasl.max.unauthenticated.frame.bytes``, it must finish within
``sasl.authentication.timeout.ms``, and any request but ApiVersions, SaslHandshake and
SaslAuthenticate closes it unanswered (as Kafka does); a failed login is answered (its named
error) and closed. Every request then carries the connection's principal — ``User:<name>``
after SASL, the certificate's ``User:<CN>`` or ``User:ANONYMOUS`` on SSL — and the peer's
host, and the listener's dispatch is behind the ACLs when ``authorizer`` is on, so the
checks are the native secured listener's. Each listener has its own ``KafkaContext``
(``listener`` = its name, sharing the classic groups), so METADATA and FIND_COORDINATOR
name the brokers' listeners of the same name. All Kafka listeners of a node share one
``FrameBudget`` for partial large frames (``socket.partial.frame.budget.bytes``).

Quotas (KIP-219): the native dispatch's byte-rate quotas (``security/throttle.py``) put a
throttle time in a produce or fetch answer; the Kafka adapters answer it at once with that
``throttle_time_ms`` (the client backs off by itself) and ``handle`` mutes the connection:
no request of it is started before the throttle ends, so TCP pushes back on a client that
ignores it.

Bad input, as Kafka answers it: ApiVersions of a version not served → an ApiVersions v0
answer with ``UNSUPPORTED_VERSION`` and the served ranges (KIP-511); any other unknown api key
or version, a payload that does not parse, or an adapter failure → the connection is closed
with a logged reason. A bad batch in a produce is answered per partition
(``CORRUPT_MESSAGE`` / ``UNSUPPORTED_COMPRESSION_TYPE``) by the produce adapter. Nothing of
this reaches the node's other tasks: the listener and the broker stay up.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import ssl
from dataclasses import dataclass
from typing import Any

import trio
from rafka.broker.kafka import codec
from rafka.broker.kafka.answer_templates import FetchAnswers, ProduceAnswers
from rafka.broker.kafka.apis import READABLE_FROM, SERVED, served_versions
from rafka.broker.kafka.context import KafkaContext
from rafka.broker.kafka.fetch_sessions import FetchSessionCache
from rafka.broker.kafka.file_records import (
    FetchStats,
    FileFrame,
    ShortFileError,
    close_all,
    frame_with_files,
)
from rafka.broker.kafka.sasl import PLAIN_CHECK_THREADS, KafkaSasl
from rafka.broker.server import _UntilFirstWait
from rafka.security.listener import ANONYMOUS, ListenerSecurity
from rafka.security.tls import PlaintextOnTlsPortError, accept_tls, certificate_principal, peer_host
from rafka.wire.frame_reader import FrameBudget, FrameReader
from rafka.wire.protocol import DEFAULT_MAX_FRAME_BYTES, FrameTooLargeError

__all__ = ["KafkaListener", "DEFAULT_MAX_FRAME_BYTES", "KAFKA_PROTOCOLS", "start_kafka_listeners"]

KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36

log = logging.getLogger("rafka.kafka")

UNSUPPORTED_VERSION = 35


@dataclass
class _Conn:
    """What one connection knows of its peer."""

    peer: str = "?"
    client_host: str | None = None
    principal: str | None = None  # None on PLAINTEXT: the node's main dispatch decides
    sasl: KafkaSasl | None = None  # SASL listeners: the login, until it is done
    muted_until: float = 0.0  # trio time: no request is started before it (a quota's throttle)
    sendfile: bool = False  # plain TCP: a fetch's stored Kafka batches leave by sendfile


class KafkaListener:
    def __init__(self, ctx: KafkaContext, host: str, port: int, *,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 max_connections: int = 1000, idle_timeout_s: float = 600.0,
                 protocol: str = "PLAINTEXT", security: ListenerSecurity | None = None,
                 sasl_mechanisms: tuple[str, ...] = (),
                 budget: FrameBudget | None = None, max_in_flight: int = 16) -> None:
        if protocol not in KAFKA_PROTOCOLS:
            raise ValueError(f"protocol must be one of {KAFKA_PROTOCOLS}, got {protocol!r}")
        if protocol != "PLAINTEXT" and security is None:
            raise ValueError(f"a {protocol} Kafka listener needs the node's [security] settings")
        self.ctx = ctx
        self.max_in_flight = max_in_flight
        self.protocol = protocol
        self.security = security
        self.tls = protocol in ("SSL", "SASL_SSL")
        self.sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        self.ssl_context: ssl.SSLContext | None = None
        if self.tls:
            assert security is not None
            cfg = security.config
            if not (cfg.certfile and cfg.keyfile):
                raise ValueError(f"a {protocol} Kafka listener needs security.ssl.certfile and "
                                 "security.ssl.keyfile")
            self.ssl_context = security.ssl_context or ListenerSecurity.build(
                dataclasses.replace(cfg, protocol="SSL"), security.credentials).ssl_context
        self.sasl_mechanisms = sasl_mechanisms
        # PLAIN's PBKDF2 runs in worker threads, at most this many at once (sasl.py)
        self.plain_limiter = trio.CapacityLimiter(PLAIN_CHECK_THREADS)
        self.budget = budget
        self.auth_failures = 0
        self.idle_timeout_s = idle_timeout_s
        self.host, self.port = host, port
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.connections = 0
        self.supported = {k: (READABLE_FROM.get(k, lo), hi) for k, (lo, hi, _) in SERVED.items()}
        self.produce_answers = ProduceAnswers()  # produce answers from templates (answer_templates.py)
        self.fetch_answers = FetchAnswers()  # fetch answers around their records, likewise
        self.fetch_stats = FetchStats()  # records bytes by how they left (file_records.py)

    def statistics(self) -> dict[str, int]:
        return {"connections": self.connections, "auth_failures": self.auth_failures,
                "produce_answers_from_templates": self.produce_answers.hits,
                "fetch_answers_from_templates": self.fetch_answers.hits,
                "fetch_sendfile_bytes": self.fetch_stats.sendfile_bytes,
                "fetch_memory_bytes": self.fetch_stats.memory_bytes}

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        port = listeners[0].socket.getsockname()[1]
        log.info("node %s: Kafka %s listener on %s:%d", getattr(self.ctx, "node_id", "?"),
                 self.protocol, self.host, port)
        task_status.started(port)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.abc.Stream) -> None:
        if self.connections >= self.max_connections:
            await stream.aclose()
            return
        self.connections += 1
        # the peer's host goes to the ACLs on secured listeners (as the native server does)
        conn = _Conn(peer=_peer(stream),
                     client_host=peer_host(stream) if self.security is not None else None)
        try:
            async with stream:
                if self.ssl_context is not None:
                    tls = await self._accept_tls(stream, conn.peer)
                    if tls is None:
                        return
                    stream = tls
                    if not self.sasl:  # SSL: the client certificate names it, else ANONYMOUS
                        conn.principal = certificate_principal(stream) or ANONYMOUS
                await self._serve_connection(stream, conn)
        # a connection's tasks run in a nursery, so its errors arrive grouped; none of them may
        # leave this task: trio.serve_listeners would take the whole node down with it (a TLS
        # peer that hangs up without close_notify raises BrokenResourceError from the reader)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the peer went away
        except* Exception as group:
            log.error("kafka %s: connection failed, closed: %r", conn.peer, group,
                      exc_info=group)
        finally:
            self.connections -= 1

    async def _accept_tls(self, stream: trio.abc.Stream, peer: str) -> trio.abc.Stream | None:
        assert self.ssl_context is not None and self.security is not None
        with trio.move_on_after(self.security.config.handshake_timeout_ms / 1000):
            try:
                return await accept_tls(stream, self.ssl_context)
            except PlaintextOnTlsPortError:
                log.info("kafka %s: a plaintext client on the %s listener: closing", peer,
                         self.protocol)
                return None
            except (ssl.SSLError, trio.BrokenResourceError) as exc:
                log.info("kafka %s: TLS handshake failed: %s", peer, exc)
                return None
        log.info("kafka %s: TLS handshake timed out", peer)
        return None

    async def _serve_connection(self, stream: trio.abc.Stream, conn: _Conn) -> None:
        """A SASL listener's login first, one frame at a time (``_login``); then the requests,
        pipelined (module docstring): a reader task starting one handler per request and a
        writer answering in request order."""
        # Kafka's framing is rafka's (a 4-byte big-endian length, then the payload), so
        # the native reader serves: memory follows the bytes that arrived, not the
        # length a peer declares, and a length above the limit — a negative int32 read
        # unsigned included — is refused before anything of it is buffered.
        # eager: a non-blocking read first, no scheduler pass after a successful one (plain
        # TCP only; safe: the reader yields per frame, waiting for its handler's first wait)
        # reuse: one kept buffer receives every large frame (a produce's ~256 KiB batch), as on
        # the native listener — growing a fresh buffer per frame from 16 KiB cost five
        # allocations and four copies per request. Safe because kio copies what it decodes and
        # the reader reads the next frame only once the handler has decoded this one (_reader).
        reader = FrameReader(stream, self.max_frame_bytes, reuse=True, budget=self.budget,
                             eager=True)
        if self.sasl and not await self._login(stream, reader, conn):
            return
        pipe = _Pipe(self.max_in_flight, getattr(stream, "socket", None))
        conn.sendfile = pipe.sock is not None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, stream, pipe, nursery.cancel_scope)
                nursery.start_soon(self._idle_deadline, reader, pipe, conn)
                try:
                    await self._reader(reader, pipe, nursery, conn)
                finally:  # the answers still owed are written, then the connection closes
                    pipe.close()
        finally:  # answers never written (the peer left first) give their files back
            for answer in pipe.order:
                if isinstance(answer.frame, FileFrame):
                    answer.frame.close()

    async def _login(self, stream: trio.abc.Stream, reader: FrameReader, conn: _Conn) -> bool:
        """Serve a SASL listener's connection until it has logged in (True) or is to be closed
        (False): small frames only, within ``sasl.authentication.timeout.ms``, nothing but
        ApiVersions / SaslHandshake / SaslAuthenticate."""
        assert self.security is not None
        cfg = self.security.config
        sasl = conn.sasl = KafkaSasl(self.sasl_mechanisms, self.security.credentials, tls=self.tls,
                                     limiter=self.plain_limiter)
        reader.max_frame_bytes = min(self.max_frame_bytes, cfg.max_unauthenticated_frame_bytes)
        auth_deadline = trio.current_time() + cfg.authentication_timeout_ms / 1000
        while not sasl.authenticated:
            payload: bytes | memoryview | None = None
            idle = True
            deadline = trio.current_time() + self.idle_timeout_s  # connections.max.idle.ms
            with trio.move_on_at(min(deadline, auth_deadline)):
                try:
                    payload = await reader.next_frame()
                except FrameTooLargeError as exc:
                    log.info("kafka %s: %s: closing", conn.peer, exc)
                    return False
                idle = False
            if idle:
                if trio.current_time() >= auth_deadline:
                    self.auth_failures += 1
                    log.info("kafka %s: did not authenticate in time: closing", conn.peer)
                else:
                    log.info("kafka %s: idle for %.0f s: closing", conn.peer, self.idle_timeout_s)
                return False
            if payload is None:  # the peer closed
                return False
            # the deadline bounds the step too: a PLAIN check queued for its worker thread
            with trio.move_on_at(auth_deadline) as step:
                answer, close = await self._login_step(bytes(payload), conn)
            if step.cancelled_caught:
                self.auth_failures += 1
                log.info("kafka %s: did not authenticate in time: closing", conn.peer)
                return False
            if answer:
                await stream.send_all(answer)
            if close:
                self.auth_failures += 1
                if answer:
                    await _linger(stream)
                return False
        conn.principal = sasl.principal
        reader.max_frame_bytes = self.max_frame_bytes
        log.debug("kafka %s: authenticated as %s", conn.peer, conn.principal)
        return True

    async def _login_step(self, payload: bytes, conn: _Conn) -> tuple[bytes | None, bool]:
        """One frame before the login is done: (answer frame, close after it)."""
        sasl = conn.sasl
        assert sasl is not None
        if sasl.raw:  # after SaslHandshake v0: a bare token, answered bare
            token = await sasl.raw_token(payload)
            if token is None:
                log.info("kafka %s: SASL %s login failed: closing", conn.peer, sasl.mechanism)
                return None, True
            return codec.frame([token]), False
        try:
            api_key, _version, _cid = codec.peek_header(payload)
        except codec.KafkaDecodeError as exc:
            log.info("kafka %s: %s: closing", conn.peer, exc)
            return None, True
        if api_key == codec.API_VERSIONS_KEY:
            return self._answer_now(payload, conn)
        if api_key not in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            log.info("kafka %s: api key %d before SASL authentication: closing", conn.peer, api_key)
            return None, True
        try:
            req = codec.decode_request(payload, self.supported)
        except codec.KafkaDecodeError as exc:
            log.info("kafka %s: %s: closing", conn.peer, exc)
            return None, True
        if api_key == SASL_HANDSHAKE_KEY:
            answer = sasl.handshake(req.body.mechanism, req.api_version)
        else:
            answer = await sasl.authenticate(req.body.auth_bytes)
        if answer.close:
            log.info("kafka %s: SASL login failed (error %s): %s: closing", conn.peer,
                     answer.fields.get("error_code"), answer.fields.get("error_message"))
        entity = codec.build(codec.response_schema(req.api_key, req.api_version), answer.fields)
        return codec.encode_response(req.api_key, req.api_version, req.correlation_id,
                                     entity), answer.close

    def _answer_now(self, payload: bytes, conn: _Conn) -> tuple[bytes | None, bool]:
        """ApiVersions before the login: answered from the table (no dispatch needed)."""
        try:
            req = codec.decode_request(payload, self.supported)
        except codec.UnsupportedVersion as exc:
            entity = codec.build(codec.response_schema(codec.API_VERSIONS_KEY, 0), {
                "error_code": UNSUPPORTED_VERSION, "api_keys": served_versions()})
            return codec.encode_response(codec.API_VERSIONS_KEY, 0, exc.correlation_id, entity), False
        except codec.KafkaDecodeError as exc:
            log.info("kafka %s: %s: closing", conn.peer, exc)
            return None, True
        entity = codec.build(codec.response_schema(req.api_key, req.api_version),
                             {"error_code": 0, "throttle_time": 0, "api_keys": served_versions()})
        return codec.encode_response(req.api_key, req.api_version, req.correlation_id, entity), False

    async def _reader(self, reader: FrameReader, pipe: _Pipe, nursery: trio.Nursery,
                      conn: _Conn) -> None:
        """Cut frames and start one task per request, in arrival order up to each handler's
        first wait (module docstring); at most ``max_in_flight`` unanswered (the reader waits
        for a slot, no error). Returns at the end of the stream or on an oversized frame."""
        while True:
            try:
                payload = await reader.next_frame()
            except FrameTooLargeError as exc:
                log.info("kafka %s: %s: closing", conn.peer, exc)
                return
            if payload is None:  # the peer closed
                return
            if conn.muted_until > trio.current_time():  # a quota's throttle (handle)
                await trio.sleep_until(conn.muted_until)
            if isinstance(payload, memoryview):
                # a view of the reader's kept buffer, which the next frame overwrites: no copy
                # is needed, as the handler decodes it (kio copies every field it returns)
                # before its first wait, and only then is the next frame read (prefix_done)
                payload = payload.toreadonly()  # kio reads read-only buffers only
            await pipe.slots.acquire()
            answer = _Answer()
            pipe.order.append(answer)
            prefix_done = trio.Event()
            nursery.start_soon(self._answer, payload, conn, answer, prefix_done, pipe)
            await prefix_done.wait()

    async def _answer(self, payload: bytes | memoryview, conn: _Conn, answer: _Answer,
                      prefix_done: trio.Event, pipe: _Pipe) -> None:
        try:
            answer.frame = await _UntilFirstWait(self.handle(payload, conn.peer, conn),
                                                prefix_done.set)
        finally:
            answer.ready = True
            pipe.drain()  # written now if it is the oldest owed (and those after it, if ready)

    async def _writer(self, stream: trio.abc.Stream, pipe: _Pipe,
                      scope: trio.CancelScope) -> None:
        """Write what ``_Pipe.drain`` could not (a full socket buffer, a TLS stream), in
        request order, and close the connection when the pipe says so."""
        try:
            while True:
                await pipe.kick.wait()
                pipe.kick = trio.Event()
                pipe.writing = True
                try:
                    while pipe.order and pipe.order[0].ready:
                        head = pipe.order[0]
                        if head.frame is _CLOSE:
                            return
                        if isinstance(head.frame, FileFrame):
                            await head.frame.send(pipe.sock)
                        elif head.frame:
                            await stream.send_all(head.frame)  # type: ignore[arg-type]
                        pipe.written()
                finally:
                    pipe.writing = False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except ShortFileError as exc:  # half an answer is out: only closing is left
            log.warning("kafka: a fetch answer could not be completed (%s): closing", exc)
        finally:
            scope.cancel()

    async def _idle_deadline(self, reader: FrameReader, pipe: _Pipe, conn: _Conn) -> None:
        """Close the connection once it went ``connections.max.idle.ms`` without completing a
        frame while it owed no answer (a long poll is not idleness) — a task that sleeps
        until the deadline, instead of a timeout around every frame's read."""
        idle_s = self.idle_timeout_s
        seen, since = -1, trio.current_time()
        while True:
            if reader.frames != seen or pipe.order:
                seen, since = reader.frames, trio.current_time()
            elif trio.current_time() - since >= idle_s:
                log.info("kafka %s: idle for %.0f s: closing", conn.peer, idle_s)
                pipe.close()
                return
            await trio.sleep(min(idle_s, max(0.01, since + idle_s - trio.current_time())))

    async def handle(self, payload: bytes | memoryview, peer: str = "?",
                     conn: _Conn | None = None) -> bytes | object | None:
        """The answer frame to one request payload, ``None`` (no answer) or ``_CLOSE``."""
        try:
            req = codec.decode_request(payload, self.supported)
            if conn is not None and (conn.principal or conn.client_host):
                req = dataclasses.replace(req, principal=conn.principal,
                                          client_host=conn.client_host)
        except codec.UnsupportedVersion as exc:
            if exc.api_key == codec.API_VERSIONS_KEY:  # KIP-511: v0 answer with the ranges
                entity = codec.build(codec.response_schema(codec.API_VERSIONS_KEY, 0), {
                    "error_code": UNSUPPORTED_VERSION, "api_keys": served_versions()})
                return codec.encode_response(codec.API_VERSIONS_KEY, 0, exc.correlation_id, entity)
            log.info("kafka %s: %s (served: %s): closing", peer, exc,
                     self.supported.get(exc.api_key, "none"))
            return _CLOSE
        except codec.KafkaDecodeError as exc:
            log.info("kafka %s: %s: closing", peer, exc)
            return _CLOSE
        adapter = SERVED[req.api_key][2]
        answer: dict[str, Any] | None = None
        try:
            answer = await adapter(self.ctx, req)
            if answer is None:
                return None
            throttle_ms = answer.get("throttle_time") if conn is not None else None
            if throttle_ms:  # over a byte-rate quota: answered now, the connection muted (KIP-219)
                conn.muted_until = max(conn.muted_until, trio.current_time() + throttle_ms / 1000)
            if req.api_key == PRODUCE_KEY:  # the hot answer: a patched template when it can be
                frame = self.produce_answers.encode(req.api_version, req.correlation_id, answer)
                if frame is not None:
                    return frame
            schema = codec.response_schema(req.api_key, req.api_version)
            if req.api_key == FETCH_KEY:  # records spliced in, from files on plain TCP (file_records.py)
                return frame_with_files(
                    answer, schema.__flexible__,
                    lambda a: codec.encode_response(req.api_key, req.api_version, req.correlation_id,
                                                    codec.build(schema, a)),
                    self.fetch_stats, sendfile=conn is not None and conn.sendfile,
                    skeleton=lambda a: self.fetch_answers.encode(req.api_version, req.correlation_id, a))
            entity = codec.build(schema, answer)
            return codec.encode_response(req.api_key, req.api_version, req.correlation_id, entity)
        except Exception:
            if answer is not None:
                close_all(answer)
            log.exception("kafka %s: api key %d v%d failed: closing", peer, req.api_key,
                          req.api_version)
            return _CLOSE


_CLOSE = object()
PRODUCE_KEY = 0
FETCH_KEY = 1
LINGER_S = 1.0  # how long a refused login's answer waits for the peer to read it


async def _linger(stream: trio.abc.Stream) -> None:
    """After a login's failure answer: half-close and read (discarding) until the peer closes,
    at most ``LINGER_S``. Closing at once with bytes of the peer still unread (a pipelined next
    request) makes the kernel send a reset, which can discard the answer before the client
    read it; Kafka also sends the failure response before it closes."""
    with trio.move_on_after(LINGER_S):
        try:
            send_eof = getattr(stream, "send_eof", None)  # TCP only; a TLS stream has none
            if send_eof is not None:
                await send_eof()
            while await stream.receive_some(4096):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


class _Answer:
    """One request's answer slot, queued in arrival order: ``frame`` once ``ready``."""

    __slots__ = ("frame", "ready")

    def __init__(self) -> None:
        self.frame: bytes | memoryview | object | None = None
        self.ready = False


class _Pipe:
    """A connection's owed answers, in request order, and how they leave.

    The handler that completes the oldest owed answer writes it (and every later one already
    complete) itself, with one non-blocking ``os.write`` each (``drain``), as the native server's
    ``_send_now`` does: no hand-off to a writer task, no scheduler pass after the send — ~4
    fewer task switches per request. What cannot go that way — a TLS stream (no socket to
    write to), a full socket buffer (the rest of a partial write), the close — is left to the
    writer task, ``kick``-ed, which writes with ``send_all`` in order while ``writing``; answers
    completed meanwhile wait for it. ``slots`` bounds the owed answers (``max_in_flight``)."""

    __slots__ = ("order", "slots", "sock", "kick", "writing")

    def __init__(self, max_in_flight: int, sock: Any) -> None:
        self.order: collections.deque[_Answer] = collections.deque()
        self.slots = trio.Semaphore(max_in_flight)
        self.sock = sock  # a plain TCP trio socket, else None (TLS: the writer writes all)
        self.kick = trio.Event()
        self.writing = False

    def written(self) -> None:
        self.order.popleft()
        self.slots.release()

    def close(self) -> None:
        """Close the connection once every answer owed before now is written."""
        closing = _Answer()
        closing.frame, closing.ready = _CLOSE, True
        self.order.append(closing)
        self.drain()

    def drain(self) -> None:
        order = self.order
        while order and order[0].ready:
            frame = order[0].frame
            if self.writing or frame is _CLOSE or self.sock is None:
                self.kick.set()
                return
            if isinstance(frame, FileFrame):
                try:
                    done = frame.write_some(self.sock)
                except OSError:  # the writer meets it again and ends the connection
                    done = False
                if not done:
                    self.kick.set()
                    return
                frame.close()
            elif frame:
                fd = self.sock.fileno()
                try:
                    n = os.write(fd, frame) if fd >= 0 else 0  # type: ignore[arg-type]
                except BlockingIOError:
                    n = 0
                except OSError:  # a reset peer: the writer's send_all meets it the usual way
                    n = 0
                if n < len(frame):  # type: ignore[arg-type]
                    order[0].frame = memoryview(frame)[n:]  # type: ignore[arg-type]
                    self.kick.set()
                    return
            self.written()


def _peer(stream: trio.abc.Stream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]  # type: ignore[attr-defined]
        return f"{host}:{port}"
    except (OSError, AttributeError):
        return "?"


def _advertised(config: Any, host: str, bound: int) -> str:
    adv = config.advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
    return f"{adv}:{bound}"


def _session_cache(config: Any) -> FetchSessionCache:
    """The node's KIP-227 fetch-session cache, shared by its Kafka listeners (fetch_sessions.py)."""
    return FetchSessionCache(config.broker["max.incremental.fetch.session.cache.slots"])


def _settings_of(config: Any) -> dict[str, Any]:
    return {"max_frame_bytes": config.broker["socket.request.max.bytes"],
            "max_connections": config.broker["max.connections"],
            "idle_timeout_s": config.broker["connections.max.idle.ms"] / 1000}


async def start_kafka_listeners(nursery: trio.Nursery, config: Any, main_dispatch: Any,
                                dispatch: Any, image: Any, replicas: Any = None,
                                started: list[KafkaListener] | None = None) -> str | None:
    """Start every Kafka listener of a node (``rafka/node.py``) in ``nursery``: the PLAINTEXT
    one (``kafka.listener``) on ``main_dispatch`` — the main native listener's, so as
    ``User:ANONYMOUS`` under the ACLs where that one is — and the secured ones
    (``kafka.ssl_listener``, ``kafka.sasl_plaintext_listener``, ``kafka.sasl_ssl_listener``) on
    ``dispatch`` behind the ACLs when ``[security] authorizer`` is on, with the connection's
    principal. Each started listener is appended to ``started`` (the node's metrics read their
    statistics). Returns what the broker registers (``context.kafka_listeners``): ``HOST:PORT``
    for a lone PLAINTEXT listener, else ``NAME://HOST:PORT,...``; None without any."""
    from rafka.security.authz import authorizing_dispatch
    from rafka.security.listener import image_credentials, node_bypass

    budget = FrameBudget(config.broker["socket.partial.frame.budget.bytes"])
    base = KafkaContext(dispatch=main_dispatch, image=image, node_id=config.node_id,
                        cluster_id=config.cluster_id, settings=dict(config.broker), replicas=replicas,
                        fetch_sessions=_session_cache(config))
    named: list[tuple[str, str]] = []
    if config.kafka_listener is not None:
        host, port = config.kafka_listener
        listener = KafkaListener(base, host, port, budget=budget, **_settings_of(config))
        if started is not None:
            started.append(listener)
        named.append(("PLAINTEXT", _advertised(config, host, await nursery.start(listener.serve))))
    sec = config.security
    if config.kafka_secured_listeners:
        assert sec is not None  # broker/config.py refuses secured Kafka listeners without it
        secured = dispatch
        if sec.authorizer:  # the native secured listener's ACL checks (security/authz.py)
            authorized = authorizing_dispatch(dispatch, image, sec.super_users)
            secured = node_bypass(dispatch, authorized) if sec.inter_broker else authorized
        security = ListenerSecurity.build(sec, image_credentials(image))
        for protocol, (host, port) in config.kafka_secured_listeners:
            ctx = dataclasses.replace(base, dispatch=secured, listener=protocol)  # groups shared
            listener = KafkaListener(ctx, host, port, protocol=protocol, security=security,
                                     sasl_mechanisms=config.kafka_sasl_mechanisms, budget=budget,
                                     **_settings_of(config))
            if started is not None:
                started.append(listener)
            named.append((protocol, _advertised(config, host, await nursery.start(listener.serve))))
    if not named:
        return None
    if len(named) == 1 and named[0][0] == "PLAINTEXT":
        return named[0][1]
    return ",".join(f"{name}://{addr}" for name, addr in named)
