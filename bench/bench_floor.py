"""The machine's floor, measured in the same ``make bench`` run as every broker figure (issue 26).

Theory of operation: a broker figure ("CPU µs per single-record acks=all produce") means little
on a shared 2-core VM unless it is put beside what the same machine charges for the least a
server can do. This module runs first (modules run in name order; ``floor`` sorts before the
broker modules) and measures, each in a process of its own (``bench/floor_peers.py``):

* ``echo_cpu_us_per_message`` — a trio server that reads, frames and writes back one 100-byte
  request at a time from a blocking client: the server's CPU per request/response. This is the
  *echo floor*; ``bench/__main__.py`` divides every broker ``…cpu_us…`` figure of the run by it
  and prints the multiple beside it (``x_echo_floor``);
* ``echo_cpu_us_per_message_window32`` — the same with 32 requests in flight (what batching of
  wake-ups buys);
* ``echo_cpu_us_per_message_32conns`` — the same server with 32 connections, each with one
  request in flight at a time: the price of a produce exchange when 32 producers wait at once
  (a window on one connection is cheaper: one read and one write serve all 32);
* ``raw_echo_cpu_us_per_message`` — a blocking-socket server (a thread per connection): what the
  kernel and the interpreter cost without an event loop;
* ``echo_client_cpu_us_per_message`` — the other side of the echo, a trio client sending one
  frame at a time: what a follower's fetch costs the follower;
* ``fdatasync_cpu_us`` (``fdatasync_wall_p50_us`` beside it) — CPU, kernel included, of a
  120-byte append and ``fdatasync`` to a growing file on the filesystem the bench clusters use:
  one single-record group commit;
* ``fdatasync_wall_p50_us_cores_busy`` and ``loopback_rtt_p50_us_cores_busy`` — the same
  ``fdatasync`` and a 100-byte loopback round trip (``loopback_rtt_p50_us`` beside them, quiet)
  while one spinning process per core keeps every core busy: what a blocking wait costs in wall
  time when no core is idle. On this VM the round trip stays at its quiet figure and the
  ``fdatasync`` does not (docs/performance.md, "Where a record's end-to-end time goes"), so on
  a busy machine every fsync round of a broker waits for a core to go idle;
* ``thread_hop_cpu_us``, ``channel_hop_cpu_us``, ``checkpoint_cpu_us`` — ``trio.to_thread``
  round trip, one memory-channel hand-off, one checkpoint (CPU of all threads);
* ``skeleton_cpu_us_per_produce`` (one at a time) and ``…_32conns`` (one in flight on each of
  32 connections), ``skeleton_produces_per_s…`` beside them — the least a replicated acks=all
  broker can do per single-record produce in trio (``bench/skeleton_broker.py``: a leader and
  two followers, group commit, parked fetches, a high watermark and nothing else), with rafka's
  durability (every replica fsyncs before the record counts). Each carries its own path counts,
  so the runner sets it beside its path floor too: the code a broker cannot do without, over
  the messages and fsyncs it took. ``skeleton_ack_p50_us_at_10k`` (and p99): the same
  skeleton's send → acknowledged latency with single records sent at 10k a second on one
  connection, linger 0 — the least the end-to-end target's setting costs with three fsyncs.
  ``skeleton_leader_cpu_us_per_produce…``: the leader's share, to set beside
  ``replication.broker_cpu_busiest_node_…``. The ``…_nofsync`` figures are the same skeleton
  with every ``fdatasync`` left out (Kafka's default durability, ``log.flush.policy=none``):
  what the fsyncs alone cost the least broker, in CPU and in acknowledgement time;
* ``idle_cluster_cpu_ms_per_s`` — a 3-node ``cluster up`` with no client, after it settled: CPU
  of the three node processes per wall second (each thread's ``schedstat`` run time,
  ``bench/idle_threads.py``), with ``wakeups_per_s`` (voluntary context
  switches of all their threads: each is a blocking wait that returned) beside it. Issue 26's
  target is ≤ 20 ms/s.

Figures are medians of ``runs``; the load average is recorded beside each by the runner.

**The path floor.** A broker figure that carries ``path_counts`` (what one operation took:
client exchanges and how many clients waited at once, exchanges between nodes, fsync rounds,
all counted by the nodes' own metrics in the same measurement) is also set beside
:func:`path_floor_us`: those messages and fsyncs at this run's floor prices, with no broker work
at all. ``bench/__main__.py`` prints the
figure's multiple of it (``x_path_floor``) beside its multiple of the echo floor: the part of a
target the messages and fsyncs alone already take, and the part left to the broker's own code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.broker_cpu import cpu_seconds
from bench.floor_peers import _cut
from bench.idle_threads import thread_rates
from rafka.cluster import cluster_down, cluster_up, free_port_block

ECHO_MESSAGES = 20_000
ECHO_WINDOW_MESSAGES = 100_000
ECHO_SIZE = 100
HOPS = 20_000
FSYNC_ROUNDS = 500
# wall-clock figures: not CPU, so not set beside the echo floor
_WALL_FIGURES = ("fdatasync_wall_p50_us", "fdatasync_wall_p50_us_cores_busy", "loopback_rtt_p50_us",
                 "loopback_rtt_p50_us_cores_busy")
FSYNC_BUSY_ROUNDS = 200  # ~10 ms each on this VM with every core busy
IDLE_SETTLE_S = 5.0
IDLE_S = 10.0
SKELETON_WARMUP = 200
SKELETON_ONE = 3_000
SKELETON_32 = 30_000
SKELETON_ACK_RATE = 10_000  # bench_replication.E2E_RATE
# (figure suffix, produces, connections, fsync): with rafka's durability, then without fsyncs
SKELETON_RUNS = (("", SKELETON_ONE, 1, True), ("_32conns", SKELETON_32, 32, True),
                 ("_nofsync", SKELETON_ONE, 1, False), ("_nofsync_32conns", SKELETON_32, 32, False))
SKELETON_ACK_MS = 3_000


def _fig(values: list[float], unit: str, **extra: Any) -> dict[str, Any]:
    return {"median": statistics.median(values), "unit": unit, "runs": values, **extra}


def _wait_port(port: int, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.02)
    raise RuntimeError(f"echo server on {port} never listened")


def _peer(*args: object) -> str:
    """Run ``bench.floor_peers`` with ``args`` (one role) in a process of its own; its stdout."""
    return subprocess.run([sys.executable, "-m", "bench.floor_peers", *map(str, args)],
                          check=True, capture_output=True, text=True).stdout


@contextlib.contextmanager
def _server(role: str) -> Iterator[tuple[int, int]]:
    port = free_port_block(1)
    proc = subprocess.Popen([sys.executable, "-m", "bench.floor_peers", role, str(port)])
    try:
        _wait_port(port)
        yield proc.pid, port
    finally:
        proc.kill()
        proc.wait()


def _echo_cpu_us(role: str, n: int, window: int, conns: int = 1) -> float:
    """Server CPU µs per message: ``n`` messages, ``window`` in flight on one connection, or
    one in flight on each of ``conns``."""
    client, spread = ("client", window) if conns == 1 else ("clients", conns)
    with _server(role) as (pid, port):
        c0 = cpu_seconds(pid)
        _peer(client, port, n, spread, ECHO_SIZE)
        return (cpu_seconds(pid) - c0) / n * 1e6


def _echo_client_cpu_us(n: int) -> float:
    """The trio client's own CPU µs per round trip (one frame at a time)."""
    with _server("trio-echo") as (_pid, port):
        out = _peer("trio-client", port, n, ECHO_SIZE)
    return float(json.loads(out)["echo_client_cpu_us_per_message"])


def _fsync(rounds: int = FSYNC_ROUNDS) -> dict[str, float]:
    """CPU and wall p50 of one 120-byte append + ``fdatasync``, in the temporary directory the
    bench clusters put their data in (the same filesystem)."""
    d = tempfile.mkdtemp(prefix="rafka-bench-floor-fsync-")
    try:
        out = _peer("fsync", d, rounds)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return {k: float(v) for k, v in json.loads(out).items()}


@contextlib.contextmanager
def _cores_busy() -> Iterator[None]:
    """One spinning process per core for the duration (``floor_peers spin``)."""
    procs = [subprocess.Popen([sys.executable, "-m", "bench.floor_peers", "spin"])
             for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(0.3)  # every spinner started and running
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def _busy_waits() -> dict[str, float]:
    """What a blocking wait costs in wall time while every core is busy: an ``fdatasync`` and a
    loopback round trip (``*_cores_busy``), each beside its quiet twin in the same run."""
    with _cores_busy():
        fs = _fsync(FSYNC_BUSY_ROUNDS)
        rtt50, _rtt99 = loopback_rtt_us()
    return {"fdatasync_wall_p50_us_cores_busy": fs["fdatasync_wall_p50_us"],
            "loopback_rtt_p50_us_cores_busy": rtt50}


def path_floor_us(counts: dict[str, float], floor: dict[str, float]) -> float | None:
    """What the messages and fsyncs of one operation cost at the floor's prices, with no broker
    work: ``counts`` (``bench.broker_cpu.path_counts``: ``client_exchanges``, answered with
    ``client_window`` clients waiting at once, each on its own connection; ``node_exchanges``,
    one node asking another; ``fsyncs``) priced by ``floor`` (this run's ``floor.*`` medians, by
    name without the prefix): a client exchange is a server echo (one connection, or the
    32-connection echo when many clients wait at once), a node exchange a server echo plus the
    trio client's side, an fsync round one ``fdatasync``. None when a price is missing."""
    window = "echo_cpu_us_per_message_32conns" if counts.get("client_window", 1) > 1 \
        else "echo_cpu_us_per_message"
    need = (window, "echo_cpu_us_per_message", "echo_client_cpu_us_per_message", "fdatasync_cpu_us")
    if any(floor.get(k) is None for k in need):
        return None
    return (counts.get("client_exchanges", 0.0) * floor[window]
            + counts.get("node_exchanges", 0.0) * (floor["echo_cpu_us_per_message"]
                                                  + floor["echo_client_cpu_us_per_message"])
            + counts.get("fsyncs", 0.0) * floor["fdatasync_cpu_us"])


def _skeleton_stats(port: int) -> dict[str, int]:
    """The skeleton leader's counts so far (a fetch frame of offset -1 on its follower port)."""
    with socket.create_connection(("127.0.0.1", port + 1), timeout=10) as s:
        s.sendall(struct.pack(">iq", 8, -1))
        buf = bytearray()
        while not (frames := _cut(buf)):
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("skeleton leader closed the stats connection")
            buf += chunk
    return json.loads(frames[0][4:])


def _skeleton_ack_us(port: int) -> tuple[float, float]:
    """(p50, p99) µs from sending a single record to its answer, records sent at
    ``SKELETON_ACK_RATE`` a second on one connection (``floor_peers paced``)."""
    got = json.loads(_peer("paced", port, SKELETON_ACK_RATE, SKELETON_ACK_MS, ECHO_SIZE))
    return float(got["p50_us"]), float(got["p99_us"])


def _skeleton(n: int, conns: int, fsync: bool = True) -> dict[str, float]:
    """The skeleton broker (``bench/skeleton_broker.py``: a leader and two followers, each a
    process) under ``n`` single-record produces, one at a time (``conns`` 1) or one in flight on
    each of ``conns`` connections: CPU µs per produce of the three processes and of the leader
    alone, produces a second, and the follower fetches and fsync rounds per produce it took
    (its own path counts); for ``conns`` 1 also the acknowledgement latency at
    ``SKELETON_ACK_RATE`` records a second (issue 26's end-to-end rate, linger 0). The
    processes are parked between requests (no timers), so there is no idle CPU to subtract.
    ``fsync`` False: the same skeleton with every ``fdatasync`` left out (its ``nofsync`` mode)."""
    d = tempfile.mkdtemp(prefix="rafka-bench-floor-skeleton-")
    port = free_port_block(2)
    mode = [] if fsync else ["nofsync"]
    procs = [subprocess.Popen([sys.executable, "-m", "bench.skeleton_broker", role, str(port), d, *mode])
             for role in ("leader", "follower", "follower")]

    def produce(k: int) -> float:  # the clients print the seconds they took
        return float(_peer("client", port, k, 1, ECHO_SIZE) if conns == 1
                     else _peer("clients", port, k, conns, ECHO_SIZE))
    try:
        _wait_port(port)
        produce(SKELETON_WARMUP)  # also waits until both followers fetch
        before, c0 = _skeleton_stats(port), [cpu_seconds(p.pid) for p in procs]
        wall = produce(n)
        cpu, after = [cpu_seconds(p.pid) - c for p, c in zip(procs, c0, strict=True)], _skeleton_stats(port)
        ack = _skeleton_ack_us(port) if conns == 1 else None
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)
    if after["produces"] - before["produces"] != n:  # every produce appended once, no more
        raise RuntimeError(f"skeleton leader appended {after['produces'] - before['produces']} of {n}")
    per = {k: (after[k] - before[k]) / n for k in after}
    out = {"cpu_us": sum(cpu) / n * 1e6, "leader_cpu_us": cpu[0] / n * 1e6,
           "produces_per_s": n / wall, "fetches": per["fetches"],
           "fsyncs": per["leader_fsyncs"] + (per["fetches_with_records"] if fsync else 0)}
    if ack is not None:
        out["ack_p50_us"], out["ack_p99_us"] = ack
    return out


def loopback_rtt_us(n: int = 2000) -> tuple[float, float]:
    """(p50, p99) µs of a 100-byte round trip over loopback between two processes (a
    blocking-socket echo server and a client sending one frame at a time): the network part of
    any latency measured on this machine, to set beside it (issue 26's end-to-end figures)."""
    with _server("raw-echo") as (_pid, port):
        out = _peer("rtt", port, n, ECHO_SIZE)
    got = json.loads(out)
    return float(got["p50_us"]), float(got["p99_us"])


def _hops() -> dict[str, float]:
    return json.loads(_peer("hops", HOPS))


def _idle_cluster() -> tuple[float, float]:
    """(CPU ms per second, wake-ups per second) of an idle 3-node cluster, all processes."""
    data = Path(tempfile.mkdtemp(prefix="rafka-bench-floor-"))
    try:
        state = cluster_up(data, 3, "127.0.0.1", free_port_block(3), echo=lambda _m: None)
        pids = [n.pid for n in state["nodes"] if n.pid]
        time.sleep(IDLE_SETTLE_S)
        # per thread, from schedstat (ns): /proc's clock ticks are 1 ms/s steps over 10 s
        rows = thread_rates(pids, IDLE_S)
        return sum(r[3] for r in rows), sum(r[4] for r in rows)
    finally:
        with contextlib.suppress(Exception):
            cluster_down(data)
        shutil.rmtree(data, ignore_errors=True)


def run(runs: int) -> dict[str, Any]:
    got: dict[str, list[float]] = {}
    skeleton_counts: dict[str, list[dict[str, float]]] = {}

    def add(name: str, v: float) -> None:
        got.setdefault(name, []).append(v)

    for _ in range(runs):
        add("echo_cpu_us_per_message", _echo_cpu_us("trio-echo", ECHO_MESSAGES, 1))
        add("echo_cpu_us_per_message_window32", _echo_cpu_us("trio-echo", ECHO_WINDOW_MESSAGES, 32))
        add("echo_cpu_us_per_message_32conns", _echo_cpu_us("trio-echo", ECHO_WINDOW_MESSAGES, 1, 32))
        add("raw_echo_cpu_us_per_message", _echo_cpu_us("raw-echo", ECHO_MESSAGES, 1))
        add("echo_client_cpu_us_per_message", _echo_client_cpu_us(ECHO_MESSAGES))
        for k, v in _fsync().items():
            add(k, v)
        add("loopback_rtt_p50_us", loopback_rtt_us()[0])
        for k, v in _busy_waits().items():
            add(k, v)
        for k, v in _hops().items():
            add(k, v)
        for suffix, n, conns, fsync in SKELETON_RUNS:
            sk = _skeleton(n, conns, fsync)
            add(f"skeleton_cpu_us_per_produce{suffix}", sk["cpu_us"])
            add(f"skeleton_leader_cpu_us_per_produce{suffix}", sk["leader_cpu_us"])
            add(f"skeleton_produces_per_s{suffix}", sk["produces_per_s"])
            skeleton_counts.setdefault(suffix, []).append(sk)
            for k in ("ack_p50_us", "ack_p99_us"):
                if k in sk:
                    add(f"skeleton_{k}_at_10k{suffix}", sk[k])
        cpu, wakeups = _idle_cluster()
        add("idle_cluster_cpu_ms_per_s", cpu)
        add("idle_cluster_wakeups_per_s", wakeups)
    out: dict[str, Any] = {}
    for name, values in got.items():
        unit = "ms/s" if name.endswith("ms_per_s") else "/s" if "_per_s" in name else "µs"
        extra: dict[str, Any] = {}
        if unit == "µs" and name not in ("echo_cpu_us_per_message", *_WALL_FIGURES) \
                and not name.startswith("skeleton_ack"):
            extra["ratio_of"] = "echo_cpu_us_per_message"
        out[name] = _fig(values, unit, **extra)
    out["idle_cluster_cpu_ms_per_s"]["target"] = "<= 20 ms/s (issue 26)"
    for suffix, runs_ in skeleton_counts.items():  # its own messages and fsyncs, as a broker figure's
        out[f"skeleton_cpu_us_per_produce{suffix}"]["path_counts"] = {
            "client_exchanges": 1.0, "client_window": 32 if suffix.endswith("32conns") else 1,
            "node_exchanges": statistics.median(r["fetches"] for r in runs_),
            "fsyncs": statistics.median(r["fsyncs"] for r in runs_), "unit_us": 1.0}
    return out
