"""Kafka v2 records sections, read and written where rafka stores them (``log/batch.py``).

Theory of operation
-------------------
rafka stores a batch produced through the Kafka listener exactly as it arrived; only its magic
byte (offset 16, outside the CRC) is changed to ``KAFKA_MAGIC`` so that every reader can tell
the records-section format from the header (see ``log/batch.py``). This module is the pure
Python reader/writer of such a section, used by everything that has to look at records:
consumers of the native client (when the C codec is not loaded), compaction (which re-packs a
batch in the format it was stored in), timestamp lookups, and the Kafka listener's conversion
of native batches for Kafka readers.

A Kafka section is ``record_count`` records, each ``varint length`` then ``int8 attributes,
varint timestampDelta, varint offsetDelta, varint keyLength, key, varint valueLength, value,
varint headerCount, (varint keyLength, key, varint valueLength, value)*`` — zig-zag varints,
length −1 for null. The whole section may be compressed: gzip (1), snappy (2; librdkafka writes
the raw block format, Java producers xerial framing, both read), lz4 (3, the LZ4 frame format)
or zstd (4). ``decode_rows`` gives the same rows as ``msgpack.unpackb`` of a native section:
``[offset_delta, timestamp_delta, key, value, headers]`` with headers a list of ``[str,
bytes | None]`` (``use_list=False``: tuples, and the shared ``()`` when a record has none), so
callers do not care which format a batch was written in.

Errors: ``KafkaSectionError`` (a ``CorruptBatchError``) for anything that does not decode,
``UnsupportedCodecError`` for a codec outside 0-4.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence
from typing import Any

import lz4.frame

from .errors import CorruptBatchError

__all__ = [
    "CODEC_NONE", "CODEC_GZIP", "CODEC_SNAPPY", "CODEC_LZ4", "CODEC_ZSTD", "CODEC_NAMES",
    "KafkaSectionError", "UnsupportedCodecError",
    "decompress", "compress", "decode_rows", "encode_rows",
]

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy",
               CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_EMPTY: tuple[()] = ()


class KafkaSectionError(CorruptBatchError):
    """A Kafka records section that cannot be read."""


class UnsupportedCodecError(KafkaSectionError):
    """Attributes name a compression codec that is not gzip, snappy, lz4 or zstd."""


# --------------------------------------------------------------------------- compression


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes | memoryview:
    """The records section of a batch compressed with ``codec`` (attributes bits 0-2);
    uncompressed data is returned as it is (no copy)."""
    try:
        if codec == CODEC_NONE:
            return data if not isinstance(data, bytearray) else memoryview(data)
        if codec == CODEC_GZIP:
            return gzip.decompress(data)
        if codec == CODEC_LZ4:
            return lz4.frame.decompress(data)
        if codec == CODEC_SNAPPY:
            import cramjam

            raw = bytes(data)
            if raw.startswith(_XERIAL_MAGIC):  # Java producers: xerial blocks behind a header
                return _xerial_unwrap(raw, cramjam)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == CODEC_ZSTD:
            import cramjam

            return bytes(cramjam.zstd.decompress(bytes(data)))
    except KafkaSectionError:
        raise
    except Exception as exc:  # every library has its own error types for bad input
        raise KafkaSectionError(f"cannot decompress a codec-{codec} records section: {exc}") from exc
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def _xerial_unwrap(raw: bytes, cramjam: Any) -> bytes:
    pos, out = 16, bytearray()  # magic (8), version (4), compatible version (4)
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise KafkaSectionError("truncated xerial snappy block length")
        (n,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        if n < 0 or pos + n > len(raw):
            raise KafkaSectionError("xerial snappy block runs past the section")
        out += cramjam.snappy.decompress_raw(raw[pos:pos + n])
        pos += n
    return bytes(out)


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section the way Kafka clients do (snappy: the raw block format)."""
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return gzip.compress(data, compresslevel=6)
    if codec == CODEC_LZ4:
        return lz4.frame.compress(data)
    if codec == CODEC_SNAPPY:
        import cramjam

        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_ZSTD:
        import cramjam

        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


# --------------------------------------------------------------------------- varint records


def _varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= end:
            raise KafkaSectionError("truncated varint in a record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise KafkaSectionError("varint longer than 10 bytes in a record")


def _bytes(buf: Any, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos, end)
    if n < 0:
        if n != -1:
            raise KafkaSectionError(f"negative field length {n} in a record")
        return None, pos
    if pos + n > end:
        raise KafkaSectionError("record field runs past its record")
    return bytes(buf[pos:pos + n]), pos + n


def decode_rows(section: bytes | bytearray | memoryview, count: int, *,
                use_list: bool = True) -> list | tuple:
    """The ``count`` records of an uncompressed Kafka section as native rows (module
    docstring); ``KafkaSectionError`` when they do not decode or are not exactly ``count``."""
    buf = section if isinstance(section, bytes) else bytes(section)
    rows: list[Any] = []
    p, n = 0, len(buf)
    for _ in range(count):
        length, p = _varint(buf, p, n)
        rend = p + length
        if length < 1 or rend > n:
            raise KafkaSectionError("record length runs past the records section")
        p += 1  # record attributes: unused (int8)
        ts_delta, p = _varint(buf, p, rend)
        off_delta, p = _varint(buf, p, rend)
        key, p = _bytes(buf, p, rend)
        value, p = _bytes(buf, p, rend)
        hcount, p = _varint(buf, p, rend)
        if hcount < 0:
            raise KafkaSectionError(f"negative header count {hcount} in a record")
        headers: Any = [] if use_list else _EMPTY
        if hcount:
            hs = []
            for _h in range(hcount):
                hk, p = _bytes(buf, p, rend)
                hv, p = _bytes(buf, p, rend)
                if hk is None:
                    raise KafkaSectionError("null record header key")
                try:
                    hks = hk.decode()
                except UnicodeDecodeError as exc:
                    raise KafkaSectionError(f"record header key is not UTF-8: {exc}") from exc
                hs.append([hks, hv] if use_list else (hks, hv))
            headers = hs if use_list else tuple(hs)
        if p != rend:
            raise KafkaSectionError("record length does not match its fields")
        if use_list:
            rows.append([off_delta, ts_delta, key, value, headers])
        else:
            rows.append((off_delta, ts_delta, key, value, headers))
    if p != n:
        raise KafkaSectionError(f"records section holds more than its {count} records")
    return rows if use_list else tuple(rows)


def _put_varint(out: bytearray, n: int) -> None:
    z = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _put_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out.append(1)  # zig-zag -1
    else:
        _put_varint(out, len(b))
        out += b


def encode_rows(rows: Sequence[Sequence[Any]]) -> bytes:
    """An uncompressed Kafka section of native rows ``[offset_delta, timestamp_delta, key,
    value, headers]`` (headers ``(str, bytes | None)`` pairs)."""
    out = bytearray()
    rec = bytearray()
    for od, td, k, v, hs in rows:
        rec.clear()
        rec.append(0)
        _put_varint(rec, td)
        _put_varint(rec, od)
        _put_bytes(rec, k)
        _put_bytes(rec, v)
        _put_varint(rec, len(hs) if hs else 0)
        for hk, hv in hs or ():
            _put_bytes(rec, hk.encode())
            _put_bytes(rec, hv)
        _put_varint(out, len(rec))
        out += rec
    return bytes(out)
