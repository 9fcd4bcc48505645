"""A topic's own ``flush.messages`` on a real 3-node cluster (broker/flush_rule.py): on nodes
running ``log.flush.policy=none``, a topic created with ``flush.messages=1`` is fsynced by every
replica, leader and followers, while a topic that sets nothing is fsynced by none. Each node's
``rafka_log_flush_rounds_total`` (every fsync round, a follower's syncs included) says which.

No wall-clock assertion: counts before and after, waits are "until".
"""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from rafka.client.metrics_view import parse_metrics
from rafka.client.sync import Admin, Producer
from rafka.wire.ports import METRICS_PORT_OFFSET

from .conftest import LocalCluster, wait_until

pytestmark = pytest.mark.timeout(240)

ROUNDS = "rafka_log_flush_rounds_total"


def _rounds(c: LocalCluster) -> list[float]:
    out = []
    for i in range(c.nodes):
        url = f"http://127.0.0.1:{c.port + METRICS_PORT_OFFSET + i}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            out.append(parse_metrics(url, 0.0, resp.read().decode()).get(ROUNDS))
    return out


def _produce(c: LocalCluster, topic: str, n: int) -> None:
    with Producer(bootstrap_servers=c.bootstrap, acks="all") as p:
        for i in range(n):
            p.send(topic, b"v%d" % i, partition=0).result(timeout=30)


def test_a_topic_asking_for_fsync_gets_it_on_every_replica_of_a_none_cluster(cluster_factory: Any) -> None:
    c: LocalCluster = cluster_factory(3, broker_config={"log.flush.policy": "none"})
    with Admin(c.bootstrap) as admin:
        admin.create_topic("safe", 1, 3, {"flush.messages": "1", "min.insync.replicas": "2"})
        admin.create_topic("fast", 1, 3, {"min.insync.replicas": "2"})
        for t in ("safe", "fast"):
            wait_until(lambda t=t: len(admin.describe_topic(t).partitions[0].isr) == 3,
                       f"{t}'s ISR is all three nodes")
    before = _rounds(c)
    _produce(c, "fast", 20)
    assert _rounds(c) == before  # the node's policy: no replica fsynced anything
    _produce(c, "safe", 20)
    after = _rounds(c)
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
