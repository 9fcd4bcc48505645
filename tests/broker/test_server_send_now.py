"""The server's answer fast path (``_Connection._send_now``) and eager reader, over real TCP.

Small answers are written with one non-blocking send when the connection is not sending
anything else; when the socket buffer is full (a client that does not read) the rest of the
frame, and every later answer, goes through ``send_all`` under the send lock. Either way every
frame must arrive whole and unmixed.
"""

from __future__ import annotations

import socket

import trio
from rafka.wire.protocol import ApiKey, decode_response

from tests.broker.harness import (
    batch,
    fetch_body,
    part,
    produce_body,
    raw_request,
    running_broker,
)

N_FETCHES = 60  # below the default 64 in flight per connection
VALUE = bytes(range(256)) * 50  # 12.8 KB: one batch, a "small" answer (<= 16 KiB)


async def test_small_answers_stay_whole_when_the_client_reads_late(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        async with b.connect() as conn:
            resp = await conn.request(ApiKey.PRODUCE, produce_body("t", batch(VALUE), acks=1))
            assert part(resp.body)["error"] == 0, resp.body
        expected = bytes((await _fetch_once(b)).raw)
        assert VALUE in expected
        before = (b.server.stats.sent_at_once, b.server.stats.sent_queued)

        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills after a few answers
        await sock.connect(("127.0.0.1", b.port))
        s = trio.SocketStream(sock)
        await s.send_all(b"".join(raw_request(ApiKey.FETCH, i, fetch_body("t", 0))
                                  for i in range(N_FETCHES)))
        await trio.sleep(0.3)  # answers pile up in the server's socket buffer meanwhile
        seen = set()
        with trio.fail_after(30):
            for _ in range(N_FETCHES):
                cid, body, raw = await _read_answer(s)
                assert part(body)["error"] == 0, body
                assert raw == expected, cid
                seen.add(cid)
        await s.aclose()
        assert seen == set(range(N_FETCHES))
        at_once = b.server.stats.sent_at_once - before[0]
        queued = b.server.stats.sent_queued - before[1]
        assert at_once + queued == N_FETCHES
        assert at_once > 0 and queued > 0, (at_once, queued)  # both paths were taken


_buffered: dict[int, bytearray] = {}


async def _read_answer(stream: trio.SocketStream) -> tuple[int, dict, bytes]:
    """One answer frame: (correlation id, body, raw part)."""
    buf = _buffered.setdefault(id(stream), bytearray())
    while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        data = await stream.receive_some(65536)
        assert data, "the server closed the connection"
        buf += data
    n = int.from_bytes(buf[:4], "big")
    frame = bytes(buf[4:4 + n])
    del buf[:4 + n]
    resp = decode_response(frame)
    return resp.correlation_id, resp.body, bytes(resp.raw)


async def _fetch_once(b):
    async with b.connect() as conn:
        return await conn.request(ApiKey.FETCH, fetch_body("t", 0))
