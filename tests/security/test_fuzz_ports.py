"""Fuzz targets for the ports ``test_fuzz.py`` does not cover: Raft, metrics HTTP, console HTTP
(issue 24). The main and TLS listeners are ``tests/security/test_fuzz.py``'s.

One real node process with a cluster secret and a ``metrics_listener``, and the web console
run in this process against it. From a seeded ``random.Random`` (printed on failure;
``RAFKA_FUZZ_SEED`` replays one) each target gets ``RAFKA_FUZZ_CASES`` connections (default
150 per target: a few seconds) — or, with ``RAFKA_FUZZ_SECONDS`` set (``make fuzz``), as many
as fit in that time, for long runs on demand:

* Raft port: random bytes, small and huge (2 GiB) and negative length prefixes with random
  bodies, half a prefix, and a plausible-size frame of garbage — none of it made with the
  secret, so every connection must be dropped, never buffered beyond the pre-authentication
  bound (``kraft/raft_guard.py``);
* HTTP (metrics and console): random bytes, request lines with random methods, paths and
  versions, overlong heads, header floods, and a stalled half head; every answer must be an
  ``HTTP/1.1 <status>`` line, or the connection closes.

Afterwards the node is alive, answers a produce, ``/metrics`` is 200, the console answers ``/``,
and the node's RSS grew by less than 32 MiB.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time

import trio
from rafka.client.aio import AsyncAdmin
from rafka.client.console.server import run_console

from rafka.cluster import RAFT_PORT_OFFSET, free_port_block
from tests.security.test_fuzz import node_pid, rss_kb
from tests.security.test_secured_broker import create_topic, produce, running_node

MAX_RSS_GROWTH_KB = 32 * 1024


def _cases() -> tuple[int, float | None]:
    seconds = os.environ.get("RAFKA_FUZZ_SECONDS")
    return int(os.environ.get("RAFKA_FUZZ_CASES", "150")), float(seconds) if seconds else None


def _budget(n: int, seconds: float | None):
    """Case numbers: ``n`` of them, or as many as fit in ``seconds``."""
    end = None if seconds is None else time.monotonic() + seconds
    i = 0
    while (i < n) if end is None else (time.monotonic() < end):
        yield i
        i += 1


def raft_case(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 4096))
    if kind == 1:  # a plausible handshake-size frame, not made with the secret
        body = rng.randbytes(rng.randrange(1, 400))
        return struct.pack("i", len(body)) + body
    if kind == 2:
        return struct.pack("i", 2**31 - 1) + bytes(rng.randrange(1, 256 * 1024))
    if kind == 3:
        return struct.pack("i", -rng.randrange(1, 2**31)) + rng.randbytes(64)
    if kind == 4:
        return struct.pack("i", rng.randrange(64 * 1024, 1 << 24)) + rng.randbytes(rng.randrange(70_000))
    return struct.pack("i", 100)[: rng.randrange(1, 4)]


def http_case(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    methods = [b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"\x00\xff", b"G" * 300]
    paths = [b"/", b"/metrics", b"/api/cluster", b"/api/topics", b"/api/groups", b"/api/throughput",
             b"/%00%ff", b"/" + b"a" * rng.randrange(1, 9000), b"/../../etc/passwd", b"*"]
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 9000))
    if kind == 1:
        return rng.choice(methods) + b" " + rng.choice(paths) + b" HTTP/1.1\r\n\r\n"
    if kind == 2:  # a header flood
        return b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * rng.randrange(10, 3000) + b"\r\n"
    if kind == 3:  # a stalled half head
        return b"GET /metrics HTTP/1."
    if kind == 4:
        return b"GET " + rng.choice(paths) + b" " + rng.randbytes(rng.randrange(1, 20)) + b"\r\n\r\n"
    return b"GET / HTTP/1.1\r\nHost: " + rng.randbytes(rng.randrange(1, 200)) + b"\r\n\r\n"


def poke(addr: tuple[str, int], data: bytes, timeout_s: float) -> bytes:
    """Send ``data``, half-close, and read what comes back until close or ``timeout_s``."""
    got = b""
    try:
        with socket.create_connection(addr, timeout=timeout_s) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while len(got) < 1 << 20:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
    except OSError:  # reset, broken pipe, not connected (closed before our half-close), timeout
        pass
    return got


def fuzz_raft(addr: tuple[str, int], rng: random.Random, n: int, seconds: float | None) -> int:
    cases = 0
    for _ in _budget(n, seconds):
        answer = poke(addr, raft_case(rng), 2.0)
        # pysyncobj answers nothing before the secret is proven (no oracle, no echo)
        assert answer == b"", f"the Raft port answered an unauthenticated peer: {answer[:80]!r}"
        cases += 1
    return cases


def fuzz_http(addr: tuple[str, int], rng: random.Random, n: int, seconds: float | None, where: str) -> int:
    cases = 0
    for _ in _budget(n, seconds):
        answer = poke(addr, http_case(rng), 7.0)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 "), f"{where}: {answer[:120]!r}"
        assert not answer.startswith(b"HTTP/1.1 500"), f"{where}: a handler crashed: {answer[:300]!r}"
        cases += 1
    return cases


async def test_raft_metrics_and_console_ports_survive_fuzzing(tmp_path) -> None:
    seed = int(os.environ.get("RAFKA_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    n, seconds = _cases()
    mport = free_port_block(1)
    top = f'cluster_secret = "fuzz-secret"\nmetrics_listener = "127.0.0.1:{mport}"'
    limit = 300 + 4 * (seconds or 0)
    with running_node(tmp_path, top=top) as (plain, _secure, _files, tmp), trio.fail_after(limit):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "fp")
        await produce(plain, "fp", b"before")
        pid = node_pid(tmp / "node.toml")
        before = rss_kb(pid)
        host, port = plain.rsplit(":", 1)
        raft = (host, int(port) + RAFT_PORT_OFFSET)
        try:
            async with trio.open_nursery() as nursery:
                cport = await nursery.start(lambda task_status: run_console(
                    plain, port=0, metrics=[f"http://127.0.0.1:{mport}/metrics"], interval_s=5.0,
                    task_status=task_status))
                rng = random.Random(seed)
                done = await trio.to_thread.run_sync(fuzz_raft, raft, random.Random(rng.random()), n, seconds)
                done += await trio.to_thread.run_sync(fuzz_http, ("127.0.0.1", mport),
                                                      random.Random(rng.random()), n, seconds, "metrics")
                done += await trio.to_thread.run_sync(fuzz_http, ("127.0.0.1", cport),
                                                      random.Random(rng.random()), n, seconds, "console")
                # still up: the console and /metrics answer
                page = await trio.to_thread.run_sync(poke, ("127.0.0.1", cport), b"GET / HTTP/1.1\r\n\r\n", 10.0)
                assert page.startswith(b"HTTP/1.1 200"), page[:200]
                nursery.cancel_scope.cancel()
        except BaseException:
            print(f"port fuzzer failed with seed {seed} (replay: RAFKA_FUZZ_SEED={seed})")
            raise
        print(f"port fuzz seed {seed}: {done} cases")
        metrics = await trio.to_thread.run_sync(poke, ("127.0.0.1", mport), b"GET /metrics HTTP/1.1\r\n\r\n", 10.0)
        assert metrics.startswith(b"HTTP/1.1 200")
        await produce(plain, "fp", b"after")
        grown = rss_kb(pid) - before
        assert grown < MAX_RSS_GROWTH_KB, f"RSS grew {grown} KiB (seed {seed})"
