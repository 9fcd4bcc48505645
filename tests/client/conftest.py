"""A real rafka cluster for the client's integration tests.

``RAFKA_TEST_BOOTSTRAP=host:port`` points the tests at a running cluster; otherwise a one-node
cluster is started with ``rafka cluster up --nodes 1 --detach`` in a temporary directory and
stopped with ``rafka cluster down`` afterwards. Without a broker (``rafka.node_cli`` not there yet)
the integration tests are skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def rafka(*args: str, input: bytes | None = None, timeout: float = 120,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the ``rafka`` CLI in a subprocess (``python -m rafka.cli``)."""
    return subprocess.run([sys.executable, "-m", "rafka.cli", *args], input=input, capture_output=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = os.environ.get("RAFKA_TEST_BOOTSTRAP")
    if given:
        yield given
        return
    if importlib.util.find_spec("rafka.node_cli") is None:
        pytest.skip("no broker yet: rafka/node_cli.py (rafka cluster up) does not exist")
    data = tmp_path_factory.mktemp("rafka-cluster")
    from rafka.cluster import free_port_block

    port = free_port_block(1)
    up = rafka("cluster", "up", "--nodes", "1", "--detach", "--data-dir", str(data),
               "--port", str(port), timeout=180)
    if up.returncode != 0:
        rafka("cluster", "down", "--data-dir", str(data))
        pytest.fail(f"rafka cluster up failed: {up.stderr.decode()[-2000:]}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        rafka("cluster", "down", "--data-dir", str(data))


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_topic(bootstrap: str):  # type: ignore[no-untyped-def]
    from rafka.client import Admin

    def make(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        with Admin(bootstrap) as admin:
            admin.create_topic(name, partitions, 1, config)
        return name

    return make


def drain(c: Any, n: int, timeout_s: float = 60) -> list[Any]:
    """Poll consumer ``c`` until it returned ``n`` records or ``timeout_s`` passed."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            out.extend(recs)
    return out
