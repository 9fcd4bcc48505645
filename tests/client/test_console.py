"""client/console: the JSON shaping (pure, hand-made admin answers and exposition text) and the
HTTP side on a real socket — the page, the throughput history, 404, and a cluster that does not
answer giving a JSON 503 while the console stays up. The real 3-node run with Chromium is in
tests/integration/test_console.py."""

from __future__ import annotations

import json
from typing import Any

import trio
from rafka.client.aio._core import ClientCore
from rafka.client.aio.admin import (
    AsyncAdmin,
    ClusterDescription,
    PartitionDescription,
    TopicDescription,
)
from rafka.client.console.page import PAGE_HTML
from rafka.client.console.server import Console, metrics_url
from rafka.client.console.snapshot import Throughput, cluster_json, group_json, topics_json
from rafka.client.metrics_view import parse_metrics
from rafka.client.types import BrokerMetadata
from rafka.wire.http_server import serve_http

N1 = "http://127.0.0.1:29092/metrics"
T0 = """
rafka_active_controller 1
rafka_request_duration_seconds_count{api="produce"} 10
rafka_topic_bytes_in_total{topic="orders"} 1000
rafka_topic_bytes_out_total{topic="orders"} 0
rafka_topic_bytes_in_total{topic="__consumer_offsets"} 50
rafka_leader_partitions 3
"""
T1 = """
rafka_active_controller 1
rafka_request_duration_seconds_count{api="produce"} 30
rafka_topic_bytes_in_total{topic="orders"} 5000
rafka_topic_bytes_out_total{topic="orders"} 2000
rafka_topic_bytes_in_total{topic="__consumer_offsets"} 90
rafka_leader_partitions 3
"""


def test_throughput_history_rates_and_bound() -> None:
    tp = Throughput(max_samples=3)
    tp.add([parse_metrics(N1, 100.0, T0)], at_unix_s=1000.0)
    assert tp.samples == type(tp.samples)()  # one round is only the base: rates need two
    tp.add([parse_metrics(N1, 102.0, T1)], at_unix_s=1002.0)
    (s,) = tp.samples
    assert s == {"t": 1002.0, "bytes_in": 2000.0, "bytes_out": 1000.0, "requests": 10.0,
                 "topics": {"orders": [2000.0, 1000.0]}}  # internal topics are left out
    for i in range(5):
        tp.add([parse_metrics(N1, 104.0 + 2 * i, T1)], at_unix_s=1004.0 + i)
    assert len(tp.samples) == 3 and tp.samples[-1]["bytes_in"] == 0.0  # bounded; no traffic since
    out = tp.to_json()
    assert out["nodes"][0]["url"] == N1 and out["nodes"][0]["active_controller"] is True
    assert out["nodes"][0]["leader_partitions"] == 3


def test_throughput_marks_a_node_that_does_not_answer() -> None:
    from rafka.client.metrics_view import Scrape

    tp = Throughput()
    tp.add([parse_metrics(N1, 1.0, T0), Scrape("http://dead/metrics", 1.0, error="URLError: refused")])
    nodes = {n["url"]: n for n in tp.to_json()["nodes"]}
    assert nodes[N1]["up"] and not nodes["http://dead/metrics"]["up"]
    assert nodes["http://dead/metrics"]["error"] == "URLError: refused"


def test_cluster_json_joins_brokers_quorum_and_metrics() -> None:
    cluster = ClusterDescription("cid", 2, [BrokerMetadata(1, "h", 9092), BrokerMetadata(2, "h", 9093),
                                            BrokerMetadata(4, "h", 9095)])
    quorum = {"leader_id": 2, "epoch": 3, "high_watermark": 40,
              "voters": [{"id": 2, "raft": "h:19093", "metadata_offset": 40, "lag": 0},
                         {"id": 1, "raft": "h:19092", "metadata_offset": 38, "lag": 2, "reachable": False}],
              "observers": [{"id": 4, "metadata_offset": 40, "lag": 0}]}
    urls = {b.node_id: metrics_url(b.host, b.port) for b in cluster.brokers}
    assert urls[1] == "http://h:29092/metrics"
    nodes = {urls[2]: {"up": True, "leader_partitions": 5}}
    c = cluster_json(cluster, quorum, nodes, urls)
    b1, b2, b4 = c["brokers"]
    assert (b2["controller"], b2["raft_leader"], b2["voter"], b2["metrics"]) == (True, True, True, nodes[urls[2]])
    assert (b1["controller"], b1["voter"], b1["metadata_lag"], b1["metrics"]) == (False, True, 2, None)
    assert (b4["voter"], b4["metadata_offset"]) == (False, None)  # a broker-only node
    assert c["quorum"]["epoch"] == 3 and [v["id"] for v in c["quorum"]["voters"]] == [1, 2]
    assert c["quorum"]["voters"][0]["reachable"] is False
    assert cluster_json(cluster, None, {}, urls)["quorum"] is None  # no quorum answer: brokers still


def test_topics_json_flags_under_replicated_and_offline() -> None:
    t = TopicDescription("orders", "id1", False, [
        PartitionDescription(0, 1, 0, (1, 2, 3), (1, 2, 3), 10, 2),
        PartitionDescription(1, 2, 0, (2, 3, 1), (2,), 7, 0),
        PartitionDescription(2, -1, 0, (3, 1, 2), (), None, None)], {"retention.ms": "1"})
    out = topics_json([t, TopicDescription("a", None, False, [], {})])
    assert [x["name"] for x in out["topics"]] == ["a", "orders"]
    parts = out["topics"][1]["partitions"]
    assert [p["under_replicated"] for p in parts] == [False, True, True]
    assert [p["offline"] for p in parts] == [False, False, True]
    assert (out["under_replicated"], out["offline"]) == (2, 1)
    assert out["topics"][1]["records"] == 8 + 7  # hw - log start; unknown counts as nothing


def test_group_json_members_assignment_and_lag() -> None:
    described = {"state": "Stable", "group_epoch": 4, "members": [
        {"member_id": "m1", "member_epoch": 4, "client_id": "c1", "client_host": "/10.0.0.1",
         "subscribed_topics": ["orders"], "assignment": [{"name": "orders", "partitions": [1, 0]}]}],
        "partitions": [{"topic": "orders", "partition": 0, "member_id": "m1", "committed": 5,
                        "high_watermark": 9, "lag": 4},
                       {"topic": "orders", "partition": 1, "member_id": "m1", "committed": -1,
                        "high_watermark": -1, "lag": None}]}
    g = group_json({"group_id": "g", "state": "Stable", "members": 1}, described)
    assert g["members"][0]["assignment"] == [{"topic": "orders", "partitions": [0, 1]}]
    assert (g["state"], g["epoch"], g["member_count"], g["lag"]) == ("Stable", 4, 1, 4)
    lost = group_json({"group_id": "h", "state": "Empty", "members": 0}, None, "COORDINATOR_NOT_AVAILABLE: x")
    assert (lost["lag"], lost["error"], lost["members"]) == (None, "COORDINATOR_NOT_AVAILABLE: x", [])


async def _get(port: int, path: str) -> tuple[int, str, bytes]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        buf = b""
        while chunk := await stream.receive_some(65536):
            buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    ctype = next(v for k, _, v in (ln.partition(": ") for ln in lines[1:]) if k.lower() == "content-type")
    return int(lines[0].split()[1]), ctype, body


async def test_http_routes_and_an_unreachable_cluster() -> None:
    dead = "127.0.0.1:1"  # nothing listens: every admin request fails
    async with trio.open_nursery() as nursery, AsyncAdmin(dead, request_timeout_ms=500) as admin:
        core = ClientCore(dead, client_id="t", request_timeout_ms=500)
        core.open(nursery)
        console = Console(admin, core, metrics=[N1], interval_s=1.0)
        console.throughput.add([parse_metrics(N1, 100.0, T0)])
        console.throughput.add([parse_metrics(N1, 102.0, T1)])
        port = await nursery.start(serve_http, console.handle, "127.0.0.1", 0)

        status, ctype, body = await _get(port, "/")
        assert (status, ctype) == (200, "text/html; charset=utf-8") and body.decode() == PAGE_HTML
        status, ctype, body = await _get(port, "/api/throughput")
        tp: dict[str, Any] = json.loads(body)
        assert (status, ctype, tp["interval_s"], len(tp["samples"])) == (200, "application/json", 1.0, 1)
        status, _, body = await _get(port, "/api/nosuch")
        assert status == 404 and "no such page" in json.loads(body)["error"]
        for path in ("/api/topics", "/api/cluster", "/api/groups"):
            status, ctype, body = await _get(port, path)
            assert (status, ctype) == (503, "application/json"), (path, body)
            assert json.loads(body)["error"]
        status, _, _ = await _get(port, "/healthz")  # still serving after the failures
        assert status == 200
        await core.aclose()
        nursery.cancel_scope.cancel()


def test_page_is_self_contained() -> None:
    """No build step and no network: nothing is loaded from elsewhere, and cluster data is never
    put in as markup."""
    for needle in ("http://", "https://", "src=", "@import", "innerHTML"):
        assert needle not in PAGE_HTML.replace("http://www.w3.org/2000/svg", ""), needle
    for endpoint in ("/api/cluster", "/api/topics", "/api/groups", "/api/throughput"):
        assert endpoint in PAGE_HTML
