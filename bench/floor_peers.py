"""The processes of the machine-floor bench (``bench/bench_floor.py``; issue 26).

Theory of operation: ``python -m bench.floor_peers ROLE ...`` runs one role in a process of its
own, so ``/proc/<pid>/stat`` of that process is exactly the CPU the role spent:

* ``trio-echo PORT`` / ``raw-echo PORT``: a server that cuts 4-byte-length-prefixed frames out of
  what it reads and writes each frame back — what a broker does per request at the least (read,
  frame, answer), with trio's event loop or with a blocking socket per connection (a thread
  each);
* ``client PORT N WINDOW SIZE``: sends ``N`` frames of ``SIZE`` bytes with at most ``WINDOW``
  unanswered, reads every answer, prints the seconds it took;
* ``clients PORT N CONNS SIZE``: ``CONNS`` connections, each with one frame in flight at a time
  (sent again as soon as its answer is read), ``N`` frames in all: what 32 producers waiting
  for their answers ask of a server, unlike a window of 32 on one connection (one read and one
  write for all of them);
* ``trio-client PORT N SIZE``: the client side of the echo, in trio, one frame at a time (what a
  follower's fetch costs the follower: send a request, wait, read the answer); prints its own
  CPU microseconds per round trip as JSON;
* ``fsync DIR N``: ``N`` rounds of a 120-byte append and ``fdatasync`` to a new file in ``DIR`` (a
  one-record group commit of a growing segment); prints the CPU microseconds per round (kernel
  included: ``time.process_time``) and the wall p50 as JSON;
* ``rtt PORT N SIZE``: ``N`` round trips of one ``SIZE``-byte frame at a time, each timed; prints
  the p50 and p99 in µs as JSON — the loopback round trip set beside end-to-end latencies;
* ``paced PORT RATE MILLIS SIZE``: on one connection, single ``SIZE``-byte frames at ``RATE`` a
  second for ``MILLIS`` ms, sent when due whatever is still unanswered; each answer (in order)
  timed from its frame's sending; prints the p50 and p99 in µs as JSON — the acknowledgement
  latency of a producer at linger 0 against ``bench/skeleton_broker.py``;
* ``hops N``: in one trio process, ``N`` of each of ``trio.to_thread.run_sync`` (a thread hop),
  a memory-channel round trip between two tasks (two hand-offs) and ``trio.lowlevel.checkpoint``;
  prints the CPU microseconds (``time.process_time``, all threads) per operation as JSON.

Nothing here imports rafka: the floor is trio's and the kernel's, not ours.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import sys
import threading
import time

import trio

_LEN = struct.Struct(">i")


def _cut(buf: bytearray) -> list[bytes]:
    """Whole frames at the front of ``buf`` (removed from it), each with its length prefix."""
    frames, pos = [], 0
    while len(buf) - pos >= 4:
        (n,) = _LEN.unpack_from(buf, pos)
        if len(buf) - pos - 4 < n:
            break
        frames.append(bytes(buf[pos:pos + 4 + n]))
        pos += 4 + n
    del buf[:pos]
    return frames


async def _trio_conn(stream: trio.SocketStream) -> None:
    buf = bytearray()
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        buf += data
        frames = _cut(buf)
        if frames:
            await stream.send_all(b"".join(frames))


def trio_echo(port: int) -> None:
    async def main() -> None:
        await trio.serve_tcp(_trio_conn, port, host="127.0.0.1")
    trio.run(main)


def raw_echo(port: int) -> None:
    srv = socket.create_server(("127.0.0.1", port))

    def conn(s: socket.socket) -> None:
        buf = bytearray()
        while data := s.recv(65536):
            buf += data
            frames = _cut(buf)
            if frames:
                s.sendall(b"".join(frames))

    while True:
        s, _ = srv.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=conn, args=(s,), daemon=True).start()


def client(port: int, n: int, window: int, size: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = _LEN.pack(size) + b"x" * size
    t0 = time.perf_counter()
    sent = got = 0
    buf = bytearray()
    while got < n:
        burst = min(window - (sent - got), n - sent)
        if burst > 0:
            s.sendall(frame * burst)
            sent += burst
        buf += s.recv(65536)
        got += len(_cut(buf))
    print(time.perf_counter() - t0, flush=True)


def clients(port: int, n: int, conns: int, size: int) -> None:
    frame = _LEN.pack(size) + b"x" * size
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    bufs = {s: bytearray() for s in socks}
    sel = selectors.DefaultSelector()
    t0 = time.perf_counter()
    sent = got = 0
    for s in socks[:n]:
        s.sendall(frame)
        sel.register(s, selectors.EVENT_READ)
        sent += 1
    while got < n:
        for key, _ in sel.select():
            s = key.fileobj
            bufs[s] += s.recv(65536)  # type: ignore[union-attr]
            for _frame in _cut(bufs[s]):
                got += 1
                if sent < n:
                    s.sendall(frame)  # type: ignore[union-attr]
                    sent += 1
    print(time.perf_counter() - t0, flush=True)


def trio_client(port: int, n: int, size: int) -> None:
    async def main() -> float:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        frame = _LEN.pack(size) + b"x" * size
        buf = bytearray()
        c0 = time.process_time()
        for _ in range(n):
            await stream.send_all(frame)
            while not _cut(buf):
                buf += await stream.receive_some(65536)
        return (time.process_time() - c0) / n * 1e6

    print(json.dumps({"echo_client_cpu_us_per_message": trio.run(main)}), flush=True)


def fsync(directory: str, n: int) -> None:
    path = os.path.join(directory, "floor-fsync.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    record = b"x" * 120
    took: list[float] = []
    try:
        c0 = time.process_time()
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, record)
            os.fdatasync(fd)
            took.append((time.perf_counter() - t0) * 1e6)
        cpu = (time.process_time() - c0) / n * 1e6
    finally:
        os.close(fd)
        os.unlink(path)
    took.sort()
    print(json.dumps({"fdatasync_cpu_us": cpu, "fdatasync_wall_p50_us": took[n // 2]}), flush=True)


def spin() -> None:
    """Keep one core busy until killed (``bench_floor._cores_busy``)."""
    x = 0
    while True:
        x = (x + 1) & 0xFFFF


def rtt(port: int, n: int, size: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = _LEN.pack(size) + b"x" * size
    took: list[float] = []
    buf = bytearray()
    for _ in range(n):
        t0 = time.perf_counter()
        s.sendall(frame)
        while not _cut(buf):
            buf += s.recv(65536)
        took.append((time.perf_counter() - t0) * 1e6)
    took.sort()
    print(json.dumps({"p50_us": took[n // 2], "p99_us": took[min(n - 1, n * 99 // 100)]}), flush=True)


def paced(port: int, rate: int, millis: int, size: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    frame = _LEN.pack(size) + b"x" * size
    n = rate * millis // 1000
    sent_at: list[float] = []
    took: list[float] = []
    buf = bytearray()
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ)
    t0 = time.perf_counter()
    while len(took) < n:
        now = time.perf_counter()
        due = min(n, int((now - t0) * rate) + 1)
        if due > len(sent_at):
            s.sendall(frame * (due - len(sent_at)))  # a 100-byte burst never fills the buffer
            sent_at.extend([now] * (due - len(sent_at)))
        wait = t0 + len(sent_at) / rate - time.perf_counter() if len(sent_at) < n else 1.0
        if sel.select(max(0.0, wait)):
            buf += s.recv(65536)
            done = time.perf_counter()
            for _ in _cut(buf):
                took.append((done - sent_at[len(took)]) * 1e6)
    took.sort()
    print(json.dumps({"p50_us": took[n // 2], "p99_us": took[min(n - 1, n * 99 // 100)]}), flush=True)


def hops(n: int) -> None:
    async def main() -> dict[str, float]:
        out: dict[str, float] = {}
        c0 = time.process_time()
        for _ in range(n):
            await trio.to_thread.run_sync(int)
        out["thread_hop_cpu_us"] = (time.process_time() - c0) / n * 1e6

        ping_s, ping_r = trio.open_memory_channel[int](1)
        pong_s, pong_r = trio.open_memory_channel[int](1)

        async def echo() -> None:
            async for v in ping_r:
                await pong_s.send(v)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(echo)
            c0 = time.process_time()
            for i in range(n):
                await ping_s.send(i)
                await pong_r.receive()
            # a round trip is two hand-offs
            out["channel_hop_cpu_us"] = (time.process_time() - c0) / n / 2 * 1e6
            nursery.cancel_scope.cancel()

        c0 = time.process_time()
        for _ in range(n):
            await trio.lowlevel.checkpoint()
        out["checkpoint_cpu_us"] = (time.process_time() - c0) / n * 1e6
        return out

    print(json.dumps(trio.run(main)), flush=True)


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "trio-echo":
        trio_echo(int(args[0]))
    elif role == "raw-echo":
        raw_echo(int(args[0]))
    elif role == "client":
        client(*(int(a) for a in args))
    elif role == "clients":
        clients(*(int(a) for a in args))
    elif role == "trio-client":
        trio_client(*(int(a) for a in args))
    elif role == "fsync":
        fsync(args[0], int(args[1]))
    elif role == "spin":
        spin()
    elif role == "rtt":
        rtt(*(int(a) for a in args))
    elif role == "paced":
        paced(*(int(a) for a in args))
    elif role == "hops":
        hops(int(args[0]))
    else:
        raise SystemExit(f"unknown role {role!r}")
