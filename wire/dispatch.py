"""What a request handler returns, and the shape of the function that answers requests.

Theory of operation: a listener (``broker.server.Server``) reads a ``Request``, calls a
``Dispatch`` and writes what comes back: a bare response body, a ``Reply`` (a body plus raw
parts that follow it on the wire — bytes, or ``FileSlice``\\ s the server sends from the page
cache with ``sendfile``), or ``None`` (no response: produce with acks=0). These types live in
the wire package, not beside the server, because the layers that wrap a dispatch (the
authorizer, the quota throttle, the SASL gate in ``security``) need them without importing
the broker.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import Request

__all__ = ["FileSlice", "RawPart", "Reply", "Dispatch", "error_body"]

_BYTES = (bytes, bytearray, memoryview)


@dataclass(slots=True)
class FileSlice:
    """``length`` bytes at ``position`` of ``fd``; the server owns ``fd`` and closes it.
    Any object with ``fd``, ``position``, ``length`` and ``close()`` will do
    (``log.partition_log.FetchSlice`` is one)."""

    fd: int
    position: int
    length: int

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


RawPart = bytes | bytearray | memoryview | FileSlice


@dataclass(slots=True)
class Reply:
    """A response body plus the raw bytes that follow it on the wire (fetch)."""

    body: dict[str, Any]
    raw: Sequence[RawPart] = ()

    @property
    def raw_len(self) -> int:
        return sum(len(p) if isinstance(p, _BYTES) else p.length for p in self.raw)

    def close(self) -> None:
        for p in self.raw:
            if not isinstance(p, _BYTES):
                with contextlib.suppress(OSError):
                    p.close()


# A handler returns a Reply, a bare body, or None (no response: produce with acks=0).
Dispatch = Callable[[Request], Awaitable[Reply | dict[str, Any] | None]]


def error_body(code: int | ErrorCode, message: str = "") -> dict[str, Any]:
    return {"error": int(code), "message": message or ErrorCode(code).name}
