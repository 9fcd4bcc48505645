"""Start the disk writes of freshly appended bytes early, so that the fsync that follows is short.

Theory of operation
-------------------
Under the broker's flush policy ``batch`` every acknowledged append is fsynced by the next
group-commit round, and the answers wait for that round. ``fdatasync`` both *submits* the
dirty pages of the file and waits for them (plus the journal commit), so a round that finds
three partitions' ~780 KB each still dirty pays for writing all of it while every waiting
answer waits. Linux's ``sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)`` submits the file's
dirty pages for writeback *without waiting*: called right after an append, the device writes
while the broker goes on with other requests, and the round's ``fdatasync`` only waits for what
is still in flight and commits the journal. Measured on this VM (3 files, three 260 KB appends
each between rounds, 6 interleaved runs of 40 rounds): an ``fdatasync`` round of 1.8 ms → 0.28
ms, for +5 % CPU.

It changes no guarantee: durability still comes only from the fsync, nothing is acknowledged
on ``start_writeback`` alone, and an error here is ignored (the fsync reports it). Python has no
``os.sync_file_range``; the libc function is called through ``ctypes``. Elsewhere than Linux,
or without the symbol, ``start_writeback`` does nothing.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["AVAILABLE", "start_writeback"]

_SYNC_FILE_RANGE_WRITE = 2


def _load() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load()
AVAILABLE = _sync_file_range is not None


def start_writeback(fd: int) -> bool:
    """Submit ``fd``'s dirty pages for writeback without waiting; False if that was not done
    (no ``sync_file_range`` here, or the call failed — the next fsync covers it either way)."""
    if _sync_file_range is None:
        return False
    return _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE) == 0
