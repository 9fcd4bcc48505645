"""Leader-epoch cache: which leader epoch started at which offset (KIP-101 / KIP-279).

Theory of operation: an ordered list of ``(epoch, start_offset)`` entries, both strictly
increasing, persisted as the file ``leader-epoch-checkpoint`` in the partition directory in
Kafka's text format (``0`` version line, entry count line, then ``"<epoch> <start_offset>"``
lines), replaced atomically (temp file, fsync, rename) on every change.  Changes are rare
(leader changes, truncation, retention), so the fsync is affordable on the caller's thread.

``end_offset_for(epoch)`` answers a follower's OffsetsForLeaderEpoch: the largest epoch ≤ the
requested one and the start offset of the next higher epoch (or the log end offset for the
latest epoch); ``(-1, -1)`` when the requested epoch is newer than anything known.  The
follower truncates to that offset and its log can no longer diverge from the leader's.

``PartitionLog`` assigns on leader appends (a new epoch starts at the batch's base offset),
on follower appends (from batch headers), on recovery (from the headers it validates) and
truncates on log truncation and retention.  A failed checkpoint write (disk full, EIO) never
fails the change that caused it (an append already written, a truncation already done, a
leadership already decided): the cache stays right in memory, ``dirty`` is set, a warning is
logged and the next change or ``persist()`` (called by flush and close; it does raise) writes
it.  A stale checkpoint is safe: an unclean recovery re-learns epochs from the batch headers
and trims entries beyond the log end.  The list is bounded by ``max_entries`` (the oldest
entries go first; they only describe data long deleted).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from .errors import StorageError
from .index import write_file_atomic

__all__ = ["LeaderEpochCache", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "CHECKPOINT_NAME"]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_NAME = "leader-epoch-checkpoint"
logger = logging.getLogger("rafka.log")


class LeaderEpochCache:
    def __init__(self, path: Path, log_end_offset: Callable[[], int], *,
                 max_entries: int = 10_000) -> None:
        self.path = path
        self._log_end_offset = log_end_offset
        self.max_entries = max_entries
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self.dirty = False  # the last checkpoint write failed; persist() retries
        self._load()

    # -- queries ----------------------------------------------------------------------------

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._offsets[0]) if self._epochs else None

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """(largest epoch ≤ ``epoch``, end offset of that epoch) as KIP-279."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, self._log_end_offset()
        i = bisect_right(self._epochs, epoch)  # first entry with a higher epoch
        if i == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if i == 0:  # older than anything known
            return epoch, self._offsets[0]
        return self._epochs[i - 1], self._offsets[i]

    def epoch_for_offset(self, offset: int) -> int | None:
        i = bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else None

    # -- changes ----------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed."""
        if epoch < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch and self._offsets[-1] <= start_offset:
            return False
        if self._epochs and (epoch < self._epochs[-1] or start_offset < self._offsets[-1]):
            # Conflicting history (e.g. replaying headers after truncation): the newest
            # assignment wins, as in Kafka, and we say so.
            logger.warning("%s: epoch %d at offset %d conflicts with %s; replacing", self.path,
                           epoch, start_offset, self.entries[-3:])
        keep = len(self._epochs)
        while keep and (self._epochs[keep - 1] >= epoch or self._offsets[keep - 1] >= start_offset):
            keep -= 1
        del self._epochs[keep:]
        del self._offsets[keep:]
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        if len(self._epochs) > self.max_entries:
            del self._epochs[0]
            del self._offsets[0]
        self._write()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there)."""
        i = bisect_right(self._offsets, end_offset - 1)
        if i < len(self._offsets):
            del self._epochs[i:]
            del self._offsets[i:]
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop older epochs, keep the one covering it."""
        i = bisect_right(self._offsets, start_offset) - 1  # entry covering start_offset
        if i < 0 or (i == 0 and self._offsets[0] == start_offset):
            return
        del self._epochs[:i]
        del self._offsets[:i]
        self._offsets[0] = start_offset
        self._write()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._offsets.clear()
            self._write()

    # -- persistence ------------------------------------------------------------------------

    def _write(self) -> None:
        """Checkpoint after an in-memory change: a failure is logged, never raised."""
        try:
            self._write_checkpoint()
        except StorageError as exc:
            logger.warning("%s: leader epoch checkpoint not written (kept in memory, retried "
                           "on the next flush): %s", self.path.parent, exc)

    def _write_checkpoint(self) -> None:
        lines = ["0", str(len(self._epochs))]
        lines += [f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)]
        try:
            write_file_atomic(self.path, ("\n".join(lines) + "\n").encode(), fsync=True)
        except OSError as exc:
            self.dirty = True
            raise StorageError(f"cannot write {self.path}", exc) from exc
        self.dirty = False

    def persist(self) -> None:
        """Retry a checkpoint write that failed earlier (e.g. disk full); no-op if clean.
        Raises ``StorageError`` if it fails again."""
        if self.dirty:
            self._write_checkpoint()

    def _load(self) -> None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        try:
            lines = text.split("\n")
            if lines[0].strip() != "0":
                raise ValueError(f"unknown version {lines[0]!r}")
            n = int(lines[1])
            epochs, offsets = [], []
            for line in lines[2:2 + n]:
                e, o = line.split()
                epochs.append(int(e))
                offsets.append(int(o))
            if len(epochs) != n or any(a >= b for a, b in zip(epochs, epochs[1:], strict=False)) \
                    or any(a >= b for a, b in zip(offsets, offsets[1:], strict=False)):
                raise ValueError("entries are not strictly increasing")
        except (ValueError, IndexError) as exc:
            logger.error("%s is unreadable (%s); starting with an empty epoch cache", self.path,
                         exc)
            os.replace(self.path, self.path.with_name(self.path.name + ".corrupt"))
            return
        self._epochs, self._offsets = epochs, offsets
