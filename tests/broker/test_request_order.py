"""Requests pipelined on one connection take effect in arrival order.

The server runs one task per request (answers may leave out of order), but the part of a
request that runs before its first wait — a produce's append — runs in arrival order, so a
producer's batches for one partition land in the log in the order it sent them, even with
acks=1 and no idempotence (no sequence numbers to reorder or reject by).
"""

from __future__ import annotations

import trio
from rafka.log.batch import decode_records, iter_batches
from rafka.wire.protocol import ApiKey

from tests.broker.harness import (
    batch,
    fetch_body,
    part,
    produce_body,
    raw_request,
    read_response,
    running_broker,
)

N_REQUESTS = 60  # below the default 64 in flight per connection


async def _log_values(b) -> list[bytes]:
    values: list[bytes] = []
    async with b.connect() as conn:
        offset = 0
        while offset < N_REQUESTS:
            resp = await conn.request(ApiKey.FETCH, fetch_body("t", offset))
            raw = bytes(resp.raw)
            for pos, _h in iter_batches(raw):
                for r in decode_records(raw, pos):
                    values.append(r.value)
                    offset = r.offset + 1
    return values


async def test_pipelined_produce_requests_append_in_arrival_order(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        s = await trio.open_tcp_stream("127.0.0.1", b.port)
        frames = b"".join(raw_request(ApiKey.PRODUCE, i, produce_body("t", batch(b"%06d" % i), acks=1))
                          for i in range(N_REQUESTS))
        await s.send_all(frames)  # all pipelined in one write: the server reads them together
        answers = {}
        for _ in range(N_REQUESTS):
            cid, body = await read_response(s)
            assert part(body)["error"] == 0, body
            answers[cid] = part(body)["base_offset"]
        await s.aclose()
        assert sorted(answers) == list(range(N_REQUESTS))
        assert [answers[i] for i in range(N_REQUESTS)] == list(range(N_REQUESTS))
        assert await _log_values(b) == [b"%06d" % i for i in range(N_REQUESTS)]


async def test_large_frames_split_anyhow_between_small_ones(tmp_path):
    """Large frames are received into their own buffer; whatever way the bytes are split on
    the wire, every frame arrives whole and in order."""
    big = [b"%06d" % i + bytes(range(256)) * 1200 for i in range(3)]  # ~300 KiB values
    frames = b""
    cid = 0
    for value in big:
        for small in (b"s%d" % cid, b"t%d" % cid):
            frames += raw_request(ApiKey.PRODUCE, cid, produce_body("t", batch(small), acks=1))
            cid += 1
        frames += raw_request(ApiKey.PRODUCE, cid, produce_body("t", batch(value), acks=1))
        cid += 1
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        s = await trio.open_tcp_stream("127.0.0.1", b.port)
        pos, step = 0, 1
        while pos < len(frames):  # 1, 4, 16, ... 65536-byte pieces, then the rest
            await s.send_all(frames[pos:pos + step])
            pos += step
            step = min(step * 4, 70_001)
            await trio.sleep(0)
        for _ in range(cid):
            _cid, body = await read_response(s)
            assert part(body)["error"] == 0, body
        await s.aclose()
        values: list[bytes] = []
        async with b.connect() as conn:
            offset = 0
            while offset < cid:
                resp = await conn.request(ApiKey.FETCH, fetch_body("t", offset))
                raw = bytes(resp.raw)
                for p, _h in iter_batches(raw):
                    for r in decode_records(raw, p):
                        values.append(r.value)
                        offset = r.offset + 1
        expected = []
        for i, value in enumerate(big):
            expected += [b"s%d" % (3 * i), b"t%d" % (3 * i), value]
        assert values == expected
