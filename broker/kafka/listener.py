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
replication round trip per request. Answers are written in request order by one writer task
(Kafka clients match answers to requests by order as well as by correlation id); a fetch's
long poll therefore still delays the answers queued behind it on that connection.

Bad input, as Kafka answers it: ApiVersions of a version not served → an ApiVersions v0
answer with ``UNSUPPORTED_VERSION`` and the served ranges (KIP-511); any other unknown api key
or version, a payload that does not parse, or an adapter failure → the connection is closed
with a logged reason. A bad batch in a produce is answered per partition
(``CORRUPT_MESSAGE`` / ``UNSUPPORTED_COMPRESSION_TYPE``) by the produce adapter. Nothing of
this reaches the node's other tasks: the listener and the broker stay up.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from rafka.broker.kafka import codec
from rafka.broker.kafka.apis import READABLE_FROM, SERVED, served_versions
from rafka.broker.kafka.context import KafkaContext
from rafka.broker.server import _UntilFirstWait
from rafka.wire.frame_reader import FrameReader
from rafka.wire.protocol import DEFAULT_MAX_FRAME_BYTES, FrameTooLargeError

__all__ = ["KafkaListener", "DEFAULT_MAX_FRAME_BYTES"]

log = logging.getLogger("rafka.kafka")

UNSUPPORTED_VERSION = 35


class KafkaListener:
    def __init__(self, ctx: KafkaContext, host: str, port: int, *,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 max_connections: int = 1000, idle_timeout_s: float = 600.0,
                 max_in_flight: int = 16) -> None:
        self.ctx = ctx
        self.max_in_flight = max_in_flight
        self.idle_timeout_s = idle_timeout_s
        self.host, self.port = host, port
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.connections = 0
        self.supported = {k: (READABLE_FROM.get(k, lo), hi) for k, (lo, hi, _) in SERVED.items()}

    def statistics(self) -> dict[str, int]:
        return {"connections": self.connections}

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        port = listeners[0].socket.getsockname()[1]
        log.info("node %s: Kafka listener on %s:%d", getattr(self.ctx, "node_id", "?"),
                 self.host, port)
        task_status.started(port)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        if self.connections >= self.max_connections:
            await stream.aclose()
            return
        self.connections += 1
        peer = _peer(stream)
        try:
            async with stream, trio.open_nursery() as nursery:
                # Kafka's framing is rafka's (a 4-byte big-endian length, then the payload), so
                # the native reader serves: memory follows the bytes that arrived, not the
                # length a peer declares, and a length above the limit — a negative int32 read
                # unsigned included — is refused before anything of it is buffered
                # eager: a non-blocking read first, no scheduler pass after a successful one
                # (safe: the reader yields per frame, waiting for its handler's first wait)
                reader = FrameReader(stream, self.max_frame_bytes, eager=True)
                answers: trio.MemorySendChannel[_Answer]
                answers, pending = trio.open_memory_channel[_Answer](self.max_in_flight)
                nursery.start_soon(self._writer, stream, pending, nursery.cancel_scope)
                async with answers:
                    await self._reader(reader, answers, nursery, peer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.connections -= 1

    async def _reader(self, reader: FrameReader, answers: trio.MemorySendChannel[_Answer],
                      nursery: trio.Nursery, peer: str) -> None:
        """Cut frames and start one task per request, in arrival order up to each handler's
        first wait (module docstring); at most ``max_in_flight`` unanswered (the channel's
        buffer: the reader waits for room, no error)."""
        unanswered = [0]  # requests whose handler has not returned yet
        while True:
            payload: bytes | memoryview | None = None
            idle = True
            with trio.move_on_after(self.idle_timeout_s):  # connections.max.idle.ms
                try:
                    payload = await reader.next_frame()
                except FrameTooLargeError as exc:
                    log.info("kafka %s: %s: closing", peer, exc)
                    await answers.send(_Answer.closing())
                    return
                idle = False
            if idle:
                if unanswered[0]:
                    continue  # a long poll is not idleness
                log.info("kafka %s: idle for %.0f s: closing", peer, self.idle_timeout_s)
                await answers.send(_Answer.closing())
                return
            if payload is None:  # the peer closed
                return
            answer = _Answer()
            payload = bytes(payload)  # the reader's buffer is reused by the next frame
            await answers.send(answer)
            prefix_done = trio.Event()
            unanswered[0] += 1
            nursery.start_soon(self._answer, payload, peer, answer, prefix_done, unanswered)
            await prefix_done.wait()

    async def _answer(self, payload: bytes, peer: str, answer: _Answer,
                      prefix_done: trio.Event, unanswered: list[int]) -> None:
        try:
            answer.frame = await _UntilFirstWait(self.handle(payload, peer), prefix_done.set)
        finally:
            unanswered[0] -= 1
            answer.done.set()

    async def _writer(self, stream: trio.SocketStream, pending: trio.MemoryReceiveChannel[_Answer],
                      scope: trio.CancelScope) -> None:
        """Write the answers in request order (Kafka clients rely on it), then close the
        connection when the reader is done or an answer says to."""
        try:
            async with pending:
                async for answer in pending:
                    await answer.done.wait()
                    if answer.frame is _CLOSE:
                        return
                    if answer.frame:
                        await stream.send_all(answer.frame)  # type: ignore[arg-type]
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            scope.cancel()

    async def handle(self, payload: bytes, peer: str = "?") -> bytes | object | None:
        """The answer frame to one request payload, ``None`` (no answer) or ``_CLOSE``."""
        try:
            req = codec.decode_request(payload, self.supported)
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
        try:
            answer = await adapter(self.ctx, req)
            if answer is None:
                return None
            entity = codec.build(codec.response_schema(req.api_key, req.api_version), answer)
            return codec.encode_response(req.api_key, req.api_version, req.correlation_id, entity)
        except Exception:
            log.exception("kafka %s: api key %d v%d failed: closing", peer, req.api_key,
                          req.api_version)
            return _CLOSE


_CLOSE = object()


class _Answer:
    """One request's answer slot, queued in arrival order: ``frame`` once ``done`` is set."""

    __slots__ = ("frame", "done")

    def __init__(self) -> None:
        self.frame: bytes | object | None = None
        self.done = trio.Event()

    @classmethod
    def closing(cls) -> _Answer:
        a = cls()
        a.frame = _CLOSE
        a.done.set()
        return a


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


async def start_kafka_listener(nursery: trio.Nursery, config: Any, dispatch: Any,
                               image: Any) -> str:
    """Start the Kafka listener of a node (``rafka/node.py``) in ``nursery``; returns the
    ``host:port`` to advertise (``advertised_host`` or the bound host, 0.0.0.0 → 127.0.0.1)."""
    host, port = config.kafka_listener
    ctx = KafkaContext(dispatch=dispatch, image=image, node_id=config.node_id,
                       cluster_id=config.cluster_id, settings=dict(config.broker))
    listener = KafkaListener(ctx, host, port,
                             max_frame_bytes=config.broker["socket.request.max.bytes"],
                             max_connections=config.broker["max.connections"],
                             idle_timeout_s=config.broker["connections.max.idle.ms"] / 1000)
    bound = await nursery.start(listener.serve)
    adv = config.advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
    return f"{adv}:{bound}"
