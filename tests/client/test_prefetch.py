"""The consumer's prefetch (its next FETCH written as soon as an answer is buffered) keeps every
guarantee: seek, pause/resume and reassignment while a prefetch is in flight never yield a
duplicate, skipped or stale record; FETCHes still carry ``max_partition_fetch_bytes`` and the
broker's answers respect it; a corrupt batch is still a named error. Plus
``Connection.send_request_nowait``, whose one non-blocking write the prefetch uses, including a
partial write finished by ``PendingResponse.wait`` with no other frame interleaved.

Scripted brokers are in-process ``broker.server.Server``s (real TCP) whose FETCH answers the
test can hold; the rest runs against the real broker of ``conftest.py``.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import msgpack
import pytest
import trio
from rafka.broker.server import Reply, Server
from rafka.client import Consumer, Producer, TopicPartition
from rafka.client.aio.consumer import AsyncConsumer
from rafka.client.errors import CorruptRecordError
from rafka.log.batch import build_batch
from rafka.wire.connection import Connection
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, Request, encode_response_head

from .conftest import drain

TP = TopicPartition("t", 0)


class ScriptedBroker:
    """One node leading ``t-0``: a FETCH at offset ``o`` is answered with records ``o..o+2``
    (a corrupt batch at ``corrupt_at``); FETCHes after the first ``hold_after`` wait for
    ``release``."""

    def __init__(self) -> None:
        self.port = 0
        self.fetch_offsets: list[int] = []
        self.fetched = trio.Event()  # set on each FETCH received
        self.hold_after = 1 << 30
        self.release = trio.Event()
        self.corrupt_at = -1

    async def dispatch(self, req: Request) -> Reply | dict[str, Any]:
        if req.api_key == ApiKey.METADATA:
            return {"cluster_id": "test", "controller_id": -1,
                    "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port, "rack": None}],
                    "topics": [{"name": "t", "error": 0, "topic_id": "id-t", "is_internal": False,
                                "partitions": [{"partition": 0, "error": 0, "leader": 1,
                                                "leader_epoch": 0, "replicas": [1], "isr": [1]}]}]}
        if req.api_key == ApiKey.LIST_OFFSETS:
            return {"topics": [{"name": "t", "partitions": [
                {"partition": 0, "error": 0, "offset": 0, "timestamp": -1, "leader_epoch": 0}]}]}
        if req.api_key == ApiKey.FETCH:
            offset = req.body["topics"][0]["partitions"][0]["fetch_offset"]
            self.fetch_offsets.append(offset)
            self.fetched.set()
            self.fetched = trio.Event()
            if len(self.fetch_offsets) > self.hold_after:
                await self.release.wait()
            raw = bytearray(build_batch([(None, b"v%d" % (offset + i), [], 1_000) for i in range(3)],
                                        base_offset=offset))
            if offset == self.corrupt_at:
                raw[-1] ^= 0xFF  # inside the records section: the CRC no longer matches
            entry = {"partition": 0, "error": 0, "message": None, "high_watermark": 1_000_000,
                     "log_start_offset": 0, "log_end_offset": 1_000_000, "diverging_epoch": None,
                     "records_len": len(raw)}
            return Reply({"topics": [{"name": "t", "partitions": [entry]}]}, [bytes(raw)])
        return {"error": int(ErrorCode.UNKNOWN_API), "message": "not scripted"}

    async def wait_fetches(self, n: int) -> None:
        with trio.fail_after(10):
            while len(self.fetch_offsets) < n:
                await self.fetched.wait()


async def _with_consumer(broker: ScriptedBroker, body: Any) -> None:
    async with trio.open_nursery() as nursery:
        broker.port = await nursery.start(Server(broker.dispatch).serve)
        async with AsyncConsumer(bootstrap_servers=f"127.0.0.1:{broker.port}", retry_backoff_ms=10,
                                 fetch_max_wait_ms=10, auto_offset_reset="earliest") as c:
            c.assign([TP])
            with trio.fail_after(20):
                await body(c)
        nursery.cancel_scope.cancel()


async def _offsets(c: AsyncConsumer) -> list[int]:
    while True:
        recs = (await c.poll(timeout_ms=200)).get(TP, [])
        if recs:
            return [r.offset for r in recs]


def test_seek_during_an_inflight_prefetch_yields_the_new_position_only() -> None:
    broker = ScriptedBroker()

    async def body(c: AsyncConsumer) -> None:
        broker.hold_after = 1  # the first answer passes, the next ones wait
        c.seek(TP, 0)
        await broker.wait_fetches(1)
        assert await _offsets(c) == [0, 1, 2]
        await broker.wait_fetches(2)  # the prefetch from 3 is in flight, held by the broker
        assert broker.fetch_offsets[1] == 3
        c.seek(TP, 100)
        broker.release.set()  # the stale answer (3..5) arrives now
        assert await _offsets(c) == [100, 101, 102]
        assert await _offsets(c) == [103, 104, 105]
        assert 100 in broker.fetch_offsets

    trio.run(_with_consumer, broker, body)


def test_corrupt_batch_behind_a_prefetch_is_a_named_error_and_seekable() -> None:
    broker = ScriptedBroker()
    broker.corrupt_at = 3

    async def body(c: AsyncConsumer) -> None:
        c.seek(TP, 0)
        assert await _offsets(c) == [0, 1, 2]
        with pytest.raises(CorruptRecordError) as err:
            await _offsets(c)
        assert err.value.start_offset == 3 and "t-0" in str(err.value)
        c.seek(TP, 6)  # past the damaged batch, as the message says
        assert await _offsets(c) == [6, 7, 8]

    trio.run(_with_consumer, broker, body)


def test_reassignment_drops_prefetched_data(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Producer(bootstrap) as p:
        for i in range(300):
            p.send(topic, value=b"%d" % i, partition=i % 2)
        p.flush()
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=20) as c:
        c.assign([t0, t1])
        first = drain(c, 20)
        assert first and all(r.offset < 20 for r in first)
        c.assign([t1])  # t0 revoked: whatever was prefetched for it must not come back
        rest = drain(c, 150 - sum(r.partition == 1 for r in first), timeout_s=30)
        assert {r.partition for r in rest} == {1}
        c.assign([t0, t1])  # t0 again: from auto_offset_reset, every record once, in order
        again = drain(c, 150, timeout_s=30)
    assert [r.offset for r in again if r.partition == 0] == list(range(150))
    one = [r.offset for r in first + rest if r.partition == 1]
    assert one == list(range(150))


def test_pause_with_prefetched_data_then_resume_is_gapless(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap, linger_ms=0) as p:
        for i in range(200):
            p.send(topic, value=b"%d" % i)
            if i % 10 == 9:
                p.flush()  # many small batches: several fetches' worth
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=15,
                  max_partition_fetch_bytes=1024) as c:
        c.assign([tp])
        got = drain(c, 15)
        c.pause(tp)
        assert c.poll(timeout_ms=300) == {}
        c.resume(tp)
        got += drain(c, 200 - len(got))
        c.seek(tp, 50)
        tail = drain(c, 150)
    assert [r.offset for r in got] == list(range(200))
    assert [r.offset for r in tail] == list(range(50, 200))


class _RecordingConsumer(AsyncConsumer):
    """Records, per FETCH answer, each partition's raw length next to what was asked for."""

    seen: list[tuple[int, int]]

    def _take_answer(self, fetch: Any, parts: Any) -> bool:
        asked = {(t["name"], p["partition"]): p["partition_max_bytes"]
                 for t in fetch.body["topics"] for p in t["partitions"]}
        for pd in parts:
            self.seen.append((len(pd.raw), asked[(pd.tp.topic, pd.tp.partition)]))
        return super()._take_answer(fetch, parts)


def test_answers_respect_max_partition_fetch_bytes(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    tp = TopicPartition(topic, 0)
    value = b"x" * 300
    with Producer(bootstrap, linger_ms=0) as p:
        for i in range(120):
            p.send(topic, value=value)
            if i % 4 == 3:
                p.flush()  # batches of ~1.2 KB

    async def main() -> list[tuple[int, int]]:
        async with _RecordingConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                      max_partition_fetch_bytes=4096) as c:
            c.seen = []
            c.assign([tp])
            n = 0
            with trio.fail_after(30):
                while n < 120:
                    n += sum(len(v) for v in (await c.poll(timeout_ms=500)).values())
            return c.seen

    seen = trio.run(main)
    assert len(seen) >= 120 * 300 // 4096  # many fetches, none bigger than asked
    assert all(asked == 4096 and 0 <= got <= 4096 for got, asked in seen), seen


# --------------------------------------------------------------------------- send_request_nowait


def _read_frames(sock: socket.socket, n: int) -> list[list[Any]]:
    buf = b""
    out: list[list[Any]] = []
    while len(out) < n:
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            buf += sock.recv(1 << 20)
        size = struct.unpack(">I", buf[:4])[0]
        out.append(msgpack.unpackb(buf[4:4 + size], raw=False))
        buf = buf[4 + size:]
    return out


def _answer(sock: socket.socket, cid: int, body: dict[str, Any]) -> None:
    head = encode_response_head(cid, body, 0)
    sock.sendall(head)


def test_send_request_nowait_writes_at_once_and_finishes_a_partial_write() -> None:
    async def main() -> None:
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn = Connection(trio.SocketStream(trio.socket.from_stdlib_socket(a)))
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            small = conn.send_request_nowait(ApiKey.FETCH, {"n": 1})
            assert small is not None  # written, nothing awaited
            assert _read_frames(b, 1)[0][2:] == [0, "rafka-python", {"n": 1}]
            big_body = {"blob": b"z" * 60_000}  # more than both socket buffers hold
            big = conn.send_request_nowait(ApiKey.FETCH, big_body)
            assert big is not None and big._rest is not None  # only part of it went out
            assert conn.send_request_nowait(ApiKey.FETCH, {"n": 3}) is None  # mid-frame: no
            frames: list[list[Any]] = []
            answers: list[Any] = []

            async def read_two() -> None:
                frames.extend(await trio.to_thread.run_sync(_read_frames, b, 2))
                _answer(b, 2, {"ok": 4})

            async def request_four() -> None:  # queued behind the unfinished frame
                answers.append((await conn.request(ApiKey.FETCH, {"n": 4})).body)

            async with trio.open_nursery() as inner:
                inner.start_soon(read_two)
                inner.start_soon(request_four)
                _answer(b, 1, {"ok": 2})
                assert (await big.wait()).body == {"ok": 2}  # wrote the rest, then the answer
            assert [f[2:] for f in frames] == [[1, "rafka-python", big_body],
                                               [2, "rafka-python", {"n": 4}]]
            assert answers == [{"ok": 4}]
            _answer(b, 0, {"ok": 1})
            assert (await small.wait()).body == {"ok": 1}
            nursery.cancel_scope.cancel()
        a.close()
        b.close()

    trio.run(main)


def test_request_writes_at_once_and_a_cancelled_caller_sends_nothing() -> None:
    """``request``/``send_request`` take ``send_request_nowait``'s one write when they can (no
    slot, lock or ``send_all`` pass), fall back to ``send_all`` when they cannot, and a caller
    already cancelled writes nothing."""
    async def main() -> None:
        a, b = socket.socketpair()
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))
        conn = Connection(stream)
        real_send_all = stream.send_all
        calls: list[int] = []

        async def counting_send_all(data: Any) -> None:
            calls.append(len(data))
            await real_send_all(data)

        stream.send_all = counting_send_all  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            with trio.CancelScope() as scope:
                scope.cancel()
                await conn.request(ApiKey.FETCH, {"n": 0})
            assert scope.cancelled_caught and not conn._waiters and conn._slots.value == 64
            b.setblocking(False)
            with pytest.raises(BlockingIOError):
                b.recv(1)  # nothing was written
            b.setblocking(True)

            async def one(n: int, out: list[Any]) -> None:
                out.append((await conn.request(ApiKey.FETCH, {"n": n})).body)

            out: list[Any] = []
            nursery.start_soon(one, 1, out)
            frame = (await trio.to_thread.run_sync(_read_frames, b, 1))[0]
            assert frame[2:] == [0, "rafka-python", {"n": 1}] and calls == []  # one os.write
            _answer(b, 0, {"ok": 1})
            pending = await conn.send_request(ApiKey.FETCH, {"n": 2})
            assert calls == []
            assert (await trio.to_thread.run_sync(_read_frames, b, 1))[0][2:] == [
                1, "rafka-python", {"n": 2}]
            _answer(b, 1, {"ok": 2})
            assert (await pending.wait()).body == {"ok": 2}
            big = {"blob": b"z" * 100_000}  # over _SPLIT_WRITE_BYTES: the send_all path
            nursery.start_soon(one, 3, out)
            assert (await trio.to_thread.run_sync(_read_frames, b, 1))[0][2:] == [
                2, "rafka-python", {"n": 3}]
            _answer(b, 2, {"ok": 3})
            big_pending = trio.Event()

            async def big_one() -> None:
                out.append((await conn.request(ApiKey.FETCH, big)).body)
                big_pending.set()

            nursery.start_soon(big_one)
            assert (await trio.to_thread.run_sync(_read_frames, b, 1))[0][4] == big
            assert calls  # written through send_all
            _answer(b, 3, {"ok": 4})
            await big_pending.wait()
            assert out == [{"ok": 1}, {"ok": 3}, {"ok": 4}]
            nursery.cancel_scope.cancel()
        a.close()
        b.close()

    trio.run(main)


class _TwoFetchesConsumer(AsyncConsumer):
    FETCHES_PER_NODE = 2


def test_two_fetches_per_broker_keep_every_partition_in_order(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(3)
    with Producer(bootstrap, linger_ms=0) as p:
        for i in range(600):
            p.send(topic, value=b"%d" % i, partition=i % 3)
            if i % 30 == 29:
                p.flush()

    async def main() -> dict[int, list[int]]:
        got: dict[int, list[int]] = {0: [], 1: [], 2: []}
        async with _TwoFetchesConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                       max_partition_fetch_bytes=512) as c:
            c.assign([TopicPartition(topic, p) for p in range(3)])
            with trio.fail_after(30):
                while sum(map(len, got.values())) < 600:
                    for tp, recs in (await c.poll(timeout_ms=500)).items():
                        got[tp.partition] += [r.offset for r in recs]
                        assert c._node_fetches[1] <= 2
        return got

    got = trio.run(main)
    assert got == {p: list(range(200)) for p in range(3)}
