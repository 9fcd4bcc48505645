"""Kafka record batches (magic 2) and their conversion to and from rafka's native batches.

Theory of operation
-------------------
A Kafka v2 batch and a rafka batch share the 61-byte header, field for field (``log/batch.py``
was laid out after Kafka's), and differ only in the records section: Kafka writes each record
as varints (``length attributes timestampDelta offsetDelta key value headers``), rafka writes
one msgpack array of ``[offset_delta, timestamp_delta, key, value, headers]``. Kafka's section
may be compressed with gzip (1), snappy (2), lz4 (3, the LZ4 *frame* format) or zstd (4);
rafka's with lz4 frames only.

Storage design (first cut, see docs/kafka-compat.md): the broker stores rafka batches only.
A Kafka produce is converted on the way in (``kafka_to_native``: decompress, decode the
varint records, pack them with msgpack, lz4 if the producer compressed), keeping every header
field — producer id, epoch, base sequence, the transactional bit, timestamps and offset deltas
— so idempotence, transactions, compaction and retention see exactly what a native producer
would have written. A Kafka fetch converts back (``native_to_kafka``: uncompressed Kafka
batches, same offsets, same header fields; transaction markers become Kafka control records:
key ``int16 version, int16 type``, value ``int16 version, int32 coordinator epoch``). The cost
is a decode and an encode of every record on both paths, in Python; the plan that removes it
(keep each batch in the format it arrived in, a format bit in the attributes, convert only
for a reader of the other protocol) is written down in docs/kafka-compat.md.

Errors are ``KafkaBatchError`` (a ``CorruptBatchError``, so the produce path answers
``CORRUPT_MESSAGE``), with ``KafkaCrcError`` for a CRC-32C mismatch and
``UnsupportedCompressionError`` for a codec this module does not know.

Compression libraries: gzip from the standard library, lz4 frames from ``lz4`` (already a
rafka dependency), snappy and zstd from ``cramjam`` (one maintained Rust-backed wheel for
both; its snappy ``decompress_raw`` is the block format that librdkafka writes, and the xerial
framing that Java producers write is unwrapped here first).
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import lz4.frame
import msgpack
from crc32c import crc32c
from rafka.log.batch import (
    CONTROL_BIT,
    HEADER_SIZE,
    BatchHeader,
    build_raw_batch,
    control_coordinator_epoch,
    control_type,
    decode_raw_records,
    parse_header,
)
from rafka.log.errors import CorruptBatchError

__all__ = [
    "KafkaBatchError", "KafkaCrcError", "UnsupportedCompressionError",
    "COMPRESSION_NONE", "COMPRESSION_GZIP", "COMPRESSION_SNAPPY", "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD", "KafkaRow", "KafkaBatch",
    "decode_batch", "iter_kafka_batches", "encode_batch", "compress", "decompress",
    "kafka_to_native", "native_to_kafka",
]

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
_COMPRESSION_MASK = 0x07
_CRC_START = 21
_HEADER = struct.Struct(">qiibIhiqqqhii")
_TAIL = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibI")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


class KafkaBatchError(CorruptBatchError):
    """A Kafka record batch that cannot be read."""


class KafkaCrcError(KafkaBatchError):
    """The batch's CRC-32C does not match its bytes."""


class UnsupportedCompressionError(KafkaBatchError):
    """Attributes name a compression codec that is not gzip, snappy, lz4 or zstd."""


class KafkaRow(NamedTuple):
    """One record as the batch carries it: deltas against the batch's base offset/timestamp."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class KafkaBatch(NamedTuple):
    header: BatchHeader
    rows: list[KafkaRow]


# --------------------------------------------------------------------------- varints


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _put_varint(out: bytearray, n: int) -> None:
    z = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _get_varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= end:
            raise KafkaBatchError("truncated varint in a record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise KafkaBatchError("varint longer than 10 bytes in a record")


def _get_bytes(buf: bytes | memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _get_varint(buf, pos, end)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise KafkaBatchError("record field runs past its record")
    return bytes(buf[pos:pos + n]), pos + n


def _put_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        _put_varint(out, -1)
    else:
        _put_varint(out, len(b))
        out += b


# --------------------------------------------------------------------------- compression


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The records section of a batch compressed with ``codec`` (attributes bits 0-2)."""
    try:
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            return gzip.decompress(data)
        if codec == COMPRESSION_LZ4:
            return lz4.frame.decompress(data)
        if codec == COMPRESSION_SNAPPY:
            import cramjam

            raw = bytes(data)
            if raw.startswith(_XERIAL_MAGIC):  # Java producers: xerial blocks behind a header
                return _xerial_unwrap(raw, cramjam)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == COMPRESSION_ZSTD:
            import cramjam

            return bytes(cramjam.zstd.decompress(bytes(data)))
    except KafkaBatchError:
        raise
    except Exception as exc:  # every library has its own error types for bad input
        raise KafkaBatchError(f"cannot decompress a codec-{codec} records section: {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def _xerial_unwrap(raw: bytes, cramjam: object) -> bytes:
    pos, out = 16, bytearray()  # magic (8), version (4), compatible version (4)
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise KafkaBatchError("truncated xerial snappy block length")
        (n,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        if n < 0 or pos + n > len(raw):
            raise KafkaBatchError("xerial snappy block runs past the section")
        out += cramjam.snappy.decompress_raw(raw[pos:pos + n])  # type: ignore[attr-defined]
        pos += n
    return bytes(out)


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section the way Kafka clients do (snappy: the raw block format)."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.compress(data, compresslevel=6)
    if codec == COMPRESSION_LZ4:
        return lz4.frame.compress(data)
    if codec == COMPRESSION_SNAPPY:
        import cramjam

        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_ZSTD:
        import cramjam

        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


# --------------------------------------------------------------------------- decode


def _header(buf: bytes | memoryview, pos: int) -> BatchHeader:
    if len(buf) - pos < HEADER_SIZE:
        raise KafkaBatchError(f"truncated batch header at byte {pos}")
    f = _HEADER.unpack_from(buf, pos)
    if f[3] != 2:
        raise KafkaBatchError(f"record batch magic {f[3]} at byte {pos} (only magic 2 is served)")
    if f[1] < HEADER_SIZE - 12 or pos + 12 + f[1] > len(buf):
        raise KafkaBatchError(f"bad batch_length {f[1]} at byte {pos}")
    if f[12] < 0 or f[6] < 0:
        raise KafkaBatchError(f"negative record count or offset delta at byte {pos}")
    return BatchHeader(*f)


def decode_batch(buf: bytes | memoryview, pos: int = 0) -> KafkaBatch:
    """The header and records of the Kafka batch at ``pos`` (CRC checked, decompressed)."""
    h = _header(buf, pos)
    end = pos + h.size
    with memoryview(buf) as mv:
        if crc32c(mv[pos + _CRC_START:end]) != h.crc:
            raise KafkaCrcError(f"CRC-32C mismatch in the batch at byte {pos}")
        section = decompress(h.attributes & _COMPRESSION_MASK, mv[pos + HEADER_SIZE:end])
    rows: list[KafkaRow] = []
    p, n = 0, len(section)
    for _ in range(h.record_count):
        length, p = _get_varint(section, p, n)
        rend = p + length
        if length < 0 or rend > n:
            raise KafkaBatchError("record length runs past the records section")
        p += 1  # record attributes: unused (int8)
        ts_delta, p = _get_varint(section, p, rend)
        off_delta, p = _get_varint(section, p, rend)
        key, p = _get_bytes(section, p, rend)
        value, p = _get_bytes(section, p, rend)
        count, p = _get_varint(section, p, rend)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(max(0, count)):
            hk, p = _get_bytes(section, p, rend)
            hv, p = _get_bytes(section, p, rend)
            try:
                headers.append(((hk or b"").decode(), hv))
            except UnicodeDecodeError as exc:
                raise KafkaBatchError(f"record header key is not UTF-8: {exc}") from exc
        if p != rend:
            raise KafkaBatchError("record length does not match its fields")
        rows.append(KafkaRow(off_delta, ts_delta, key, value, headers))
    if p != n:
        raise KafkaBatchError(f"records section holds more than its {h.record_count} records")
    return KafkaBatch(h, rows)


def iter_kafka_batches(buf: bytes | memoryview) -> Iterator[int]:
    """Positions of the whole batches in ``buf``; ``KafkaBatchError`` on a trailing fragment."""
    pos = 0
    while pos < len(buf):
        h = _header(buf, pos)
        yield pos
        pos += h.size


# --------------------------------------------------------------------------- encode


def encode_records(rows: Sequence[KafkaRow]) -> bytes:
    out = bytearray()
    rec = bytearray()
    for r in rows:
        rec.clear()
        rec.append(0)
        _put_varint(rec, r.timestamp_delta)
        _put_varint(rec, r.offset_delta)
        _put_bytes(rec, r.key)
        _put_bytes(rec, r.value)
        _put_varint(rec, len(r.headers))
        for hk, hv in r.headers:
            _put_bytes(rec, hk.encode())
            _put_bytes(rec, hv)
        _put_varint(out, len(rec))
        out += rec
    return bytes(out)


def encode_batch(rows: Sequence[KafkaRow], *, first_timestamp: int, max_timestamp: int | None = None,
                 base_offset: int = 0, leader_epoch: int = -1, attributes: int = 0,
                 compression: int = COMPRESSION_NONE, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1,
                 last_offset_delta: int | None = None) -> bytes:
    """A Kafka v2 batch of ``rows`` (CRC-32C computed); ``compression`` replaces bits 0-2."""
    section = compress(compression, encode_records(rows))
    if max_timestamp is None:
        max_timestamp = first_timestamp + max((r.timestamp_delta for r in rows), default=0)
    if last_offset_delta is None:
        last_offset_delta = max((r.offset_delta for r in rows), default=0)
    tail = _TAIL.pack((attributes & ~_COMPRESSION_MASK) | compression, last_offset_delta,
                      first_timestamp, max_timestamp, producer_id, producer_epoch,
                      base_sequence, len(rows))
    crc = crc32c(section, crc32c(tail))
    head = _HEAD.pack(base_offset, HEADER_SIZE - 12 + len(section), leader_epoch, 2, crc)
    return b"".join((head, tail, section))


# --------------------------------------------------------------------------- conversion

_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def kafka_to_native(payload: bytes | memoryview) -> bytes:
    """Every Kafka batch of a produce payload as a rafka batch with the same header fields.

    A compressed Kafka batch is stored lz4-compressed (rafka's one codec); control batches
    are left to the produce handler to refuse (the bit is kept)."""
    out: list[bytes] = []
    for pos in iter_kafka_batches(payload):
        h, rows = decode_batch(payload, pos)
        section = _packb([[r.offset_delta, r.timestamp_delta, r.key, r.value,
                           [list(x) for x in r.headers]] for r in rows])
        native_codec = 0
        if h.attributes & _COMPRESSION_MASK:
            section, native_codec = lz4.frame.compress(section), 1
        out.append(build_raw_batch(
            section, base_offset=h.base_offset, last_offset_delta=h.last_offset_delta,
            record_count=h.record_count, first_timestamp=h.first_timestamp,
            max_timestamp=h.max_timestamp,
            attributes=(h.attributes & ~_COMPRESSION_MASK) | native_codec,
            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, leader_epoch=h.partition_leader_epoch))
    return b"".join(out)


def native_to_kafka(data: bytes | memoryview) -> bytes:
    """Every whole rafka batch of ``data`` (a fetch's bytes) as an uncompressed Kafka batch;
    a trailing partial batch is dropped (Kafka clients skip one too)."""
    out: list[bytes] = []
    pos, end = 0, len(data)
    while end - pos >= HEADER_SIZE:
        h = parse_header(data, pos)
        if pos + h.size > end:
            break
        if h.attributes & CONTROL_BIT:
            ctype = control_type(data, pos)
            epoch = control_coordinator_epoch(data, pos)
            rows = [KafkaRow(0, 0, _CONTROL_KEY.pack(0, ctype), _CONTROL_VALUE.pack(0, epoch), [])]
        else:
            rows = [KafkaRow(od, td, k, v, [(hk, hv) for hk, hv in hs] if hs else [])
                    for od, td, k, v, hs in decode_raw_records(data, pos, h)]
        out.append(encode_batch(
            rows, first_timestamp=h.first_timestamp, max_timestamp=h.max_timestamp,
            base_offset=h.base_offset, leader_epoch=h.partition_leader_epoch,
            attributes=h.attributes & ~_COMPRESSION_MASK, producer_id=h.producer_id,
            producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
            last_offset_delta=h.last_offset_delta))
        pos += h.size
    return b"".join(out)


