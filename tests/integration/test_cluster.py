"""Real node processes: ``cluster up/down``, topics seen by every broker, restart, revive."""

from __future__ import annotations

import os
import signal

import trio
from rafka.wire.connection import connect
from rafka.wire.protocol import ApiKey

from tests.broker.harness import batch, fetch_body, part, produce_body
from tests.integration.conftest import wait_until

RETRY = 60  # hang guard (seconds) for conditions that become true


async def request(addr, api, body):
    async with connect(*addr) as conn:
        return (await conn.request(api, body)).body


async def create_topic(addr, name, partitions=1, rf=1):
    body = await request(addr, ApiKey.CREATE_TOPICS, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf}],
        "timeout_ms": 30_000})
    assert body.get("error", 0) == 0 and body["topics"][0]["error"] == 0, body
    return body


async def leader_of(addrs, topic, partition=0):
    md = await request(addrs[0], ApiKey.METADATA, {"topics": [topic]})
    leader = md["topics"][0]["partitions"][partition]["leader"]
    b = next(b for b in md["brokers"] if b["node_id"] == leader)
    return b["host"], b["port"]


async def eventually(fn):
    with trio.fail_after(RETRY):
        while True:
            try:
                out = await fn()
                if out:
                    return out
            except Exception:  # noqa: BLE001 - not yet
                pass
            await trio.sleep(0.1)


async def test_topic_created_via_any_node_is_visible_on_every_broker(cluster3):
    addrs = cluster3.addresses()
    await create_topic(addrs[2], "seen", partitions=3)
    for addr in addrs:
        async def visible(addr=addr):
            md = await request(addr, ApiKey.METADATA, {"topics": ["seen"]})
            t = md["topics"][0]
            return t["error"] == 0 and all(p["leader"] >= 0 for p in t["partitions"]) \
                and len(t["partitions"]) == 3
        assert await eventually(visible)
    # produce to the leader right away, then read it back
    leader = await leader_of(addrs, "seen")
    r = await eventually(lambda: request(leader, ApiKey.PRODUCE, produce_body("seen", batch(b"hi"))))
    assert part(r)["error"] == 0


async def test_down_then_up_restarts_with_data(cluster3):
    addrs = cluster3.addresses()
    await create_topic(addrs[0], "keep")
    leader = await leader_of(addrs, "keep")
    r = await eventually(lambda: request(leader, ApiKey.PRODUCE, produce_body("keep", batch(b"v1", b"v2"))))
    assert part(r)["error"] == 0
    old = set(cluster3.pids().values())
    down = cluster3.down()
    assert down.returncode == 0, down.stderr
    assert all(p is None for p in cluster3.pids().values())
    for pid in old:  # every node process is gone
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] == "Z"
    cluster3.up()

    async def data_back():
        ldr = await leader_of(addrs, "keep")
        p = part(await request(ldr, ApiKey.FETCH, fetch_body("keep", 0)))
        return p["error"] == 0 and p["high_watermark"] == 2 and p["records_len"] > 0

    assert await eventually(data_back)


async def test_killed_node_is_brought_back_by_up(cluster3):
    before = cluster3.pids()
    cluster3.kill(2, signal.SIGKILL)
    r = cluster3.up()
    assert "started node(s) 2" in r.stderr
    after = cluster3.pids()
    assert after[1] == before[1] and after[3] == before[3] and after[2] != before[2]

    async def unfenced_again():
        md = await request(cluster3.addresses()[0], ApiKey.METADATA, {"topics": []})
        return any(b["node_id"] == 2 and not b["fenced"] for b in md["brokers"])

    assert await eventually(unfenced_again)


async def test_single_node_cluster_round_trip(cluster1):
    addr = cluster1.addresses()[0]
    await create_topic(addr, "one", partitions=2)
    r = await request(addr, ApiKey.PRODUCE, produce_body("one", batch(b"a"), partition=1))
    assert part(r)["error"] == 0
    p = part(await request(addr, ApiKey.FETCH, fetch_body("one", 0, partition=1)))
    assert p["high_watermark"] == 1 and p["records_len"] > 0


async def test_replicated_topic_acks_all_round_trip(cluster3):
    addrs = cluster3.addresses()
    await create_topic(addrs[1], "rep", partitions=1, rf=3)
    leader = await leader_of(addrs, "rep")

    async def produced():
        r = await request(leader, ApiKey.PRODUCE, produce_body("rep", batch(b"r1", b"r2")))
        return part(r)["error"] == 0

    assert await eventually(produced)

    async def replicated():
        md = await request(addrs[0], ApiKey.METADATA, {"topics": ["rep"]})
        isr = md["topics"][0]["partitions"][0]["isr"]
        p = part(await request(leader, ApiKey.FETCH, fetch_body("rep", 0)))
        return len(isr) == 3 and p["high_watermark"] >= 2

    assert await eventually(replicated)


async def test_sigterm_finishes_a_controlled_shutdown_while_leaders_see_the_node_caught_up(cluster3):
    """KIP-841 (found in the compose cluster's rolling restart): a broker stopping under control
    keeps fetching as a follower, so leaders found it caught up and re-added it to the ISR; each
    heartbeat took it out again and its shutdown waited out controlled.shutdown.timeout.ms. Now the
    controller refuses the re-add (INELIGIBLE_REPLICA) and the node says it finished under control."""
    addrs = cluster3.addresses()
    await create_topic(addrs[0], "stay", partitions=6, rf=3)
    for p in range(6):  # every partition has data and every follower has caught up with it
        async def written(p=p):
            ldr = await leader_of(addrs, "stay", p)
            r = part(await request(ldr, ApiKey.PRODUCE, produce_body("stay", batch(b"x"), partition=p, acks=-1)))
            return r["error"] == 0
        assert await eventually(written)
    node3 = next(n for n in cluster3.info()["nodes"] if n["id"] == 3)
    log_path = os.path.join(node3["data_dir"], "stdout.log")
    os.kill(cluster3.pids()[3], signal.SIGTERM)

    def outcome():
        with open(log_path, errors="replace") as f:
            text = f.read()
        return text if "controlled shutdown" in text else None

    text = wait_until(outcome, "node 3 logs how its controlled shutdown ended", timeout_s=120)
    assert "controlled shutdown complete" in text, text[-3000:]
    assert "controlled shutdown did not finish" not in text
