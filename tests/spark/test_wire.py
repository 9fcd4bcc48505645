"""The Spark source's blocking connection reads frames straight into their own buffers
(``BlockingConnection._read_exact``): whole answers in any split, pipelined answers matched to
their requests, and the named errors — an announced length over the limit, a peer that closes
mid-frame. A real TCP peer on loopback plays the broker with hand-made frames."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator

import msgpack
import pytest
from rafka.broker.errors import ErrorCode, RafkaError
from rafka.broker.protocol import ApiKey, FrameTooLargeError, decode_request
from rafka.spark_source.wire import BlockingConnection

_LEN = struct.Struct(">I")


def _answer(cid: int, body: dict, raw: bytes = b"") -> bytes:
    head = msgpack.packb([cid, body])
    return _LEN.pack(4 + len(head) + len(raw)) + _LEN.pack(len(head)) + head + raw


def _read_request(conn: socket.socket) -> int:
    """The correlation id of the next request on ``conn``."""
    def exact(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            assert chunk, "client went away"
            out += chunk
        return out
    (n,) = _LEN.unpack(exact(4))
    return decode_request(exact(n)).correlation_id


@pytest.fixture
def peer() -> Iterator[Callable[[Callable[[socket.socket], None]], tuple[str, int]]]:
    """Start a one-connection TCP peer running ``script(conn)``; yields the starter."""
    threads: list[threading.Thread] = []
    socks: list[socket.socket] = []

    def start(script: Callable[[socket.socket], None]) -> tuple[str, int]:
        srv = socket.create_server(("127.0.0.1", 0))
        socks.append(srv)

        def run() -> None:
            conn, _ = srv.accept()
            with conn:
                script(conn)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        threads.append(t)
        return srv.getsockname()[:2]

    yield start
    for s in socks:
        s.close()
    for t in threads:
        t.join(5)


def test_answers_split_anyhow_and_pipelined_are_matched(peer) -> None:
    raw = bytes(range(256)) * 4096  # 1 MiB of "records" behind the head

    def script(conn: socket.socket) -> None:
        a, b = _read_request(conn), _read_request(conn)
        wire = _answer(b, {"n": 2}) + _answer(a, {"n": 1}, raw)  # out of order
        for i in range(0, len(wire), 7919):  # odd-sized pieces: every boundary is crossed
            conn.sendall(wire[i:i + 7919])
        conn.recv(1)

    host, port = peer(script)
    c = BlockingConnection(host, port, timeout_s=10)
    try:
        first = c.send(ApiKey.API_VERSIONS, {})
        second = c.send(ApiKey.API_VERSIONS, {})
        r1 = c.receive(first)
        assert r1.body == {"n": 1} and bytes(r1.raw) == raw
        assert c.receive(second).body == {"n": 2}
    finally:
        c.close()


def test_an_oversized_length_is_refused_before_reading_it(peer) -> None:
    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(_LEN.pack(2**31))  # 2 GiB announced, nothing behind it
        conn.recv(1)

    host, port = peer(script)
    c = BlockingConnection(host, port, timeout_s=10)
    cid = c.send(ApiKey.API_VERSIONS, {})
    with pytest.raises(FrameTooLargeError):
        c.receive(cid)
    assert c.closed  # the stream cannot be framed any more


def test_a_peer_closing_mid_frame_is_a_network_error(peer) -> None:
    def script(conn: socket.socket) -> None:
        cid = _read_request(conn)
        conn.sendall(_answer(cid, {"x": 1}, b"r" * 1000)[:-10])  # the last 10 bytes never come

    host, port = peer(script)
    c = BlockingConnection(host, port, timeout_s=10)
    cid = c.send(ApiKey.API_VERSIONS, {})
    with pytest.raises(RafkaError) as info:
        c.receive(cid)
    assert info.value.code == ErrorCode.NETWORK_EXCEPTION
    assert "closed the connection" in str(info.value)
    assert c.closed
