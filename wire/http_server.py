"""A tiny HTTP/1.1 server on trio for a node's ``/metrics`` (and the web console).

Theory of operation
-------------------
``serve_http(handler, host, port)`` binds, calls ``task_status.started(port)`` and serves every
connection in its own task of one nursery (``trio.serve_listeners``), so nothing outlives the
caller's nursery: no thread, no background server. A connection carries exactly one request
(``Connection: close``): the reader collects the head (request line + headers, at most
``MAX_HEAD_BYTES``) within ``REQUEST_TIMEOUT_S``, hands ``(method, path)`` to ``handler`` and
writes its ``HttpResponse`` with a ``Content-Length``. Request bodies are not read (only GET and
HEAD are served); a malformed head gets 400, another method 405, a handler error 500 (logged),
and more than ``MAX_CONNECTIONS`` concurrent connections 503 — a bad or greedy client never
takes the node down. This is enough for Prometheus scrapers, curl, ``rafka top`` and a browser.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import trio

__all__ = ["HttpResponse", "HttpHandler", "serve_http", "MAX_HEAD_BYTES", "MAX_CONNECTIONS"]

log = logging.getLogger("rafka.http")

MAX_HEAD_BYTES = 8192
MAX_CONNECTIONS = 32
REQUEST_TIMEOUT_S = 5.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"


# (method, path without the query string, query string) -> response
HttpHandler = Callable[[str, str, str], Awaitable[HttpResponse]]


def _encode(resp: HttpResponse, head_only: bool = False) -> bytes:
    reason = _REASONS.get(resp.status, "")
    head = (f"HTTP/1.1 {resp.status} {reason}\r\n"
            f"Content-Type: {resp.content_type}\r\n"
            f"Content-Length: {len(resp.body)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n\r\n").encode("latin-1")
    return head if head_only else head + resp.body


def _text(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, (message + "\n").encode())


async def _read_head(stream: trio.abc.Stream) -> bytes | None:
    buf = bytearray()
    while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def parse_request_line(head: bytes) -> tuple[str, str, str] | None:
    """``(method, path, query)`` of a request head, or None when it is not HTTP."""
    line = head.split(b"\n", 1)[0].strip().decode("latin-1", "replace")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/") or not parts[1].startswith("/"):
        return None
    url = urlsplit(parts[1])
    return parts[0].upper(), unquote(url.path), url.query


async def serve_http(handler: HttpHandler, host: str = "127.0.0.1", port: int = 0, *,
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``handler`` on ``host:port`` until cancelled; ``started(bound port)``."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    slots = trio.Semaphore(MAX_CONNECTIONS)

    async def connection(stream: trio.abc.Stream) -> None:
        try:
            if slots.value == 0:
                with trio.move_on_after(1):
                    await stream.send_all(_encode(_text(503, "too many connections")))
                return
            async with slots:
                await _one_request(stream, handler)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                await trio.aclose_forcefully(stream)

    log.info("HTTP listener on %s:%d", host, bound)
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, connection, listeners)
        task_status.started(bound)


async def _one_request(stream: trio.abc.Stream, handler: HttpHandler) -> None:
    head: bytes | None = None
    with trio.move_on_after(REQUEST_TIMEOUT_S):
        head = await _read_head(stream)
    req = parse_request_line(head) if head else None
    if req is None:
        resp, head_only = _text(400, "bad request"), False
    else:
        method, path, query = req
        head_only = method == "HEAD"
        if method not in ("GET", "HEAD"):
            resp = _text(405, f"method {method} not allowed")
        else:
            try:
                resp = await handler(method, path, query)
            except Exception:  # a bug in a page must not take the node down
                log.exception("HTTP handler failed for %s", path)
                resp = _text(500, "internal error")
    with trio.move_on_after(REQUEST_TIMEOUT_S):
        await stream.send_all(_encode(resp, head_only))
