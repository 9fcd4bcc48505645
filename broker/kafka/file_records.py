"""A Kafka fetch answer whose stored Kafka batches leave by ``sendfile``, not through memory.

Theory of operation
-------------------
A batch produced through the Kafka listener is stored as it arrived, with one byte changed:
its magic (offset 16, outside the CRC) says ``KAFKA_MAGIC`` (log/batch.py). A Kafka reader
needs that byte back to 2, so the fetch adapter used to read every slice into memory, patch
it, and have kio copy it into the answer: two copies of every byte on top of the socket's
own, where the native fetch ``sendfile``-s the same slice (``broker/server.py``). Measured
with identical raw clients (``bench/kafka_raw_fetch.py``): 1.53× the native broker CPU per
record fetched.

Here a slice of whole stored Kafka batches is sent as the bytes it already is, except the
first 17 bytes of each batch (offset, length, leader epoch, magic), which are read with one
``pread`` each, patched, and written from memory:

    [head of the answer + batch 1's 17 bytes] [sendfile batch 1 from byte 17]
    [batch 2's 17 bytes] [sendfile batch 2 from byte 17] ... [rest of the answer]

* **Which slices.** ``FileRecords.plan`` walks the slice's batch headers. It gives up — and
  the slice is read and converted in memory as before (``materialize``) — for a slice read
  inline (already in memory), a native batch (converted per record for a Kafka reader), or
  batches averaging under ``MIN_AVG_BATCH_BYTES``: each batch costs three syscalls here
  (``pread``, ``write``, ``sendfile``), which for small batches cost more than the copies.
* **The answer around them.** Every fetch answer is built the same way, whatever its
  records are (``frame_with_files``): each partition's records become a unique 16-byte
  sentinel, the rest of the answer is encoded — by a patched template when its shape has one
  (``answer_templates.FetchAnswers``: ~3 µs against kio's ~22 µs), else by kio, so no
  protocol table is written by hand — and each sentinel, found in that output in order, has
  its length prefix (int32 16 before Fetch v12, unsigned varint 17 from v12) replaced by the
  real length and is itself replaced by the records: bytes already in memory, or the parts
  above. The frame's own length is set to the total. A sentinel not found where expected (it
  cannot be in the names or numbers around it, but the check costs nothing) makes the caller
  fall back to kio with every record in memory.
* **Ownership.** A ``FileRecords`` owns the slice's file descriptor from the moment the
  adapter takes it out of the native reply; a ``FileFrame`` owns those of its parts until it
  is written or closed — by the writer when the frame is out, by the listener when the
  connection ends first (``close`` is idempotent).
* **A segment that shrank** between planning and sending (a truncation: only a leader change
  does it) makes ``sendfile`` come up short: ``ShortFileError``, and the listener closes the
  connection — half a frame cannot be taken back, exactly as on the native listener.
* ``sendfile`` on plain TCP only: a TLS stream has no socket to ``sendfile`` to, so its
  answers carry every record in memory (``FileRecords.materialize``), spliced the same way.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
from kio.serial.writers import write_unsigned_varint
from rafka.broker.kafka.records import to_kafka
from rafka.log.batch import HEADER_SIZE, KAFKA_MAGIC, MAGIC

__all__ = ["FileRecords", "FileFrame", "ShortFileError", "MIN_AVG_BATCH_BYTES",
           "MIN_SLICE_BYTES", "take_file_records", "frame_with_files",
           "close_all", "FetchStats"]

MIN_SLICE_BYTES = 64 * 1024  # below it one copy is cheaper than the syscalls per batch
MIN_AVG_BATCH_BYTES = 16 * 1024
_HEAD_BYTES = 17  # base offset, length, leader epoch, magic: what is patched and written
_MAGIC_AT = 16
_LEN = struct.Struct(">i")
_SENTINEL = b"\xfe\xedrafka-file\x00\x00\x00\x00"  # 16 bytes; the last 4 number the partition
_SENDFILE_CHUNK = 1 << 20


@dataclass
class FetchStats:
    """Bytes of records a listener's fetch answers carried, by how they left (``/metrics``:
    ``rafka_kafka_fetch_records_bytes{path="sendfile"|"memory"}``)."""

    sendfile_bytes: int = 0
    memory_bytes: int = 0


class ShortFileError(OSError):
    """A segment ended before the bytes planned from it were sent."""


class FileRecords:
    """One partition's records in a fetch answer: a slice of a segment file, owned."""

    __slots__ = ("fd", "position", "length", "_slice")

    def __init__(self, part: Any) -> None:
        # take the descriptor out of the native reply's slice: reply.close() skips it now
        self.fd, part.fd = part.fd, -1
        self.position, self.length = part.position, part.length
        self._slice = part

    def __len__(self) -> int:  # fetch sessions ask "does this partition carry records?"
        return self.length

    def plan(self) -> list[bytes | tuple[int, int, int]] | None:
        """The parts to send (bytes, or ``(fd, position, length)`` of the file), when every
        batch is a stored Kafka batch and they are large enough; else ``None``."""
        if self.fd < 0:  # closed
            return None
        parts: list[bytes | tuple[int, int, int]] = []
        pos, end, batches = self.position, self.position + self.length, 0
        while pos < end:
            head = os.pread(self.fd, _HEAD_BYTES, pos)
            if len(head) < _HEAD_BYTES or head[_MAGIC_AT] != KAFKA_MAGIC & 0xFF:
                return None
            size = 12 + _LEN.unpack_from(head, 8)[0]
            if size < HEADER_SIZE or pos + size > end:
                return None  # not a batch we can trust: the in-memory path names the error
            batches += 1
            if batches > 4 and (pos + size - self.position) < batches * MIN_AVG_BATCH_BYTES:
                return None
            parts.append(head[:_MAGIC_AT] + bytes((MAGIC,)))
            parts.append((self.fd, pos + _HEAD_BYTES, size - _HEAD_BYTES))
            pos += size
        return parts

    def materialize(self) -> bytes | bytearray | memoryview:
        """The records as Kafka batches in memory (the general path: any slice, any format)."""
        try:
            self._slice.fd = self.fd
            return to_kafka(self._slice.read_bytearray())
        finally:
            self._slice.fd = -1
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def take_file_records(part: Any) -> FileRecords | None:
    """A ``FileRecords`` owning ``part`` (a native fetch reply's file slice) when it is one
    this module may send from the file; ``None`` for bytes, an inline slice (no fd) or a
    small one."""
    if getattr(part, "fd", -1) < 0 or part.length < MIN_SLICE_BYTES:
        return None
    return FileRecords(part)


class FileFrame:
    """A whole answer frame as parts: bytes, and ranges of files sent with ``sendfile``.
    ``write_some`` writes as much as a non-blocking socket takes and remembers where it is."""

    __slots__ = ("parts", "_at", "_done", "_fds")

    def __init__(self, parts: list[bytes | tuple[int, int, int]], owned: list[FileRecords]) -> None:
        self.parts = parts
        self._at = 0  # index of the part being written
        self._done = 0  # bytes of it written
        self._fds = owned

    def write_some(self, sock: Any) -> bool:
        """Write on until the socket would block (``False``) or the frame is out (``True``).

        Each small head goes out as its own packet (``TCP_NODELAY``), which py-spy shows
        costing about what the ``sendfile`` calls cost. ``TCP_CORK`` around the frame and
        ``MSG_MORE`` on the head writes were both tried (session 22) and both stalled the
        answers — ``bench/kafka_raw_fetch.py`` fell from ~2.8M to 12–17k records/s — so
        neither is used; why they stall was not looked into."""
        fd = sock.fileno()
        parts = self.parts
        while self._at < len(parts):
            part = parts[self._at]
            try:
                if isinstance(part, bytes):
                    n = os.write(fd, memoryview(part)[self._done:])
                    left = len(part) - self._done - n
                else:
                    src, pos, length = part
                    n = os.sendfile(fd, src, pos + self._done,
                                    min(length - self._done, _SENDFILE_CHUNK))
                    if n == 0:
                        raise ShortFileError(f"segment ended {length - self._done} bytes early")
                    left = length - self._done - n
            except BlockingIOError:
                return False
            if left:
                self._done += n
            else:
                self._at, self._done = self._at + 1, 0
        return True

    async def send(self, sock: Any) -> None:
        """Write the whole frame to a trio socket, waiting whenever its buffer is full."""
        while not self.write_some(sock):
            await trio.lowlevel.wait_writable(sock)
        self.close()

    def close(self) -> None:
        for fr in self._fds:
            fr.close()
        self._fds = []


def _records_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The partition entries of a fetch answer that carry ``FileRecords``."""
    return [p for t in answer.get("responses") or () for p in t["partitions"]
            if isinstance(p.get("records"), FileRecords)]


def close_all(answer: dict[str, Any]) -> None:
    for p in _records_of(answer):
        p["records"].close()


Piece = bytes | bytearray | memoryview | tuple[int, int, int]  # bytes, or (fd, position, length)


def frame_with_files(answer: dict[str, Any], flexible: bool,
                     encode: Callable[[dict[str, Any]], bytes | memoryview],
                     stats: FetchStats | None = None, *,
                     skeleton: Callable[[dict[str, Any]], bytes | None] | None = None,
                     sendfile: bool = True) -> bytes | bytearray | memoryview | FileFrame:
    """The whole answer frame: a ``FileFrame`` when some partition's records leave from their
    file (``sendfile``: a plain TCP connection), else one buffer. Each partition's records are
    replaced by a sentinel, the rest of the answer is encoded — by ``skeleton`` (a patched
    template, ``answer_templates.FetchAnswers``) when it has one, else by ``encode`` (kio) —
    and the records are spliced in where the sentinels are. ``answer`` is changed."""
    entries = [p for t in answer.get("responses") or () for p in t["partitions"] if p.get("records")]
    pieces: list[tuple[list[Piece], int]] = []
    owned: list[FileRecords] = []
    originals: list[Any] = []
    try:
        for p in entries:
            rec = p["records"]
            parts = rec.plan() if sendfile and isinstance(rec, FileRecords) else None
            if parts is not None:
                owned.append(rec)
                pieces.append((parts, rec.length))
            else:
                if isinstance(rec, FileRecords):
                    rec = rec.materialize()
                pieces.append(([rec], len(rec)))
            originals.append(rec)
            p["records"] = _sentinel(len(pieces) - 1)
        frame = skeleton(answer) if skeleton is not None else None
        out = _splice(bytes(encode(answer)) if frame is None else frame, pieces, flexible, owned)
        if out is None:  # not where it was expected (a bug): answer from memory instead
            for p, rec in zip(entries, originals, strict=True):
                p["records"] = rec.materialize() if isinstance(rec, FileRecords) else rec
            owned.clear()
            out = encode(answer)
        if stats is not None:
            sent = sum(fr.length for fr in owned)
            stats.sendfile_bytes += sent
            stats.memory_bytes += sum(n for _, n in pieces) - sent
        return out
    except BaseException:
        for fr in owned:
            fr.close()
        close_all(answer)
        raise


def _sentinel(i: int) -> bytes:
    return _SENTINEL[:12] + i.to_bytes(4, "big")


def _splice(frame: bytes, pieces: list[tuple[list[Piece], int]], flexible: bool,
            owned: list[FileRecords]) -> bytearray | FileFrame | None:
    """``frame`` with sentinel *i* (and its 16-byte length prefix) replaced by ``pieces[i]``:
    one buffer when every piece is bytes, else a ``FileFrame``; None when a sentinel is not
    where it should be."""
    prefix = bytes((17,)) if flexible else _LEN.pack(16)
    parts: list[bytes | tuple[int, int, int]] = []
    pending = bytearray(4)  # the frame's own length, set at the end
    start = 4
    with memoryview(frame) as view:
        for i, (items, length) in enumerate(pieces):
            at = frame.find(_sentinel(i), start)
            if at < 0 or frame[at - len(prefix):at] != prefix:
                return None
            pending += view[start:at - len(prefix)]
            pending += _compact_len(length + 1) if flexible else _LEN.pack(length)
            for item in items:
                if isinstance(item, tuple):
                    parts.append(bytes(pending))
                    pending = bytearray()
                    parts.append(item)
                else:
                    pending += item
            start = at + len(_SENTINEL)
        pending += view[start:]
    if not parts:
        _LEN.pack_into(pending, 0, len(pending) - 4)
        return pending
    parts.append(bytes(pending))
    total = sum(len(p) if isinstance(p, bytes) else p[2] for p in parts) - 4
    head = bytearray(parts[0])  # type: ignore[arg-type]  # always bytes: the answer's head
    _LEN.pack_into(head, 0, total)
    parts[0] = bytes(head)
    return FileFrame(parts, owned)


def _compact_len(n: int) -> bytes:
    """A compact field's length prefix (unsigned varint of length + 1), by kio's writer."""
    out = io.BytesIO()
    write_unsigned_varint(out, n)
    return out.getvalue()
