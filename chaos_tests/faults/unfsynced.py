"""lose-unfsynced-writes: a FUSE pass-through filesystem that forgets what was never fsynced.

What it simulates
-----------------
A machine crash (power loss, kernel panic) of one node: the node process is SIGKILLed and, in
every file of its data directory, each byte written since that file's last ``fsync`` /
``fdatasync`` (or ``msync``, which reaches FUSE as fsync) is lost:

* a file's **content** is durable up to the state it had at its last fsync.  Bytes appended
  since are cut off; bytes of the durable part overwritten since (or cut by ``truncate``) are
  restored from a shadow copy taken at the first such change after the fsync.  A file created
  and never fsynced comes back empty.
* **Names** (create, rename, unlink, mkdir) are treated as durable at once — as a journalling
  file system that commits metadata promptly (ext4 ``data=ordered``) mostly behaves, and weaker
  than strict POSIX, which also needs a directory fsync.  So a rename-over (``write temp, fsync,
  rename``) never loses the old *and* the new file.
* ``events.jsonl`` and ``node.log`` are exempt: they are the harness's evidence, as if shipped
  to a log collector off the machine. Only those names: until session 34 every ``*.log`` was
  exempt, and that took in the partitions' segment files (``00000000000000000000.log``) and the
  ``@metadata`` log's, so a crash never cut a record that was written but not fsynced
  (docs/chaos-results.md, "Session 34").
* Dirty pages of a shared ``mmap`` that the kernel had not yet written back when the process
  died are pushed through the filesystem (``syncfs``) and then dropped like any unfsynced
  write.

How
---
``python -m rafka.chaos_tests.faults.unfsynced BACKING MOUNT --control SOCK`` mounts
:class:`FsyncTrackingFS` (``mfusepy`` over libfuse3: Debian ``fuse3``) at ``MOUNT`` (the node's
data dir) forwarding every call to ``BACKING``.  Writes go straight to the backing files; per
inode it records the *durable size* at each fsync (files present at mount time count as
durable).  A control thread serves a unix socket: ``crash`` applies the loss (above) and
answers a JSON line with what was cut; ``stats``; ``exit``.  ``attr_timeout=0`` /
``entry_timeout=0`` keep the kernel from caching sizes across a crash, and FUSE drops a file's
page cache on every open, so the restarted node reads what survived.

:class:`LoseUnfsyncedWrites` is the nemesis handler: ``setup`` mounts one filesystem per node
before the nodes start, ``start`` = SIGKILL + ``syncfs`` + ``crash``, ``stop`` = restart the
node, ``teardown`` unmounts.  Needs root (or ``/dev/fuse`` access) and ``mfusepy``.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FsyncTrackingFS", "LoseUnfsyncedWrites", "fuse_available", "EXEMPT_NAMES"]

log = logging.getLogger("chaos.unfsynced")

# the harness's evidence, by exact name (.1: rotated, broker/events.py): a segment file ends in
# .log too, and must be cut like any other file
EXEMPT_NAMES = ("events.jsonl", "events.jsonl.1", "node.log")
SHADOW_DIR = ".chaos-shadow"


def fuse_available() -> str | None:
    """None when the FUSE fault can run here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 missing (apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except ImportError:
        return "mfusepy missing (pip install mfusepy)"
    except OSError as exc:
        return f"libfuse not loadable: {exc}"
    return None


def _exempt(name: str) -> bool:
    return name in EXEMPT_NAMES


@dataclass
class _Durable:
    size: int  # bytes durable (content as of the last fsync)
    shadow: Path | None = None  # copy of the durable prefix, taken at its first change


@dataclass
class _Stats:
    writes: int = 0
    fsyncs: int = 0
    crashes: int = 0
    cut_bytes: int = 0
    restored_files: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


class FsyncTrackingFS:
    """The pass-through filesystem (``mfusepy.Operations`` duck type); see the module docstring."""

    use_ns = True

    def __init__(self, backing: str | os.PathLike[str]) -> None:
        self.root = Path(backing).resolve()
        self.shadow_root = self.root.parent / (self.root.name + SHADOW_DIR)
        self.shadow_root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._durable: dict[int, _Durable] = {}  # inode -> state (absent: durable as is)
        self.stats = _Stats()

    # -- helpers ---------------------------------------------------------------------------
    def _p(self, path: str) -> str:
        return str(self.root / path.lstrip("/"))

    def _state(self, fd: int | None = None, path: str | None = None) -> tuple[int, _Durable]:
        st = os.fstat(fd) if fd is not None else os.stat(path)  # type: ignore[arg-type]
        d = self._durable.get(st.st_ino)
        if d is None:  # untouched since mount or since the last fsync: all of it is durable
            d = self._durable[st.st_ino] = _Durable(st.st_size)
        return st.st_ino, d

    def _shadow_before_change(self, ino: int, d: _Durable, src: str) -> None:
        if d.shadow is None and d.size > 0:
            dst = self.shadow_root / f"{ino}"
            with open(src, "rb") as f, open(dst, "wb") as g:
                shutil.copyfileobj(f, g, 1 << 20)
            d.shadow = dst

    # -- files -----------------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._p(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns",
                "st_mtime_ns", "st_ctime_ns")
        out = {k.replace("_ns", ""): getattr(st, k) for k in keys}
        return out

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._p(path), amode):
            raise OSError(errno.EACCES, "access")
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._p(path))]

    def readlink(self, path: str) -> str:
        return os.readlink(self._p(path))

    def statfs(self, path: str) -> dict[str, Any]:
        s = os.statvfs(self._p(path))
        return {k: getattr(s, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize",
                                           "f_favail", "f_ffree", "f_files", "f_flag",
                                           "f_frsize", "f_namemax")}

    def open(self, path: str, flags: int) -> int:
        return os.open(self._p(path), flags & ~os.O_CREAT)

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        fd = os.open(self._p(path), (flags & ~os.O_EXCL) | os.O_CREAT, mode)
        with self._lock:
            st = os.fstat(fd)
            self._durable[st.st_ino] = _Durable(0)  # new: nothing durable until its fsync
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._lock:
            ino, d = self._state(fd=fh)
            if offset < d.size:
                self._shadow_before_change(ino, d, f"/proc/self/fd/{fh}")
            self.stats.writes += 1
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._lock:
            target = f"/proc/self/fd/{fh}" if fh is not None else self._p(path or "")
            ino, d = self._state(fd=fh) if fh is not None else self._state(path=target)
            if length < d.size:
                self._shadow_before_change(ino, d, target)
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(target, length)
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        if mode:
            raise OSError(errno.EOPNOTSUPP, "fallocate mode")
        os.posix_fallocate(fh, offset, size)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self._lock:
            st = os.fstat(fh)
            d = self._durable.get(st.st_ino)
            if d is not None and d.shadow is not None:
                d.shadow.unlink(missing_ok=True)
            self._durable[st.st_ino] = _Durable(st.st_size)
            self.stats.fsyncs += 1
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def release(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        return 0

    # -- names -----------------------------------------------------------------------------
    def unlink(self, path: str) -> int:
        os.unlink(self._p(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        os.rename(self._p(old), self._p(new))
        return 0

    def link(self, target: str, source: str) -> int:
        os.link(self._p(source), self._p(target))
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._p(target))
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._p(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._p(path))
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._p(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._p(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._p(path), ns=times) if times else os.utime(self._p(path))
        return 0

    # -- the crash -------------------------------------------------------------------------
    def crash(self) -> dict[str, Any]:
        """Drop every unfsynced change (module docstring); returns what was cut."""
        cut: list[dict[str, Any]] = []
        with self._lock:
            for dirpath, _dirs, files in os.walk(self.root):
                for name in files:
                    p = os.path.join(dirpath, name)
                    try:
                        st = os.lstat(p)
                    except FileNotFoundError:
                        continue
                    d = self._durable.get(st.st_ino)
                    if d is None or _exempt(name):
                        continue
                    rel = os.path.relpath(p, self.root)
                    if d.shadow is not None:
                        with open(d.shadow, "rb") as f, open(p, "r+b") as g:
                            g.truncate(0)
                            shutil.copyfileobj(f, g, 1 << 20)
                            g.truncate(d.size)
                        cut.append({"file": rel, "size": st.st_size, "to": d.size,
                                    "restored": True})
                        self.stats.restored_files += 1
                    elif st.st_size > d.size:
                        os.truncate(p, d.size)
                        cut.append({"file": rel, "size": st.st_size, "to": d.size})
                        self.stats.cut_bytes += st.st_size - d.size
            for d in self._durable.values():
                if d.shadow is not None:
                    d.shadow.unlink(missing_ok=True)
            self._durable.clear()  # everything on "disk" now is durable
            self.stats.crashes += 1
        report = {"crash": self.stats.crashes, "files": cut}
        self.stats.history.append(report)
        return report


# --------------------------------------------------------------------------- daemon

def _serve_control(fs: FsyncTrackingFS, sock_path: str, stop: threading.Event,
                   mountpoint: str) -> None:
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(4)
    srv.settimeout(0.5)
    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(30)
            try:
                cmd = conn.recv(64).decode().strip()
                if cmd == "crash":
                    reply: dict[str, Any] = fs.crash()
                elif cmd == "stats":
                    s = fs.stats
                    reply = {"writes": s.writes, "fsyncs": s.fsyncs, "crashes": s.crashes,
                             "cut_bytes": s.cut_bytes, "restored_files": s.restored_files}
                elif cmd == "exit":
                    reply = {"ok": True}
                    stop.set()
                else:
                    reply = {"error": f"unknown command {cmd!r}"}
                conn.sendall((json.dumps(reply) + "\n").encode())
            except OSError as exc:
                log.warning("control connection failed: %s", exc)
        if stop.is_set():
            subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False, timeout=10)
    srv.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backing")
    ap.add_argument("mountpoint")
    ap.add_argument("--control", required=True, help="unix socket for crash/stats/exit")
    args = ap.parse_args(argv)
    import mfusepy

    # absolute paths before FUSE starts: libfuse may chdir("/") while mounting, and the control
    # thread binds its socket concurrently (a relative path once failed with ENOENT)
    args.mountpoint = os.path.abspath(args.mountpoint)
    args.backing = os.path.abspath(args.backing)
    args.control = os.path.abspath(args.control)
    fs = FsyncTrackingFS(args.backing)
    stop = threading.Event()
    t = threading.Thread(target=_serve_control, args=(fs, args.control, stop, args.mountpoint),
                         daemon=True)
    t.start()
    mfusepy.FUSE(fs, args.mountpoint, foreground=True, nothreads=False,
                 attr_timeout=0, entry_timeout=0, negative_timeout=0, fsname="rafka-chaos")
    stop.set()
    return 0


# --------------------------------------------------------------------------- nemesis handler

def control(sock_path: str | os.PathLike[str], cmd: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """Send one control command to a running filesystem daemon (blocking)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(sock_path))
        s.sendall(cmd.encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf or b"{}")


def _syncfs(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.sync() if not hasattr(os, "syncfs") else os.syncfs(fd)  # type: ignore[attr-defined]
    finally:
        os.close(fd)


class LoseUnfsyncedWrites:
    """Nemesis handler for ``lose-unfsynced-writes`` (module docstring)."""

    def __init__(self, backend: Any, data_dirs: Mapping[int, Path], work_dir: Path, *,
                 mount_timeout_s: float = 10.0) -> None:
        self.backend = backend
        self.data_dirs = {n: Path(p).absolute() for n, p in data_dirs.items()}
        self.work_dir = Path(work_dir).absolute()
        self.mount_timeout_s = mount_timeout_s
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self.reports: list[dict[str, Any]] = []

    def _sock(self, n: int) -> Path:
        return self.work_dir / f"fsyncfs-{n}.sock"

    def _backing(self, n: int) -> Path:
        return self.work_dir / f"fsyncfs-{n}-backing"

    async def setup(self) -> None:
        import trio

        why = fuse_available()
        if why:
            raise RuntimeError(f"lose-unfsynced-writes unavailable: {why}")
        for n, d in self.data_dirs.items():
            backing = self._backing(n)
            backing.mkdir(parents=True, exist_ok=True)
            d.mkdir(parents=True, exist_ok=True)
            for child in d.iterdir():  # move anything already there under the mount
                child.rename(backing / child.name)
            logf = open(self.work_dir / f"fsyncfs-{n}.log", "ab")  # noqa: SIM115
            self._procs[n] = subprocess.Popen(
                [sys.executable, "-m", "rafka.chaos_tests.faults.unfsynced", str(backing), str(d),
                 "--control", str(self._sock(n))], stdout=logf, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
            logf.close()
            deadline = time.monotonic() + self.mount_timeout_s
            while not (os.path.ismount(d) and self._sock(n).exists()):
                if self._procs[n].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"FUSE mount of {d} failed (see fsyncfs-{n}.log)")
                await trio.sleep(0.05)

    async def start(self, fault: Any, targets: Sequence[int]) -> None:
        import trio

        for n in targets:
            await self.backend.kill_node(n)
            await trio.to_thread.run_sync(_syncfs, self.data_dirs[n])
            report = await trio.to_thread.run_sync(control, self._sock(n), "crash")
            report["node"] = n
            self.reports.append(report)

    async def stop(self, fault: Any, targets: Sequence[int]) -> None:
        for n in targets:
            await self.backend.start_node(n)

    async def heal_all(self) -> None:
        return None

    async def teardown(self) -> None:
        import trio

        for n, p in self._procs.items():
            try:
                await trio.to_thread.run_sync(control, self._sock(n), "exit", 5.0)
            except OSError:
                pass
            await trio.to_thread.run_sync(
                lambda d=self.data_dirs[n]: subprocess.run(
                    ["fusermount3", "-u", "-z", str(d)], check=False, timeout=10,
                    capture_output=True))
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self._procs.clear()

    def statistics(self) -> dict[str, Any]:
        return {"crashes": len(self.reports),
                "cut_files": sum(len(r.get("files", ())) for r in self.reports)}


if __name__ == "__main__":
    sys.exit(main())
