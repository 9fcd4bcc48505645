"""Opening a partition directory: leftovers, clean/unclean start, validation, state rebuild.

Theory of operation: ``recover(log)`` runs once from ``PartitionLog.open``.

1. Leftovers of interrupted work are removed: ``*.cleaned`` (a compaction that did not reach
   its atomic rename — the original ``.log`` is intact), ``*.tmp`` (atomic writes that did
   not reach their rename), ``*.deleted`` (retention's delayed deletes) and index files whose
   ``.log`` is gone.
2. ``.clean_shutdown`` present → clean start: the marker is removed (durably, so a later crash
   is not mistaken for a clean stop) and the index files are trusted; each segment still
   CRC-checks the batches after its last index entry (so the active segment's last batch is
   always checked), and a segment whose indexes fail the sanity checks is fully validated.
   That data was fsynced, so a whole batch failing its CRC there (as in any segment wholly
   below the recovery point) is bit rot, not a torn write: it is kept in place and logged with
   its offset range, the batches after it stay (fetches of its range get CORRUPT_MESSAGE).
3. No marker → unclean start: every batch from the start of the segment holding the
   checkpointed recovery point to the end is validated (header sanity, offsets increasing,
   whole, CRC-32C) while its indexes are rebuilt and leader epochs re-learned from the
   headers.  At the first bad or partial batch the segment is truncated there and every later
   segment deleted; what was dropped (bytes, offset range, reason) is logged at WARNING on
   logger ``rafka.log``.  The validated data is then fsynced and becomes the recovery point.
   Nothing here compares a segment with ``segment.bytes``: a segment whose one batch is
   larger than that (``log/partition_log.py``, "Batches larger than segment.bytes") is
   validated like any other, and a torn one is a partial batch, cut like any other.
4. Producer state and the aborted-transaction indexes are rebuilt together
   (``rebuild_producer_state``): the newest snapshot at or below ``rebuild_from`` plus a
   header scan from there; every index entry at or after the scan's start is dropped and
   re-derived from the markers the scan meets.  ``rebuild_from`` is the log end offset after
   a clean stop (nothing is rescanned when the close snapshot is there), the base of the first
   validated segment after an unclean one (what was not fsynced may be missing or torn), and
   at most the base of any segment whose ``.txnindex`` file is missing.  The epoch cache is
   trimmed to ``[log_start, log_end)``.
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
from typing import TYPE_CHECKING

from . import retention
from .batch import (
    HEADER_SIZE,
    CorruptBatchError,
    control_coordinator_epoch,
    control_type,
    parse_header,
)
from .segment import ScanResult, Segment, log_damage
from .txn_index import AbortedTxn

if TYPE_CHECKING:
    from .partition_log import PartitionLog

__all__ = ["recover", "rebuild_producer_state"]

logger = logging.getLogger("rafka.log")
_SEGMENT_RE = re.compile(r"^\d{20}\.log$")
_INDEX_RE = re.compile(r"^(\d{20})\.(index|timeindex|txnindex)$")


def _remove_leftovers(log: PartitionLog) -> None:
    d = log.directory
    for p in d.iterdir():
        name = p.name
        if name.endswith((".cleaned", ".tmp", ".deleted")):
            logger.info("%s: removing leftover %s", d, name)
            p.unlink(missing_ok=True)
            continue
        m = _INDEX_RE.match(name)
        if m and not (d / f"{m.group(1)}.log").exists():
            logger.info("%s: removing orphan index %s", d, name)
            p.unlink(missing_ok=True)


def _read_recovery_point(log: PartitionLog) -> int:
    from .partition_log import RECOVERY_POINT_FILE
    try:
        return max(0, int((log.directory / RECOVERY_POINT_FILE).read_text().strip()))
    except (OSError, ValueError):
        return 0


def recover(log: PartitionLog) -> None:
    from .partition_log import CLEAN_SHUTDOWN_FILE
    d, cfg = log.directory, log.config
    _remove_leftovers(log)
    marker = d / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    if clean:
        marker.unlink()
        log._fsync_dir()
    rp = _read_recovery_point(log)
    paths = sorted(p for p in d.iterdir() if _SEGMENT_RE.match(p.name))
    segments = [Segment.open_existing(p, cfg) for p in paths]
    now = log._now_ms()
    fresh = not segments
    if fresh:
        segments = [Segment.create(d, 0, cfg, now)]
        log._fsync_dir()
    bases = [s.base_offset for s in segments]
    first_unsafe = len(segments) if clean else max(0, bisect_right(bases, rp) - 1)
    log._segments, log._bases = segments, bases
    validated: list[Segment] = []

    def learn_epoch(h) -> None:
        if h.partition_leader_epoch >= 0:
            log.epochs.assign(h.partition_leader_epoch, h.base_offset)

    for i, seg in enumerate(segments):
        if i < first_unsafe:
            if seg.load_indexes():
                continue
            logger.info("%s: rebuilding indexes of %s", d, seg.path.name)
        # below the recovery point (or after a clean stop) the data was fsynced: a bad CRC
        # there is bit rot in the middle, kept in place and named, not a torn tail to cut
        res = seg.scan(validate=True, on_batch=learn_epoch if i >= first_unsafe else None,
                       keep_bad_crc=i < first_unsafe)
        log_damage(seg, res)
        validated.append(seg)
        first = seg.first_batch_header()
        seg.roll_base_ms = first.max_timestamp if first is not None else now
        if res.problem is not None:
            _drop_tail(log, i, res)
            break
    segments = log._segments  # _drop_tail may have shortened it
    rebuild_from = segments[first_unsafe].base_offset if first_unsafe < len(segments) else None
    for seg in segments:
        if not seg.txn_index.load():
            logger.info("%s: %s is missing; rebuilt from the batches", d,
                        seg.txn_index.path.name)
            seg.txn_index.create()
            rebuild_from = seg.base_offset if rebuild_from is None else min(
                rebuild_from, seg.base_offset)
    log._bases = [s.base_offset for s in segments]
    log._log_start_offset = segments[0].base_offset
    for seg in validated:
        seg.flushed_size = 0
    log._recovery_point = 0
    log.flush()  # fsyncs the validated segments, checkpoints recovery point = log end
    leo = log.log_end_offset
    deleted_to = retention.read_log_start(log)  # DeleteRecords moved it mid-segment
    if deleted_to is not None and deleted_to > log._log_start_offset:
        log._log_start_offset = min(deleted_to, leo)
    log.epochs.truncate_from_end(leo)
    log.epochs.truncate_from_start(log.log_start_offset)
    rebuild_producer_state(log, rebuild_from)
    logger.info("%s: opened (%s start), offsets [%d, %d), %d segment(s), %d validated", d,
                "new" if fresh else "clean" if clean else "unclean", log.log_start_offset, leo, len(segments),
                len(validated))


def _drop_tail(log: PartitionLog, i: int, res: ScanResult) -> None:
    """Truncate segment ``i`` at its last good batch and delete every later segment."""
    seg = log._segments[i]
    later = log._segments[i + 1:]
    first_dropped = res.next_offset
    end_guess = first_dropped
    pos = res.valid_size  # how far do the dropped batches claim to reach?
    while pos + HEADER_SIZE <= res.file_size:  # (the whole dropped tail, not just its first batch)
        try:
            h = parse_header(seg.pread(HEADER_SIZE, pos))
        except CorruptBatchError:
            break
        if h.next_offset <= end_guess and pos > res.valid_size:
            break
        end_guess = max(end_guess, h.next_offset)
        pos += h.size
    dropped = res.file_size - res.valid_size
    for s in later:
        s.scan(validate=False)
        end_guess = max(end_guess, s.next_offset, s.base_offset)
        dropped += os.fstat(s.fd).st_size
    os.ftruncate(seg.fd, res.valid_size)
    os.fdatasync(seg.fd)
    for s in later:
        s.delete_files()
    log._fsync_dir()
    del log._segments[i + 1:]
    rng = (f"offsets [{first_dropped}, {end_guess})" if end_guess > first_dropped
           else f"offsets >= {first_dropped} (no whole batch header in the dropped bytes)")
    logger.warning(
        "%s: recovery dropped %d bytes, %s: %s truncated at byte %d (%s)%s; log end offset "
        "is now %d", log.directory, dropped, rng, seg.path.name, res.valid_size, res.problem,
        f"; deleted {len(later)} later segment(s) {[s.base_offset for s in later]}"
        if later else "", first_dropped)


def rebuild_producer_state(log: PartitionLog, rebuild_from: int | None = None) -> None:
    """Producer state = newest snapshot ≤ min(log end, ``rebuild_from``) + the batch headers
    after it; the aborted-transaction index entries from that point on are re-derived."""
    ps = log.producer_state
    leo = log.log_end_offset
    ps.delete_snapshots_above(leo)
    snap = ps.load_latest_snapshot(leo if rebuild_from is None else min(leo, rebuild_from))
    start = snap if snap is not None else log.log_start_offset
    for seg in log.segments:
        seg.txn_index.truncate(start)
    now = log._now_ms()  # the scanned batches carry no broker time: seen now (producer_state.py)
    for seg, pos, h in log.iter_headers(start):
        if h.base_offset < start or h.producer_id < 0:
            continue
        mtype, cepoch = None, -1
        if h.is_control:
            try:
                raw = seg.pread(h.size, pos)
                mtype = control_type(raw)
                cepoch = control_coordinator_epoch(raw)
            except CorruptBatchError as exc:  # bit rot kept in place (see recover)
                logger.warning("%s: unreadable transaction marker at offset %d: %s",
                               log.directory, h.base_offset, exc)
                continue
        done = ps.update(h, h.base_offset, marker_type=mtype, coordinator_epoch=cepoch,
                         now_ms=now)
        if done is not None and done.aborted:
            seg.txn_index.append(AbortedTxn(done.producer_id, done.first_offset,
                                            done.last_offset, done.last_stable_offset))
    ps.trim()
