"""The controller's storage on a full disk: fail-stop with a named exit, restart recovers.

- a Raft journal record that cannot be reserved/written ends the process with exit 74 and one
  ``rafka: controller storage failure (disk full)`` line, no traceback (a real tmpfs, filled);
- a torn last journal record (the header's end offset past the data) is dropped on open instead
  of failing the start (the ``struct.error`` restarts of the disk-full chaos run);
- a metadata snapshot that cannot be written is skipped (warning), the log stays usable.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from pysyncobj.journal import LAST_RECORD_OFFSET_OFFSET
from rafka.chaos_tests.faults.disk import fill, unfill
from rafka.kraft.durable_journal import EXIT_STORAGE_FAILURE, DurableFileJournal
from rafka.kraft.metadata_log import MetadataLog

from tests.tmpfs import mounted_tmpfs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_fs(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "256k") as where:
        yield where


def test_torn_journal_tail_is_dropped_on_open(tmp_path):
    path = str(tmp_path / "raft.journal")
    j = DurableFileJournal(path)
    for i in range(3):
        j.add(b"cmd-%d" % i, i + 1, 1)
    j._destroy()
    with open(path, "r+b") as f:  # a 4th record's header update landed, its data did not
        f.seek(LAST_RECORD_OFFSET_OFFSET)
        (last,) = struct.unpack("<I", f.read(4))
        f.seek(LAST_RECORD_OFFSET_OFFSET)
        f.write(struct.pack("<I", last + 40))
    j = DurableFileJournal(path)
    assert [j[i][0] for i in range(len(j))] == [b"cmd-0", b"cmd-1", b"cmd-2"]
    j.add(b"cmd-3", 4, 1)
    j._destroy()
    j = DurableFileJournal(path)
    assert len(j) == 4 and j[3][0] == b"cmd-3"
    j._destroy()


def test_journal_on_a_full_disk_fail_stops_with_a_named_exit(tiny_fs):
    path = tiny_fs / "raft.journal"
    code = f"""
import sys
from pathlib import Path
from rafka.kraft.durable_journal import DurableFileJournal
from rafka.chaos_tests.faults.disk import fill
j = DurableFileJournal({str(path)!r})
j.add(b"before", 1, 1)
fill(Path({str(tiny_fs)!r}))
for i in range(1000):
    j.add(b"x" * 4096, i + 2, 1)
print("NOT STOPPED")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert r.returncode == EXIT_STORAGE_FAILURE, (r.returncode, r.stdout, r.stderr)
    assert "rafka: controller storage failure (disk full)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "NOT STOPPED" not in r.stdout, r.stderr
    unfill(tiny_fs)
    j = DurableFileJournal(str(path))  # restarts once space is freed
    assert len(j) >= 1 and j[0][0] == b"before"
    j._destroy()


def test_metadata_snapshot_on_a_full_disk_is_skipped(tiny_fs, monkeypatch):
    mlog = MetadataLog(tiny_fs / "metadata", snapshot_every_records=1)
    fill(tiny_fs)
    payload = mlog.snapshot_payload()
    payload["r"] = [{"pad": "x" * 300_000}]  # bigger than what is left
    with pytest.raises(OSError):
        mlog.write_snapshot(payload)
    assert not list((tiny_fs / "metadata").glob("*.tmp"))  # the space is given back
    # maybe_snapshot (the controller's flusher loop) logs it and carries on
    monkeypatch.setattr(mlog, "snapshot_payload", lambda: payload)
    monkeypatch.setattr(mlog, "snapshot_every_records", -1)
    assert mlog.maybe_snapshot() is False
    unfill(tiny_fs)
    mlog.close()
