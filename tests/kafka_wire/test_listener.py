"""The Kafka listener's connection handling over loopback, without a broker: answers in
order, ApiVersions served, idle and oversized connections closed, the listener stays up."""

from __future__ import annotations

import ssl
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


def _sasl_listener(protocol: str = "SASL_PLAINTEXT", **config: object) -> KafkaListener:
    from rafka.security.listener import ListenerSecurity, SecurityConfig

    cfg = SecurityConfig(listener=("127.0.0.1", 0), advertised_listener=None, protocol=protocol,
                         **config)  # type: ignore[arg-type]
    security = ListenerSecurity(cfg, None, lambda mechanism, user: None)
    return KafkaListener(ctx=None, host="127.0.0.1", port=0,  # type: ignore[arg-type]
                         protocol=protocol, security=security,
                         sasl_mechanisms=("SCRAM-SHA-256",), idle_timeout_s=60)


async def test_a_sasl_listener_closes_connections_that_do_not_log_in_in_time() -> None:
    slow = _sasl_listener(authentication_timeout_ms=300)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(slow.serve)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        frames = _Frames(stream)
        await stream.send_all(_api_versions(1))  # answered before the login...
        assert codec.decode_response(await frames.next(), 18, 3)[0] == 1
        with trio.fail_after(10):  # ...but the login deadline still closes it
            assert await frames.next() == b""
        assert slow.statistics()["auth_failures"] == 1
        nursery.cancel_scope.cancel()


async def test_a_sasl_listener_limits_frames_before_login_and_stays_up() -> None:
    listener = _sasl_listener(max_unauthenticated_frame_bytes=512)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(listener.serve)
        big = await trio.open_tcp_stream("127.0.0.1", port)
        await big.send_all(struct.pack(">i", 513))  # one byte over: closed unread
        assert await _read_frame(big) == b""
        garbage = await trio.open_tcp_stream("127.0.0.1", port)
        await garbage.send_all(struct.pack(">i", 2) + b"\x00\x11")  # shorter than a header
        assert await _read_frame(garbage) == b""
        ok = await trio.open_tcp_stream("127.0.0.1", port)
        await ok.send_all(_api_versions(7))
        assert codec.decode_response(await _read_frame(ok), 18, 3)[0] == 7
        nursery.cancel_scope.cancel()


async def test_a_tls_listener_closes_a_plaintext_client(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rafka.security.certs import CertAuthority, write_node_files

    files = write_node_files(tmp_path, CertAuthority.create(), "node-1", ["127.0.0.1"])
    listener = _sasl_listener("SSL", certfile=str(files.certfile), keyfile=str(files.keyfile))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(listener.serve)
        plain = await trio.open_tcp_stream("127.0.0.1", port)
        await plain.send_all(_api_versions(1))
        with trio.fail_after(10):
            try:  # closed with our request unread: an EOF or a reset
                assert await _read_frame(plain) == b""
            except trio.BrokenResourceError:
                pass
        ok = await trio.open_tcp_stream("127.0.0.1", port)  # and the listener stays up
        tls = trio.SSLStream(ok, ssl.create_default_context(cafile=str(files.cafile)),
                             server_hostname="127.0.0.1")
        await tls.send_all(_api_versions(2))
        assert codec.decode_response(await _read_frame(tls), 18, 3)[0] == 2
        nursery.cancel_scope.cancel()


async def test_a_plain_login_queued_for_its_thread_still_ends_at_the_login_deadline(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """PLAIN's PBKDF2 waits for one of the listener's worker threads; while every thread is
    busy (held here by the test) the login deadline still closes the connection, and the
    listener keeps serving."""
    from rafka.security.certs import CertAuthority, write_node_files
    from rafka.security.listener import ListenerSecurity, SecurityConfig

    files = write_node_files(tmp_path, CertAuthority.create(), "node-1", ["127.0.0.1"])
    cfg = SecurityConfig(listener=("127.0.0.1", 0), advertised_listener=None,  # type: ignore[arg-type]
                         protocol="SASL_SSL", certfile=str(files.certfile),
                         keyfile=str(files.keyfile), authentication_timeout_ms=300)
    listener = KafkaListener(ctx=None, host="127.0.0.1", port=0,  # type: ignore[arg-type]
                             protocol="SASL_SSL",
                             security=ListenerSecurity(cfg, None, lambda mech, user: None),
                             sasl_mechanisms=("PLAIN",), idle_timeout_s=60)
    holders = [object() for _ in range(int(listener.plain_limiter.total_tokens))]
    for h in holders:  # every worker thread busy
        await listener.plain_limiter.acquire_on_behalf_of(h)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(listener.serve)
        tls = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port),
                             ssl.create_default_context(cafile=str(files.cafile)),
                             server_hostname="127.0.0.1")
        frames = _Frames(tls)  # type: ignore[arg-type]
        hs = codec.build(codec.request_schema(17, 1), {"mechanism": "PLAIN"})
        await tls.send_all(codec.encode_request(hs, 1))
        assert int(codec.decode_response(await frames.next(), 17, 1)[1].error_code) == 0
        auth = codec.build(codec.request_schema(36, 2), {"auth_bytes": b"\0alice\0pw"})
        await tls.send_all(codec.encode_request(auth, 2))
        with trio.fail_after(10):
            try:  # closed unanswered at the deadline, the check still queued
                assert await frames.next() == b""
            except trio.BrokenResourceError:
                pass
        assert listener.statistics()["auth_failures"] == 1
        assert listener.plain_limiter.statistics().tasks_waiting == 0  # nothing left queued
        for h in holders:
            listener.plain_limiter.release_on_behalf_of(h)
        nursery.cancel_scope.cancel()
