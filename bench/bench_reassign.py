"""Reassignment benchmark: how fast a new replica catches up, throttled and not (kraft/reassign.py).

    .venv/bin/python -m bench --only reassign [--runs N]

A real 3-node cluster (combined nodes) plus a broker-only node 4 (``bench.cluster.add_broker_node``,
the documented scale-out). One RF-3 partition holding ``RECORDS`` random 1000-byte records is
moved back and forth: ``[..] -> [2, 3, 4]`` with ``--throttle THROTTLE_BYTES_PER_S`` (node 4
copies the whole log), then ``-> [2, 3, 1]`` unthrottled (node 1, which deleted its copy when it
was removed, copies it again). Each pair is measured in the same run, from the admin call to the
moment no broker lists the reassignment and METADATA shows the target replicas.

Figures: ``throttled_s`` / ``unthrottled_s`` (seconds per move, medians), the ratio of the two,
and ``throttled_rate_over_throttle`` — bytes copied per second while throttled over the
throttle (about 1: the throttle holds; a little above because of the one-second bucket).
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from typing import Any

from rafka.client.sync import Admin, Producer
from rafka.client.types import TopicPartition

from bench.cluster import add_broker_node, cluster_dir

__all__ = ["run"]

RECORDS = 8_000
THROTTLE_BYTES_PER_S = 1_000_000
TOPIC = "reassign-bench"


def _moved(admin: Admin, tp: TopicPartition, target: list[int]) -> bool:
    return (not admin.list_partition_reassignments([tp])
            and list(admin.describe_topic(tp.topic).partitions[tp.partition].replicas) == target)


def _move(admin: Admin, tp: TopicPartition, target: list[int], throttle: int) -> float:
    t0 = time.monotonic()
    admin.alter_partition_reassignments({tp: target}, throttle_bytes_per_s=throttle)
    deadline = t0 + 600
    while not _moved(admin, tp, target):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the move to {target} did not finish in 600 s")
        time.sleep(0.05)
    return time.monotonic() - t0


def _broker_ready(admin: Admin, broker_id: int) -> bool:
    return any(o["id"] == broker_id and o["fenced"] is False for o in admin.describe_quorum()["observers"])


def run(runs: int) -> dict[str, Any]:
    with cluster_dir(3) as (bootstrap, data, _port):
        node4, addr = add_broker_node(data, 4, data / "node-4.out")
        try:
            boot = f"{bootstrap},{addr}"
            with Admin(bootstrap_servers=boot) as admin:
                admin.create_topic(TOPIC, partitions=1, replication_factor=3)
                deadline = time.monotonic() + 120
                while not _broker_ready(admin, 4):
                    if time.monotonic() > deadline:
                        raise RuntimeError("broker 4 did not join")
                    time.sleep(0.2)
                with Producer(bootstrap_servers=boot, acks="all", linger_ms=5) as p:
                    for _ in range(RECORDS):
                        p.send(TOPIC, os.urandom(1000))
                    p.flush()
                tp = TopicPartition(TOPIC, 0)
                size = sum(f.stat().st_size for f in (data / "node-2").rglob(f"{TOPIC}-0/*.log"))
                throttled, free = [], []
                for _ in range(runs):
                    throttled.append(_move(admin, tp, [2, 3, 4], THROTTLE_BYTES_PER_S))
                    free.append(_move(admin, tp, [2, 3, 1], 0))
        finally:
            node4.send_signal(signal.SIGKILL)
            node4.wait()
    rate = [size / t / THROTTLE_BYTES_PER_S for t in throttled]
    return {
        "throttled_s": {"runs": throttled, "unit": "s", "median": statistics.median(throttled),
                        "ratio_of": "unthrottled_s", "log_bytes": size,
                        "throttle_bytes_per_s": THROTTLE_BYTES_PER_S},
        "unthrottled_s": {"runs": free, "unit": "s", "median": statistics.median(free)},
        "throttled_rate_over_throttle": {"runs": rate, "unit": "x", "median": statistics.median(rate)},
    }
