"""Inter-broker security on a real 3-node ``rafka cluster up --tls --auth`` cluster.

Every client of this test speaks SASL_SSL as ``admin`` to the secured listeners, so whatever
reaches a node's plaintext main listener is a peer. Checked: a topic of replication factor 3
takes acks=all records and all three replicas stay in sync; every node's secured listener has
accepted peer nodes by their certificates (``rafka_secured_node_connections``) and every node
opened TLS connections to its peers (``rafka_peer_tls_connections``), while no connection is
open on any main listener; after the active controller is killed a new one is elected, a topic
is created through a survivor (forwarded over TLS to the new controller) and acks=all produce
and a full read work on the survivors.
"""

from __future__ import annotations

import re
import signal
import urllib.request

import pytest
import trio
from rafka.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
from rafka.client.aio.admin import NewTopic
from rafka.client.types import TopicPartition

from rafka.cluster import METRICS_PORT_OFFSET
from rafka.local_security import SECURE_PORT_OFFSET, read_admin_password
from tests.integration.conftest import LocalCluster, rafka_cli
from tests.integration.test_cluster import eventually
from tests.integration.test_secure_cluster import _free_secured_block

pytestmark = pytest.mark.timeout(300)


def scrape(port: int, node: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port + METRICS_PORT_OFFSET + node - 1}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for m in re.finditer(r"^(rafka_(?:secured|peer|connections)\w*) ([0-9.e+-]+)$", text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


async def scrape_async(port: int, node: int) -> dict[str, float]:
    return await trio.to_thread.run_sync(scrape, port, node)


async def produce(bootstrap: str, topic: str, values: list[bytes], sec: dict) -> None:
    async with AsyncProducer(bootstrap, acks="all", request_timeout_ms=30_000, **sec) as p:
        futures = [await p.send(topic, v) for v in values]
        for f in futures:
            await f


async def read_all(bootstrap: str, topic: str, expected: int, sec: dict) -> list[bytes]:
    got: list[bytes] = []
    async with AsyncConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", **sec) as c:
        while len(got) < expected:
            for rs in (await c.poll(timeout_ms=2000)).values():
                got += [r.value for r in rs]
    return got


async def test_replication_and_controller_failover_run_over_tls(tmp_path):
    port = _free_secured_block(3)
    data = tmp_path / "secured"
    cluster = LocalCluster(data, 3, port)
    try:
        r = rafka_cli("cluster", "up", "--nodes", "3", "--data-dir", str(data), "--port", str(port),
                      "--detach", "--tls", "--auth", timeout=180)
        if (data / "cluster.json").exists():
            cluster._remember()
        assert r.returncode == 0, r.stdout + r.stderr
        toml = (data / "node-1" / "node.toml").read_text()
        assert '"inter.broker.security" = true' in toml and "secure_rpc" in toml
        sec = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
               "sasl_plain_username": "admin", "sasl_plain_password": read_admin_password(data),
               "ssl_cafile": str(data / "tls" / "ca.pem")}
        secured = [f"127.0.0.1:{port + SECURE_PORT_OFFSET + i}" for i in range(3)]
        with trio.fail_after(240):
            async with AsyncAdmin(",".join(secured), request_timeout_ms=60_000, **sec) as admin:
                await admin.create_topics([NewTopic("replicated", 1, 3)])
            await produce(",".join(secured), "replicated", [b"a%d" % i for i in range(100)], sec)

            async def in_sync() -> bool:
                async with AsyncAdmin(",".join(secured), **sec) as admin:
                    p = (await admin.describe_topics(["replicated"]))[0].partitions[0]
                return sorted(p.isr) == [1, 2, 3] and p.high_watermark == 100

            assert await eventually(in_sync)
            for node in (1, 2, 3):
                m = await scrape_async(port, node)
                assert m.get("rafka_secured_node_connections_total", 0) >= 1, (node, m)
                assert m.get("rafka_peer_tls_connections_total", 0) >= 1, (node, m)
                assert m["rafka_secured_tls_connections_total"] >= m["rafka_secured_node_connections_total"]
                # nothing (no peer, none of our clients) is connected to the plaintext listener
                assert m["rafka_connections_open"] == 0, (node, m)

            async with AsyncAdmin(",".join(secured), **sec) as admin:
                old = (await admin.describe_quorum())["leader_id"]
            cluster.kill(old, signal.SIGKILL)
            survivors = ",".join(a for i, a in enumerate(secured, 1) if i != old)

            async def new_controller() -> bool:
                async with AsyncAdmin(survivors, request_timeout_ms=10_000, **sec) as admin:
                    q = await admin.describe_quorum()
                    if q["leader_id"] in (-1, old):
                        return False
                    await admin.create_topics([NewTopic(f"after-{old}", 1, 2)])
                    return True

            assert await eventually(new_controller)
            await produce(survivors, "replicated", [b"b%d" % i for i in range(50)], sec)
            got = await read_all(survivors, "replicated", 150, sec)
            assert sorted(got) == sorted([b"a%d" % i for i in range(100)]
                                         + [b"b%d" % i for i in range(50)])
            for node in {1, 2, 3} - {old}:
                m = await scrape_async(port, node)
                assert m["rafka_connections_open"] == 0, (node, m)
            async with AsyncConsumer(bootstrap_servers=survivors, **sec) as c:
                tp = TopicPartition(f"after-{old}", 0)
                assert (await c.end_offsets([tp]))[tp] == 0
    finally:
        cluster.stop()

