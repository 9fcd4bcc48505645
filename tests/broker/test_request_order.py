"""Requests pipelined on one connection take effect in arrival order.

The server runs one task per request (answers may leave out of order), but the part of a
request that runs before its first wait — a produce's append — runs in arrival order, so a
producer's batches for one partition land in the log in the order it sent them, even with
acks=1 and no idempotence (no sequence numbers to reorder or reject by).
"""

from __future__ import annotations

import trio

from broker.protocol import ApiKey
from log.batch import decode_records, iter_batches
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
