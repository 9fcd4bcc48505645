"""Fixtures of the Spark suite: one SparkSession (local[2]) and one rafka cluster per session.

Starting Spark costs ~11 s, so every test shares one session. The cluster is a real one, started
with ``rafka cluster up --detach`` in a temporary data dir on free ports (``RAFKA_SPARK_BOOTSTRAP``
points the suite at an already running cluster instead). Topics get unique names per test.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rafka.cluster import free_port_block

ROOT = Path(__file__).resolve().parents[2]
JAVA17 = "/usr/lib/jvm/java-17-openjdk-amd64"


def _java_available() -> bool:
    if not os.environ.get("JAVA_HOME") and Path(JAVA17).exists():
        os.environ["JAVA_HOME"] = JAVA17
    home = os.environ.get("JAVA_HOME")
    return bool((home and Path(home, "bin", "java").exists()) or shutil.which("java"))


def spark_env() -> None:
    """Environment every Spark process of this suite needs (also used by bench and demo)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must import spark_source, client, broker and log from this tree.
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if not _java_available():
        pytest.skip("Java is not installed (PySpark needs Java 17: set JAVA_HOME)")
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install '.[spark]')")
    spark_env()
    from pyspark.sql import SparkSession
    from rafka.spark_source import RafkaDataSource

    session = (SparkSession.builder.master("local[2]").appName("rafka-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.pollingDelay", "50ms")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RafkaDataSource)
    yield session
    session.stop()


def _rafka(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rafka.cli", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="session")
def bootstrap() -> Iterator[str]:
    given = os.environ.get("RAFKA_SPARK_BOOTSTRAP")
    if given:
        yield given
        return
    if importlib.util.find_spec("rafka.node_cli") is None:
        pytest.skip("no broker yet: `rafka cluster up` (rafka/node_cli.py) is not there")
    # not under pytest's basetemp: concurrent pytest sessions prune old basetemp dirs
    data_dir = Path(tempfile.mkdtemp(prefix="rafka-spark-cluster-"))
    nodes = os.environ.get("RAFKA_SPARK_NODES", "1")
    port = free_port_block(int(nodes))
    try:
        up = _rafka("cluster", "up", "--nodes", nodes, "--data-dir", str(data_dir),
                    "--port", str(port), "--detach",
                    # the retention test needs old segments deleted within seconds
                    "--broker-config", "log.retention.check.interval.ms=500")
        if up.returncode != 0:
            pytest.fail(f"rafka cluster up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
        yield f"127.0.0.1:{port}"
    finally:
        _rafka("cluster", "down", "--data-dir", str(data_dir), timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    stem = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40]
    return f"spark-{stem}-{uuid.uuid4().hex[:6]}"


def wait_for(pred, timeout_s: float = 60.0, what: str = "condition", interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)
