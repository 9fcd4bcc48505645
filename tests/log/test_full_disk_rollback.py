"""Disk full on a real (tiny) tmpfs: every path of the log stays consistent and usable.

- a follower append that spans two segments and fails on the second leaves the log exactly as
  before (no half payload: offsets, indexes, epochs as before) and works once space is freed;
- flush and truncation survive a recovery-point / epoch checkpoint that cannot be written;
- close on a full disk closes without raising (no clean-shutdown marker) and the reopened log
  holds every record.
"""

from __future__ import annotations

import os

import pytest
from rafka.chaos_tests.faults.disk import fill, unfill
from rafka.log.batch import decode_records, iter_batches
from rafka.log.config import LogConfig
from rafka.log.errors import StorageError
from rafka.log.partition_log import CLEAN_SHUTDOWN_FILE, PartitionLog

from tests.tmpfs import mounted_tmpfs

from .conftest import make_batch

PAGE = 4096


@pytest.fixture
def tiny_fs(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "256k") as where:
        yield where


def offsets(log):
    out: list[int] = []
    pos = log.log_start_offset
    while pos < log.log_end_offset:  # read_bytes stays within one segment
        data = log.read_bytes(pos, 1 << 20)
        out += [r.offset for p, _ in iter_batches(data) for r in decode_records(data, p)]
        pos = out[-1] + 1
    return out


def leader_bytes(tmp_path, clock, n_batches: int, epoch: int = 3) -> bytes:
    """``n_batches`` ~1.2 KiB batches as a leader stamped them (offsets 0.., epoch)."""
    src = PartitionLog.open(tmp_path / "leader", LogConfig.from_dict({}), now_ms=clock)
    for _ in range(n_batches):
        src.append(make_batch(1, value=b"y" * 1200), epoch)
    data = src.read_bytes(0, 1 << 20)
    src.close()
    return data


def free_one_page(mnt):
    """Fill the volume to the last byte, then give exactly one page back."""
    fill(mnt)
    filler = mnt / ".chaos-disk-filler"
    with open(filler, "r+b") as f:
        f.truncate(max(0, os.fstat(f.fileno()).st_size - PAGE))


def test_follower_append_across_segments_is_all_or_nothing(tiny_fs, tmp_path, clock):
    data = leader_bytes(tmp_path, clock, 4)
    cfg = LogConfig.from_dict({"segment.bytes": str(2 * 1300)})  # 2 batches per segment
    log = PartitionLog.open(tiny_fs / "p", cfg, now_ms=clock)
    segments_before = [s.path.name for s in log.segments]
    free_one_page(tiny_fs)  # room for the first segment's chunk, not for the second's
    with pytest.raises(StorageError) as ei:
        log.append_as_follower(data)
    assert ei.value.disk_full
    # exactly as before: nothing of the payload, no extra segment, no epoch learnt
    assert log.log_end_offset == 0 and offsets(log) == []
    assert [s.path.name for s in log.segments] == segments_before
    assert log.active_segment.path.stat().st_size == 0
    assert log.epochs.latest_epoch is None
    unfill(tiny_fs)
    info = log.append_as_follower(data)
    assert (info.base_offset, info.last_offset) == (0, 3)
    assert offsets(log) == [0, 1, 2, 3] and log.epochs.latest_epoch == 3
    log.close()
    log = PartitionLog.open(tiny_fs / "p", cfg, now_ms=clock)
    assert offsets(log) == [0, 1, 2, 3]
    log.close()


def test_flush_truncate_and_close_survive_a_full_disk(tiny_fs, clock):
    cfg = LogConfig.from_dict({"segment.bytes": str(1 << 20)})
    log = PartitionLog.open(tiny_fs / "p", cfg, now_ms=clock)
    for _ in range(5):
        log.append(make_batch(2, value=b"x" * 100), 1)
    fill(tiny_fs)
    # a new leader epoch (as Partition._become_leader does): its checkpoint cannot be
    # written; the cache keeps it in memory and does not raise
    log.epochs.assign(2, log.log_end_offset)
    assert log.epochs.dirty and log.epochs.latest_epoch == 2
    assert log.flush() == log.log_end_offset  # the checkpoint writes fail; flush does not
    log.truncate_to(6)  # recovery point checkpoint not writable: truncation still done
    assert offsets(log) == list(range(6))
    log.close()  # no raise; no clean marker on a full disk
    assert not (tiny_fs / "p" / CLEAN_SHUTDOWN_FILE).exists()
    assert not list((tiny_fs / "p").glob("*.tmp"))  # failed atomic writes leave nothing
    unfill(tiny_fs)
    log = PartitionLog.open(tiny_fs / "p", cfg, now_ms=clock)
    assert offsets(log) == list(range(6))
    assert log.epochs.latest_epoch == 1  # epoch 2 never got a record: not re-learnt
    log.append(make_batch(1), 2)
    log.close()
    assert (tiny_fs / "p" / CLEAN_SHUTDOWN_FILE).exists()
