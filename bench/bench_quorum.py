"""Controller quorum benchmark: a real 3-node rafka cluster (combined nodes) on loopback.

    .venv/bin/python -m bench --only quorum [--runs N]

Figures:

* ``failover``: seconds from ``kill -9`` of the active controller's process to the next
  successful CREATE_TOPICS sent through a surviving node (the node forwards it to whichever
  controller is active; the client retries at once on an error). Includes detection, the Raft
  election, the new leader's ``LeaderChange`` commit and the topic's own commit. After each
  kill the node is restarted (``cluster up``) and the quorum is let converge before the next
  one. Median, min and max of ``max(10, runs)`` kills (``runs`` holds every sample).
* ``metadata_propagation_p50`` / ``_p99``: ms from sending CREATE_TOPICS to a broker until the
  topic is visible in METADATA on *every* broker (3 pollers, one per broker, each on its own
  connection, polling back to back). 100 topics per run; p50/p99 per run, medians over runs.
* ``create_topics_per_s`` / ``alter_configs_per_s``: metadata operations per second, 32 in
  flight through one broker (forwarded to the active controller; each one a separate Raft
  command, answered after it is committed, applied and fsynced on the controller and applied by
  the forwarding broker).

Session timeout, Raft timeouts: the defaults of ``rafka cluster up``
(``raft.min.timeout.ms`` 350, ``raft.max.timeout.ms`` 1000, AppendEntries every 100 ms).
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from rafka.wire.connection import Connection, connect
from rafka.wire.protocol import ApiKey

from rafka.cluster import _reap, cluster_up, free_port_block, load_cluster, stop_nodes

__all__ = ["run"]

NODES = 3
PROPAGATION_TOPICS = 100
OPS = 600
IN_FLIGHT = 32


class _Cluster:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rafka-bench-quorum-"))
        self.port = free_port_block(NODES)
        self.addrs = [("127.0.0.1", self.port + i) for i in range(NODES)]

    def up(self) -> None:
        cluster_up(self.dir, NODES, "127.0.0.1", self.port, ready_timeout_s=120, echo=lambda _m: None)

    def pid(self, node_id: int) -> int:
        state = load_cluster(self.dir)
        assert state is not None
        pid = next(n.pid for n in state["nodes"] if n.id == node_id)
        assert pid
        return int(pid)

    def __enter__(self) -> _Cluster:
        self.up()
        return self

    def __exit__(self, *exc: Any) -> None:
        state = load_cluster(self.dir)
        if state is not None:
            stop_nodes(self.dir, state, timeout_s=30)
        shutil.rmtree(self.dir, ignore_errors=True)


async def _req(conn: Connection, api: int, body: dict[str, Any]) -> dict[str, Any]:
    return dict((await conn.request(api, body)).body)


def _create_body(name: str) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 30_000}


def _ok(body: dict[str, Any]) -> bool:
    return not body.get("error") and all(t.get("error") in (0, 36) for t in body.get("topics", [{}]))


async def _settled(c: _Cluster) -> int:
    """The active controller once every voter is reachable with lag 0."""
    with trio.fail_after(120):
        while True:
            try:
                async with connect(*c.addrs[0]) as conn:
                    q = await _req(conn, ApiKey.DESCRIBE_QUORUM, {})
                if not q.get("error") and all(v["reachable"] and v["lag"] == 0 for v in q["voters"]):
                    return int(q["leader_id"])
            except Exception:  # noqa: BLE001 - not yet
                pass
            await trio.sleep(0.1)


async def _one_failover(c: _Cluster, k: int) -> float:
    leader = await _settled(c)
    survivor = next(i for i in range(1, NODES + 1) if i != leader)
    async with connect(*c.addrs[survivor - 1]) as conn:
        assert _ok(await _req(conn, ApiKey.CREATE_TOPICS, _create_body(f"warm-{k}")))
        pid = c.pid(leader)
        t0 = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        with trio.fail_after(60):
            while True:
                body = await _req(conn, ApiKey.CREATE_TOPICS, _create_body(f"failover-{k}"))
                if _ok(body):
                    break
                await trio.sleep(0.005)
        took = time.perf_counter() - t0
    _reap()
    return took


async def _propagation_ms(c: _Cluster, prefix: str, n: int) -> list[float]:
    out: list[float] = []
    async with connect(*c.addrs[0]) as creator:
        conns = []
        async with trio.open_nursery() as nursery:
            for addr in c.addrs:
                conn = await nursery.start(_open_conn, addr)
                conns.append(conn)
            for k in range(n):
                name = f"{prefix}-{k}"
                seen: list[float] = []
                t0 = time.perf_counter()
                async with trio.open_nursery() as inner:
                    async def watch(conn: Connection, name: str = name, seen: list[float] = seen) -> None:
                        while True:
                            md = await _req(conn, ApiKey.METADATA, {"topics": [name]})
                            t = md["topics"][0]
                            if t["error"] == 0 and t["partitions"] and t["partitions"][0]["leader"] >= 0:
                                seen.append(time.perf_counter())
                                return
                            await trio.sleep(0.001)  # 3 pollers must not starve the 2 cores

                    for conn in conns:
                        inner.start_soon(watch, conn)
                    assert _ok(await _req(creator, ApiKey.CREATE_TOPICS, _create_body(name)))
                out.append((max(seen) - t0) * 1000)
            nursery.cancel_scope.cancel()
    return out


async def _open_conn(addr: tuple[str, int], *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    async with connect(*addr) as conn:
        task_status.started(conn)
        await trio.sleep_forever()


async def _ops_per_s(c: _Cluster, kind: str, tag: str) -> float:
    async with connect(*c.addrs[0]) as conn:
        if kind == "alter":
            assert _ok(await _req(conn, ApiKey.CREATE_TOPICS, _create_body(f"cfg-{tag}")))
        limiter = trio.Semaphore(IN_FLIGHT)
        failures = []

        async def one(i: int) -> None:
            try:
                if kind == "create":
                    body = await _req(conn, ApiKey.CREATE_TOPICS, _create_body(f"ops-{tag}-{i}"))
                else:
                    body = await _req(conn, ApiKey.ALTER_CONFIGS, {"topics": [
                        {"name": f"cfg-{tag}", "configs": {"retention.ms": str(60_000 + i)}}]})
                if not _ok(body):
                    failures.append(body)
            finally:
                limiter.release()

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(OPS):
                await limiter.acquire()
                nursery.start_soon(one, i)
        rate = OPS / (time.perf_counter() - t0)
        assert not failures, failures[:3]
        return rate


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


def run(runs: int = 3) -> dict[str, Any]:
    failover: list[float] = []
    p50: list[float] = []
    p99: list[float] = []
    creates: list[float] = []
    alters: list[float] = []
    with _Cluster() as c:
        for r in range(runs):
            lat = trio.run(_propagation_ms, c, f"prop{r}", PROPAGATION_TOPICS)
            p50.append(_pct(lat, 0.5))
            p99.append(_pct(lat, 0.99))
            creates.append(trio.run(_ops_per_s, c, "create", str(r)))
            alters.append(trio.run(_ops_per_s, c, "alter", str(r)))
        for k in range(max(10, runs)):
            failover.append(trio.run(_one_failover, c, k))
            c.up()  # bring the killed node back before the next kill
        trio.run(_settled, c)
    return {
        "failover": {"median": statistics.median(failover), "unit": "s", "runs": failover,
                     "min": min(failover), "max": max(failover), "kills": len(failover),
                     "target": "<= 1 s median"},
        "metadata_propagation_p50": {"median": statistics.median(p50), "unit": "ms", "runs": p50,
                                     "topics_per_run": PROPAGATION_TOPICS, "target": "<= 50 ms"},
        "metadata_propagation_p99": {"median": statistics.median(p99), "unit": "ms", "runs": p99,
                                     "topics_per_run": PROPAGATION_TOPICS},
        "create_topics_per_s": {"median": statistics.median(creates), "unit": "ops/s", "runs": creates,
                                "in_flight": IN_FLIGHT},
        "alter_configs_per_s": {"median": statistics.median(alters), "unit": "ops/s", "runs": alters,
                                "in_flight": IN_FLIGHT},
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(1), indent=2))
