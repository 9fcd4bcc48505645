"""The rafka wire protocol, sans I/O: bytes in, requests/responses out.

Theory of operation
-------------------
A frame is a 4-byte big-endian length ``N`` followed by ``N`` payload bytes.

* Request payload: one msgpack array ``[api_key, api_version, correlation_id, client_id, body]``
  where ``body`` is a map with str keys. Record batches travel inside the body as msgpack ``bin``
  (the broker validates and stores them as opaque bytes; it never decodes records).
* Response payload: a 4-byte big-endian length ``H``, then ``H`` bytes of msgpack
  ``[correlation_id, body]``, then optional *raw* bytes. Only fetch responses carry raw bytes:
  each partition entry of the body says how many (``records_len``), in body order, so the broker
  can write the head with one ``send`` and then ``sendfile`` the batches straight from segment
  files (page cache), and the client can slice them without copying.

Several requests may be in flight on one connection; responses carry the correlation id and may
come back in any order. ``acks=0`` produce requests are never answered.

``SCHEMAS`` (``wire/apis.py``, with ``ApiKey``) is the reference for every request body
(checked by ``validate_request``) and, in comments, the response body.

Nothing here touches a socket: ``FrameDecoder`` buffers bytes and yields whole frames,
``encode_*`` / ``decode_*`` convert between frames and ``Request`` / ``Response`` objects. The trio
edges live in ``broker/server.py`` and ``wire/connection.py``, and they produce no byte of their
own: a request frame is always ``RequestEncoder``'s (``encode_request`` for one-off frames, a
connection's own encoder with its reused buffer on the hot path — the same bytes,
``tests/protocol/test_codec_io.py`` compares them on a real loopback connection), a response
head always ``encode_response_head``'s, and the I/O twin of ``FrameDecoder`` that cuts frames
off a socket with fewer copies (``wire/frame_reader.py``) reads each length prefix with
``read_frame_length``, the same check ``FrameDecoder`` applies.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack
from rafka.wire.apis import SCHEMAS, ApiKey, MapOf, Opt, UnknownApiError, validate_request
from rafka.wire.errors import ErrorCode, ProtocolError, error_for

__all__ = [
    "ApiKey",
    "SCHEMAS",
    "API_VERSION",
    "DEFAULT_MAX_FRAME_BYTES",
    "NEED_DATA",
    "Opt",
    "MapOf",
    "Request",
    "Response",
    "FrameDecoder",
    "FrameTooLargeError",
    "MalformedFrameError",
    "UnknownApiError",
    "encode_request",
    "RequestEncoder",
    "frame_prefix",
    "read_frame_length",
    "check_frame_length",
    "decode_request",
    "encode_response",
    "encode_response_head",
    "decode_response",
    "peek_correlation_id",
    "validate_request",
    "ClientProtocol",
]

API_VERSION: Final = 0
DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024
_LEN = struct.Struct(">I")


# --------------------------------------------------------------------------- frames


class FrameTooLargeError(ProtocolError):
    code = ErrorCode.FRAME_TOO_LARGE


class MalformedFrameError(ProtocolError):
    code = ErrorCode.MALFORMED_FRAME


def frame_prefix(n: int) -> bytes:
    """The 4-byte length prefix of an ``n``-byte frame payload."""
    return _LEN.pack(n)


def read_frame_length(buf: bytes | bytearray | memoryview, pos: int, max_frame_bytes: int) -> int:
    """The payload length announced at ``buf[pos:pos + 4]``; ``FrameTooLargeError`` above
    ``max_frame_bytes``, before any of the payload is buffered (a hostile length cannot make
    the reader allocate)."""
    (n,) = _LEN.unpack_from(buf, pos)
    check_frame_length(n, max_frame_bytes)
    return n  # type: ignore[no-any-return]


def check_frame_length(n: int, max_frame_bytes: int) -> None:
    """``FrameTooLargeError`` for an announced length above ``max_frame_bytes``."""
    if n > max_frame_bytes:
        raise FrameTooLargeError(f"frame of {n} bytes exceeds the limit of {max_frame_bytes} bytes")


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


class FrameDecoder:
    """Accumulates bytes and yields whole frame payloads.

    ``receive_data(data)`` then call ``next_frame()`` until it returns ``NEED_DATA``. A declared
    length above ``max_frame_bytes`` raises ``FrameTooLargeError`` before any of it is buffered,
    so a hostile length cannot make the peer allocate memory.
    """

    __slots__ = ("_buf", "_pos", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_frame_bytes = max_frame_bytes

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos and self._pos > len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def check_length(self, n: int) -> None:
        """``FrameTooLargeError`` for an announced length above the limit, before any of it
        is buffered."""
        check_frame_length(n, self.max_frame_bytes)

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def next_frame(self) -> bytes | _NeedData:
        avail = len(self._buf) - self._pos
        if avail < 4:
            return NEED_DATA
        n = read_frame_length(self._buf, self._pos, self.max_frame_bytes)
        if avail < 4 + n:
            return NEED_DATA
        start = self._pos + 4
        with memoryview(self._buf) as view:  # one copy (a bytearray slice would be a second)
            payload = bytes(view[start : start + n])
        self._pos = start + n
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return payload


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    correlation_id: int
    body: dict[str, Any]
    api_version: int = API_VERSION
    client_id: str = ""
    principal: str | None = None  # set by the server on secured listeners (docs/security.md)
    client_host: str | None = None  # the peer's address, set with principal


@dataclass(frozen=True, slots=True)
class Response:
    correlation_id: int
    body: dict[str, Any]
    raw: bytes | memoryview = field(default=b"")

    def raise_for_error(self) -> None:
        code = self.body.get("error", 0)
        if code:
            raise error_for(code, self.body.get("message") or "")


_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack


class RequestEncoder:
    """Request frames from one reused msgpack buffer: the one request encoder of both sides.

    ``frame(...)`` encodes a request and returns its whole frame (length prefix included, new
    bytes); with ``split_at`` a payload of that many bytes or more is left in the buffer
    instead (``None`` returned) for a caller that writes a large frame in two parts without a
    frame-sized copy: ``frame_prefix(len(view))`` then the view ``payload()`` gives (released
    before the next ``frame``). The buffer is kept between requests: a large produce is copied
    once, into it, and written from it (faulting in a fresh megabyte per request cost more
    than the copies themselves). Not shared between tasks that may interleave a ``frame`` and
    its ``payload``.
    """

    __slots__ = ("_packer", "client_id")

    def __init__(self, client_id: str = "") -> None:
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False)
        self.client_id = client_id

    def frame(self, api_key: int, correlation_id: int, body: dict[str, Any], *,
              api_version: int = API_VERSION, split_at: int | None = None) -> bytes | None:
        """The request's whole frame; None (the payload left in the buffer) from ``split_at``
        bytes of payload on."""
        packer = self._packer
        packer.reset()
        packer.pack([int(api_key), api_version, correlation_id, self.client_id, body])
        view = packer.getbuffer()  # one view, released at once: the hot path of every request
        try:
            n = len(view)
            if split_at is not None and n >= split_at:
                return None
            return _LEN.pack(n) + bytes(view)
        finally:
            view.release()

    def payload(self) -> memoryview:
        """A view of the last ``frame``'s payload, valid until released (release it before the
        next ``frame``)."""
        return self._packer.getbuffer()  # type: ignore[no-any-return]

    def encode(self, req: Request) -> bytes:
        """``req``'s whole frame."""
        self.client_id = req.client_id
        frame = self.frame(req.api_key, req.correlation_id, req.body, api_version=req.api_version)
        assert frame is not None
        return frame


_local = threading.local()  # one RequestEncoder per thread for encode_request


def encode_request(req: Request) -> bytes:
    """A whole frame (length prefix included) for ``req`` (``RequestEncoder.encode``, with this
    thread's encoder: building a Packer per call would cost more than the encoding)."""
    encoder = getattr(_local, "encoder", None)
    if encoder is None:
        encoder = _local.encoder = RequestEncoder()
    return encoder.encode(req)


def peek_correlation_id(payload: bytes) -> int:
    """Best effort: the correlation id of a request payload whose body may be malformed (-1)."""
    try:
        up = msgpack.Unpacker(raw=False, max_buffer_size=len(payload) + 16)
        up.feed(payload[:64])
        if up.read_array_header() < 3:
            return -1
        up.unpack()
        up.unpack()
        cid = up.unpack()
        return cid if isinstance(cid, int) and not isinstance(cid, bool) else -1
    except Exception:
        return -1


def decode_request(payload: bytes, *, validate: bool = True) -> Request:
    """Parse a request payload. Raises ``MalformedFrameError`` / ``UnknownApiError`` /
    ``ProtocolError``; the caller answers with ``peek_correlation_id(payload)``."""
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:
        raise MalformedFrameError(f"request is not valid msgpack: {exc}") from None
    if not isinstance(obj, list) or len(obj) != 5:
        raise MalformedFrameError("request must be [api_key, api_version, correlation_id, client_id, body]")
    api_key, api_version, cid, client_id, body = obj
    if not (type(api_key) is type(api_version) is type(cid) is int) and not all(
            isinstance(x, int) and not isinstance(x, bool) for x in (api_key, api_version, cid)):
        raise MalformedFrameError("api_key, api_version and correlation_id must be integers")
    if not isinstance(client_id, str) or not isinstance(body, dict):
        raise MalformedFrameError("client_id must be a string and body a map")
    if validate:
        validate_request(api_key, body)
        if api_version != API_VERSION:
            raise error_for(
                ErrorCode.UNSUPPORTED_VERSION,
                f"api {ApiKey(api_key).name} version {api_version} is not supported (only {API_VERSION})",
            )
    return Request(api_key, cid, body, api_version, client_id)


def encode_response_head(correlation_id: int, body: dict[str, Any], raw_len: int = 0) -> bytes:
    """Frame length + head for a response whose ``raw_len`` raw bytes the caller sends next."""
    head = _packb([correlation_id, body])
    return _LEN.pack(4 + len(head) + raw_len) + _LEN.pack(len(head)) + head


def encode_response(resp: Response) -> bytes:
    raw = bytes(resp.raw)
    return encode_response_head(resp.correlation_id, resp.body, len(raw)) + raw


def decode_response(payload: bytes) -> Response:
    if len(payload) < 4:
        raise MalformedFrameError("response shorter than its head length")
    (hlen,) = _LEN.unpack_from(payload, 0)
    if 4 + hlen > len(payload):
        raise MalformedFrameError("response head runs past the frame")
    try:
        obj = msgpack.unpackb(memoryview(payload)[4 : 4 + hlen], raw=False, strict_map_key=False)
        cid, body = obj
    except Exception as exc:
        raise MalformedFrameError(f"response head is not valid: {exc}") from None
    raw = memoryview(payload)[4 + hlen :] if len(payload) > 4 + hlen else b""
    return Response(cid, body, raw)


class ClientProtocol:
    """Client side of one connection, sans I/O: numbers requests and matches responses."""

    __slots__ = ("_decoder", "_encoder", "_next_cid", "in_flight")

    def __init__(self, client_id: str = "rafka-python", max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self._decoder = FrameDecoder(max_frame_bytes)
        self._encoder = RequestEncoder(client_id)
        self._next_cid = 0
        self.in_flight: set[int] = set()

    @property
    def client_id(self) -> str:
        return self._encoder.client_id

    def send(self, api_key: int, body: dict[str, Any], *, expect_response: bool = True) -> tuple[int, bytes]:
        cid = self._next_cid
        self._next_cid = (cid + 1) & 0x7FFFFFFF
        if expect_response:
            self.in_flight.add(cid)
        return cid, self._encoder.encode(Request(int(api_key), cid, body, API_VERSION, self.client_id))

    def receive_data(self, data: bytes) -> None:
        self._decoder.receive_data(data)

    def next_response(self) -> Response | _NeedData:
        payload = self._decoder.next_frame()
        if payload is NEED_DATA:
            return NEED_DATA
        return self.decode_frame(payload)  # type: ignore[arg-type]

    def decode_frame(self, payload: bytes | bytearray) -> Response:
        """The response in one whole frame payload (its length prefix stripped) that the caller
        read itself — e.g. straight into a buffer of the announced size, with no copy through
        the decoder; ``check_frame_length`` first."""
        resp = decode_response(payload)  # type: ignore[arg-type]
        self.in_flight.discard(resp.correlation_id)
        return resp

    def check_frame_length(self, n: int) -> None:
        """``FrameTooLargeError`` for an announced length above the limit, before any of it
        is read."""
        self._decoder.check_length(n)
