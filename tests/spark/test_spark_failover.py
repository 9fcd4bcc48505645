"""Slow: a streaming query keeps exactly-once while a partition leader is killed and restarted.

Runs its own 3-node cluster (replication factor 3), so it is marked ``slow``: ``make test``
skips it, ``make test-all`` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from rafka.cluster import free_port_block
from tests.spark.conftest import _rafka, wait_for
from tests.spark.helpers import Feeder, create_topic, stream_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    from rafka.client import Admin

    with Admin(bootstrap_servers=bootstrap) as admin:
        for p in admin.describe_topic(topic).partitions:
            if p.partition == partition:
                return p.leader
    raise AssertionError(f"{topic}-{partition} not found")


def test_stream_exactly_once_across_leader_failover(spark: Any, tmp_path: Path) -> None:
    data = Path(tempfile.mkdtemp(prefix="rafka-spark-failover-"))
    port = free_port_block(3)
    up = _rafka("cluster", "up", "--nodes", "3", "--data-dir", str(data), "--port", str(port),
                "--detach")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        bootstrap = ",".join(f"127.0.0.1:{port + i}" for i in range(3))
        topic = "failover"
        create_topic(bootstrap, topic, 2, replication_factor=3)
        feeder = Feeder(bootstrap, topic, rate_per_s=300).start()
        df = (spark.readStream.format("rafka")
              .options(**stream_options(bootstrap, topic, maxOffsetsPerTrigger="500")).load())
        out = tmp_path / "out"
        q = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="300 milliseconds").start())
        try:
            wait_for(lambda: sum(p["numInputRows"] for p in q.recentProgress) >= 300, 120,
                     "first batches")
            victim = _leader(bootstrap, topic, 0)
            nodes = json.loads((data / "cluster.json").read_text())["nodes"]
            pid = next(n["pid"] for n in nodes if n["id"] == victim)
            os.kill(pid, signal.SIGKILL)
            time.sleep(5)                              # the query goes on with a new leader
            again = _rafka("cluster", "up", "--nodes", "3", "--data-dir", str(data),
                           "--port", str(port), "--detach")
            assert again.returncode == 0, again.stdout + again.stderr
            time.sleep(3)
        finally:
            sent = feeder.stop()

        def total() -> int:
            prog = q.lastProgress
            end = prog and prog["sources"][0].get("endOffset")
            if not end:
                return -1
            end = json.loads(end) if isinstance(end, str) else end
            return sum(end.get(topic, {}).values())

        try:
            wait_for(lambda: total() >= sent, 120, f"the query to reach {sent} records")
            q.processAllAvailable()
            assert q.exception() is None
        finally:
            q.stop()
        got = sorted(bytes(r.value) for r in
                     spark.read.schema("value binary").parquet(str(out)).collect())
        assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicates"
        assert got == sorted(b"v%d" % i for i in range(sent))
    finally:
        _rafka("cluster", "down", "--data-dir", str(data), timeout=60)
        shutil.rmtree(data, ignore_errors=True)
