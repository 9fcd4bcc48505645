"""The least a replicated acks=all broker can do per produce in trio: a measured skeleton (issue 26).

Theory of operation: ``bench/bench_floor.py`` prices one message (a trio echo) and one
``fdatasync``; the *path floor* adds those prices up for the messages and fsyncs an operation
took. What the sum leaves out is the least code that ties them together: a producer's request
has to be appended, wait for a group commit and for both followers, and be answered; a
follower's fetch has to park until there is data. This module is that code and nothing else —
no protocol schema, no CRC, no idempotence, no index, no metrics, no ACLs — so its CPU per
produce is the floor of any broker written in Python on trio with rafka's durability (every
acknowledged record on disk on every in-sync replica), measured rather than priced.

``python -m bench.skeleton_broker ROLE ...``, one role per process (``/proc/<pid>/stat`` of each
is its CPU):

* ``leader PORT DIR``: producers connect to ``PORT``, followers to ``PORT + 1``. A producer frame
  (4-byte length, then the record) is appended to ``DIR/leader.log`` with ``os.write`` and held
  until the high watermark passes it; the answer is its 8-byte offset. One flusher task
  group-commits: it wakes once per batch of appends, ``fdatasync``s inline on the trio thread
  (no thread hop: the cheapest CPU, which is what this measures) and raises the leader's own
  flushed offset. The high watermark is the least of that and both followers' fetch positions
  (the ISR is all three, as in the bench clusters). A follower's fetch frame carries its next
  offset (everything before it is on its disk); it is answered at once if the leader has more,
  or parks until an append wakes it; the answer is a 4-byte record count and the records. A
  fetch frame of offset -1 asks for the counts instead (JSON: produces, fetches, fetches that
  carried records, leader fsyncs).
* ``follower PORT DIR``: fetches from the leader's ``PORT + 1`` in a loop: appends what came to
  ``DIR/follower-<pid>.log``, ``fdatasync``s, asks from the new end.

A fourth argument ``nofsync`` (both roles) leaves every ``fdatasync`` out and nothing else: the
leader's flusher still wakes once per batch and a follower still asks only after its append, so
the difference is the fsyncs alone. That is Kafka's default durability (``log.flush.policy=none``
in rafka: a record counts once it is in every in-sync replica's page cache).

Producers are ``bench/floor_peers.py``'s blocking ``client`` / ``clients`` roles (one frame in
flight per connection); their CPU is not counted, as in the broker figures.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import os
import struct
import sys

import trio

from bench.floor_peers import _LEN, _cut

_OFFSET = struct.Struct(">q")
_COUNT = struct.Struct(">i")
FOLLOWERS = 2


async def _frames(stream: trio.SocketStream, buf: bytearray) -> list[bytes]:
    """The next whole frames (payloads, prefix removed); ``[]`` when the peer closed."""
    while not (frames := _cut(buf)):
        data = await stream.receive_some(65536)
        if not data:
            return []
        buf += data
    return [f[4:] for f in frames]


def _frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


class Leader:
    def __init__(self, fd: int, fsync: bool = True) -> None:
        self.fd = fd
        self.fsync = fsync
        self.records: list[bytes] = []  # offset = index
        self.flushed = 0  # records [0, flushed) are on the leader's disk
        self.positions: dict[int, int] = {}  # follower connection -> its next offset
        self.hw = 0
        self.appended = trio.Event()  # woken on every append: parked fetches, the flusher
        self.waiters: list[tuple[int, int, trio.Event]] = []  # (offset needed, seq, event)
        self.seq = itertools.count()
        self.counts = {"produces": 0, "fetches": 0, "fetches_with_records": 0, "leader_fsyncs": 0}

    def append(self, record: bytes) -> int:
        os.write(self.fd, record)
        self.records.append(record)
        self.counts["produces"] += 1
        ev, self.appended = self.appended, trio.Event()
        ev.set()
        return len(self.records) - 1

    def update_hw(self) -> None:
        if len(self.positions) < FOLLOWERS:
            return
        hw = min(self.flushed, *self.positions.values())
        if hw <= self.hw:
            return
        self.hw = hw
        while self.waiters and self.waiters[0][0] <= hw:
            heapq.heappop(self.waiters)[2].set()

    async def committed(self, offset: int) -> None:
        if self.hw > offset:
            return
        ev = trio.Event()
        heapq.heappush(self.waiters, (offset + 1, next(self.seq), ev))
        await ev.wait()

    async def flusher(self) -> None:
        while True:
            if self.flushed == len(self.records):
                await self.appended.wait()
            end = len(self.records)
            if self.fsync:
                os.fdatasync(self.fd)
                self.counts["leader_fsyncs"] += 1
            self.flushed = end
            self.update_hw()
            await trio.lowlevel.checkpoint()  # let the appends of the next round in

    async def producer(self, stream: trio.SocketStream) -> None:
        buf = bytearray()
        while frames := await _frames(stream, buf):
            last = 0
            for record in frames:
                last = self.append(record)
            await self.committed(last)
            first = last - len(frames) + 1
            await stream.send_all(b"".join(_frame(_OFFSET.pack(o)) for o in range(first, last + 1)))

    async def follower(self, stream: trio.SocketStream) -> None:
        buf, me = bytearray(), id(stream)
        try:
            while frames := await _frames(stream, buf):
                (offset,) = _OFFSET.unpack(frames[-1])
                if offset < 0:
                    await stream.send_all(_frame(json.dumps(self.counts).encode()))
                    continue
                self.counts["fetches"] += 1
                self.positions[me] = offset
                self.update_hw()
                while len(self.records) <= offset:
                    await self.appended.wait()
                batch = self.records[offset:]
                self.counts["fetches_with_records"] += 1
                await stream.send_all(_frame(_COUNT.pack(len(batch)) + b"".join(batch)))
        finally:
            self.positions.pop(me, None)


def leader(port: int, directory: str, fsync: bool = True) -> None:
    fd = os.open(os.path.join(directory, "leader.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    node = Leader(fd, fsync)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(node.flusher)
            nursery.start_soon(functools.partial(trio.serve_tcp, node.follower, port + 1, host="127.0.0.1"))
            await trio.serve_tcp(node.producer, port, host="127.0.0.1")

    trio.run(main)


def follower(port: int, directory: str, fsync: bool = True) -> None:
    path = os.path.join(directory, f"follower-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    async def main() -> None:
        while True:  # the leader may not listen yet
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port + 1)
                break
            except OSError:
                await trio.sleep(0.02)
        buf, offset = bytearray(), 0
        while True:
            await stream.send_all(_frame(_OFFSET.pack(offset)))
            frames = await _frames(stream, buf)
            if not frames:
                return
            (count,) = _COUNT.unpack_from(frames[0])
            os.write(fd, memoryview(frames[0])[4:])
            if fsync:
                os.fdatasync(fd)
            offset += count

    trio.run(main)


if __name__ == "__main__":
    role, port_arg, dir_arg, *mode = sys.argv[1:]
    if mode not in ([], ["nofsync"]):
        raise SystemExit(f"unknown mode {mode!r}: give nothing or 'nofsync'")
    {"leader": leader, "follower": follower}[role](int(port_arg), dir_arg, fsync=not mode)
