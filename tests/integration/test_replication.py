"""Replication on real processes (issue 4): 3 combined nodes, RF=3, min.insync.replicas=2.

Each test starts its own cluster through the ``cluster_factory`` fixture, with a short
``replica.lag.time.max.ms`` so that ISR changes happen within seconds. Requests go over the raw
protocol (``rafka.wire.connection``) where a test needs to see exact error codes and offsets, and
through ``AsyncProducer`` where it needs a real idempotent producer. Nothing asserts wall-clock
times; every wait is "until a condition holds", bounded by a hang guard.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from rafka.client.aio.producer import AsyncProducer
from rafka.log.batch import build_batch, decode_records, iter_batches
from rafka.wire.connection import connect
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from rafka.cluster import load_cluster, start_missing, wait_ready
from tests.broker.harness import batch, fetch_body, part, produce_body

HANG_GUARD_S = 60
KILLS = int(os.environ.get("RAFKA_TEST_KILLS", "20"))
LAG_MS = 2000
FAST = {"replica.lag.time.max.ms": LAG_MS, "replica.fetch.wait.max.ms": 200,
        "broker.heartbeat.interval.ms": 200}
TOPIC_CONFIG = {"min.insync.replicas": "2"}


# --------------------------------------------------------------------------- failure dumps

_CLUSTERS: list[Any] = []  # this test's clusters, for the dump a timed-out wait writes


@pytest.fixture
def cluster_factory(cluster_factory: Any) -> Iterator[Any]:
    """The shared factory, remembering each cluster so that a timed-out ``eventually`` can dump
    what the nodes saw at that moment (see ``dump_clusters``)."""
    def make(*args: Any, **kwargs: Any) -> Any:
        c = cluster_factory(*args, **kwargs)
        _CLUSTERS.append(c)
        return c

    _CLUSTERS.clear()
    try:
        yield make
    finally:
        _CLUSTERS.clear()


def _tail(path: Path, lines: int, skip: tuple[str, ...] = ()) -> list[str]:
    try:
        out = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return [f"({exc})"]
    if skip:
        out = [ln for ln in out if not any(s in ln for s in skip)]
    return out[-lines:]


def _cli(c: Any, *args: str) -> str:
    try:
        r = subprocess.run([sys.executable, "-m", "rafka.cli", *args, "--bootstrap", c.bootstrap,
                            "--json"], capture_output=True, text=True, timeout=20,
                           cwd=str(Path(__file__).resolve().parents[2]))
        return (r.stdout + r.stderr).strip()
    except Exception as exc:  # noqa: BLE001 - a dump must not fail
        return f"({exc!r})"


def dump_clusters(why: str) -> str:
    """Write what every node of every cluster of this test saw (log tails, node events other
    than HW moves, topic and quorum descriptions, pids) to ``DATA_DIR/failure-dump.txt`` and
    return it: the evidence for a wait that timed out on a loaded machine."""
    parts: list[str] = []
    for c in _CLUSTERS:
        text = [f"=== {why}: cluster {c.data_dir}"]
        try:
            text.append(f"pids: {c.pids()}")
        except Exception as exc:  # noqa: BLE001
            text.append(f"pids: ({exc!r})")
        try:
            text.append(f"load: {os.getloadavg()}")
        except OSError:
            pass
        for topic in sorted({d.name.rsplit("-", 1)[0] for d in c.data_dir.glob("node-*/*-[0-9]*")
                             if d.is_dir() and not d.name.startswith("@")}):
            text.append(f"--- rafka topic describe {topic} --json\n"
                        + _cli(c, "topic", "describe", topic))
        text.append("--- rafka quorum describe --json\n" + _cli(c, "quorum", "describe"))
        for n in range(1, c.nodes + 1):
            d = c.data_dir / f"node-{n}"
            text.append(f"--- node {n} node.log (tail)")
            text += _tail(d / "node.log", 80)
            text.append(f"--- node {n} events.jsonl (tail, without hw)")
            text += _tail(d / "events.jsonl", 40, skip=('"event": "hw"', '"event":"hw"'))
        dump = "\n".join(text)
        try:
            (c.data_dir / "failure-dump.txt").write_text(dump + "\n")
        except OSError:
            pass
        parts.append(dump)
    return "\n".join(parts)


# --------------------------------------------------------------------------- helpers


async def request(addr: tuple[str, int], api: int, body: dict[str, Any]) -> Any:
    async with connect(*addr) as conn:
        return await conn.request(api, body)


async def call(addr: tuple[str, int], api: int, body: dict[str, Any]) -> dict[str, Any]:
    return (await request(addr, api, body)).body


async def eventually(fn: Any, what: str = "condition") -> Any:
    last: Any = None
    with trio.move_on_after(HANG_GUARD_S):
        while True:
            try:
                out = await fn()
                if out:
                    return out
                last = out
            except Exception as exc:  # noqa: BLE001 - not yet (node down, no leader...)
                last = exc
            await trio.sleep(0.1)
    dump = await trio.to_thread.run_sync(dump_clusters, f"timed out waiting for {what}")
    print(dump)  # shown by pytest with the failure; also in DATA_DIR/failure-dump.txt
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


async def create_topic(c: Any, name: str) -> None:
    async def created() -> bool:
        body = await call(c.addresses()[0], ApiKey.CREATE_TOPICS, {
            "topics": [{"name": name, "num_partitions": 1, "replication_factor": 3,
                        "configs": TOPIC_CONFIG}], "timeout_ms": 30_000})
        err = body["topics"][0]["error"]
        return err in (0, ErrorCode.TOPIC_ALREADY_EXISTS)

    await eventually(created, f"topic {name}")
    await wait_isr(c, name, 3)


async def partition_md(c: Any, topic: str, via: list[int] | None = None) -> dict[str, Any]:
    """Leader/ISR of partition 0 as the first answering node (of ``via``) sees it."""
    ids = via or list(range(1, c.nodes + 1))
    last: Exception | None = None
    for i in ids:
        try:
            md = await call(c.addresses()[i - 1], ApiKey.METADATA, {"topics": [topic]})
            p = md["topics"][0]["partitions"][0]
            p["fenced"] = {b["node_id"] for b in md["brokers"] if b.get("fenced")}
            return p
        except Exception as exc:  # noqa: BLE001 - try the next node
            last = exc
    raise AssertionError(f"no node answered METADATA: {last}")


async def wait_isr(c: Any, topic: str, size: int, via: list[int] | None = None) -> dict[str, Any]:
    async def ok() -> dict[str, Any] | None:
        p = await partition_md(c, topic, via)
        return p if p["leader"] >= 0 and len(p["isr"]) == size else None

    return await eventually(ok, f"{topic} ISR of {size}")


async def wait_leader(c: Any, topic: str, among: set[int], via: list[int]) -> int:
    async def ok() -> int | None:
        p = await partition_md(c, topic, via)
        return p["leader"] if p["leader"] in among else None

    return await eventually(ok, f"{topic} led by one of {sorted(among)}")


def addr(c: Any, node: int) -> tuple[str, int]:
    return c.addresses()[node - 1]


async def produce(c: Any, node: int, topic: str, records: bytes, acks: int = -1) -> dict[str, Any]:
    return part(await call(addr(c, node), ApiKey.PRODUCE, produce_body(topic, records, acks=acks)))


async def produce_until_ok(c: Any, topic: str, records: bytes, via: list[int]) -> dict[str, Any]:
    async def ok() -> dict[str, Any] | None:
        leader = (await partition_md(c, topic, via))["leader"]
        r = await produce(c, leader, topic, records)
        return r if r["error"] == 0 else None

    return await eventually(ok, "an acknowledged produce")


async def log_end(c: Any, node: int, topic: str) -> int:
    body = await call(addr(c, node), ApiKey.LIST_OFFSETS, {
        "replica_id": node, "topics": [{"name": topic, "partitions": [
            {"partition": 0, "timestamp": -1}]}]})
    entry = part(body)
    assert entry["error"] == 0, entry
    return entry["offset"]


async def read_all(c: Any, node: int, topic: str) -> tuple[list[tuple[int, bytes]], int]:
    """Every record a consumer can read from ``node`` (the leader): ``[(offset, value)]``, HW."""
    out: list[tuple[int, bytes]] = []
    offset, hw = 0, -1
    while True:
        resp = await request(addr(c, node), ApiKey.FETCH, fetch_body(topic, offset, max_bytes=4 << 20))
        entry = part(resp.body)
        assert entry["error"] == 0, entry
        hw = entry["high_watermark"]
        raw = bytes(resp.raw)
        if not raw:
            return out, hw
        for pos, _h in iter_batches(raw):
            for rec in decode_records(raw, pos):
                assert rec.offset < hw, f"consumer served offset {rec.offset} above HW {hw}"
                out.append((rec.offset, rec.value))
                offset = rec.offset + 1


async def sigkill(c: Any, node: int) -> None:
    await trio.to_thread.run_sync(c.kill, node)


async def up(c: Any) -> None:
    await trio.to_thread.run_sync(c.up)


def _restart_stopped(c: Any) -> None:
    """What ``rafka cluster up`` does on an existing cluster (start the nodes that are not
    running, wait until every node sees every broker unfenced), in this process: the CLI's own
    interpreter start and imports cost several seconds per restart on a loaded 2-core box,
    on top of the node's."""
    data_dir = c.data_dir.resolve()
    state = load_cluster(data_dir)
    assert state is not None, f"no cluster in {data_dir}"
    start_missing(data_dir, state)
    c._remember()  # killed at teardown whatever happens
    wait_ready(state, 120)


async def restart(c: Any) -> None:
    await trio.to_thread.run_sync(_restart_stopped, c)


def node_events(c: Any, node: int, event: str) -> list[dict[str, Any]]:
    path = c.data_dir / f"node-{node}" / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e.get("event") == event]


# --------------------------------------------------------------------------- tests


# Each kill costs a node restart (interpreter start and imports: ~3 s idle, 7-15 s on a 2-core
# box at load 10-18), so the default 300 s per test is too short for 20 kills there.
@pytest.mark.timeout(120 + 30 * KILLS)
async def test_acks_all_survives_twenty_leader_kills(cluster_factory: Any) -> None:
    """kill -9 the partition leader 20 times while an idempotent acks=all producer writes:
    every acknowledged record is read back exactly once, at its acknowledged offset, in order."""
    c = cluster_factory(3, broker_config=FAST)
    topic = "kills"
    await create_topic(c, topic)
    acked: dict[int, int] = {}  # value -> offset
    failed: list[BaseException] = []
    sent = 0
    stop = trio.Event()

    async with AsyncProducer(c.bootstrap, acks="all", enable_idempotence=True, linger_ms=2,
                             retry_backoff_ms=50, request_timeout_ms=5000,
                             delivery_timeout_ms=120_000) as p:
        def on_done(fut: Any, i: int) -> None:
            exc = fut.exception()
            if exc is not None:
                failed.append(exc)  # counted; never acknowledged
            else:
                acked[i] = fut.result().offset

        async def writer() -> None:
            nonlocal sent
            while not stop.is_set():
                for _ in range(20):
                    fut = await p.send(topic, value=b"%d" % sent, partition=0)
                    fut.add_done_callback(lambda f, i=sent: on_done(f, i))
                    sent += 1
                await trio.sleep(0.01)

        leaders = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            for i in range(KILLS):
                t0 = trio.current_time()
                md = await wait_isr(c, topic, 3)
                t1 = trio.current_time()
                leaders.append(md["leader"])
                before = len(acked)
                await sigkill(c, md["leader"])
                await restart(c)  # the restarted node re-registers: leadership moves at once
                t2 = trio.current_time()
                await eventually(_async(lambda b=before: len(acked) > b + 20), "progress")
                print(f"kill {i + 1}/{KILLS}: leader {md['leader']}; ISR of 3 after "
                      f"{t1 - t0:.1f} s, restarted after {t2 - t1:.1f} s, progress after "
                      f"{trio.current_time() - t2:.1f} s; {len(acked)} acked")
            stop.set()
        await p.flush()

    assert not failed, failed[:3]
    assert len(set(leaders)) > 1
    md = await wait_isr(c, topic, 3)
    records, hw = await read_all(c, md["leader"], topic)
    values = [int(v) for _, v in records]
    assert len(values) == len(set(values)), "a record was written twice"
    assert values == sorted(values), "records out of order"
    by_value = {int(v): o for o, v in records}
    for v, o in acked.items():
        assert by_value.get(v) == o, f"acknowledged record {v} at {o}: found at {by_value.get(v)}"
    assert len(acked) == sent and hw == len(records)


def _async(fn: Any) -> Any:
    async def run() -> Any:
        return fn()
    return run


async def test_paused_follower_leaves_isr_and_rejoins(cluster_factory: Any) -> None:
    """SIGSTOP a follower: after replica.lag.time.max.ms the leader drops it from the ISR (the
    broker session is long, so this is the lag rule, not fencing); after SIGCONT it rejoins."""
    c = cluster_factory(3, broker_config=FAST,
                        controller_config={"broker.session.timeout.ms": 30_000})
    topic = "pause"
    await create_topic(c, topic)
    md = await wait_isr(c, topic, 3)
    leader = md["leader"]
    follower = next(r for r in md["isr"] if r != leader)
    others = [n for n in (1, 2, 3) if n != follower]
    assert (await produce(c, leader, topic, batch(b"before")))["error"] == 0
    pid = c.pids()[follower]
    os.kill(pid, signal.SIGSTOP)
    try:
        # acks=all waits while the paused follower is in the ISR, then completes once it is out
        r = await produce(c, leader, topic, batch(b"during"))
        assert r["error"] == 0, r
        md = await wait_isr(c, topic, 2, via=others)
        assert follower not in md["isr"] and follower not in md["fenced"], md
    finally:
        os.kill(pid, signal.SIGCONT)
    md = await wait_isr(c, topic, 3)
    assert follower in md["isr"]
    assert (await produce(c, md["leader"], topic, batch(b"after")))["error"] == 0
    records, _hw = await read_all(c, md["leader"], topic)
    assert [v for _, v in records] == [b"before", b"during", b"after"]


async def test_two_brokers_down_refuses_acks_all_without_appending(cluster_factory: Any) -> None:
    """Kill both followers: acks=all answers NOT_ENOUGH_REPLICAS and appends nothing (the log
    end is unchanged when they return); once they are back and in sync, produce works."""
    c = cluster_factory(3, broker_config=FAST)
    topic = "two-down"
    await create_topic(c, topic)
    md = await wait_isr(c, topic, 3)
    leader = md["leader"]
    assert (await produce(c, leader, topic, batch(b"a", b"b")))["error"] == 0
    for n in (1, 2, 3):
        if n != leader:
            await sigkill(c, n)
    # The controller quorum went with them (2 of 3 voters), so the ISR shrink cannot commit:
    # the leader refuses once its followers have been silent for the lag limit.
    await trio.sleep(2 * LAG_MS / 1000)
    end = await log_end(c, leader, topic)
    for _ in range(3):
        r = await produce(c, leader, topic, batch(b"x"))
        assert ErrorCode(r["error"]).name == "NOT_ENOUGH_REPLICAS", r
        assert r["base_offset"] == -1
    assert await log_end(c, leader, topic) == end
    await up(c)
    md = await wait_isr(c, topic, 3)
    assert await log_end(c, md["leader"], topic) == end
    r = await produce_until_ok(c, topic, batch(b"c"), [1, 2, 3])
    assert r["base_offset"] == end
    records, _hw = await read_all(c, md["leader"], topic)
    assert [v for _, v in records] == [b"a", b"b", b"c"]


async def test_old_leader_truncates_records_that_never_replicated(cluster_factory: Any) -> None:
    """The leader appends acks=1 records while both followers are paused (so no controller
    quorum either: the ISR keeps all three), then dies. A follower takes over; the old leader
    comes back, truncates those records (``truncate`` event) and no consumer ever saw them."""
    c = cluster_factory(3, broker_config=FAST)
    topic = "diverge"
    await create_topic(c, topic)
    md = await wait_isr(c, topic, 3)
    old = md["leader"]
    followers = [n for n in (1, 2, 3) if n != old]
    r = await produce(c, old, topic, batch(b"c0", b"c1", b"c2"))
    assert r["error"] == 0
    committed = 3
    pids = {n: c.pids()[n] for n in followers}
    for pid in pids.values():
        os.kill(pid, signal.SIGSTOP)
    try:
        # A fetch the followers sent just before the pause is parked at the leader for up to
        # replica.fetch.wait.max.ms; once it is answered (empty) nothing is outstanding, so the
        # records below are never sent to a follower (an answer with them would sit in the
        # paused follower's socket buffer and be appended after SIGCONT).
        await trio.sleep(5 * FAST["replica.fetch.wait.max.ms"] / 1000)
        r = await produce(c, old, topic, batch(b"x0", b"x1"), acks=1)
        assert r["error"] == 0 and r["base_offset"] == committed, r
        assert await log_end(c, old, topic) == committed + 2
        seen, hw = await read_all(c, old, topic)
        assert hw == committed and [v for _, v in seen] == [b"c0", b"c1", b"c2"]
        await sigkill(c, old)
    finally:
        for pid in pids.values():
            os.kill(pid, signal.SIGCONT)
    new = await wait_leader(c, topic, set(followers), via=followers)
    r = await produce_until_ok(c, topic, batch(b"n0"), followers)
    assert r["base_offset"] == committed
    await up(c)
    md = await wait_isr(c, topic, 3)
    truncs = [e for e in node_events(c, old, "truncate") if e["tp"] == f"{topic}/0"]
    assert any(e["from"] == committed + 2 and e["to"] == committed for e in truncs), truncs
    records, _hw = await read_all(c, md["leader"], topic)
    assert [v for _, v in records] == [b"c0", b"c1", b"c2", b"n0"]
    assert await log_end(c, md["leader"], topic) == committed + 1
    assert new in followers


async def test_idempotent_retry_after_leader_change_is_not_duplicated(cluster_factory: Any) -> None:
    """An idempotent batch acknowledged by the old leader (response "lost"), resent to the new
    leader after the old one is killed: the original offsets come back, one copy in the log —
    the new leader rebuilt the producer's sequence state from the replicated log.

    The batches carry timestamp 0 (client time, as a mirror replaying old records sends) and a
    retention pass runs every 100 ms on every node: producer expiry counts broker time, so the
    sequence window outlives them (CI once caught the 5-minute pass between the append and the
    retry, and the retry was appended a second time)."""
    c = cluster_factory(3, broker_config={**FAST, "log.retention.check.interval.ms": 100})
    topic = "idem"
    await create_topic(c, topic)
    md = await wait_isr(c, topic, 3)
    old = md["leader"]
    others = [n for n in (1, 2, 3) if n != old]
    init = await call(addr(c, old), ApiKey.INIT_PRODUCER_ID, {})
    assert init.get("error", 0) == 0, init
    pid, epoch = init["producer_id"], init["producer_epoch"]

    def idem_batch(seq: int, *values: bytes) -> bytes:
        return build_batch([(None, v, [], 0) for v in values], producer_id=pid,
                           producer_epoch=epoch, base_sequence=seq)

    assert (await produce(c, old, topic, batch(b"plain")))["error"] == 0
    first = idem_batch(0, b"i0", b"i1", b"i2")
    r = await produce(c, old, topic, first)
    assert r["error"] == 0 and r["base_offset"] == 1, r
    again = await produce(c, old, topic, first)  # a retry to the same leader
    assert again["error"] == 0 and again["base_offset"] == 1, again
    await sigkill(c, old)
    await wait_leader(c, topic, set(others), via=others)
    r = await produce_until_ok(c, topic, first, others)
    assert r["base_offset"] == 1, r
    r = await produce_until_ok(c, topic, idem_batch(3, b"i3"), others)
    assert r["base_offset"] == 4, r
    await up(c)
    md = await wait_isr(c, topic, 3)
    records, _hw = await read_all(c, md["leader"], topic)
    assert [v for _, v in records] == [b"plain", b"i0", b"i1", b"i2", b"i3"]
