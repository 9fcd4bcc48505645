"""Measure controller failover after kill -9 of the active controller (not a test).

    .venv/bin/python -m tests.kraft.failover_bench --kills 7 [--set raft.min.timeout.ms=700 ...]

Each round: find the active controller, kill -9 it, time until another voter answers as
active controller AND commits a CREATE_TOPICS; restart the killed voter; wait until all
three converge. Prints every sample and the median / max.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import trio
from rafka.wire.protocol import ApiKey

from tests.kraft.cluster_util import VoterCluster, live_broker


async def main(kills: int, settings: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        c = VoterCluster(Path(tmp), settings=settings)
        c.start_all()
        samples = []
        try:
            leader = await c.active_controller()
            async with live_broker(c):
                for k in range(kills):
                    await c.wait_converged(c.ids)
                    leader = await c.active_controller()
                    t0 = time.monotonic()
                    c.kill(leader)
                    new = await c.active_controller([i for i in c.ids if i != leader])
                    t_active = time.monotonic() - t0
                    body = {"topics": [{"name": f"f{k}", "num_partitions": 1, "replication_factor": 1}],
                            "timeout_ms": 5000}
                    r = await c.request(new, ApiKey.CREATE_TOPICS, body)
                    t_commit = time.monotonic() - t0
                    assert r["topics"][0]["error"] == 0, r
                    samples.append(t_commit)
                    print(f"kill {k + 1}: voter {leader} -> {new}: active after {t_active:.3f}s, "
                          f"first decision committed after {t_commit:.3f}s", flush=True)
                    c.start(leader)
                    await c.wait_rpc(leader)
        finally:
            c.stop_all()
        print(f"failover over {len(samples)} kills: median {statistics.median(samples):.3f}s, "
              f"min {min(samples):.3f}s, max {max(samples):.3f}s")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--kills", type=int, default=7)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a controller setting for every voter (e.g. raft.min.timeout.ms=700)")
    a = p.parse_args()
    trio.run(main, a.kills, dict(kv.split("=", 1) for kv in a.set))
