"""broker/metrics.py and wire/http_server.py on an in-process broker (tests/broker/harness.py).

The real Server, ReplicaManager and MetadataPublisher; requests over a real connection; the
endpoint scraped over a real socket and parsed with prometheus_client's own parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from prometheus_client.parser import text_string_to_metric_families
from rafka.broker.metrics import NodeMetrics
from rafka.metadata.records import Partition, PartitionChange, Topic
from rafka.wire.protocol import ApiKey

from .harness import BROKER_ID, _offsets, batch, fetch_body, part, produce_body, running_broker


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


async def http_get(port: int, raw: bytes) -> tuple[int, bytes]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


async def scrape(port: int) -> str:
    status, body = await http_get(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200
    return body.decode()


async def start_metrics(nursery: trio.Nursery, b: Any) -> tuple[NodeMetrics, int]:
    m = NodeMetrics(BROKER_ID, publisher=b.publisher, replica_manager=b.rm, server=b.server)
    b.server.dispatch = m.instrument(b.server.dispatch)
    port = await nursery.start(m.serve, "127.0.0.1", 0)
    return m, port


async def test_requests_bytes_and_flushes_move(tmp_path: Path) -> None:
    async with running_broker(tmp_path, topics={"t": 1}) as b, trio.open_nursery() as nursery:
        _m, port = await start_metrics(nursery, b)
        before = await scrape(port)
        assert value(before, "rafka_topic_bytes_in_total", topic="t") is None
        records = batch(b"a" * 100, b"b" * 50)
        async with b.connect() as conn:
            for _ in range(3):
                assert part((await conn.request(ApiKey.PRODUCE, produce_body("t", records))).body)["error"] == 0
            fetched = await conn.request(ApiKey.FETCH, fetch_body("t", 0))
            served = part(fetched.body)["records_len"]
            bad = await conn.request(ApiKey.FETCH, {**fetch_body("t", 0), "isolation_level": 7})
            assert bad.body["error"]
        after = await scrape(port)
        assert value(after, "rafka_topic_bytes_in_total", topic="t") == 3 * len(records)
        assert served > 0 and value(after, "rafka_topic_bytes_out_total", topic="t") == served
        assert value(after, "rafka_request_duration_seconds_count", api="produce") == 3
        assert value(after, "rafka_request_duration_seconds_count", api="fetch") == 2
        assert value(after, "rafka_request_errors_total", api="fetch") == 1
        assert value(after, "rafka_request_errors_total", api="produce") == 0
        assert value(after, "rafka_log_flush_duration_seconds_count") >= 1  # acks=-1 waited for a flush
        # a lone leader has no follower syncs: every fsync round is a group commit
        assert value(after, "rafka_log_flush_rounds_total") == \
            value(after, "rafka_log_flush_duration_seconds_count")
        assert value(after, "rafka_leader_partitions") == 1
        assert value(after, "rafka_topic_high_watermark_sum", topic="t") == 6
        assert value(after, "rafka_connections_open") >= 0
        assert value(after, "rafka_active_controller") == 0  # no controller on this node
        nursery.cancel_scope.cancel()


async def test_isr_shrink_expand_and_under_replicated(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b, trio.open_nursery() as nursery:
        _m, port = await start_metrics(nursery, b)
        tid = "id-r"
        await b.publisher.publish_records([
            (next(_offsets), 1, Topic("r", tid)),
            (next(_offsets), 1, Partition(tid, 0, (BROKER_ID, 2), (BROKER_ID, 2), BROKER_ID, 0, 0)),
        ])
        text = await scrape(port)
        assert value(text, "rafka_under_replicated_partitions") == 0
        assert value(text, "rafka_isr_shrinks_total") == 0  # a new leadership is no shrink
        await b.publisher.publish_records([(next(_offsets), 1, PartitionChange(tid, 0, isr=(BROKER_ID,)))])
        text = await scrape(port)
        assert value(text, "rafka_isr_shrinks_total") == 1
        assert value(text, "rafka_isr_expands_total") == 0
        assert value(text, "rafka_under_replicated_partitions") == 1
        assert value(text, "rafka_topic_under_replicated_partitions", topic="r") == 1
        await b.publisher.publish_records([(next(_offsets), 1, PartitionChange(tid, 0, isr=(BROKER_ID, 2)))])
        text = await scrape(port)
        assert value(text, "rafka_isr_expands_total") == 1
        assert value(text, "rafka_under_replicated_partitions") == 0
        nursery.cancel_scope.cancel()


async def test_http_endpoint_answers_bad_requests_and_stays_up(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b, trio.open_nursery() as nursery:
        _m, port = await start_metrics(nursery, b)
        assert (await http_get(port, b"GET /nope HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await http_get(port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await http_get(port, b"\x00\x01garbage\r\n\r\n"))[0] == 400
        try:  # a head past MAX_HEAD_BYTES: 400 and close (the unread rest may reset it first)
            assert (await http_get(port, b"G" * 20000))[0] == 400
        except trio.BrokenResourceError:
            pass
        status, body = await http_get(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        assert status == 200 and body == b""
        assert "rafka_partitions" in await scrape(port)
        nursery.cancel_scope.cancel()


async def test_two_nodes_in_one_process_do_not_clash(tmp_path: Path) -> None:
    async with running_broker(tmp_path / "a", topics={"t": 1}) as a, \
            running_broker(tmp_path / "b", topics={"t": 1}) as b, trio.open_nursery() as nursery:
        _ma, port_a = await start_metrics(nursery, a)
        _mb, port_b = await start_metrics(nursery, b)
        async with a.connect() as conn:
            await conn.request(ApiKey.PRODUCE, produce_body("t", batch(b"x")))
        assert value(await scrape(port_a), "rafka_request_duration_seconds_count", api="produce") == 1
        assert value(await scrape(port_b), "rafka_request_duration_seconds_count", api="produce") is None
        nursery.cancel_scope.cancel()


def test_metrics_listener_config() -> None:
    import pytest
    from rafka.broker.config import ConfigError, parse_config

    base = {"node_id": 1, "roles": ["broker"], "data_dir": "/tmp/x", "listener": "127.0.0.1:9092",
            "voters": [{"id": 9, "raft": "127.0.0.1:1", "rpc": "127.0.0.1:2"}]}
    assert parse_config(base).metrics_listener is None  # off unless configured
    assert parse_config({**base, "metrics_listener": "0.0.0.0:29092"}).metrics_listener == ("0.0.0.0", 29092)
    with pytest.raises(ConfigError, match="metrics_listener"):
        parse_config({**base, "metrics_listener": "nope"})
