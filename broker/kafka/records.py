"""Kafka record batches (magic 2) at the Kafka listener's edge: validated and stored as they
arrived on produce, handed back as they were stored on fetch.

Theory of operation
-------------------
A Kafka v2 batch and a rafka batch share the 61-byte header, field for field (``log/batch.py``
was laid out after Kafka's), and differ only in the records section: Kafka writes each record
as varints, optionally gzip / snappy / lz4 / zstd compressed (``log/kafka_section.py``), rafka
writes one msgpack array, optionally lz4. The CRC-32C covers bytes ``[21, end)`` in both, so the
magic byte (offset 16) is outside it.

Storage design (docs/kafka-compat.md "Storage design"): a batch is stored in the format it
arrived in. ``accept_produce`` checks each Kafka batch of a produce exactly as the native
produce path checks a native one — header, framing, CRC-32C, a known codec — and never reads
its records; it then sets the magic byte to ``log.batch.KAFKA_MAGIC`` (no CRC change), which
tells every later reader the section is Kafka's. Producer id / epoch / base sequence, the
transactional bit, timestamps and offset deltas are header fields, so idempotence,
transactions, retention and LogAppendTime stamping see exactly what they see for a native
batch. ``to_kafka`` serves a Kafka fetch: a stored Kafka batch is copied out with its magic set
back to 2 (one byte per batch, no record work, the codec it was produced with); a native batch
(a native producer's, or a transaction marker) is converted to an uncompressed Kafka batch
(``native_to_kafka``: markers become Kafka control records, key ``int16 version, int16 type``,
value ``int16 version, int32 coordinator epoch``). Native readers decode Kafka sections
themselves (``log.batch.unpack_section``), so the broker never converts for them.

Errors are ``KafkaBatchError`` (a ``CorruptBatchError``, so the produce path answers
``CORRUPT_MESSAGE``), with ``KafkaCrcError`` for a CRC-32C mismatch and
``UnsupportedCompressionError`` for a codec outside 0-4. ``decode_batch`` / ``encode_batch`` /
``kafka_to_native`` read and write whole Kafka batches for tests and benchmarks.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import lz4.frame
import msgpack
from crc32c import crc32c
from rafka.log.batch import (
    CONTROL_BIT,
    HEADER_SIZE,
    KAFKA_MAGIC,
    MAGIC,
    BatchHeader,
    as_kafka_section,
    build_raw_batch,
    control_coordinator_epoch,
    control_type,
    parse_header,
)
from rafka.log.kafka_section import (
    _XERIAL_MAGIC,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    KafkaSectionError,
    UnsupportedCodecError,
    compress,
    decode_rows,
    decompress,
    encode_rows,
)

__all__ = [
    "KafkaBatchError", "KafkaCrcError", "UnsupportedCompressionError",
    "COMPRESSION_NONE", "COMPRESSION_GZIP", "COMPRESSION_SNAPPY", "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD", "KafkaRow", "KafkaBatch",
    "decode_batch", "iter_kafka_batches", "encode_batch", "encode_records", "compress",
    "decompress", "accept_produce", "to_kafka", "kafka_to_native", "native_to_kafka",
]

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = (
    CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)
_COMPRESSION_MASK = 0x07
_CRC_START = 21
_MAGIC_AT = 16
_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT32 = struct.Struct(">i")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_ = _XERIAL_MAGIC  # re-exported for tests

KafkaBatchError = KafkaSectionError
"""A Kafka record batch that cannot be read (a ``CorruptBatchError``)."""
UnsupportedCompressionError = UnsupportedCodecError
"""Attributes name a compression codec that is not gzip, snappy, lz4 or zstd."""


class KafkaCrcError(KafkaBatchError):
    """The batch's CRC-32C does not match its bytes."""


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


# --------------------------------------------------------------------------- produce: accept


def _header(buf: bytes | bytearray | memoryview, pos: int) -> BatchHeader:
    if len(buf) - pos < HEADER_SIZE:
        raise KafkaBatchError(f"truncated batch header at byte {pos}")
    f = _HEADER.unpack_from(buf, pos)
    if f[3] != 2:
        raise KafkaBatchError(f"record batch magic {f[3]} at byte {pos} (only magic 2 is served)")
    if f[1] < HEADER_SIZE - 12 or pos + 12 + f[1] > len(buf):
        raise KafkaBatchError(f"bad batch_length {f[1]} at byte {pos}")
    return BatchHeader._make(f)


def _check(buf: bytes | bytearray | memoryview, pos: int, check_crc: bool = True) -> BatchHeader:
    """Header, framing, CRC and codec of the Kafka batch at ``pos`` — what the broker checks
    of a native batch; the records are not read."""
    h = _header(buf, pos)
    if check_crc:
        with memoryview(buf) as mv:
            if crc32c(mv[pos + _CRC_START:pos + h.size]) != h.crc:
                raise KafkaCrcError(f"CRC-32C mismatch in the batch at byte {pos}")
    if h.record_count < 0 or h.last_offset_delta < 0:  # after the CRC: a flipped bit is a CRC error
        raise KafkaBatchError(f"negative record count or offset delta at byte {pos}")
    if h.attributes & _COMPRESSION_MASK > CODEC_ZSTD:
        raise UnsupportedCompressionError(
            f"unknown compression codec {h.attributes & _COMPRESSION_MASK}")
    return h


def accept_produce(payload: bytes | bytearray | memoryview, *,
                   check_crc: bool = True) -> bytearray:
    """A produce's Kafka batches, checked (``_check``) and tagged ``KAFKA_MAGIC`` for storage:
    the same bytes otherwise. Raises ``KafkaBatchError`` / ``KafkaCrcError`` /
    ``UnsupportedCompressionError``; nothing of the payload is stored then. ``check_crc=False``:
    the caller appends through ``PartitionLog.append``, which checks every batch's CRC itself
    (``CORRUPT_MESSAGE``) — one CRC pass per batch, as for a native produce."""
    out = bytearray(payload)
    pos, end = 0, len(out)
    while pos < end:
        h = _check(out, pos, check_crc)
        out[pos + _MAGIC_AT] = KAFKA_MAGIC & 0xFF
        pos += h.size
    return out


# --------------------------------------------------------------------------- fetch: serve


def to_kafka(data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
    """Every whole stored batch of ``data`` (a fetch's bytes) as a Kafka v2 batch: a stored
    Kafka batch byte for byte with magic 2 again; a native one converted (``native_to_kafka``).
    A trailing partial batch is dropped (Kafka clients skip one too). When ``data`` is a
    ``bytearray`` holding Kafka batches only (the usual fetch of a Kafka-written topic), the
    magic bytes are patched in place and a view of it is returned: no copy — so pass a
    bytearray only when it is the caller's own copy (never the log's memory)."""
    if isinstance(data, bytearray):
        whole = _kafka_only(data)
        if whole is not None:
            _restore_magic(data, 0, whole)
            return memoryview(data)[:whole]
    out = bytearray()
    pos, end = 0, len(data)
    run = -1  # start of the current run of Kafka batches: copied in one slice
    with memoryview(data) as mv:
        while end - pos >= HEADER_SIZE:
            h = parse_header(mv, pos)
            if pos + h.size > end:
                break
            if h.magic == KAFKA_MAGIC:
                if run < 0:
                    run = pos
            else:
                if run >= 0:
                    _copy_kafka(out, mv[run:pos])
                    run = -1
                out += native_to_kafka(mv[pos:pos + h.size])
            pos += h.size
        if run >= 0:
            _copy_kafka(out, mv[run:pos])
    return out


def _kafka_only(data: bytearray) -> int | None:
    """The end of the whole batches of ``data`` when every one is a stored Kafka batch with a
    plausible length; ``None`` otherwise (the general path then converts or names the error)."""
    pos, end = 0, len(data)
    while end - pos >= HEADER_SIZE:
        (length,) = _INT32.unpack_from(data, pos + 8)
        if data[pos + _MAGIC_AT] != KAFKA_MAGIC & 0xFF or length < HEADER_SIZE - 12:
            return None
        if pos + 12 + length > end:
            break
        pos += 12 + length
    return pos


def _copy_kafka(out: bytearray, run: memoryview) -> None:
    """Append a run of stored Kafka batches with each magic byte set back to 2."""
    at = len(out)
    out += run
    _restore_magic(out, at, len(out))


def _restore_magic(buf: bytearray, pos: int, end: int) -> None:
    """Set the magic byte of every stored Kafka batch in ``buf[pos:end]`` back to Kafka's 2."""
    while pos < end:
        buf[pos + _MAGIC_AT] = MAGIC
        pos += 12 + _INT32.unpack_from(buf, pos + 8)[0]


# --------------------------------------------------------------------------- whole batches


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> KafkaBatch:
    """The header and records of the Kafka batch at ``pos`` (CRC checked, decompressed)."""
    h = _check(buf, pos)
    with memoryview(buf) as mv:
        section = decompress(h.attributes & _COMPRESSION_MASK, mv[pos + HEADER_SIZE:pos + h.size])
    rows = [KafkaRow(od, td, k, v, [(hk, hv) for hk, hv in hs])
            for od, td, k, v, hs in decode_rows(section, h.record_count)]
    return KafkaBatch(h, rows)


def iter_kafka_batches(buf: bytes | bytearray | memoryview) -> Iterator[int]:
    """Positions of the whole batches in ``buf``; ``KafkaBatchError`` on a trailing fragment."""
    pos = 0
    while pos < len(buf):
        h = _header(buf, pos)
        yield pos
        pos += h.size


def encode_records(rows: Sequence[KafkaRow]) -> bytes:
    """An uncompressed Kafka records section."""
    return encode_rows(rows)


def encode_batch(rows: Sequence[KafkaRow], *, first_timestamp: int, max_timestamp: int | None = None,
                 base_offset: int = 0, leader_epoch: int = -1, attributes: int = 0,
                 compression: int = COMPRESSION_NONE, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1,
                 last_offset_delta: int | None = None) -> bytes:
    """A Kafka v2 batch of ``rows`` (CRC-32C computed); ``compression`` replaces bits 0-2."""
    section = compress(compression, encode_rows(rows))
    if max_timestamp is None:
        max_timestamp = first_timestamp + max((r.timestamp_delta for r in rows), default=0)
    if last_offset_delta is None:
        last_offset_delta = max((r.offset_delta for r in rows), default=0)
    return build_raw_batch(  # rafka's framing is Kafka's v2 framing (magic 2)
        section, base_offset=base_offset, last_offset_delta=last_offset_delta,
        record_count=len(rows), first_timestamp=first_timestamp, max_timestamp=max_timestamp,
        attributes=(attributes & ~_COMPRESSION_MASK) | compression, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, leader_epoch=leader_epoch)


# --------------------------------------------------------------------------- conversion

_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def kafka_to_native(payload: bytes | memoryview) -> bytes:
    """Every Kafka batch of a produce payload as a rafka (msgpack) batch with the same header
    fields, lz4 when the producer compressed. The broker no longer calls it (batches are
    stored as they arrived: ``accept_produce``); kept as the reference conversion for tests
    and ``bench/kafka_codec.py``'s before/after figures."""
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


def native_to_kafka(data: bytes | bytearray | memoryview) -> bytes:
    """Every whole native (msgpack) batch of ``data`` as an uncompressed Kafka batch with the
    same header fields; a trailing partial batch is dropped. ``to_kafka`` calls it for the
    native batches of a fetch (stored Kafka batches are passed through there). The records
    are converted by the C codec when it is loaded (``log.batch.as_kafka_section``)."""
    out: list[bytes] = []
    pos, end = 0, len(data)
    while end - pos >= HEADER_SIZE:
        h = parse_header(data, pos)
        if pos + h.size > end:
            break
        if h.magic != MAGIC:
            raise KafkaBatchError(f"batch at offset {h.base_offset} is not a native batch")
        if h.attributes & CONTROL_BIT:
            ctype = control_type(data, pos)
            epoch = control_coordinator_epoch(data, pos)
            section = encode_rows([(0, 0, _CONTROL_KEY.pack(0, ctype),
                                    _CONTROL_VALUE.pack(0, epoch), ())])
        else:
            section = as_kafka_section(data, pos, h)
        out.append(build_raw_batch(
            section, base_offset=h.base_offset, last_offset_delta=h.last_offset_delta,
            record_count=h.record_count, first_timestamp=h.first_timestamp,
            max_timestamp=h.max_timestamp, attributes=h.attributes & ~_COMPRESSION_MASK,
            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, leader_epoch=h.partition_leader_epoch))
        pos += h.size
    return b"".join(out)
