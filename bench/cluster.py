"""Start and stop a throwaway rafka cluster for a benchmark (real processes, loopback)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from rafka.cluster import free_port_block

__all__ = ["add_broker_node", "cluster", "cluster_dir"]

RAFKA = [sys.executable, "-m", "rafka.cli"]


@contextlib.contextmanager
def cluster(nodes: int = 1, broker_config: dict[str, str] | None = None) -> Iterator[str]:
    """Yields the bootstrap string of a fresh ``nodes``-node cluster in a temp dir."""
    with cluster_dir(nodes, broker_config) as (bootstrap, _data, _port):
        yield bootstrap


@contextlib.contextmanager
def cluster_dir(nodes: int = 1, broker_config: dict[str, str] | None = None,
                extra_args: Sequence[str] = ()) -> Iterator[tuple[str, Path, int]]:
    """``cluster`` that also yields its data dir and first port; ``extra_args`` go to
    ``cluster up`` (e.g. ``--tls --auth``: bench_security.py)."""
    data = Path(tempfile.mkdtemp(prefix="rafka-bench-"))
    port = free_port_block(nodes)
    args = [*RAFKA, "cluster", "up", "--nodes", str(nodes), "--data-dir", str(data),
            "--port", str(port), "--detach", *extra_args]
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
        yield bootstrap, data, port
    finally:
        subprocess.run([*RAFKA, "cluster", "down", "--data-dir", str(data)],
                       capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)


def add_broker_node(data_dir: Path, node_id: int, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start a broker-only node ``node_id`` for the local cluster in ``data_dir`` (the scale-out
    of docs/operations.md: node 1's config with its own id, roles, listener, Kafka listener and
    data dir, no raft or metrics listener). Returns the process (the caller stops it) and its address."""
    import tomllib

    from rafka.chaos_tests.campaign import toml_dumps

    cfg = tomllib.loads((data_dir / "node-1" / "node.toml").read_text())
    addr = f"127.0.0.1:{free_port_block(1)}"
    cfg.update(node_id=node_id, roles=["broker"], listener=addr, data_dir=str(data_dir / f"node-{node_id}"))
    for key in ("raft_listener", "metrics_listener"):
        cfg.pop(key, None)
    if "kafka" in cfg:  # node 1's Kafka listener is node 1's: the new broker gets its own port
        cfg["kafka"] = {**cfg["kafka"], "listener": f"127.0.0.1:{free_port_block(1)}"}
    path = data_dir / f"node-{node_id}.toml"
    path.write_text(toml_dumps(cfg))
    with open(log_path, "wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([*RAFKA, "server", "--config", str(path)], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return proc, addr
