"""LD_PRELOAD shims for node processes, compiled here with gcc: clock skew and link redirects.

Theory of operation
-------------------
Two small C libraries, each compiled once per source hash into ``$XDG_CACHE_HOME/rafka-chaos``
(``~/.cache``) by :func:`build_so` and preloaded into node processes (never into the harness):

* **clock skew** (:func:`faketime_env`, every backend but docker, which has its own copy in the
  image): the sleep shim + libfaketime, below;
* **link redirect** (:func:`connect_redirect_env`, the local backend): ``connect_redirect.c``
  rewrites node N's ``connect()`` to node M's own address ``127.0.0.<10+M>`` into the link
  proxy ``127.1.N.M``, so replication, AlterPartition and every other node-to-node connection
  made to an *advertised* address goes through the proxy that partitions cut.

Clock skew.  Debian's libfaketime 0.9.10 shifts the wall clock live from a timestamp file
(``FAKETIME_TIMESTAMP_FILE`` holding e.g. ``+30.000``, re-read on every call with
``FAKETIME_NO_CACHE=1``), and ``DONT_FAKE_MONOTONIC=1`` leaves CLOCK_MONOTONIC alone.  But with
that setting it fails every ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...)`` with
EINVAL, and that is how CPython 3.11 implements ``time.sleep``: pysyncobj's tick thread died at
its first sleep.  And its ``pthread_cond_timedwait`` wakes late on condvars that use
CLOCK_MONOTONIC, which CPython's GIL hand-off does: every ``trio.to_thread.run_sync`` took
~30 ms instead of ~0.3 ms, so acks=all produce (an fsync in a worker thread) fell from ~60 to
~1 ack/s per producer.  The shim ``faketime_fix.c`` is preloaded *before* libfaketime and sends
both monotonic waits straight to the kernel / glibc (with ``DONT_FAKE_MONOTONIC=1`` they are
not meant to be faked anyway); every other call goes on to libfaketime.  (The docker image
builds and preloads the same file: ``deploy/build-image.sh``.)

What a skewed node sees (libfaketime intercepts libc, so this is process-wide, C and Python):

* skewed: ``CLOCK_REALTIME`` as read through libc — ``time.time()``, ``time.time_ns()``,
  ``datetime.now()``, ``gettimeofday``; in rafka that is the controller's command timestamps
  (``kraft/service.py`` ``timestamp_ms``), group offset commit / expiry times
  (``broker/groups/offsets.py``), the log's wall clock (``log/partition_log.py``: record
  timestamps the broker assigns, time-based retention and segment roll), node-event ``wall_ms``
  and log-line timestamps.
* not skewed: ``CLOCK_MONOTONIC`` / ``BOOTTIME`` — ``time.monotonic()``, ``time.perf_counter()``,
  trio's clock and so every trio timeout, pysyncobj's election / heartbeat timers (its core uses
  ``monotonic``), node-event ``mono_ns`` (so events stay comparable with the harness's history
  clock); ``stat`` results (file mtimes are the kernel's, checked: not faked by 0.9.10 here);
  the kernel itself (TCP timers) and other processes (the harness, clients).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["FAKETIME_LIB", "SHIM_SOURCE", "CONNECT_SOURCE", "faketime_available",
           "clock_skew_unsupported", "connect_redirect_unsupported", "build_so",
           "faketime_env", "connect_redirect_env", "merge_preload"]

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SHIM_SOURCE = Path(__file__).resolve().with_name("faketime_fix.c")
CONNECT_SOURCE = Path(__file__).resolve().with_name("connect_redirect.c")


def _cc() -> str:
    return os.environ.get("CC", "gcc")


def faketime_available() -> bool:
    return os.path.exists(FAKETIME_LIB)


def clock_skew_unsupported() -> str | None:
    """None when clock skew works here, else why not (and how to fix it)."""
    if not faketime_available():
        return f"libfaketime missing ({FAKETIME_LIB}): make -C deploy chaos-deps"
    if not SHIM_SOURCE.exists():
        return f"the libfaketime shim source is missing ({SHIM_SOURCE})"
    if shutil.which(_cc()) is None:
        return "no C compiler for the libfaketime sleep shim: apt-get install gcc libc6-dev"
    return None


def connect_redirect_unsupported() -> str | None:
    """None when the local backend can route node-to-node traffic through its proxies."""
    if not sys.platform.startswith("linux"):
        return f"the connect() redirect shim is Linux-only (LD_PRELOAD), not {sys.platform}"
    if not CONNECT_SOURCE.exists():
        return f"{CONNECT_SOURCE} is missing"
    if shutil.which(_cc()) is None:
        return "no C compiler for the connect() redirect shim: apt-get install gcc libc6-dev"
    return None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rafka-chaos"


def build_so(source: Path, out_dir: Path | None = None) -> Path:
    """Compile ``source`` (once per source hash) and return the ``.so`` path."""
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    out_dir = out_dir or _cache_dir()
    so = out_dir / f"{source.stem}-{key}.so"
    if so.exists():
        return so
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)  # atomic for concurrent runs
    os.close(fd)
    try:
        r = subprocess.run([_cc(), "-O2", "-shared", "-fPIC", "-o", tmp, str(source), "-ldl"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"building {source.name} failed: {r.stderr.strip()}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, so)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return so


def faketime_env(clock_file: Path) -> dict[str, str]:
    """Environment for a skewable node reading its offset from ``clock_file``
    (``LD_PRELOAD``: the sleep shim first, then libfaketime)."""
    return {"LD_PRELOAD": f"{build_so(SHIM_SOURCE)} {FAKETIME_LIB}",
            "FAKETIME_TIMESTAMP_FILE": str(clock_file), "FAKETIME_NO_CACHE": "1",
            "DONT_FAKE_MONOTONIC": "1"}


def connect_redirect_env(node: int) -> dict[str, str]:
    """Environment that routes node ``node``'s connections to peers through the link proxies."""
    return {"LD_PRELOAD": str(build_so(CONNECT_SOURCE)), "RAFKA_CHAOS_NODE": str(node)}


def merge_preload(env: dict[str, str], extra: dict[str, str]) -> None:
    """``env.update(extra)``, but ``LD_PRELOAD`` values are concatenated (extra's first)."""
    for k, v in extra.items():
        env[k] = f"{v} {env[k]}" if k == "LD_PRELOAD" and env.get(k) else v
