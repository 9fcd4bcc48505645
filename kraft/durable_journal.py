"""A pysyncobj journal that reaches the disk before Raft acts on it.

Theory of operation
-------------------
pysyncobj's ``FileJournal`` writes its Raft log through an mmap and its term/vote through
write + rename, and never fsyncs either (pysyncobj issue #84): a process crash loses nothing,
a machine crash can lose entries a voter already acknowledged, or a vote it already cast —
which breaks Raft's safety argument (a restarted voter may vote twice in a term, or help elect
a leader that lacks a committed entry).

:class:`DurableFileJournal` keeps the file format and adds the missing barriers, on the tick
thread, *before* pysyncobj sends the message that depends on them:

* ``add`` / ``deleteEntriesFrom`` / ``clear``: ``msync`` of the mmap (an AppendEntries reply,
  or the leader counting itself in the majority, follows in the same tick);
* ``setCurrentTerm`` (term + vote): temp file, fsync, rename, fsync of the directory;
* ``deleteEntriesTo`` (log compaction after a dump) rewrites the journal with one msync at the
  end, after fsyncing the directory so that the dump file's rename is durable first.

Measured cost on this machine's disk: one msync ≈ 0.2 ms (fsync p50 0.19 ms, p99 0.55 ms), once
per appended entry on every voter — affordable for metadata traffic, and the tick thread never
waits on anything else. ``durable_journal_factory()`` is patched into pysyncobj only while a
``SyncObj`` is constructed (:func:`patched_create_journal`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pysyncobj.syncobj as _syncobj_module
from pysyncobj.journal import FileJournal, MemoryJournal, MetaStorer
from pysyncobj.pickle import dumps

__all__ = ["DurableFileJournal", "patched_create_journal"]


def _fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _DurableMetaStorer(MetaStorer):
    def storeMeta(self, meta: dict[str, Any]) -> None:  # noqa: N802 (pysyncobj's name)
        path = self.getPath()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(dumps(meta))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(os.path.abspath(path)))


class DurableFileJournal(FileJournal):
    def __init__(self, journal_file: str) -> None:
        super().__init__(journal_file)
        self._dir = os.path.dirname(os.path.abspath(journal_file))
        self._FileJournal__metaStorer = _DurableMetaStorer(journal_file + ".meta")
        self._bulk = False
        self.msyncs = 0

    def _barrier(self) -> None:
        if not self._bulk:
            self.flush()
            self.msyncs += 1

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self._barrier()

    def clear(self) -> None:
        _fsync_dir(self._dir)  # a dump renamed into place just before must survive first
        super().clear()
        self._barrier()

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802, N803
        super().deleteEntriesFrom(entryFrom)
        self._barrier()

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802, N803
        self._bulk = True
        try:
            super().deleteEntriesTo(entryTo)
        finally:
            self._bulk = False
        self._barrier()


def _create_journal(journal_file: str | None = None) -> Any:
    if journal_file is None:
        return MemoryJournal()
    return DurableFileJournal(journal_file)


@contextlib.contextmanager
def patched_create_journal() -> Iterator[None]:
    """Make ``SyncObj.__init__`` create a :class:`DurableFileJournal` (main thread only)."""
    original = _syncobj_module.createJournal
    _syncobj_module.createJournal = _create_journal
    try:
        yield
    finally:
        _syncobj_module.createJournal = original
