"""Kafka request/response framing and payload codec, sans I/O, on top of ``kio``.

Theory of operation
-------------------
A Kafka frame is a 4-byte big-endian length and that many bytes. A request starts with a
header — ``api_key int16, api_version int16, correlation_id int32, client_id nullable
string`` (request header v1), plus a tagged-field section when the API version is *flexible*
(request header v2, KIP-482) — followed by the request payload of that API and version. A
response starts with ``correlation_id int32`` (response header v0), plus tagged fields when
the version is flexible (header v1) — except ApiVersions, whose response header is always v0
so that a client can read the answer whatever version it asked for.

``decode_request(payload, supported)`` reads the header, checks the version against the
``supported`` ranges and reads the payload into a frozen ``kio`` dataclass.
``encode_response(req, entity)`` frames the answer. ``build(cls, data)`` turns nested dicts
(what the API adapters produce) into the ``kio`` dataclass of one API version, so an adapter
is written once for all the versions it serves: fields a version lacks are dropped, fields
with a default may be omitted, ints become ``ErrorCode``/``timedelta`` where the schema says.

Why ``kio``: it is generated from Kafka's own JSON message schemas (every API and version,
flexible versions and tagged fields included), reads with a native (Rust) reader, and its
entities are frozen, slotted dataclasses with Hypothesis strategies for every field type —
the same shape as rafka's own events (STYLE.md). kafka-python's protocol package was the
other candidate: it covers fewer versions (hand-maintained classes per version in the
releases we checked), and it would make the client a runtime dependency of the broker.

Errors: ``UnsupportedVersion`` (Kafka closes the connection for it, except ApiVersions,
which is answered with ``UNSUPPORTED_VERSION`` and the supported range: KIP-511),
``UnknownApi``, ``KafkaDecodeError`` (the payload does not parse; the connection is closed).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from rafka.wire.protocol import frame_prefix

__all__ = [
    "API_VERSIONS_KEY", "KafkaRequest", "KafkaDecodeError", "UnsupportedVersion", "UnknownApi",
    "peek_header", "decode_request", "encode_request", "encode_response", "decode_response",
    "build", "request_schema", "response_schema", "frame",
]

API_VERSIONS_KEY = 18
_HEAD = struct.Struct(">hhi")


class KafkaDecodeError(Exception):
    """The request cannot be read (Kafka closes the connection)."""


class UnknownApi(KafkaDecodeError):
    pass


class UnsupportedVersion(KafkaDecodeError):
    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not supported")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request dataclass of (api_key, api_version)
    # set by the listener on secured listeners: the ACLs see them (security/authz.py)
    principal: str | None = None
    client_host: str | None = None


@cache
def request_schema(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


@cache
def response_schema(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


def peek_header(payload: bytes) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a request payload."""
    if len(payload) < _HEAD.size:
        raise KafkaDecodeError(f"request of {len(payload)} bytes is shorter than its header")
    return _HEAD.unpack_from(payload, 0)


def decode_request(payload: bytes, supported: Mapping[int, tuple[int, int]]) -> KafkaRequest:
    """Parse one request frame payload; ``supported``: api key -> (min, max) version served."""
    api_key, version, cid = peek_header(payload)
    if api_key not in supported:
        raise UnknownApi(f"api key {api_key} is not served")
    lo, hi = supported[api_key]
    if not lo <= version <= hi:
        raise UnsupportedVersion(api_key, version, cid)
    try:
        schema = request_schema(api_key, version)
    except Exception as exc:  # the range says served, the codec has no schema: our bug
        raise UnsupportedVersion(api_key, version, cid) from exc
    header_cls = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    try:
        header, pos = entity_reader(header_cls)(payload, 0)
        body, used = entity_reader(schema)(payload, pos)
    except Exception as exc:  # kio's DecodeError, BufferUnderflow, ValueError of phantom types
        raise KafkaDecodeError(f"cannot read api key {api_key} v{version}: "
                               f"{type(exc).__name__}: {exc}") from exc
    # Bytes after the payload are ignored, as Kafka's own parser does: librdkafka 2.16 sends
    # Metadata v12 with three trailing bytes when it asks for all topics.
    return KafkaRequest(api_key, version, cid, header.client_id, body)


def frame(parts: list[bytes]) -> bytes:
    n = sum(len(p) for p in parts)
    return b"".join([frame_prefix(n), *parts])


def _write(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def encode_response(api_key: int, api_version: int, correlation_id: int,
                    entity: Any) -> bytes | memoryview:
    """A whole response frame (length prefix included), written into one buffer: a fetch's
    records are copied once, by kio, and not again to join the prefix on."""
    flexible = getattr(entity, "__flexible__", False) and api_key != API_VERSIONS_KEY
    header = (ResponseHeaderV1 if flexible else ResponseHeaderV0)(correlation_id=correlation_id)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(type(header))(buf, header)
    entity_writer(type(entity))(buf, entity)
    view = buf.getbuffer()
    view[:4] = frame_prefix(len(view) - 4)
    return view


def encode_request(entity: Any, correlation_id: int, client_id: str | None = "rafka-test") -> bytes:
    """A whole request frame for ``entity`` (tests and benchmarks play the client with it)."""
    header_cls = RequestHeaderV2 if entity.__flexible__ else RequestHeaderV1
    header = header_cls(request_api_key=entity.__api_key__, request_api_version=entity.__version__,
                        correlation_id=correlation_id, client_id=client_id)
    return frame([_write(header), _write(entity)])


def decode_response(payload: bytes | memoryview, api_key: int, api_version: int) -> tuple[int, Any]:
    """``(correlation_id, entity)`` of a response frame payload (tests play the client)."""
    if not isinstance(payload, bytes):  # kio reads read-only buffers: encode_response's view
        payload = bytes(payload)
    schema = response_schema(api_key, api_version)
    flexible = schema.__flexible__ and api_key != API_VERSIONS_KEY
    header, pos = entity_reader(ResponseHeaderV1 if flexible else ResponseHeaderV0)(payload, 0)
    body, _ = entity_reader(schema)(payload, pos)
    return header.correlation_id, body


# --------------------------------------------------------------------------- build


@cache
def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        has_default = (f.default is not dataclasses.MISSING
                       or f.default_factory is not dataclasses.MISSING)
        out.append((f.name, hints[f.name], has_default))
    return tuple(out)


def _identity(value: Any) -> Any:
    return value


@cache
def _converter(hint: Any) -> Callable[[Any], Any]:
    """How a value for a field typed ``hint`` becomes what kio wants (never called with
    ``None``): worked out once per hint — this runs for every field of every answer."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        inner = _converter(typing.get_args(hint)[0])
        return lambda value: tuple(None if v is None else inner(v) for v in value)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _converter(args[0]) if len(args) == 1 else _identity
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return lambda value: value if isinstance(value, hint) else build(hint, value)
        if issubclass(hint, KioErrorCode):
            return lambda value: KioErrorCode(int(value))
        if issubclass(hint, datetime.timedelta):
            return lambda value: (datetime.timedelta(milliseconds=value)
                                  if isinstance(value, int) else value)
    return _identity


def _convert(hint: Any, value: Any) -> Any:
    return None if value is None else _converter(hint)(value)


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """The ``kio`` dataclass ``cls`` from nested dicts: keys the schema lacks are ignored,
    keys with a schema default may be missing (see the module docstring)."""
    kwargs = {}
    for name, hint, has_default in _fields(cls):
        if name.startswith("__"):
            continue
        if name in data:
            kwargs[name] = _convert(hint, data[name])
        elif not has_default:
            raise KeyError(f"{cls.__module__}.{cls.__name__}: no value for {name!r}")
    return cls(**kwargs)
