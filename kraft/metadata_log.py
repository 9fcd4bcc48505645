"""rafka's own ``@metadata`` log on disk: offset-ordered records, snapshots, CRC recovery.

Theory of operation
-------------------
The Raft engine orders commands; this store is where their *output* lives. Every voter calls
``apply(command, raft_index)`` for each committed command, in order: the state machine
(:class:`~kraft.state_machine.ControllerStateMachine`, owned here) decides, and an accepted
command becomes one frame appended to the current segment with a plain ``write`` (page cache).
``sync()`` fsyncs everything written so far (one fsync covers every command applied since the
previous one: group commit) and advances ``durable_offset``. Readers (``read``) and waiters see
only durable entries, so nothing is reported done or served to a broker before it is on disk.

Files in ``directory``::

    00000000000000000000.log   segment named by the offset of its first record
    00000000000000000042.snap  snapshot of the image after offset 42 (+ dedup state)

Each file is a sequence of frames ``[u32 length][u32 crc32c(payload)][payload]`` (big-endian),
the payload msgpack: a log frame is ``{o: base offset, e: epoch, ri: raft index, rid: request
id, r: [record dicts]}``; a snapshot file holds one frame ``{o, e, ri, dedup, r}``. Snapshots
are written to a temp file, fsynced, renamed, and the directory fsynced.

``maybe_snapshot()`` writes a snapshot every ``snapshot_every_records`` records or
``snapshot_interval_ms`` (if anything changed) — and sooner, once the records since the last
snapshot are at least ``SNAPSHOT_TAIL_MIN`` and at least as many as the image itself holds
(brokers, topics, partitions): a restart replays the snapshot plus that tail, so the tail is
kept no longer than the snapshot (a 900-topic image is ~2,000 records, against a tail of up
to 10,000 after a kill-all run's fence/unfence churn; issue 27, docs/quorum.md "Run E"), and
writing it costs at most one record per record appended. It then rolls to a new segment, and trims: segments
whose records are all covered by the *previous* snapshot are deleted (so fetchers slightly
behind still find records), and older snapshot files too.

Recovery (``open``): the newest snapshot whose CRC holds, then every segment frame in order;
the first frame that is partial, fails its CRC or breaks offset continuity ends the log — the
file is truncated there and later segments are removed (a torn tail after a crash).

Storage failures: a frame that cannot be written (``apply``) or an fsync that fails (``sync``,
the fsync of the current segment at a roll) stops the process through
:func:`kraft.durable_journal.fail_stop` (exit 74, one named line, no traceback): the state
machine has already moved on in memory, and a decision must never be reported done unless it
is on disk. A snapshot that cannot be written (disk full) is optional: the temp file is
removed, a warning logged and the next ``maybe_snapshot`` tries again; the log is unchanged.
Recovery drops a torn tail frame, so the node restarts once space is freed.

Threads: ``apply`` runs on the engine's thread, ``sync``/``maybe_snapshot`` on a flusher
thread, ``read`` on trio's thread; one lock guards the in-memory state, and fsync runs outside
it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
from crc32c import crc32c
from rafka.kraft.durable_journal import fail_stop
from rafka.kraft.quorum import Command, LogEntry, OffsetOutOfRange, ProposeResult, Snapshot
from rafka.kraft.state_machine import DEFAULT_DEDUP_CAPACITY, Applied, ControllerStateMachine
from rafka.log.index import fsync_dir, write_file_atomic
from rafka.metadata import (
    MetadataDelta,
    MetadataImage,
    image_to_records,
    record_from_dict,
    records_to_image,
)

__all__ = ["MetadataLog", "encode_frame", "decode_frames"]

log = logging.getLogger("rafka.kraft.metadata_log")

_HEAD = struct.Struct(">II")
MAX_FRAME_BYTES = 64 * 1024 * 1024


def encode_frame(obj: Any) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return _HEAD.pack(len(payload), crc32c(payload)) + payload


def decode_frames(data: bytes) -> tuple[list[tuple[Any, int]], int]:
    """Whole valid frames from the start of ``data`` as (object, end position) pairs, and the
    byte length they cover (where the first partial or corrupt frame starts)."""
    out: list[tuple[Any, int]] = []
    pos = 0
    while pos + _HEAD.size <= len(data):
        n, crc = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + n
        if n > MAX_FRAME_BYTES or end > len(data):
            break
        payload = data[pos + _HEAD.size : end]
        if crc32c(payload) != crc:
            break
        try:
            out.append((msgpack.unpackb(payload, raw=False, strict_map_key=False), end))
        except Exception:
            break
        pos = end
    return out, pos


# the shortest tail worth a snapshot of its own (module docstring: "maybe_snapshot")
SNAPSHOT_TAIL_MIN = 1000


def _image_size_records(image: MetadataImage) -> int:
    """A lower bound of ``len(image_to_records(image))``, cheap enough to ask per batch."""
    return len(image.cluster.brokers) + sum(1 + len(t.partitions) for t in image.topics.by_id.values())


def _name(offset: int, suffix: str) -> str:
    return f"{offset:020d}{suffix}"


class MetadataLog:
    def __init__(
        self,
        directory: str | Path,
        *,
        snapshot_every_records: int = 10_000,
        snapshot_interval_ms: int = 3_600_000,
        dedup_capacity: int = DEFAULT_DEDUP_CAPACITY,
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.snapshot_every_records = snapshot_every_records
        self.snapshot_interval_ms = snapshot_interval_ms
        self.dedup_capacity = dedup_capacity
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self.entries: list[LogEntry] = []
        self.log_start = 0
        self.durable_offset = -1
        self._written_offset = -1
        self._snapshot: Snapshot | None = None
        self._prev_snapshot_offset = -1
        self._last_snapshot_time = time.monotonic()
        self._fd = -1
        self._segment_base = 0
        self.fsyncs = 0
        self.sm = ControllerStateMachine(dedup_capacity=dedup_capacity)
        self._recover()

    # -- recovery -----------------------------------------------------------------------

    def _snapshots(self) -> list[Path]:
        return sorted(self.dir.glob("*.snap"))

    def _segments(self) -> list[Path]:
        return sorted(self.dir.glob("*.log"))

    def _load_snapshot_file(self, path: Path) -> dict[str, Any] | None:
        frames, _ = decode_frames(path.read_bytes())
        return frames[0][0] if frames else None

    def _recover(self) -> None:
        for tmp in self.dir.glob("*.tmp"):
            tmp.unlink()
        snaps = self._snapshots()
        snap_obj = None
        for path in reversed(snaps):
            snap_obj = self._load_snapshot_file(path)
            if snap_obj is not None:
                break
            path.unlink()  # a torn snapshot: never renamed into place normally; drop it
        if snap_obj is not None:
            self._install_state(snap_obj)
            valid = sorted(p for p in self._snapshots() if int(p.stem) <= snap_obj["o"])
            if len(valid) >= 2:
                self._prev_snapshot_offset = int(valid[-2].stem)
        segments = self._segments()
        first_offset: int | None = None
        # every frame's records fold into one delta, applied once at the end: the image of each
        # frame on the way is never looked at, and building it per frame cost a quarter of a
        # restart's recovery (402 applies for 7.7k records; issue 27, docs/quorum.md "Run E")
        self._recovery_delta = MetadataDelta(self.sm.image)
        for i, seg in enumerate(segments):
            data = seg.read_bytes()
            frames, good = decode_frames(data)
            broken = good < len(data)
            prev_end = 0
            for f, end in frames:
                batch = self._frame_entries(f)
                if first_offset is None and batch:
                    first_offset = batch[0].offset
                expected = (self.entries[-1].offset + 1) if self.entries else None
                if batch and expected is not None and batch[0].offset != expected:
                    broken = True  # offset gap: treat as the end of the log
                    good = prev_end
                    break
                prev_end = end
                self.entries.extend(batch)
                if batch and batch[-1].offset > self._recovery_delta.offset:
                    self._replay(f, batch)
                elif not batch and f.get("ri", 0) > self.sm.last_raft_index:
                    self._replay(f, batch)
            if broken:
                with open(seg, "r+b") as fh:
                    fh.truncate(good)
                    os.fsync(fh.fileno())
                for later in segments[i + 1 :]:
                    later.unlink()
                break
        self.sm.image = self._recovery_delta.apply()
        del self._recovery_delta
        image_offset = self.sm.image.offset
        self.log_start = first_offset if first_offset is not None else image_offset + 1
        if self._snapshot is not None and self.log_start > self._snapshot.offset + 1:
            self.log_start = self._snapshot.offset + 1
            self.entries = [e for e in self.entries if e.offset >= self.log_start]
        self._written_offset = self.durable_offset = image_offset
        self._open_segment(image_offset + 1)

    def _frame_entries(self, f: dict[str, Any]) -> list[LogEntry]:
        return [
            LogEntry(f["o"] + i, f["e"], record_from_dict(r)) for i, r in enumerate(f["r"])
        ]

    def _replay(self, f: dict[str, Any], batch: list[LogEntry]) -> None:
        delta = self._recovery_delta
        for e in batch:
            if e.offset > delta.offset:
                delta.replay(e.record, e.offset, e.epoch)
        self.sm.last_raft_index = max(self.sm.last_raft_index, f.get("ri", 0))
        last = batch[-1].offset if batch else delta.offset
        base = batch[0].offset if batch else -1
        self.sm.remember(f.get("rid", ""), ProposeResult(base, last, f["e"]))

    def _install_state(self, obj: dict[str, Any]) -> None:
        records = [record_from_dict(r) for r in obj["r"]]
        image = records_to_image(records, obj["o"], obj["e"])
        self.sm = ControllerStateMachine(
            image, [tuple(d) for d in obj["dedup"]], obj["ri"], self.dedup_capacity  # type: ignore[misc]
        )
        self._snapshot = Snapshot(obj["o"], obj["e"], records)

    def _open_segment(self, base: int, roll: bool = False) -> None:
        """Open the segment to append to: the last one (recovery), or a new one at ``base``
        (``roll``; reusing the last one if it starts at ``base``, i.e. holds nothing)."""
        path = self.dir / _name(base, ".log")
        existing = self._segments()
        if existing and not roll and int(existing[-1].stem) <= base:
            path = existing[-1]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # before closing
        if self._fd >= 0:  # the old one: a failed open leaves the log writing where it was
            os.close(self._fd)
        self._fd = fd
        self._segment_base = int(path.stem)
        fsync_dir(self.dir)

    # -- the write path -------------------------------------------------------------------

    def holds_raft_index(self, raft_index: int) -> bool:
        """Is the command at this Raft index already recorded here (a replay)? Read without
        the lock: only the tick thread, the one writer of ``last_raft_index``, asks."""
        return 0 < raft_index <= self.sm.last_raft_index

    def apply(self, command: Command, raft_index: int = 0) -> Applied:
        """Apply one committed command; write its frame (no fsync: see ``sync``)."""
        with self._lock:
            if self.holds_raft_index(raft_index):
                return Applied()  # replayed by the engine after a restart: already here
            applied = self.sm.apply(command, raft_index)
            if applied.error is None and applied.result is not None and not applied.result.duplicate:
                base = applied.entries[0].offset if applied.entries else -1
                frame = encode_frame({
                    "o": base, "e": command.epoch, "ri": raft_index, "rid": command.request_id,
                    "r": [e.record.to_dict() for e in applied.entries],
                })
                self._write_frame(frame)
                if applied.entries:
                    self.entries.extend(applied.entries)
                    self._written_offset = applied.entries[-1].offset
            return applied

    def _write_frame(self, frame: bytes) -> None:
        view = memoryview(frame)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:  # the state machine already applied it: fail-stop
            fail_stop("writing the @metadata log", exc)

    def sync(self) -> int:
        """fsync what has been written; returns the new durable offset."""
        with self._io_lock:
            with self._lock:
                target, fd = self._written_offset, self._fd
            if target > self.durable_offset:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    fail_stop("fsync of the @metadata log", exc)
                self.fsyncs += 1
                with self._lock:
                    self.durable_offset = max(self.durable_offset, target)
            return self.durable_offset

    # -- reads ----------------------------------------------------------------------------

    def read(self, from_offset: int, max_records: int) -> list[LogEntry]:
        with self._lock:
            if from_offset < self.log_start:
                raise OffsetOutOfRange(from_offset, self.log_start)
            i = from_offset - self.log_start
            end = min(len(self.entries), i + max_records, self.durable_offset + 1 - self.log_start)
            return self.entries[i:end] if end > i else []

    def latest_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def snapshot_payload(self) -> dict[str, Any]:
        """The current state as a snapshot frame (what ``install`` accepts)."""
        with self._lock:
            image = self.sm.image
            dedup = self.sm.dedup_state()
            ri = self.sm.last_raft_index
        return {
            "o": image.offset, "e": image.epoch, "ri": ri, "dedup": [list(d) for d in dedup],
            "r": [r.to_dict() for r in image_to_records(image)],
        }

    # -- snapshots ------------------------------------------------------------------------

    def maybe_snapshot(self, force: bool = False) -> bool:
        with self._lock:
            image = self.sm.image
            since = image.offset - (self._snapshot.offset if self._snapshot else -1)
            due = since >= self.snapshot_every_records or (
                since > 0
                and (time.monotonic() - self._last_snapshot_time) * 1000 >= self.snapshot_interval_ms
            ) or (since >= SNAPSHOT_TAIL_MIN and since >= _image_size_records(image))
        if not (due or (force and since > 0)):
            return False
        try:
            self.write_snapshot(self.snapshot_payload())
        except OSError as exc:  # optional: the log is unchanged, the next call tries again
            log.warning("%s: metadata snapshot not written (retried later): %s", self.dir, exc)
            return False
        return True

    def _write_snapshot_file(self, obj: dict[str, Any]) -> None:
        # on failure the temp file is removed (space given back) and no snapshot appears
        write_file_atomic(self.dir / _name(obj["o"], ".snap"), encode_frame(obj),
                          fsync=True, sync_dir=True)

    def write_snapshot(self, obj: dict[str, Any]) -> None:
        """Write a snapshot of our own state, roll the segment, trim old segments/snapshots."""
        with self._io_lock:
            self._write_snapshot_file(obj)
            with self._lock:
                prev = self._snapshot.offset if self._snapshot else -1
                self._snapshot = Snapshot(obj["o"], obj["e"], [record_from_dict(r) for r in obj["r"]])
                self._last_snapshot_time = time.monotonic()
                self._prev_snapshot_offset = prev
                try:
                    os.fsync(self._fd)
                except OSError as exc:
                    fail_stop("fsync of the @metadata log", exc)
                self._open_segment(self._written_offset + 1, roll=True)
                self._trim_locked(prev)

    def _trim_locked(self, upto: int) -> None:
        if upto < 0:
            return
        segments = self._segments()
        for seg, nxt in zip(segments, segments[1:], strict=False):
            if int(nxt.stem) - 1 <= upto:  # every record of seg is <= upto
                seg.unlink()
        remaining = self._segments()  # never empty: the current segment is there
        new_start = int(remaining[0].stem)
        if new_start > self.log_start:
            self.entries = [e for e in self.entries if e.offset >= new_start]
            self.log_start = new_start
        for snap in self._snapshots():
            if int(snap.stem) < upto:
                snap.unlink()

    def install(self, obj: dict[str, Any]) -> bool:
        """Reset to a snapshot received from the leader (engine snapshot install). Ignored
        (False) if this log already covers it (``ri`` not newer than ours)."""
        with self._io_lock:
            with self._lock:
                if obj["ri"] <= self.sm.last_raft_index and obj["o"] <= self.sm.image.offset:
                    return False
            self._write_snapshot_file(obj)
            with self._lock:
                self._install_state(obj)
                os.close(self._fd)
                self._fd = -1
                for seg in self._segments():
                    seg.unlink()
                for snap in self._snapshots():
                    if int(snap.stem) != obj["o"]:
                        snap.unlink()
                self.entries = []
                self.log_start = obj["o"] + 1
                self._written_offset = self.durable_offset = obj["o"]
                self._prev_snapshot_offset = -1
                self._open_segment(obj["o"] + 1)
            return True

    def close(self) -> None:
        with self._io_lock, self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1
