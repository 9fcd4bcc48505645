"""Start and stop a throwaway rafka cluster for a benchmark (real processes, loopback)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from broker.cluster import free_port_block

__all__ = ["cluster"]

RAFKA = [sys.executable, "-m", "client.cli"]


@contextlib.contextmanager
def cluster(nodes: int = 1, broker_config: dict[str, str] | None = None) -> Iterator[str]:
    """Yields the bootstrap string of a fresh ``nodes``-node cluster in a temp dir."""
    data = Path(tempfile.mkdtemp(prefix="rafka-bench-"))
    port = free_port_block(nodes)
    args = [*RAFKA, "cluster", "up", "--nodes", str(nodes), "--data-dir", str(data),
            "--port", str(port), "--detach"]
    for k, v in (broker_config or {}).items():
        args += ["--broker-config", f"{k}={v}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:  # stop whatever did start before removing its data
        subprocess.run([*RAFKA, "cluster", "down", "--data-dir", str(data)],
                       capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)
        raise RuntimeError(f"cluster up failed: {out.stderr or out.stdout}")
    bootstrap = ",".join(f"127.0.0.1:{port + i}" for i in range(nodes))
    try:
        yield bootstrap
    finally:
        subprocess.run([*RAFKA, "cluster", "down", "--data-dir", str(data)],
                       capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)
