"""Retention of a partition log: delete whole old segments by time and by size.

Theory of operation: ``enforce_retention`` (called by the broker's housekeeping through
``PartitionLog.enforce_retention``) first purges files whose delayed delete is due and expires
idle producers, then — on ``cleanup.policy=delete`` topics — counts the oldest non-active
segments whose max timestamp is older than ``retention.ms`` and those that keep the log above
``retention.bytes``, and deletes the larger prefix.  The prefix never reaches past the first
unstable offset: the segment holding an open transaction's first batch stays (so does the last
stable offset's data, and the marker that later closes it can still be matched).  The active
segment is never deleted.

Deleting is renaming: each file of a doomed segment (``.log`` and its indexes) becomes
``<name>.deleted`` under both log locks and is unlinked ``file.delete.delay.ms`` later (a reader
holding a dup'ed fd keeps reading meanwhile); recovery removes leftovers.  The pending list is
bounded (``_MAX_PENDING_DELETES``, oldest purged early).

Deleting records (``advance_log_start``, Kafka's DeleteRecords): the log start offset moves to
an offset inside the log, possibly mid-segment.  It is written to ``LOG_START_FILE`` (fsynced)
*before* anything is deleted, so recovery, which otherwise starts the log at its first
segment's base, restarts it there; then the whole segments below it are deleted as retention
deletes them.  Readers below the new start get OFFSET_OUT_OF_RANGE (``log_reader.py``), and a
fetch from the start gets the whole batch holding it, older records included, as Kafka's does.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from .errors import StorageError
from .index import write_file_atomic

if TYPE_CHECKING:
    from .partition_log import PartitionLog

__all__ = ["enforce_retention", "purge_deleted", "advance_log_start", "DELETED_SUFFIX",
           "LOG_START_FILE"]

DELETED_SUFFIX = ".deleted"
LOG_START_FILE = "log-start-offset-checkpoint"
_MAX_PENDING_DELETES = 1024
logger = logging.getLogger("rafka.log")


def enforce_retention(log: PartitionLog, now_ms: int | None = None) -> list[int]:
    """Delete old segments by retention.ms / retention.bytes; returns their base offsets."""
    log._check_usable()
    now = log._now_ms() if now_ms is None else now_ms
    purge_deleted(log, now)
    log.producer_state.expire(now)
    cfg = log.config
    if not cfg.delete:
        return []
    segments = log._segments
    candidates = segments[:-1]
    k_time = 0
    if cfg.retention_ms >= 0:
        horizon = now - cfg.retention_ms
        while k_time < len(candidates) and candidates[k_time].max_timestamp < horizon:
            k_time += 1
    k_size = 0
    if cfg.retention_bytes >= 0:
        excess = log.size_bytes - cfg.retention_bytes
        while k_size < len(candidates) and excess - candidates[k_size].size >= 0:
            excess -= candidates[k_size].size
            k_size += 1
    k = max(k_time, k_size)
    fuo = log.first_unstable_offset()
    if fuo is not None:
        while k > 0 and segments[k].base_offset > fuo:
            k -= 1
    if k == 0:
        return []
    return _delete_oldest(log, k, now, "retention")


def advance_log_start(log: PartitionLog, offset: int, now_ms: int | None = None) -> int:
    """Move the log start offset up to ``offset`` (at most the log end), delete the whole
    segments below it; returns the log start offset after (never lower than before)."""
    log._check_usable()
    offset = min(offset, log.log_end_offset)
    if offset <= log._log_start_offset:
        return log._log_start_offset
    write_log_start(log, offset)
    with log._lock:
        log._log_start_offset = offset
    segments = log._segments
    k = 0
    while k < len(segments) - 1 and segments[k + 1].base_offset <= offset:
        k += 1
    now = log._now_ms() if now_ms is None else now_ms
    if k:
        _delete_oldest(log, k, now, "delete records")
    else:
        log.epochs.truncate_from_start(offset)
        logger.info("%s: delete records: log start offset now %d", log.directory, offset)
    return log._log_start_offset


def write_log_start(log: PartitionLog, offset: int | None) -> None:
    """Checkpoint the log start offset (None: remove it, the first segment's base rules)."""
    path = log.directory / LOG_START_FILE
    try:
        if offset is None:
            path.unlink(missing_ok=True)
        else:
            write_file_atomic(path, f"{offset}\n".encode(), fsync=True)
    except OSError as exc:
        raise StorageError("cannot write the log start offset checkpoint", exc) from exc


def read_log_start(log: PartitionLog) -> int | None:
    """The checkpointed log start offset, or None (missing or unreadable: ignored)."""
    try:
        return int((log.directory / LOG_START_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _delete_oldest(log: PartitionLog, k: int, now: int, why: str) -> list[int]:
    with log._flush_lock, log._lock:
        doomed = log._segments[:k]
        del log._segments[:k]
        del log._bases[:k]
        log._log_start_offset = max(log._log_start_offset, log._segments[0].base_offset)
        paths = []
        for seg in doomed:
            seg.close()
            for p in seg.file_paths:
                if p.exists():
                    dead = p.with_name(p.name + DELETED_SUFFIX)
                    os.replace(p, dead)
                    paths.append(dead)
        log._pending_deletes.append((now + log.config.file_delete_delay_ms, paths))
        while len(log._pending_deletes) > _MAX_PENDING_DELETES:
            for p in log._pending_deletes.popleft()[1]:
                p.unlink(missing_ok=True)
        purge_deleted(log, now)
    log.epochs.truncate_from_start(log._log_start_offset)
    logger.info("%s: %s deleted segments %s; log start offset now %d", log.directory, why,
                [s.base_offset for s in doomed], log._log_start_offset)
    return [s.base_offset for s in doomed]


def purge_deleted(log: PartitionLog, now: int | None) -> None:
    """Unlink the ``.deleted`` files whose delay is over (all of them when ``now`` is None)."""
    pending = log._pending_deletes
    while pending and (now is None or pending[0][0] <= now):
        for p in pending.popleft()[1]:
            p.unlink(missing_ok=True)
