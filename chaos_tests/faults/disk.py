"""disk-full: each node's data dir on its own small tmpfs; the fault fills it to the last byte.

What it simulates
-----------------
The node's data volume runs out of space: every write, file creation and ``fallocate`` in the
data dir fails with ``ENOSPC`` while the fault lasts (reads and fsyncs of already-written data
keep working, as on a real full disk).  Healing frees the space; a node process that died of
it is restarted (as an operator would after freeing space).

How
---
``setup`` (before the nodes start, root only) mounts a tmpfs of ``size_bytes`` (default 512
MiB) over each node's empty data dir, so the node's files live on a volume the harness
controls — mounting over a directory a process already uses would not affect its open files.
The fault creates ``.chaos-disk-filler`` in the data dir and grows it with ``posix_fallocate``
and then small writes until the volume is full; ``stop`` deletes it.  ``teardown`` unmounts
(lazily, the nodes may still hold files open).  Node events (``events.jsonl``) written during
the fault are lost (the broker never fails for an event line); that only hides evidence.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DiskFull", "FILLER", "fill", "unfill"]

log = logging.getLogger("chaos.disk")

FILLER = ".chaos-disk-filler"
DEFAULT_SIZE_BYTES = 512 * 1024 * 1024
MAX_FILL_WRITES = 100_000


def fill(directory: Path) -> int:
    """Fill the file system of ``directory`` completely; returns the filler's size."""
    path = directory / FILLER
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        s = os.statvfs(directory)
        free = s.f_bavail * s.f_frsize
        if free > 0:
            try:
                os.posix_fallocate(fd, os.fstat(fd).st_size, free)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
        chunk = b"\0" * 4096
        for _ in range(MAX_FILL_WRITES):  # top off what fallocate left (block rounding)
            try:
                if os.write(fd, chunk) <= 0:
                    break
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    if len(chunk) == 1:
                        break
                    chunk = chunk[: len(chunk) // 2]
                    continue
                raise
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def unfill(directory: Path) -> None:
    (directory / FILLER).unlink(missing_ok=True)


class DiskFull:
    """Nemesis handler for ``disk-full`` (module docstring)."""

    def __init__(self, backend: Any, data_dirs: Mapping[int, Path], *,
                 size_bytes: int = DEFAULT_SIZE_BYTES) -> None:
        self.backend = backend
        self.data_dirs = {n: Path(p) for n, p in data_dirs.items()}
        self.size_bytes = size_bytes
        self._mounted: list[Path] = []
        self.filled: dict[int, int] = {}

    async def setup(self) -> None:
        import trio

        if os.geteuid() != 0:
            raise RuntimeError("disk-full needs root (tmpfs mounts)")
        for d in self.data_dirs.values():
            d.mkdir(parents=True, exist_ok=True)
            if any(d.iterdir()):
                raise RuntimeError(f"{d} is not empty; the tmpfs must be mounted first")
            await trio.to_thread.run_sync(lambda d=d: subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes},mode=0755",
                 "rafka-chaos-disk", str(d)], check=True, timeout=15, capture_output=True))
            self._mounted.append(d)

    async def start(self, fault: Any, targets: Sequence[int]) -> None:
        import trio

        for n in targets:
            self.filled[n] = await trio.to_thread.run_sync(fill, self.data_dirs[n])

    async def stop(self, fault: Any, targets: Sequence[int]) -> None:
        for n in targets:
            unfill(self.data_dirs[n])
            if not self.backend.running(n):
                await self.backend.start_node(n)

    async def heal_all(self) -> None:
        for d in self.data_dirs.values():
            unfill(d)

    async def teardown(self) -> None:
        import trio

        for d in reversed(self._mounted):
            await trio.to_thread.run_sync(lambda d=d: subprocess.run(
                ["umount", "-l", str(d)], check=False, timeout=15, capture_output=True))
        self._mounted.clear()

    def statistics(self) -> dict[str, Any]:
        return {"filled": dict(self.filled)}
