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
from rafka.spark_source.wire import BlockingConnection
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey, FrameTooLargeError, decode_request

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


def _metadata_server(peer, answers: list[dict], asked: list[int]) -> tuple[str, int]:
    """A peer answering every METADATA request on one connection with the next of
    ``answers`` (the last one again when they run out); ``asked`` counts the requests."""
    def script(conn: socket.socket) -> None:
        while True:
            try:
                cid = _read_request(conn)
            except AssertionError:
                return  # the client went away
            answer = answers[min(len(asked), len(answers) - 1)]
            asked.append(cid)  # before the answer: the test reads it once answered
            conn.sendall(_answer(cid, answer))

    return peer(script)


def _meta(offset: int, ports: list[int], *, known: bool) -> dict:
    """METADATA at image ``offset``: brokers 1, 2 on ``ports``; topic ``t`` led by broker 2,
    or unknown."""
    topic = ({"name": "t", "error": 0, "topic_id": "id", "is_internal": False,
              "partitions": [{"partition": 0, "error": 0, "leader": 2, "leader_epoch": 0,
                              "replicas": [2], "isr": [2]}]} if known else
             {"name": "t", "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
              "message": "unknown topic 't'", "topic_id": None, "is_internal": False,
              "partitions": []})
    return {"cluster_id": "c", "controller_id": 1, "metadata_offset": offset,
            "brokers": [{"node_id": i + 1, "host": "127.0.0.1", "port": port, "rack": None}
                        for i, port in enumerate(ports)],
            "topics": [topic]}


def test_metadata_of_a_broker_behind_is_not_taken_for_a_deletion(peer) -> None:
    """A restarted broker answers METADATA from an empty image (offset -1) until it has caught
    up, and calls every topic unknown: the source asks another broker, never concludes the
    topic was deleted (a false DataLossError failed a streaming query across a leader restart,
    tests/spark/test_spark_failover.py). An "unknown" from an image older than one that listed
    the topic (a broker lagging the log) keeps what was known; a current answer is believed."""
    from rafka.spark_source.wire import Cluster

    behind_answers: list[dict] = []
    behind_asked: list[int] = []
    behind = _metadata_server(peer, behind_answers, behind_asked)
    good_answers: list[dict] = []
    good_asked: list[int] = []
    good = _metadata_server(peer, good_answers, good_asked)
    ports = [behind[1], good[1]]
    behind_answers += [_meta(-1, ports, known=False), _meta(5, ports, known=False),
                       _meta(13, ports, known=True)]
    good_answers += [_meta(10, ports, known=True)]
    with Cluster(f"{behind[0]}:{behind[1]},{good[0]}:{good[1]}", timeout_ms=3000) as c:
        assert c.refresh(["t"]) == {"t": [0]}  # offset -1 skipped: the second broker answers
        assert (len(behind_asked), len(good_asked), c.metadata_offset) == (1, 1, 10)
        assert c.refresh(["t"]) == {"t": [0]}  # broker 1 first: at 5 < 10 its "unknown" is lag
        assert (len(behind_asked), len(good_asked), c.metadata_offset) == (2, 1, 10)
        assert c.leader_address(("t", 0)) == ("127.0.0.1", good[1])
        assert c.refresh(["t"]) == {"t": [0]} and c.metadata_offset == 13  # caught up


def test_a_topic_deleted_by_current_metadata_is_gone(peer) -> None:
    """The rule above never hides a real deletion: a current broker saying "unknown" is."""
    from rafka.spark_source.wire import Cluster, PartitionGone

    answers: list[dict] = []
    asked: list[int] = []
    host, port = _metadata_server(peer, answers, asked)
    answers += [_meta(3, [port, port], known=True), _meta(4, [port, port], known=False)]
    with Cluster(f"{host}:{port}", timeout_ms=3000) as c:
        assert c.refresh(["t"]) == {"t": [0]}
        c.leaders.clear()
        with pytest.raises(PartitionGone):
            c.leader_address(("t", 0))
        assert c.metadata_offset == 4


def test_a_lagging_listing_keeps_a_topic_a_current_one_drops_it(peer) -> None:
    """subscribePattern lists every topic (METADATA with topics=None): a listing from an image
    older than one that had the topic does not drop it; a current listing without it does."""
    from rafka.spark_source.wire import Cluster

    answers: list[dict] = []
    asked: list[int] = []
    host, port = _metadata_server(peer, answers, asked)
    empty = {**_meta(0, [port, port], known=True), "topics": []}
    answers += [_meta(10, [port, port], known=True), {**empty, "metadata_offset": 5},
                {**empty, "metadata_offset": 11}]
    with Cluster(f"{host}:{port}", timeout_ms=3000) as c:
        assert c.refresh(None) == {"t": [0]}
        assert c.refresh(None) == {"t": [0]}  # offset 5: lag, the topic stays
        assert c.refresh(None) == {}          # offset 11: deleted
        assert "t" not in c.topics
