"""Small Raft messages go out as zlib *stored* blocks, not deflated (issue 26).

Theory of operation
-------------------
pysyncobj zlib-compresses every pickled message at level 3 before sealing it
(``tcp_connection.py``: ``zlib.compress(pickle.dumps(message), 3)``; the receiver calls
``zlib.decompress``). For a heartbeat that is ~34 µs of CPU each time — deflate sets up a fresh
256 KiB state per call — to turn 169 bytes into 149. An idle 3-node quorum sends ~40 messages a
second, and a busy one sends one per commit per follower, all of them small.

:func:`install` points pysyncobj's module at :class:`FrameZlib`: a payload under
``raft.compress.min.bytes`` (default ``STORE_BELOW_BYTES``; 0 deflates everything, as
pysyncobj does on its own) becomes one zlib stream of a single stored block (the 2-byte header, the
block's length and its complement, the bytes, the Adler-32: ~0.3 µs), which every zlib
``decompress`` — an older voter's included — reads; a larger one (a big metadata command, a
snapshot piece) is deflated at the level pysyncobj asked for, as before. Decompression is
zlib's own. Nothing on the wire changes meaning, so voters with and without this mix freely.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import pysyncobj.tcp_connection

__all__ = ["STORE_BELOW_BYTES", "FrameZlib", "install", "stored"]

STORE_BELOW_BYTES: Final = 4096
_BLOCK = struct.Struct("<BHH")  # BFINAL=1 BTYPE=00, LEN, NLEN (RFC 1951 3.2.4)
_ADLER = struct.Struct(">I")
_HEADER: Final = b"\x78\x01"  # deflate, 32 KiB window, no dictionary, FCHECK valid (RFC 1950)


def stored(data: bytes) -> bytes:
    """``data`` (< 64 KiB) as a zlib stream of one stored block."""
    n = len(data)
    if n > 0xFFFF:
        raise ValueError(f"a stored block holds at most 65535 bytes, not {n}")
    return _HEADER + _BLOCK.pack(1, n, n ^ 0xFFFF) + data + _ADLER.pack(zlib.adler32(data))


class FrameZlib:
    """What pysyncobj's transport calls ``zlib``."""

    store_below = STORE_BELOW_BYTES

    @classmethod
    def compress(cls, data: bytes, level: int = -1) -> bytes:
        return stored(data) if len(data) < cls.store_below else zlib.compress(data, level)

    decompress = staticmethod(zlib.decompress)


def install(store_below: int = STORE_BELOW_BYTES) -> None:
    """Process-wide (every pysyncobj connection of this process; one voter per process)."""
    FrameZlib.store_below = min(max(0, store_below), 0xFFFF + 1)
    pysyncobj.tcp_connection.zlib = FrameZlib  # type: ignore[attr-defined]
