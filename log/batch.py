"""Record batch codec (docs/internals.md section 1).

Theory of operation: a batch is a 61-byte big-endian header in Kafka v2 field order followed by
the records section, one msgpack array of ``[offset_delta, timestamp_delta, key, value,
headers]`` records, lz4.frame-compressed as a whole when attributes bits 0-2 say 1.  The CRC-32C
covers bytes ``[21, end)`` — everything from ``attributes`` on — so the leader can ``stamp`` the
base offset and leader epoch (bytes 0-16) without recomputing it.  Stamping ``max_timestamp``
for LogAppendTime topics *does* touch the covered range: ``stamp_log_append_time`` rewrites the
field and recomputes the CRC (one crc32c pass, ~29 GB/s).

The broker only calls ``parse_header``, ``crc_ok``, ``stamp`` and ``iter_batches``: whole
batches, never records.  ``build_batch`` / ``build_batch_rows`` (producers) pack the record
list with one ``Packer.pack`` call; ``decode_records`` (consumers, compaction) unpacks it with one
``unpackb``.  With LogAppendTime every record's timestamp is the batch ``max_timestamp``.

C accelerator (``log/_codec.c``, chosen at import by ``log/speedups.py``; ``RAFKA_NO_SPEEDUPS=1``
forces the pure path): ``build_batch_rows`` packs with ``_codec.pack_batch`` (the same bytes as
msgpack's ``Packer``; records a producer batch packed as they came, ``_codec.pack_record``, are
copied behind the array header), and ``decode_columns`` turns a ``records_section`` into column buffers
for the columnar consumer. Input outside the C subset goes through msgpack, so both paths give
the same batches, records and ``CorruptBatchError`` errors.

Two records-section formats (docs/kafka-compat.md "Storage design"): magic 2 is the msgpack
section above; magic ``KAFKA_MAGIC`` (-2) is a Kafka v2 records section (varint records,
compressed with Kafka's codecs 0-4) stored exactly as a Kafka client produced it through the
Kafka listener. Both formats share the header and the CRC range ``[21, end)``, and the magic
byte (offset 16) lies outside the CRC, so the listener tags a Kafka batch by rewriting that one
byte — no CRC pass, no record touched — and a Kafka fetch writes 2 back. Why not one stored
format: either protocol would then pay a per-record conversion on every produce (~8 µs/record
in Python for Kafka batches); with the tag, only a reader of the *other* protocol converts,
and the native reader does it in the client. So every reader of records here is
format-blind: ``records_section`` decompresses either codec set, ``unpack_section`` gives the
same rows for both (``kafka_section.decode_rows``), the C decoders take ``kafka=True``,
``pack_section`` writes kept records back in the batch's own format (compaction), and
``as_kafka_section`` turns either into a Kafka section (the listener's fetch of a native
batch). Header-only code (offsets, producer state, transactions, retention, LogAppendTime
stamping, recovery, replication) does not care which format a batch holds.

Transactions (docs/transactions.md): attributes bit 4 (``0x10``) marks a *transactional* batch
(an idempotent batch inside a transaction), bit 5 (``0x20``) a *control* batch — a transaction
marker written by a coordinator: one record, key msgpack ``[0, type]`` (0 ABORT, 1 COMMIT),
value msgpack ``[coordinator_epoch]``, base sequence -1, both bits set.  ``control_type`` reads
the type back; everything else treats a marker as an ordinary batch (``decode_records`` works
on it, consumers skip it by its header).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator, Sequence
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

import lz4.frame
import msgpack
from crc32c import crc32c

from . import kafka_section as _ks
from .errors import CorruptBatchError
from .speedups import Unsupported
from .speedups import codec as _c

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "KAFKA_MAGIC",
    "COMPRESSION_NONE",
    "COMPRESSION_LZ4",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TRANSACTIONAL_BIT",
    "CONTROL_BIT",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "BatchHeader",
    "Record",
    "CorruptBatchError",
    "parse_header",
    "build_batch",
    "build_batch_rows",
    "segment_rows",
    "packed_rows",
    "frame_packed",
    "PACKED_ROOM",
    "build_raw_batch",
    "build_control_batch",
    "control_type",
    "control_coordinator_epoch",
    "stamp",
    "stamp_log_append_time",
    "crc_ok",
    "iter_batches",
    "decode_records",
    "decode_raw_records",
    "records_section",
    "unpack_section",
    "decode_columns",
    "decode_records_c",
    "pack_section",
    "as_kafka_section",
]

HEADER_SIZE = 61
MAGIC = 2
KAFKA_MAGIC = -2  # a Kafka v2 records section, stored as it arrived (module docstring)
COMPRESSION_NONE = 0
COMPRESSION_LZ4 = 1
TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_CRC_START = 21
_MIN_BATCH_LENGTH = HEADER_SIZE - 12
_COMPRESSIONS = {"none": COMPRESSION_NONE, "lz4": COMPRESSION_LZ4}
_COMPRESSION_NAMES = {v: k for k, v in _COMPRESSIONS.items()}
_KAFKA_COMPRESSION_NAMES = _ks.CODEC_NAMES

_HEADER = struct.Struct(">qiibIhiqqqhii")
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. record_count, bytes [21, 61)
_HEAD = struct.Struct(">qiibI")  # base_offset .. crc, bytes [0, 21)
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_LENGTH_AND_CRC = struct.Struct(">i5xI")  # batch_length, (leader epoch, magic), crc: bytes [8, 21)
assert _HEADER.size == HEADER_SIZE and _HEAD.size + _TAIL.size == HEADER_SIZE


class BatchHeader(NamedTuple):
    """Every field of the fixed batch header, in wire order.

    A named tuple rather than a frozen dataclass: ``parse_header`` builds one per batch on
    every append, follower append and fetch read (~6 per single-record produce on a 3-node
    cluster), and a frozen dataclass's ``__init__`` sets its 13 fields one
    ``object.__setattr__`` at a time — 1.57 µs a header against 0.5 µs from ``struct``'s
    tuple (issue 26). Immutable either way."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + 12

    @property
    def compression(self) -> str:
        names = _KAFKA_COMPRESSION_NAMES if self.magic == KAFKA_MAGIC else _COMPRESSION_NAMES
        return names.get(self.attributes & _COMPRESSION_MASK, "unknown")

    @property
    def is_kafka(self) -> bool:
        """The records section is Kafka's (varint records, Kafka's codecs): magic ``KAFKA_MAGIC``."""
        return self.magic == KAFKA_MAGIC

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


_new_header = tuple.__new__  # BatchHeader from the unpacked fields, without __new__'s arguments


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the header at ``pos`` (not the CRC: see ``crc_ok``)."""
    if len(buf) - pos < HEADER_SIZE or pos < 0:
        raise CorruptBatchError(f"truncated batch header at byte {pos}")
    f = _HEADER.unpack_from(buf, pos)
    if f[3] == MAGIC:
        codecs = _COMPRESSION_NAMES
    elif f[3] == KAFKA_MAGIC:
        codecs = _KAFKA_COMPRESSION_NAMES
    else:
        raise CorruptBatchError(f"bad magic {f[3]} at byte {pos} (expected {MAGIC} or "
                                f"{KAFKA_MAGIC})")
    if f[1] < _MIN_BATCH_LENGTH:
        raise CorruptBatchError(f"bad batch_length {f[1]} at byte {pos}")
    if f[6] < 0 or f[12] < 0 or f[0] < 0:
        raise CorruptBatchError(f"negative offset delta, record count or base offset at byte {pos}")
    if f[5] & _COMPRESSION_MASK not in codecs:
        raise CorruptBatchError(f"unknown compression {f[5] & _COMPRESSION_MASK} at byte {pos}")
    return _new_header(BatchHeader, f)


def crc_ok(buf: bytes | bytearray | memoryview, pos: int = 0) -> bool:
    """True if the batch at ``pos`` is whole and its CRC-32C matches."""
    if len(buf) - pos < HEADER_SIZE:
        return False
    length, stored = _LENGTH_AND_CRC.unpack_from(buf, pos + 8)
    end = pos + 12 + length
    if length < _MIN_BATCH_LENGTH or end > len(buf):
        return False
    # a slice of a view: no copy; the views go with this frame (a bytearray caller may
    # resize its buffer afterwards)
    mv = buf if type(buf) is memoryview else memoryview(buf)
    return crc32c(mv[pos + _CRC_START:end]) == stored


def stamp(buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Write ``base_offset`` and ``partition_leader_epoch``; both lie outside the CRC."""
    _INT64.pack_into(buf, pos, base_offset)
    _INT32.pack_into(buf, pos + 12, leader_epoch)


def stamp_log_append_time(buf: bytearray | memoryview, pos: int, now_ms: int,
                          rest: bytes | bytearray | memoryview | None = None) -> None:
    """Set the LogAppendTime attribute bit and ``max_timestamp = now_ms``, then re-CRC.

    Both fields are inside the CRC range, so this costs one crc32c pass over the batch.
    ``rest``: the batch's bytes after its header when ``buf`` holds only a copy of the header
    (``pos`` must then be 0 and ``buf`` ``HEADER_SIZE`` long): the CRC is continued over it.
    """
    (attrs,) = struct.unpack_from(">h", buf, pos + 21)
    struct.pack_into(">h", buf, pos + 21, attrs | _TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + 35, now_ms)
    (length,) = _INT32.unpack_from(buf, pos + 8)
    with memoryview(buf) as mv:
        if rest is None:
            crc = crc32c(mv[pos + _CRC_START:pos + 12 + length])
        else:
            if pos != 0 or len(mv) != HEADER_SIZE or len(rest) != 12 + length - HEADER_SIZE:
                raise ValueError("stamp_log_append_time: header copy and rest do not match")
            crc = crc32c(rest, crc32c(mv[_CRC_START:HEADER_SIZE]))
        _UINT32.pack_into(buf, pos + 17, crc)


_local = threading.local()


def _packer() -> msgpack.Packer:
    p = getattr(_local, "packer", None)
    if p is None:
        p = _local.packer = msgpack.Packer(use_bin_type=True)
    return p


def build_raw_batch(records_section: bytes, *, base_offset: int, last_offset_delta: int,
                    record_count: int, first_timestamp: int, max_timestamp: int,
                    attributes: int, producer_id: int = -1, producer_epoch: int = -1,
                    base_sequence: int = -1, leader_epoch: int = -1, magic: int = MAGIC) -> bytes:
    """Frame an already packed (and compressed) records section; computes the CRC.
    ``magic``: ``KAFKA_MAGIC`` for a Kafka records section."""
    tail = _TAIL.pack(attributes, last_offset_delta, first_timestamp, max_timestamp,
                      producer_id, producer_epoch, base_sequence, record_count)
    crc = crc32c(records_section, crc32c(tail))
    head = _HEAD.pack(base_offset, HEADER_SIZE - 12 + len(records_section), leader_epoch,
                      magic, crc)
    return b"".join((head, tail, records_section))


def build_batch(records: Sequence[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]],
                *, compression: str = "none", producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, base_offset: int = 0, leader_epoch: int = -1,
                timestamp_type: int = 0, transactional: bool = False) -> bytes:
    """Build a batch from ``(key, value, headers, timestamp_ms)`` tuples; offset deltas 0..n-1.

    ``transactional`` sets attributes bit 4 (a batch of an open transaction)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    ts0 = records[0][3]
    rows = [(i, r[3] - ts0, r[0], r[1], r[2]) for i, r in enumerate(records)]
    return build_batch_rows(rows, ts0, compression=compression, producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=base_sequence,
                            base_offset=base_offset, leader_epoch=leader_epoch,
                            timestamp_type=timestamp_type, transactional=transactional)


_second = itemgetter(1)


Segment = tuple[int, int, "list | None", list, "list | None", int, int]


def segment_rows(first_index: int, ts_delta: int, keys: list | None, values: list,
                 headers: list | None, a: int, k: int) -> Iterator[tuple]:
    """The wire rows a *segment* stands for: records ``a..k-1`` of aligned ``keys`` /
    ``values`` / ``headers`` lists (``None``: all ``None`` / no headers), offset deltas from
    ``first_index``, one timestamp delta — how ``send_batch``'s records wait in a producer batch
    without a tuple each (``client/aio/accumulator.py``)."""
    n = k - a
    return zip(range(first_index, first_index + n), repeat(ts_delta, n),
               repeat(None, n) if keys is None else keys[a:k], values[a:k],
               repeat((), n) if headers is None else headers[a:k], strict=True)


def packed_rows(packed: bytes | bytearray | memoryview, count: int) -> list[tuple]:
    """The wire rows of ``count`` records packed one after another (``_codec.pack_record``,
    ``client/_sendpath.c``) as the producer appends them unpacked: tuples, headers a list of
    ``(str, bytes)`` tuples or ``()``."""
    if count == 0:
        return []
    rows = msgpack.unpackb(_packer().pack_array_header(count) + bytes(packed), use_list=False)
    return [(o, t, k, v, list(h) if h else ()) for o, t, k, v, h in rows]


PACKED_ROOM = HEADER_SIZE + 5  # room before a producer batch's packed records: frame_packed


def frame_packed(buf: bytearray, end: int, count: int, first_timestamp: int, max_dt: int, *,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False) -> memoryview:
    """Frame, in place, the ``count`` records packed at ``buf[PACKED_ROOM:end]`` (a producer
    batch's ``send`` records, greatest timestamp delta ``max_dt``) as an uncompressed batch:
    the array header and the batch header go into the room before them, the CRC is computed
    over the buffer itself. Returns a view of ``buf`` holding the batch (the bytes of
    ``build_batch_rows`` on the same records) — no copy, no allocation; framing again (a new
    sequence) rewrites the same bytes."""
    array_header = _packer().pack_array_header(count)
    records_at = PACKED_ROOM - len(array_header)
    start = records_at - HEADER_SIZE
    buf[records_at:PACKED_ROOM] = array_header
    _TAIL.pack_into(buf, start + _CRC_START, TRANSACTIONAL_BIT if transactional else 0, count - 1,
                    first_timestamp, first_timestamp + max_dt, producer_id, producer_epoch,
                    base_sequence, count)
    with memoryview(buf) as view:
        crc = crc32c(view[start + _CRC_START:end])
        _HEAD.pack_into(buf, start, 0, HEADER_SIZE - 12 + end - records_at, -1, MAGIC, crc)
        return view[start:end]


def build_batch_rows(rows: Sequence[Sequence], first_timestamp: int, *, compression: str = "none",
                     producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                     base_offset: int = 0, leader_epoch: int = -1, timestamp_type: int = 0,
                     transactional: bool = False, segments: list[Segment] | None = None,
                     packed: bytes | bytearray | memoryview | None = None, packed_count: int = 0,
                     packed_max_dt: int = -(2**63)) -> bytes:
    """Build a batch from records already in wire form: first ``packed_count`` records packed
    one after another in ``packed`` (their greatest timestamp delta ``packed_max_dt``: a
    producer batch's ``send`` records, packed as they came), then ``(offset_delta,
    timestamp_delta, key, value, headers)`` rows, then the records of ``segments``
    (``segment_rows``), packed straight from their lists by the C codec; offset deltas
    ``0..n-1``, timestamp deltas against ``first_timestamp``. One pack call over the whole batch
    and no per-record Python code: this is the producer's build."""
    n = packed_count + len(rows) + sum(seg[6] - seg[5] for seg in segments or ())
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    codec = _COMPRESSIONS.get(compression)
    if codec is None:
        raise ValueError(f"unknown compression {compression!r} (none | lz4)")
    max_ts = first_timestamp + max(max(map(_second, rows), default=-(2**63)),
                                   max((seg[1] for seg in segments or ()), default=-(2**63)),
                                   packed_max_dt if packed_count else -(2**63))
    section = None
    if _c is not None:
        try:
            section = _c.pack_batch(rows if type(rows) is list else list(rows), segments or [],
                                    packed if packed_count else b"", packed_count)
        except Unsupported:  # a type outside the C packer's subset: msgpack's own packer
            section = None
    if section is None:
        if segments or packed_count:
            rows = [*(packed_rows(packed, packed_count) if packed is not None else ()), *rows,
                    *(r for seg in segments or () for r in segment_rows(*seg))]
        section = _packer().pack(rows)
    if codec == COMPRESSION_LZ4:
        section = lz4.frame.compress(section)
    attributes = (codec | (_TIMESTAMP_TYPE_BIT if timestamp_type else 0)
                  | (TRANSACTIONAL_BIT if transactional else 0))
    return build_raw_batch(section, base_offset=base_offset, last_offset_delta=n - 1,
                           record_count=n, first_timestamp=first_timestamp, max_timestamp=max_ts,
                           attributes=attributes, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence,
                           leader_epoch=leader_epoch)


def build_control_batch(producer_id: int, producer_epoch: int, commit: bool,
                        coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """A transaction marker: one record, key ``[0, type]``, value ``[coordinator_epoch]``."""
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(f"a marker needs a producer id and epoch, got {producer_id}/"
                         f"{producer_epoch}")
    packer = _packer()
    key = packer.pack([0, CONTROL_COMMIT if commit else CONTROL_ABORT])
    value = packer.pack([coordinator_epoch])
    section = packer.pack([[0, 0, key, value, []]])
    return build_raw_batch(section, base_offset=0, last_offset_delta=0, record_count=1,
                           first_timestamp=timestamp_ms, max_timestamp=timestamp_ms,
                           attributes=TRANSACTIONAL_BIT | CONTROL_BIT, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=-1)


def control_type(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """``CONTROL_ABORT`` or ``CONTROL_COMMIT`` of the marker at ``pos`` (CRC checked).

    Raises ``CorruptBatchError`` when the batch is not a well-formed control batch."""
    h = parse_header(buf, pos)
    if not h.is_control:
        raise CorruptBatchError(f"batch at offset {h.base_offset} is not a control batch")
    recs = decode_raw_records(buf, pos, h)
    try:
        if len(recs) != 1:
            raise ValueError(f"{len(recs)} records")
        if h.magic == KAFKA_MAGIC:  # Kafka's control key: int16 version, int16 type
            version, ctype = struct.unpack(">hh", recs[0][2])
        else:
            version, ctype = msgpack.unpackb(recs[0][2], raw=False)
        if version != 0 or ctype not in (CONTROL_ABORT, CONTROL_COMMIT):
            raise ValueError(f"version {version} type {ctype}")
    except Exception as exc:  # malformed key: any unpack/shape error
        raise CorruptBatchError(f"bad control record in batch at offset {h.base_offset}: "
                                f"{exc}") from exc
    return ctype


def control_coordinator_epoch(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The coordinator epoch a marker carries (its value ``[coordinator_epoch]``); -1 when it
    names none (an operator's abort) or the value is unreadable (the type is what matters)."""
    h = parse_header(buf, pos)
    try:
        value = decode_raw_records(buf, pos, h)[0][3]
        if h.magic == KAFKA_MAGIC:  # Kafka's control value: int16 version, int32 epoch
            (epoch,) = struct.unpack_from(">i", value, 2)
            return int(epoch)
        (epoch,) = msgpack.unpackb(value, raw=False)
        return int(epoch)
    except Exception:  # noqa: BLE001 - an old or foreign marker: no fencing information
        return -1


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each whole batch; stops at a partial one.

    Raises ``CorruptBatchError`` for a malformed header; does not check CRCs.
    """
    pos = 0
    end = len(buf)
    while end - pos >= HEADER_SIZE:
        h = parse_header(buf, pos)
        if pos + h.size > end:
            return
        yield pos, h
        pos += h.size


def records_section(buf: bytes | bytearray | memoryview, pos: int,
                    h: BatchHeader) -> bytes | memoryview:
    """The batch's records section, CRC-checked and decompressed (the msgpack array's bytes).

    Raises ``CorruptBatchError`` on a CRC mismatch or an undecompressable section."""
    if not crc_ok(buf, pos):
        raise CorruptBatchError(f"CRC mismatch in batch at offset {h.base_offset}")
    section = memoryview(buf)[pos + HEADER_SIZE:pos + h.size]
    if h.magic == KAFKA_MAGIC:
        return _ks.decompress(h.attributes & _COMPRESSION_MASK, section)
    if h.attributes & _COMPRESSION_MASK == COMPRESSION_LZ4:
        try:
            return lz4.frame.decompress(section)
        except Exception as exc:  # lz4 raises RuntimeError and others on bad input
            raise CorruptBatchError(f"undecodable records in batch at offset {h.base_offset}: "
                                    f"{exc}") from exc
    return section


def decode_raw_records(buf: bytes | bytearray | memoryview, pos: int = 0,
                       header: BatchHeader | None = None) -> list[list]:
    """The undecorated ``[offset_delta, timestamp_delta, key, value, headers]`` lists.

    Validates the CRC.  Used by compaction, which re-packs what it keeps.
    """
    h = header if header is not None else parse_header(buf, pos)
    return unpack_section(records_section(buf, pos, h), h)


def unpack_section(section: bytes | memoryview, h: BatchHeader, *, use_list: bool = True) -> list | tuple:
    """msgpack's unpacking of a ``records_section``: one list (``use_list=False``: tuple) per
    record inside one list (tuple). Raises ``CorruptBatchError`` when it does not unpack or
    does not hold ``h.record_count`` records. A Kafka section (``h.is_kafka``) gives the same
    rows (``kafka_section.decode_rows``)."""
    if h.magic == KAFKA_MAGIC:
        try:
            return _ks.decode_rows(section, h.record_count, use_list=use_list)
        except CorruptBatchError as exc:
            raise CorruptBatchError(f"undecodable records in batch at offset {h.base_offset}: "
                                    f"{exc}") from exc
    try:
        recs = msgpack.unpackb(section, raw=False, use_list=use_list)
    except Exception as exc:  # msgpack raises a zoo of types on bad input
        raise CorruptBatchError(f"undecodable records in batch at offset {h.base_offset}: "
                                f"{exc}") from exc
    if not isinstance(recs, list if use_list else tuple) or len(recs) != h.record_count:
        raise CorruptBatchError(f"batch at offset {h.base_offset}: record count mismatch")
    return recs


def decode_records_c(section: bytes | memoryview, h: BatchHeader, topic: str, partition: int,
                     cls: type[tuple]) -> list | None:
    """The C codec's consumer records of a records section: ``cls((topic, partition, offset,
    timestamp, timestamp_type, key, value, headers))`` each (``ConsumerRecord``). ``None``
    when the extension is not loaded or the section is outside its subset (see
    ``decode_columns``)."""
    if _c is None:
        return None
    try:
        return _c.decode_records(section, h.record_count, h.base_offset,  # type: ignore[no-any-return]
                                 h.first_timestamp, h.timestamp_type, h.max_timestamp, topic,
                                 partition, cls, h.magic == KAFKA_MAGIC)
    except Unsupported:
        return None


def decode_columns(section: bytes | memoryview, h: BatchHeader) -> tuple | None:
    """The C codec's columns of a records section (``records_section``): ``(offsets,
    timestamps, key_validity, key_offsets, key_data, value_validity, value_offsets,
    value_data, headers)`` — absolute int64 offsets and timestamps, Arrow-style binary keys and
    values (``log/_codec.c``). ``None`` when the extension is not loaded or the section is
    outside its subset (or corrupt): decode it with msgpack then, which gives the pure path's
    records or its error."""
    if _c is None:
        return None
    try:
        return _c.decode_columns(section, h.record_count, h.base_offset,  # type: ignore[no-any-return]
                                 h.first_timestamp, h.timestamp_type, h.max_timestamp,
                                 h.magic == KAFKA_MAGIC)
    except Unsupported:
        return None


def decode_records(buf: bytes | bytearray | memoryview, pos: int = 0) -> list[Record]:
    """Decode every record of the batch at ``pos`` (validates the CRC first)."""
    h = parse_header(buf, pos)
    recs = decode_raw_records(buf, pos, h)
    base = h.base_offset
    try:
        if h.attributes & _TIMESTAMP_TYPE_BIT:
            ts = h.max_timestamp
            return [Record(base + od, ts, k, v, [tuple(x) for x in hs] if hs else [])
                    for od, _td, k, v, hs in recs]
        ts0 = h.first_timestamp
        return [Record(base + od, ts0 + td, k, v, [tuple(x) for x in hs] if hs else [])
                for od, td, k, v, hs in recs]
    except (TypeError, ValueError) as exc:
        raise CorruptBatchError(f"malformed record in batch at offset {base}: {exc}") from exc


def pack_section(h: BatchHeader, rows: Sequence[Sequence]) -> bytes:
    """A records section of ``rows`` (``[offset_delta, timestamp_delta, key, value, headers]``)
    in the format and codec of the batch ``h`` — what compaction writes for the records it
    keeps: msgpack (lz4 when the batch is) for a native batch, Kafka varint records compressed
    with the batch's codec for a Kafka one."""
    codec = h.attributes & _COMPRESSION_MASK
    if h.magic == KAFKA_MAGIC:
        return _ks.compress(codec, _ks.encode_rows(rows))
    section = _packer().pack(list(rows))
    return lz4.frame.compress(section) if codec == COMPRESSION_LZ4 else section


def as_kafka_section(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> bytes:
    """The records of the batch at ``pos`` as an uncompressed Kafka v2 records section (CRC
    checked): a Kafka batch's own section decompressed, a native one converted — by the C
    codec (``_codec.kafka_section``) when loaded, else record by record here; both give the
    same bytes. Raises ``CorruptBatchError`` as ``decode_raw_records`` does."""
    section = records_section(buf, pos, h)
    if h.magic == KAFKA_MAGIC:
        return bytes(section)
    if _c is not None:
        try:
            return _c.kafka_section(section, h.record_count)  # type: ignore[no-any-return]
        except Unsupported:
            pass
    rows = unpack_section(section, h)
    try:
        return _ks.encode_rows(rows)
    except (TypeError, ValueError, AttributeError) as exc:
        raise CorruptBatchError(f"malformed record in batch at offset {h.base_offset}: "
                                f"{exc}") from exc
