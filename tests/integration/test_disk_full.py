"""Disk full on one node of a real 3-node cluster: the node stays up and recovers by itself.

Node 2's data dir is a small tmpfs (root only, as the chaos ``disk`` fault), filled to the last
byte while records flow. Its controller directory and its stdout/node.log are symlinked off the
tmpfs: a controller that cannot write its Raft journal stops on purpose (fail-stop, exit 74;
tests/kraft/test_full_disk_journal.py), which is not what this test is about.

Checked: while full, partitions node 2 follows keep taking acks=1 writes on their leaders and
node 2 backs off (no partial append); a partition node 2 leads answers KAFKA_STORAGE_ERROR;
a topic deleted meanwhile is closed and removed; the HW checkpoint loop and events.jsonl keep
going. After the space is freed, without a restart:
node 2's follower logs catch up byte for byte, its led partition takes writes again, every
acknowledged record is readable, and the node-2 process is the same one, alive, with no
traceback in its output.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from rafka.chaos_tests.faults.disk import fill, unfill
from rafka.client import Admin, Consumer, Producer, TopicPartition
from rafka.wire.connection import connect
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from rafka.cluster import free_port_block
from tests.broker.harness import batch, part, produce_body
from tests.integration.conftest import LocalCluster

pytestmark = pytest.mark.timeout(300)


def call(port: int, api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with connect("127.0.0.1", port) as conn:
            return (await conn.request(api, body)).body
    return trio.run(go)


def wait_for(cond: Any, what: str, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            v = cond()
        except Exception:  # noqa: BLE001 - not yet
            v = None
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def log_bytes(d: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


@pytest.fixture
def cluster(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root = tmp_path / "cluster"
    n2 = root / "node-2"
    n2.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(n2)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    off = tmp_path / "node-2-off-tmpfs"
    (off / "controller").mkdir(parents=True)
    for name in ("controller", "node.log", "stdout.log"):
        (n2 / name).symlink_to(off / name)
    c = LocalCluster(root, 3, free_port_block(3))
    try:
        c.up()
        yield c, n2, off
    finally:
        try:
            if (root / "cluster.json").exists():
                c._remember()
                c.down()
        finally:
            c.kill_all()
            subprocess.run(["umount", "-l", str(n2)], check=False)


def test_a_full_disk_leaves_the_node_up_and_it_recovers(cluster) -> None:
    c, n2, off = cluster
    topic = "full-disk"
    with Admin(c.bootstrap) as admin:
        admin.create_topic(topic, 3, 3)
        admin.create_topic("doomed", 1, 3)

    def leaders() -> dict[int, int] | None:
        md = call(c.port, ApiKey.METADATA, {"topics": [topic]})
        ps = md["topics"][0]["partitions"]
        ok = len(ps) == 3 and all(p["leader"] > 0 and len(p["isr"]) == 3 for p in ps)
        return {p["partition"]: p["leader"] for p in ps} if ok else None

    lead = wait_for(leaders, "3 partitions with a full ISR")
    followed = [p for p, ldr in lead.items() if ldr != 2]
    led_by_2 = [p for p, ldr in lead.items() if ldr == 2]
    assert followed, lead
    pid2 = c.pids()[2]
    acked: dict[int, list[bytes]] = {p: [] for p in lead}
    with Producer(c.bootstrap, acks=1, linger_ms=5) as prod:
        def send(p: int, tag: str, n: int) -> None:
            vals = [b"%s-%d-%d" % (tag.encode(), p, i) + b"." * 2000 for i in range(n)]
            futs = [prod.send(topic, value=v, partition=p) for v in vals]
            prod.flush()
            for v, f in zip(vals, futs, strict=True):
                f.result(30)
                acked[p].append(v)

        for p in followed:
            send(p, "before", 50)
        fill(n2)  # node 2's volume is full from here on
        for p in followed:  # the leaders take writes; node 2 cannot replicate them
            send(p, "during", 300)
        for p in led_by_2:  # node 2 leads: a named storage error, nothing appended
            port = c.port + 1
            errs = []
            for _ in range(20):
                r = part(call(port, ApiKey.PRODUCE,
                              produce_body(topic, batch(b"z" * 60_000), acks=1, partition=p)))
                errs.append(r["error"])
                if r["error"]:
                    break
            assert errs[-1] == ErrorCode.KAFKA_STORAGE_ERROR, errs
        # a topic deleted while the disk is full: closing its log cannot write the producer
        # snapshot / clean marker (this killed node 1 in the disk-full chaos run)
        with Admin(c.bootstrap) as admin:
            admin.delete_topic("doomed")
        wait_for(lambda: not (n2 / "doomed-0").exists(), "doomed-0 removed on node 2")
        time.sleep(3)  # HW checkpoint loop (1 s), retention, fetcher backoff: all on a full disk
        assert c.pids()[2] == pid2 and os.path.exists(f"/proc/{pid2}")
        unfill(n2)  # space again: no restart

        leader_dirs = {p: c.data_dir / f"node-{lead[p]}" / f"{topic}-{p}" for p in followed}
        for p in followed:
            wait_for(lambda p=p: log_bytes(n2 / f"{topic}-{p}") == log_bytes(leader_dirs[p]),
                     f"node 2 caught up on {topic}/{p}")
        for p in led_by_2:
            r = wait_for(lambda p=p: (lambda resp: resp if resp["error"] == 0 else None)(part(call(
                c.port + 1, ApiKey.PRODUCE, produce_body(topic, batch(b"after"), acks=1,
                                                         partition=p)))),
                         f"a produce to {topic}/{p} on node 2 after space is freed")
        for p in lead:
            send(p, "after", 5)

    for p, vals in acked.items():
        with Consumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest") as cons:
            tp = TopicPartition(topic, p)
            cons.assign([tp])
            got: list[bytes] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not set(vals) <= set(got):
                for recs in cons.poll(timeout_ms=300).values():
                    got += [r.value for r in recs]
            assert set(vals) <= set(got), f"{topic}/{p}: acknowledged records missing"

    assert c.pids()[2] == pid2 and os.path.exists(f"/proc/{pid2}"), "node 2 restarted or died"
    out = (off / "stdout.log").read_text(errors="replace")
    assert "Traceback" not in out and "ExceptionGroup" not in out, out[-3000:]
    # the HW checkpoint loop survived the full disk: it writes again once there is space
    wait_for(lambda: int((n2 / f"{topic}-{followed[0]}" / "high-watermark-checkpoint")
                         .read_text()) > 0, "node 2 checkpoints its HW again")
