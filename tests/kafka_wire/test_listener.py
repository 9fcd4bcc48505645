"""The Kafka listener's connection handling over loopback, without a broker: answers in
order, ApiVersions served, idle and oversized connections closed, the listener stays up."""

from __future__ import annotations

import struct

import trio
from rafka.broker.kafka import codec
from rafka.broker.kafka.listener import KafkaListener


class _Frames:
    """Whole answer frames off a stream (keeps what arrived past the current frame)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream, self.buf = stream, b""

    async def next(self) -> bytes:
        """The next frame's payload, or b"" when the listener closed the connection."""
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">i", self.buf)
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return frame
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                return b""
            self.buf += chunk


async def _read_frame(stream: trio.SocketStream) -> bytes:
    return await _Frames(stream).next()


def _api_versions(cid: int) -> bytes:
    req = codec.build(codec.request_schema(18, 3), {"client_software_name": "t",
                                                   "client_software_version": "1"})
    return codec.encode_request(req, cid)


async def test_pipelined_requests_are_answered_in_order_and_bad_ones_close() -> None:
    listener = KafkaListener(ctx=None, host="127.0.0.1", port=0,  # type: ignore[arg-type]
                             max_frame_bytes=1024, idle_timeout_s=60)
    # a second listener to watch the idle close (a short timeout on the first would make the
    # test depend on how fast a loaded machine schedules it)
    idler = KafkaListener(ctx=None, host="127.0.0.1", port=0,  # type: ignore[arg-type]
                          idle_timeout_s=0.3)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(listener.serve)
        idle_port = await nursery.start(idler.serve)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        frames = _Frames(stream)
        await stream.send_all(b"".join(_api_versions(c) for c in (1, 2, 3)))
        cids = [codec.decode_response(await frames.next(), 18, 3)[0] for _ in range(3)]
        assert cids == [1, 2, 3]
        # oversized: closed before the frame is read
        await stream.send_all(struct.pack(">i", 4096))
        assert await frames.next() == b""
        # idle: closed after idle_timeout_s
        idle = await trio.open_tcp_stream("127.0.0.1", idle_port)
        with trio.fail_after(10):
            assert await _read_frame(idle) == b""
        # still serving
        again = await trio.open_tcp_stream("127.0.0.1", port)
        await again.send_all(_api_versions(9))
        assert codec.decode_response(await _read_frame(again), 18, 3)[0] == 9
        assert listener.statistics()["connections"] >= 1
        nursery.cancel_scope.cancel()
