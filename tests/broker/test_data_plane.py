"""Produce → fetch round trips and the data-plane errors, at the raw protocol level."""

from __future__ import annotations

from typing import Any

import trio
from rafka.log.batch import decode_records, iter_batches
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from tests.broker.harness import (
    batch,
    fetch_body,
    list_offsets_body,
    part,
    produce_body,
    running_broker,
)


async def test_produce_fetch_round_trip(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        r1 = (await conn.request(ApiKey.PRODUCE, produce_body("t", batch(b"a", b"b")))).body
        r2 = (await conn.request(ApiKey.PRODUCE, produce_body("t", batch(b"c"), acks=1))).body
        assert part(r1)["error"] == 0 and part(r1)["base_offset"] == 0
        assert part(r2)["error"] == 0 and part(r2)["base_offset"] == 2
        resp = await conn.request(ApiKey.FETCH, fetch_body("t", 0))
        p = part(resp.body)
        assert p["error"] == 0 and p["high_watermark"] == 3 and p["records_len"] == len(resp.raw)
        raw = bytes(resp.raw)
        values = [r.value for pos, _h in iter_batches(raw) for r in decode_records(raw, pos)]
        assert values == [b"a", b"b", b"c"]
        offsets = [r.offset for pos, _h in iter_batches(raw) for r in decode_records(raw, pos)]
        assert offsets == [0, 1, 2]
        # a small reply: the bytes the log read to check their CRCs go out with the head — no
        # sendfile, and no second read of the segment file by the server
        assert b.server.stats.bytes_copied == 0 and b.server.stats.bytes_sendfile == 0
        # fetch from the middle of the log: whole batches from the one holding the offset
        p = part((await conn.request(ApiKey.FETCH, fetch_body("t", 2))).body)
        assert p["records_len"] > 0
        earliest = part((await conn.request(ApiKey.LIST_OFFSETS, list_offsets_body("t", -2))).body)
        latest = part((await conn.request(ApiKey.LIST_OFFSETS, list_offsets_body("t", -1))).body)
        assert (earliest["offset"], latest["offset"]) == (0, 3)


async def test_large_fetch_is_sent_with_sendfile(tmp_path):
    """Above SMALL_REPLY_BYTES the records go from the segment file with sendfile, whole."""
    from rafka.broker.server import SMALL_REPLY_BYTES

    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        values = [bytes([i % 251]) * 1000 for i in range(3 * SMALL_REPLY_BYTES // 1000)]
        r = (await conn.request(ApiKey.PRODUCE, produce_body("t", batch(*values)))).body
        assert part(r)["error"] == 0
        resp = await conn.request(ApiKey.FETCH, fetch_body("t", 0))
        raw = bytes(resp.raw)
        assert len(raw) > SMALL_REPLY_BYTES
        assert b.server.stats.bytes_sendfile >= len(raw) and b.server.stats.bytes_copied == 0
        got = [r.value for pos, _h in iter_batches(raw) for r in decode_records(raw, pos)]
        assert got == values


async def test_wrong_crc_appends_nothing(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        good = batch(b"x")
        bad = bytearray(batch(b"y"))
        bad[-1] ^= 0xFF  # flip a bit in the records: CRC no longer matches
        r = (await conn.request(ApiKey.PRODUCE, produce_body("t", good + bytes(bad)))).body
        assert part(r)["error"] == ErrorCode.CORRUPT_MESSAGE
        latest = part((await conn.request(ApiKey.LIST_OFFSETS, list_offsets_body("t", -1))).body)
        assert latest["offset"] == 0  # not even the good batch of the payload
        assert part((await conn.request(ApiKey.PRODUCE, produce_body("t", good))).body)["error"] == 0


async def test_unknown_topic_and_partition(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        r = (await conn.request(ApiKey.PRODUCE, produce_body("nope", batch(b"x")))).body
        assert part(r)["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        r = (await conn.request(ApiKey.PRODUCE, produce_body("t", batch(b"x"), partition=7))).body
        assert part(r)["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        r = (await conn.request(ApiKey.FETCH, fetch_body("nope", 0))).body
        assert part(r)["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        md = (await conn.request(ApiKey.METADATA, {"topics": ["t", "nope"]})).body
        assert [t["error"] for t in md["topics"]] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert md["topics"][0]["partitions"][0]["leader"] == 1
        assert md["brokers"][0]["port"] == b.port


async def test_offset_out_of_range(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        await conn.request(ApiKey.PRODUCE, produce_body("t", batch(b"x")))
        r = (await conn.request(ApiKey.FETCH, fetch_body("t", 5))).body
        assert part(r)["error"] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert part(r)["log_end_offset"] == 1
        r = (await conn.request(ApiKey.FETCH, fetch_body("t", -3))).body
        assert part(r)["error"] == ErrorCode.OFFSET_OUT_OF_RANGE


async def _long_poll_woken_by_produce(b: Any, conn: Any, body: dict[str, Any],
                                      *values: bytes) -> tuple[dict[str, Any], bytes]:
    """Park ``body`` (a FETCH with a 10-minute ``max_wait_ms``), then produce ``values`` on
    another connection: (partition answer, records) of the fetch, which the append must wake."""
    result: dict[str, Any] = {}

    async def poll() -> None:
        resp = await conn.request(ApiKey.FETCH, body)
        result["p"], result["raw"] = part(resp.body), bytes(resp.raw)

    with trio.fail_after(60):  # hang guard: without a wake-up this would wait 10 minutes
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.sleep(0.05)
            assert "p" not in result  # nothing yet: still waiting
            async with b.connect() as other:
                await other.request(ApiKey.PRODUCE, produce_body("t", batch(*values)))
    return result["p"], result["raw"]


async def test_long_poll_fetch_wakes_up_on_new_data(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        p, _raw = await _long_poll_woken_by_produce(
            b, conn, fetch_body("t", 0, max_wait_ms=600_000), b"wake")
        assert p["error"] == 0 and p["records_len"] > 0


async def test_parked_follower_fetch_is_answered_when_data_arrives(tmp_path):
    """A follower's long poll (replica_id >= 0) is woken by the append itself — no timer, and
    not held for the HW: it is served up to the log end offset."""
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        body = {**fetch_body("t", 0, max_wait_ms=600_000), "replica_id": 2}
        p, raw = await _long_poll_woken_by_produce(b, conn, body, b"x", b"y")
        assert p["error"] == 0 and p["records_len"] == len(raw) > 0
        assert [r.value for pos, _h in iter_batches(raw) for r in decode_records(raw, pos)] == [b"x", b"y"]


async def test_acks_zero_gets_no_response_but_appends(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        await conn.send_only(ApiKey.PRODUCE, produce_body("t", batch(b"fire"), acks=0))
        with trio.fail_after(30):
            while True:  # the next request on the same connection is ordered after it
                latest = part((await conn.request(ApiKey.LIST_OFFSETS, list_offsets_body("t", -1))).body)
                if latest["offset"] == 1:
                    break
                await trio.sleep(0.01)


async def test_describe_configs_and_api_versions(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}, **{"log.retention.ms": 1234}) as b, \
            b.connect() as conn:
        r = (await conn.request(ApiKey.DESCRIBE_CONFIGS, {"topics": ["t", "zz"]})).body
        assert r["topics"][0]["configs"]["retention.ms"] == "1234"
        assert r["topics"][1]["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        v = (await conn.request(ApiKey.API_VERSIONS, {})).body
        assert [ApiKey.PRODUCE, 0, 0] in v["apis"]
