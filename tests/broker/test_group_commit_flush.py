"""A group-commit round fsyncs its partitions in parallel (``replica_manager._flush_all``).

Real partition logs on disk: every partition of a round is fsynced (its recovery point reaches
its log end offset) and the results come back in the round's order, also past the fan-out's
width; a round of several partitions is spread over several threads; a failed fsync is reported
in its own partition's slot (that log goes offline, the others are durable).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from rafka.broker import replica_manager
from rafka.broker.replica_manager import _flush_all
from rafka.log.batch import build_batch
from rafka.log.config import LogConfig
from rafka.log.errors import StorageError
from rafka.log.partition_log import PartitionLog


@pytest.fixture
def logs(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = [PartitionLog.open(tmp_path / f"p{i}", LogConfig.from_dict({})) for i in range(7)]
    for i, log in enumerate(opened):
        log.append(build_batch([(b"k", b"v" * 100, [], 1000 + j) for j in range(i + 1)]), 0)
    yield opened
    for log in opened:
        log.close()


def test_every_partition_is_fsynced_and_reported_in_order(logs: list[PartitionLog]) -> None:
    assert len(logs) > replica_manager._FLUSH_FANOUT + 1  # some past the fan-out's width
    results = _flush_all([SimpleNamespace(log=log) for log in logs])
    assert results == [log.log_end_offset for log in logs] == list(range(1, 8))
    assert all(log.recovery_point == log.log_end_offset for log in logs)
    assert all(log.fsync_count == 1 for log in logs)


def test_a_round_of_several_partitions_uses_several_threads(logs: list[PartitionLog],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[int] = set()
    real = os.fdatasync

    def recording(fd: int) -> None:
        threads.add(threading.get_ident())
        real(fd)

    monkeypatch.setattr(os, "fdatasync", recording)
    assert _flush_all([SimpleNamespace(log=log) for log in logs[:3]]) == [1, 2, 3]
    assert len(threads) > 1


def test_a_failed_fsync_is_reported_for_its_partition_only(logs: list[PartitionLog]) -> None:
    bad = (3, 6)  # one fsynced by a helper thread, one after the fan-out's width
    r, w = os.pipe()  # fdatasync of a pipe fails (EINVAL): a real failing fsync
    saved = {}
    try:
        for i in bad:
            seg = logs[i]._segments[-1]
            saved[i] = seg.fd
            seg.fd = r
        results = _flush_all([SimpleNamespace(log=log) for log in logs])
    finally:
        for i, fd in saved.items():
            logs[i]._segments[-1].fd = fd
        os.close(r)
        os.close(w)
    for i, (log, res) in enumerate(zip(logs, results, strict=True)):
        if i in bad:
            assert isinstance(res, StorageError) and log.offline is not None
        else:
            assert res == log.log_end_offset == log.recovery_point
