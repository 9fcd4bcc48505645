"""Observability on a real single-node ``rafka cluster up`` (issue 15): the node's Prometheus
endpoint scraped over HTTP while records are produced and consumed, and ``rafka top --once``.

No wall-clock assertion: values are compared before/after the traffic, waits are "until".
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest
from rafka.client.metrics_view import Scrape, parse_metrics
from rafka.client.sync import Admin, Consumer, Producer

from rafka.cluster import METRICS_PORT_OFFSET

from .conftest import PROJECT_ROOT, LocalCluster, wait_until

pytestmark = pytest.mark.timeout(240)


def scrape(c: LocalCluster) -> Scrape:
    url = f"http://127.0.0.1:{c.port + METRICS_PORT_OFFSET}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return parse_metrics(url, time.monotonic(), resp.read().decode())


def test_metrics_move_with_traffic_and_top_shows_them(cluster_factory: Any) -> None:
    c: LocalCluster = cluster_factory(1)
    again = c.up()  # already running: prints where the metrics are again
    assert f"metrics: http://127.0.0.1:{c.port + METRICS_PORT_OFFSET}/metrics" in again.stderr
    before = scrape(c)
    assert before.get("rafka_active_controller") == 1
    assert before.get("rafka_raft_leader_changes_total") >= 1
    assert before.get("rafka_raft_commit_index") >= 1
    # the quorum watchdog (kraft/raft_watchdog.py): idle reads 0, listener bound, no stall.
    # Right after ``up`` the quorum may not be idle yet: a 0.5 s sample that catches an entry
    # still uncommitted (the broker's start-up writes) reads 0.5 until the next one (the
    # fresh-clone run of session 24 scraped exactly that once), so wait for an idle sample
    wait_until(lambda: scrape(c).get("rafka_quorum_seconds_since_commit") == 0,
               "the idle quorum's seconds_since_commit reads 0", 10)
    assert before.get("rafka_quorum_stalled") == 0 and before.get("rafka_raft_listener_bound") == 1
    assert before.get("rafka_fenced_brokers") == 0 and before.get("rafka_offline_partitions") == 0

    with Admin(c.bootstrap) as admin:
        admin.create_topic("mt", 2)
        admin.create_topic("live", 1)
    with Producer(c.bootstrap) as p:
        for i in range(20):
            p.send("mt", b"x" * 100, key=str(i).encode())
        p.flush()
    with Consumer("mt", bootstrap_servers=c.bootstrap, group_id="g", auto_offset_reset="earliest") as cons:
        seen = 0
        for _rec in cons:
            seen += 1
            if seen == 20:
                break
        cons.commit()
    with Producer(c.bootstrap) as p:
        for i in range(7):
            p.send("mt", b"y" * 100, key=str(i).encode())
        p.flush()

    after = wait_until(lambda: (s := scrape(c)).get("rafka_consumer_group_lag_sum", -1, group="g") == 7 and s,
                       "group g's lag to be 7")
    assert after.get("rafka_topic_bytes_in_total", topic="mt") > 27 * 100
    assert after.get("rafka_topic_bytes_out_total", topic="mt") > 20 * 100
    for api in ("produce", "fetch", "offset_commit"):
        assert after.get("rafka_request_duration_seconds_count", api=api) > \
            before.get("rafka_request_duration_seconds_count", api=api)
    assert after.get("rafka_log_flush_duration_seconds_count") > before.get("rafka_log_flush_duration_seconds_count")
    assert after.get("rafka_leader_partitions") >= 3  # mt/0, mt/1, live/0 (+ __consumer_offsets)
    assert after.get("rafka_under_replicated_partitions") == 0
    committed = {int(lb["partition"]): v for lb, v in after.series("rafka_consumer_group_committed_offset")
                 if lb["group"] == "g"}
    assert sum(committed.values()) == 20
    assert after.get("rafka_consumer_groups", state="Empty") >= 1  # the consumer left
    assert after.get("rafka_raft_commit_index") >= before.get("rafka_raft_commit_index")

    # rafka top --once while "live" receives records: its throughput and g's lag are on screen
    stop = threading.Event()

    def produce_live() -> None:
        with Producer(c.bootstrap, linger_ms=5) as p:
            while not stop.is_set():
                p.send("live", b"z" * 200)
                p.flush()

    feeder = threading.Thread(target=produce_live)
    feeder.start()
    try:
        wait_until(lambda: scrape(c).get("rafka_topic_bytes_in_total", topic="live") > 0, "live traffic")
        env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "COLUMNS": "160"}
        r = subprocess.run([sys.executable, "-m", "rafka.cli", "top", "--once", "--bootstrap", c.bootstrap],
                           capture_output=True, text=True, timeout=60, cwd=str(PROJECT_ROOT), env=env)
    finally:
        stop.set()
        feeder.join()
    assert r.returncode == 0, r.stderr
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in r.stdout.splitlines() if line.startswith("│")}
    assert "nodes 1/1" in r.stdout and "under-replicated 0" in r.stdout
    live_in_rate = rows["live"][0]
    assert live_in_rate != "0 B", r.stdout  # bytes/s over the one-second frame
    assert rows["g"][:3] == ["Empty", "0", "7"], r.stdout
    assert "mt/0:" in rows["g"][3] and "mt/1:" in rows["g"][3]
