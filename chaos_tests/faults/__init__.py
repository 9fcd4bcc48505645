"""Fault implementations that need more than a signal or an iptables rule.

* :mod:`.disk` — ``disk-full``: data dirs on per-node tmpfs volumes, filled on demand.
* :mod:`.unfsynced` — ``lose-unfsynced-writes``: a FUSE pass-through that tracks fsynced
  lengths and drops everything else when the node "crashes".

Each exposes a nemesis handler (``setup`` / ``start(fault, targets)`` / ``stop`` / ``heal_all``
/ ``teardown``) that :class:`~chaos_tests.nemesis.NemesisRunner` uses through ``handlers=``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["disk", "unfsynced", "unmount_leftovers"]


def unmount_leftovers(work_dir: Path) -> list[str]:
    """Lazily unmount every mount point under ``work_dir`` (deepest first) — what a killed
    earlier campaign's FUSE or tmpfs faults left behind, which would make its work dir
    impossible to delete (EBUSY). Returns the mount points it unmounted."""
    root = str(Path(work_dir).absolute()).rstrip("/") + "/"
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            points = [line.split()[1].replace("\\040", " ") for line in f]
    except OSError:
        return []
    done = []
    for mp in sorted((m for m in points if m.startswith(root)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mp], check=False, timeout=15, capture_output=True)
        done.append(mp)
    return done
