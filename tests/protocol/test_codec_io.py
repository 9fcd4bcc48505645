"""The trio edges write the codec's bytes, on a real loopback connection (no mock streams):
what ``wire.connection.Connection`` writes for requests — small ones in one write, large ones
in two parts from its reused buffer, ``send_request_nowait``'s non-blocking write — equals
``wire.protocol.encode_request``; what ``broker.server.Server`` writes for answers — a small
reply gathered into one write, a large one with its records sent from a file by ``sendfile``
— equals ``wire.protocol.encode_response``."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import msgpack
import trio
from rafka.broker.server import SMALL_REPLY_BYTES, Server
from rafka.wire.connection import connect
from rafka.wire.dispatch import FileSlice, Reply
from rafka.wire.errors import NetworkException
from rafka.wire.protocol import (
    ApiKey,
    FrameDecoder,
    Request,
    Response,
    decode_request,
    encode_request,
    encode_response,
)

CLIENT_ID = "codec-io"


async def _read_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = await stream.receive_some(n - len(out))
        assert chunk, f"closed after {len(out)} of {n} bytes"
        out += chunk
    return bytes(out)


async def test_connection_writes_the_codecs_request_frames() -> None:
    bodies: list[tuple[ApiKey, dict[str, Any]]] = [
        (ApiKey.METADATA, {"topics": None}),
        (ApiKey.PRODUCE, {"acks": 0, "timeout_ms": 1, "topics": [
            {"name": "t", "partitions": [{"partition": 0, "records": b"r" * 300_000}]}]}),  # 2 writes
        (ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                        "topics": []}),
        (ApiKey.LIST_GROUPS, {}),
    ]
    expected = b"".join(encode_request(Request(int(k), cid, body, 0, CLIENT_ID))
                        for cid, (k, body) in enumerate(bodies))
    # the codec's frames are the documented format (wire/protocol.py), not just its own output
    spelled = [msgpack.packb([int(k), 0, cid, CLIENT_ID, body], use_bin_type=True)
               for cid, (k, body) in enumerate(bodies)]
    assert expected == b"".join(struct.pack(">I", len(p)) + p for p in spelled)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    got = b""
    async with trio.open_nursery() as nursery:
        async def serve() -> None:
            nonlocal got
            stream = await listeners[0].accept()
            got = await _read_exactly(stream, len(expected))
            await stream.aclose()

        nursery.start_soon(serve)
        async with connect("127.0.0.1", port, client_id=CLIENT_ID) as conn:
            await conn.send_only(*bodies[0])  # _send: one write
            await conn.send_only(*bodies[1])  # _send: prefix, then the encoder's buffer
            pending = conn.send_request_nowait(*bodies[2])  # one non-blocking os.write
            assert pending is not None
            later = await conn.send_request(*bodies[3])
            with trio.fail_after(10):
                while not got:
                    await trio.sleep(0.01)
            pending.abandon()
            later.abandon()
    await listeners[0].aclose()
    assert got == expected
    # and the codec reads them back as the requests they were
    dec = FrameDecoder()
    dec.receive_data(got)
    for cid, (key, body) in enumerate(bodies):
        req = decode_request(dec.next_frame())  # type: ignore[arg-type]
        assert (req.api_key, req.correlation_id, req.client_id, req.body) == (key, cid, CLIENT_ID, body)


async def test_a_reset_while_a_request_waits_leaves_connect_as_itself() -> None:
    """The peer closes the connection after reading a request: ``conn.request`` raises
    NetworkException, and it leaves ``async with connect(...)`` as a NetworkException — not
    wrapped in the reader's nursery's exception group, which ``except NetworkException`` (the
    quorum describe's per-voter ask, tests/kraft/cluster_util.py's ``try_request``) misses."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        async def serve() -> None:
            stream = await listeners[0].accept()
            await stream.receive_some(65536)  # the request
            await stream.aclose()  # no answer

        nursery.start_soon(serve)
        with trio.fail_after(10):
            try:
                async with connect("127.0.0.1", port, client_id=CLIENT_ID) as conn:
                    await conn.request(ApiKey.LIST_GROUPS, {})
            except NetworkException as exc:
                caught: BaseException = exc
            except BaseException as exc:  # noqa: BLE001 - the assertion names what it was
                caught = exc
    await listeners[0].aclose()
    assert isinstance(caught, NetworkException), repr(caught)


async def test_server_writes_the_codecs_response_frames(tmp_path: Path) -> None:
    segment = tmp_path / "segment"
    records = os.urandom(3 * SMALL_REPLY_BYTES)
    segment.write_bytes(records)
    small_raw = records[:100]

    async def dispatch(req: Request) -> Reply | dict[str, Any] | None:
        if req.body.get("big"):  # head, then the file slice by sendfile
            fd = os.open(segment, os.O_RDONLY)
            return Reply({"topics": [], "records_len": len(records)}, [FileSlice(fd, 0, len(records))])
        if req.body.get("small"):  # gathered: head + pread slice + bytes in one write
            fd = os.open(segment, os.O_RDONLY)
            return Reply({"n": 2}, [FileSlice(fd, 0, 50), small_raw[50:]])
        return {"error": 0, "echo": req.body}

    server = Server(dispatch, "127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        cases = [({"x": 1}, Response(0, {"error": 0, "echo": {"x": 1}})),
                 ({"small": True}, Response(1, {"n": 2}, small_raw)),
                 ({"big": True}, Response(2, {"topics": [], "records_len": len(records)}, records))]
        for cid, (body, answer) in enumerate(cases):
            await stream.send_all(encode_request(Request(ApiKey.LIST_GROUPS, cid, body)))
            want = encode_response(answer)
            with trio.fail_after(10):
                assert await _read_exactly(stream, len(want)) == want
        await stream.aclose()
        nursery.cancel_scope.cancel()
