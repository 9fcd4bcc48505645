"""Disk full: append fails with StorageError, the log stays intact and recovers."""

from __future__ import annotations

import pytest
from rafka.log.batch import decode_records, iter_batches
from rafka.log.config import LogConfig
from rafka.log.errors import StorageError
from rafka.log.partition_log import PartitionLog

from tests.tmpfs import mounted_tmpfs

from .conftest import make_batch


@pytest.fixture
def tiny_fs(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "64k") as where:
        yield where


def offsets(log):
    data = log.read_bytes(0, 1 << 20)
    return [r.offset for p, _ in iter_batches(data) for r in decode_records(data, p)]


def test_disk_full(tiny_fs, clock):
    filler = tiny_fs / "filler"
    filler.write_bytes(b"\0" * 24 * 1024)
    cfg = LogConfig.from_dict({"segment.bytes": str(1 << 20)})
    log = PartitionLog.open(tiny_fs / "p", cfg, now_ms=clock)
    with pytest.raises(StorageError) as ei:
        for _ in range(1000):
            log.append(make_batch(4, value=b"x" * 300), 0)
    assert ei.value.disk_full and "disk full" in str(ei.value)
    leo = log.log_end_offset
    assert leo > 0 and offsets(log) == list(range(leo))
    assert log.active_segment.path.stat().st_size == log.active_segment.size  # no torn tail
    filler.unlink()
    info = log.append(make_batch(4, value=b"x" * 300), 0)
    assert info.base_offset == leo
    log.close()
    log = PartitionLog.open(tiny_fs / "p", cfg, now_ms=clock)
    assert offsets(log) == list(range(leo + 4))
    log.close()
