"""A real node asks to be unfenced as soon as it has seen its own registration (issue 27).

``rafka cluster up --detach`` returns once every broker is registered *and unfenced*. With
``broker.heartbeat.interval.ms`` at its maximum (60 s) and a session timeout far beyond it, the
only heartbeat that can unfence the broker within the readiness bound (30 s, half the
interval) is the one ``BrokerLifecycle`` sends when its metadata image reaches the
registration record. Before that change the first heartbeat came a whole interval after the
registration, so ``up`` failed with "waiting for [1]" — the same wait that, with the harness's
250 ms interval, sat between every restarted broker and the first topic create after a
kill-all. The test asserts the outcome (ready, then a topic placed on the broker), not a time.
"""

from __future__ import annotations

from pathlib import Path

from rafka.client import Admin

from rafka.cluster import free_port_block

from .conftest import LocalCluster, rafka_cli


def test_a_fresh_broker_is_unfenced_without_waiting_a_heartbeat_interval(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "cluster", 1, free_port_block(1),
                     broker_config={"broker.heartbeat.interval.ms": 60_000},
                     controller_config={"broker.session.timeout.ms": 600_000})
    try:
        r = rafka_cli("cluster", "up", "--nodes", "1", "--data-dir", str(c.data_dir),
                      "--port", str(c.port), "--detach", "--ready-timeout", "30",
                      "--broker-config", "broker.heartbeat.interval.ms=60000",
                      "--controller-config", "broker.session.timeout.ms=600000")
        assert r.returncode == 0, f"cluster up failed:\n{r.stdout}\n{r.stderr}"
        with Admin(bootstrap_servers=c.bootstrap, request_timeout_ms=10_000) as admin:
            assert admin.create_topic("placed", 1, 1)  # an unfenced broker to place it on
    finally:
        c.stop()
