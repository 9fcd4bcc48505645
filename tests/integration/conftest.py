"""Shared fixtures: real ``rafka cluster up --detach`` clusters in a tmp dir, torn down by pid.

``cluster_factory(nodes=3, broker_config={k: v}, controller_config={k: v})`` starts a cluster of real node processes on free ports and returns
a ``LocalCluster`` (data dir, bootstrap string, node specs, ``up()``/``down()``/``kill(id)``).
Every node ever started is killed by pid at teardown, even when the test failed. ``cluster3`` /
``cluster1`` are ready-made. ``module_cluster1`` is one node shared by a module's tests: a
module whose tests neither stop, restart nor reconfigure the cluster, and name their topics
and groups apart, binds ``cluster1`` to it (a node start is 3-7 s of the default suite per
test). Reusable by any test package (``pytest_plugins`` or a conftest
import).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rafka.cluster import free_port_block

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def rafka_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the node-side CLI (``rafka.node_cli``) in a subprocess."""
    code = "import sys; from rafka.node_cli import cluster, server; " \
           "cmd = cluster if sys.argv[1] == 'cluster' else server; " \
           "cmd.main(sys.argv[2:] if sys.argv[1] == 'cluster' else sys.argv[2:], standalone_mode=True)"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(PROJECT_ROOT))


@dataclass
class LocalCluster:
    data_dir: Path
    nodes: int
    port: int
    pids_seen: set[int] = field(default_factory=set)
    broker_config: dict[str, Any] = field(default_factory=dict)  # --broker-config k=v
    controller_config: dict[str, Any] = field(default_factory=dict)  # --controller-config k=v

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + i}" for i in range(self.nodes))

    def addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.port + i) for i in range(self.nodes)]

    def info(self) -> dict[str, Any]:
        return json.loads((self.data_dir / "cluster.json").read_text())

    def pids(self) -> dict[int, int | None]:
        return {n["id"]: n["pid"] for n in self.info()["nodes"]}

    def _remember(self) -> None:
        self.pids_seen |= {p for p in self.pids().values() if p}

    def up(self) -> subprocess.CompletedProcess[str]:
        extra: list[str] = []
        for k, v in self.broker_config.items():
            extra += ["--broker-config", f"{k}={v}"]
        for k, v in self.controller_config.items():
            extra += ["--controller-config", f"{k}={v}"]
        r = rafka_cli("cluster", "up", "--nodes", str(self.nodes), "--data-dir", str(self.data_dir),
                      "--port", str(self.port), "--detach", *extra)
        if (self.data_dir / "cluster.json").exists():
            self._remember()
        assert r.returncode == 0, f"cluster up failed:\n{r.stdout}\n{r.stderr}"
        return r

    def down(self) -> subprocess.CompletedProcess[str]:
        return rafka_cli("cluster", "down", "--data-dir", str(self.data_dir))

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        pid = self.pids()[node_id]
        assert pid
        os.kill(pid, sig)
        _wait_gone(pid)

    def kill_all(self) -> None:
        for pid in self.pids_seen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """Test teardown: a clean ``cluster down`` if the cluster came up, then SIGKILL to
        every node process ever seen (a down that failed leaves none behind)."""
        try:
            if (self.data_dir / "cluster.json").exists():
                self._remember()
                self.down()
        finally:
            self.kill_all()


def wait_until(cond: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """Poll ``cond`` every 0.1 s until it is truthy (returned) or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.1)


class JsonLinesProc:
    """A helper script (``python ARGS...``) whose stdout is JSON lines, collected by a reader
    thread; its stderr goes to ``stderr_path``."""

    def __init__(self, args: list[str], stderr_path: Path, *, mode: str = "a") -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.stderr = open(stderr_path, mode)  # noqa: SIM115 - closed by close()/wait()
        self.proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, cwd=str(PROJECT_ROOT))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def wait(self, timeout_s: float = 60.0) -> int:
        """The exit code, once the process and its reader ended."""
        rc = self.proc.wait(timeout_s)
        self._reader.join(5)
        self.stderr.close()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()


def _wait_gone(pid: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.split(")")[-1].split()[0] == "Z":
                return
        except (ProcessLookupError, FileNotFoundError):
            return
        time.sleep(0.02)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[LocalCluster] = []

    def make(nodes: int = 3, *, broker_config: dict[str, Any] | None = None,
             controller_config: dict[str, Any] | None = None) -> LocalCluster:
        c = LocalCluster(tmp_path / f"cluster-{len(made)}", nodes, free_port_block(nodes),
                         broker_config=dict(broker_config or {}),
                         controller_config=dict(controller_config or {}))
        made.append(c)
        c.up()
        return c

    try:
        yield make
    finally:
        for c in made:
            c.stop()


@pytest.fixture
def cluster3(cluster_factory: Any) -> LocalCluster:
    return cluster_factory(3)


@pytest.fixture
def cluster1(cluster_factory: Any) -> LocalCluster:
    return cluster_factory(1)


@pytest.fixture(scope="module")
def module_cluster1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("module-cluster") / "cluster", 1, free_port_block(1))
    try:
        c.up()
        yield c
    finally:
        c.stop()
