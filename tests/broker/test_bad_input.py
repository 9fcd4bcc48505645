"""Hostile and broken input: every case gets an answer or a closed connection, and the broker
keeps serving afterwards."""

from __future__ import annotations

import struct

import msgpack
import trio
from rafka.broker.server import Server, ServerLimits
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, Request

from tests.broker.harness import (
    batch,
    fetch_body,
    part,
    produce_body,
    raw_request,
    read_response,
    read_until_closed,
    running_broker,
)


async def still_serves(b) -> None:
    async with b.connect() as conn:
        r = (await conn.request(ApiKey.PRODUCE, produce_body("t", batch(b"alive")))).body
        assert part(r)["error"] == 0


async def open_raw(b) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", b.port)


async def test_garbage_bytes(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        s = await open_raw(b)
        await s.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # length 0x47455420: too large
        got = await read_response(s)
        assert got is not None and got[0] == -1 and got[1]["error"] == ErrorCode.FRAME_TOO_LARGE
        assert await read_until_closed(s) == b""
        await still_serves(b)


async def test_garbage_payload_in_a_valid_frame(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        s = await open_raw(b)
        await s.send_all(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")  # not msgpack
        cid, body = await read_response(s)
        assert cid == -1 and body["error"] == ErrorCode.MALFORMED_FRAME
        await s.send_all(raw_request(ApiKey.API_VERSIONS, 3, {}))  # connection still usable
        cid, body = await read_response(s)
        assert cid == 3 and body["error"] == 0
        await s.aclose()
        await still_serves(b)


async def test_truncated_frame_then_close(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        s = await open_raw(b)
        frame = raw_request(ApiKey.PRODUCE, 1, produce_body("t", batch(b"half")))
        await s.send_all(frame[: len(frame) // 2])
        await s.aclose()
        await still_serves(b)
        async with b.connect() as conn:  # the half request appended nothing
            r = (await conn.request(ApiKey.FETCH, fetch_body("t", 0))).body
            assert part(r)["log_end_offset"] == 1


async def test_oversized_frame(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}, limits=ServerLimits(max_frame_bytes=4096)) as b:
        s = await open_raw(b)
        await s.send_all(raw_request(ApiKey.PRODUCE, 1, produce_body("t", batch(b"x" * 10_000))))
        cid, body = await read_response(s)
        assert cid == -1 and body["error"] == ErrorCode.FRAME_TOO_LARGE
        assert await read_until_closed(s) == b""
        await still_serves(b)


async def test_unknown_api(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        s = await open_raw(b)
        await s.send_all(raw_request(999, 42, {}))
        cid, body = await read_response(s)
        assert cid == 42 and body["error"] == ErrorCode.UNKNOWN_API
        await still_serves(b)


async def test_bad_schema_and_version(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        s = await open_raw(b)
        await s.send_all(raw_request(ApiKey.PRODUCE, 7, {"acks": "all", "topics": 3}))
        cid, body = await read_response(s)
        assert cid == 7 and body["error"] == ErrorCode.INVALID_REQUEST and "produce" in body["message"]
        await s.send_all(raw_request(ApiKey.METADATA, 8, {}, version=9))
        cid, body = await read_response(s)
        assert cid == 8 and body["error"] == ErrorCode.UNSUPPORTED_VERSION
        body = msgpack.packb([1, 0, 9, "c"])  # 4 fields instead of 5
        await s.send_all(struct.pack(">I", len(body)) + body)
        cid, body = await read_response(s)
        assert cid == 9 and body["error"] == ErrorCode.MALFORMED_FRAME
        await still_serves(b)


async def test_too_many_connections(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}, limits=ServerLimits(max_connections=2)) as b:
        held = [await open_raw(b) for _ in range(2)]
        for s in held:  # make sure both are accepted and counted
            await s.send_all(raw_request(ApiKey.API_VERSIONS, 1, {}))
            assert (await read_response(s))[1]["error"] == 0
        extra = await open_raw(b)
        cid, body = await read_response(extra)
        assert cid == -1 and body["error"] == ErrorCode.TOO_MANY_CONNECTIONS
        assert await read_until_closed(extra) == b""
        await held[0].aclose()
        with trio.fail_after(30):
            while b.server.stats.connections_open > 1:
                await trio.sleep(0.01)
        await still_serves(b)
        await held[1].aclose()


async def test_too_many_in_flight(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}, limits=ServerLimits(max_in_flight=2)) as b:
        s = await open_raw(b)
        long_poll = fetch_body("t", 0, max_wait_ms=600_000)
        await s.send_all(raw_request(ApiKey.FETCH, 1, long_poll) + raw_request(ApiKey.FETCH, 2, long_poll)
                         + raw_request(ApiKey.METADATA, 3, {}))
        cid, body = await read_response(s)
        assert cid == 3 and body["error"] == ErrorCode.TOO_MANY_IN_FLIGHT
        await still_serves(b)  # wakes both long polls on the first connection too
        got = {(await read_response(s))[0] for _ in range(2)}
        assert got == {1, 2}
        await s.aclose()


async def test_handler_crash_is_answered_not_fatal():
    async def dispatch(req: Request):
        if req.api_key == ApiKey.METADATA:
            raise ZeroDivisionError("boom")
        return {"error": 0}

    server = Server(dispatch, "127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        s = await trio.open_tcp_stream("127.0.0.1", port)
        await s.send_all(raw_request(ApiKey.METADATA, 5, {}) + raw_request(ApiKey.API_VERSIONS, 6, {}))
        got = sorted([await read_response(s), await read_response(s)], key=lambda r: r[0])
        (cid, body), (cid2, body2) = got  # responses may come back in any order
        assert (cid, body["error"]) == (5, ErrorCode.UNKNOWN_SERVER_ERROR) and "boom" in body["message"]
        assert (cid2, body2["error"]) == (6, 0)
        assert server.stats.handler_crashes == 1
        nursery.cancel_scope.cancel()


async def test_connection_reset_by_peer_does_not_stop_the_server(tmp_path):
    """A client that dies with unread data on its socket resets the connection (RST): the
    server's read fails with ECONNRESET, which must end that connection only."""
    import socket

    async with running_broker(tmp_path, topics={"t": 1}) as b:
        for _ in range(3):
            s = await open_raw(b)
            # unanswered long poll, then a reset with the answer still unread
            await s.send_all(raw_request(ApiKey.FETCH, 1, fetch_body("t", 0, max_wait_ms=50))
                             + raw_request(ApiKey.METADATA, 2, {}))
            await trio.sleep(0.1)
            s.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.socket.close()
            await trio.sleep(0.05)
        s = await open_raw(b)
        await s.send_all(raw_request(ApiKey.PRODUCE, 1, produce_body("t", batch(b"x")))[:10])
        s.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.socket.close()
        await trio.sleep(0.05)
        await still_serves(b)
