"""Broker CPU and request counts of a bench cluster, for "CPU per request" figures.

Theory of operation: a figure like "broker CPU µs per single-record acks=all produce" is the
CPU time (user + system, ``/proc/<pid>/stat``, all threads) the cluster's node processes spent
while the bench did ``n`` operations, divided by ``n``. The nodes also burn CPU when idle (Raft
ticks, heartbeats, metadata long polls): :class:`CpuMeter` measures that idle rate first and
subtracts it for the duration of the measured window, so a slow run on a loaded machine is not
charged with more idle time. Request counts come from each node's Prometheus endpoint
(``rafka_request_duration_seconds_count{api}``), summed over the nodes: they say how many
requests of each kind one operation caused (follower fetches, verifications, markers...).
Linux only; elsewhere the CPU figures are 0.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rafka.cluster import load_cluster, metrics_urls

__all__ = ["CpuMeter", "SyscallCounter", "cluster_pids_and_metrics", "counters", "cpu_seconds", "metric_total",
           "path_counts", "request_counts", "voluntary_switches"]

FLUSH_ROUNDS = "rafka_log_flush_rounds_total"  # every fsync round, leader or follower
_COUNT = re.compile(r'rafka_request_duration_seconds_count\{api="(\w+)"\} (\S+)')


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0.0 if unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def voluntary_switches(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` so far: each is a blocking wait
    (epoll, a lock, a queue) that returned — the process's wake-ups (0 if unreadable)."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    for task in tasks:
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


class SyscallCounter:
    """System calls of ``pids`` (all threads) between ``start()`` and ``stop()``, counted by
    ``perf stat -e raw_syscalls:sys_enter`` (a kernel tracepoint: no ptrace, the processes run
    at full speed). ``stop()`` is ``None`` where perf is missing or not allowed (non-root with
    a strict ``perf_event_paranoid``): the figure is then left out, not guessed."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        perf = shutil.which("perf")
        if perf is None or not self.pids:
            return
        self._proc = subprocess.Popen(
            [perf, "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", ",".join(map(str, self.pids))],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)  # perf attaches before the measured window starts

    def stop(self) -> int | None:
        if self._proc is None:
            return None
        self._proc.send_signal(signal.SIGINT)
        try:
            _, err = self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            return None
        finally:
            self._proc = None
        for line in err.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2] == "raw_syscalls:sys_enter" and fields[0].isdigit():
                return int(fields[0])
        return None


def _scrapes(urls: Sequence[str]) -> Iterator[str]:
    """The text of each node's metrics endpoint that answers."""
    for url in urls:
        try:
            yield urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            continue


def counters(urls: Sequence[str]) -> tuple[dict[str, float], float]:
    """(requests handled so far per api name, fsync rounds so far), summed over the nodes'
    metrics endpoints, from one scrape of each."""
    out: dict[str, float] = {}
    flushes = 0.0
    for text in _scrapes(urls):
        for m in _COUNT.finditer(text):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
        flushes += _total(text, FLUSH_ROUNDS)
    return out, flushes


def request_counts(urls: Sequence[str]) -> dict[str, float]:
    """Requests handled so far per api name, summed over the nodes' metrics endpoints."""
    return counters(urls)[0]


def _total(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def metric_total(urls: Sequence[str], name: str) -> float:
    """The samples of metric ``name`` (any labels), summed over the nodes' metrics endpoints."""
    return sum(_total(text, name) for text in _scrapes(urls))


# APIs one node asks of another in the figures that use path_counts (no consumer runs there):
# follower fetches and transaction markers. A leader's KIP-890 verification is an
# ADD_PARTITIONS_TO_TXN like the client's, so it is priced as a client exchange (the cheaper).
NODE_APIS = frozenset({"fetch", "write_txn_markers"})


def path_counts(runs: Sequence[dict[str, Any]], client_window: int, unit_us: float = 1.0
                ) -> dict[str, float]:
    """The messages and fsyncs of one operation, medians over ``runs`` (each a ``CpuMeter.stop``),
    for ``bench.bench_floor.path_floor_us``: client exchanges (``client_window`` clients waiting
    at once), exchanges between nodes (``NODE_APIS``), every node's fsync rounds; ``unit_us``:
    µs per unit of the figure they go with (1000 for a figure in ms)."""
    def med(f: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(f(r) for r in runs)
    return {"client_exchanges": med(lambda r: sum(v for k, v in r["requests"].items() if k not in NODE_APIS)),
            "client_window": client_window,
            "node_exchanges": med(lambda r: sum(v for k, v in r["requests"].items() if k in NODE_APIS)),
            "fsyncs": med(lambda r: r["flush_rounds"]),
            "unit_us": unit_us}


def cluster_pids_and_metrics(data_dir: Path) -> tuple[list[int], list[str]]:
    """Node pids and metrics URLs of the cluster in ``data_dir`` (``rafka cluster up``)."""
    state = load_cluster(data_dir)
    if state is None:
        return [], []
    return [n.pid for n in state["nodes"] if n.pid], metrics_urls(state)


class CpuMeter:
    """``meter = CpuMeter(pids, urls); meter.idle(2.0); meter.start(); ...; meter.stop(n)``."""

    def __init__(self, pids: Sequence[int], urls: Sequence[str] = ()) -> None:
        self.pids = list(pids)
        self.urls = list(urls)
        self.idle_rate = 0.0  # CPU seconds per second of the nodes doing nothing for us
        self.idle_requests: dict[str, float] = {}  # requests per second, idle (per api)
        self.idle_wakeups = 0.0  # voluntary context switches per second, idle, all nodes
        self.idle_syscalls: float | None = None  # per second, idle, all nodes (perf; None without)
        self.idle_flush_rounds = 0.0  # fsync rounds per second, idle, all nodes
        self._flush0 = 0.0
        self._syscalls = SyscallCounter(self.pids)
        self._cpu0: list[float] = []
        self._wake0 = 0
        self._t0 = 0.0
        self._req0: dict[str, float] = {}

    def _cpu(self) -> list[float]:
        return [cpu_seconds(p) for p in self.pids]

    def _wakeups(self) -> int:
        return sum(voluntary_switches(p) for p in self.pids)

    def idle(self, seconds: float) -> float:
        """Measure the idle CPU (and request) rate over ``seconds`` of sleep; returns the CPU."""
        (r0, f0), c0, t0 = counters(self.urls), sum(self._cpu()), time.perf_counter()
        w0 = self._wakeups()
        self._syscalls.start()
        time.sleep(seconds)
        n_sys = self._syscalls.stop()
        c1, (r1, f1), w1 = sum(self._cpu()), counters(self.urls), self._wakeups()
        took = time.perf_counter() - t0
        self.idle_flush_rounds = max(0.0, (f1 - f0) / took)
        self.idle_syscalls = None if n_sys is None else n_sys / took
        self.idle_rate = max(0.0, (c1 - c0) / took)
        self.idle_wakeups = max(0.0, (w1 - w0) / took)
        self.idle_requests = {k: (v - r0.get(k, 0.0)) / took for k, v in r1.items()}
        return self.idle_rate

    def start(self) -> None:
        self._req0, self._flush0 = counters(self.urls)
        self._syscalls.start()
        self._wake0 = self._wakeups()
        self._cpu0, self._t0 = self._cpu(), time.perf_counter()

    def stop(self, ops: int = 0, *, per_api: str | None = None) -> dict[str, Any]:
        """Per operation: ``cpu_us`` (all nodes, idle rate subtracted), ``busiest_node_us``
        (the node that spent most — the leader, usually), ``wakeups`` (voluntary context
        switches of all the nodes' threads, idle rate subtracted), ``syscalls`` (the same, from
        perf; ``None`` without it), ``requests`` (api → count, the idle
        rate subtracted), ``flush_rounds`` (fsync rounds of all the nodes, leaders' group
        commits and followers' syncs: ``rafka_log_flush_rounds_total``, idle rate subtracted).
        ``per_api``: the operations are that api's requests (e.g. "fetch")."""
        cpu1, elapsed = self._cpu(), time.perf_counter() - self._t0
        wake1 = self._wakeups()
        n_sys = self._syscalls.stop()
        per_node = [b - a for a, b in zip(self._cpu0, cpu1, strict=True)]
        req, flush1 = counters(self.urls)
        flushes = flush1 - self._flush0 - self.idle_flush_rounds * elapsed
        caused = {k: v - self._req0.get(k, 0.0) - self.idle_requests.get(k, 0.0) * elapsed
                  for k, v in req.items()}
        if per_api is not None:
            ops = round(caused.get(per_api, 0.0))
        ops = max(1, ops)
        idle_share = self.idle_rate * elapsed / max(1, len(per_node))
        return {
            "cpu_us": max(0.0, sum(per_node) - self.idle_rate * elapsed) / ops * 1e6,
            "busiest_node_us": max(0.0, max(per_node, default=0.0) - idle_share) / ops * 1e6,
            "wakeups": max(0.0, wake1 - self._wake0 - self.idle_wakeups * elapsed) / ops,
            "syscalls": (None if n_sys is None or self.idle_syscalls is None
                         else max(0.0, n_sys - self.idle_syscalls * elapsed) / ops),
            "requests": {k: round(v / ops, 2) for k, v in caused.items() if v / ops >= 0.01},
            "flush_rounds": max(0.0, flushes) / ops,
            "ops": ops,
            "ops_per_s": ops / elapsed,
            "idle_cpu_ms_per_s": self.idle_rate * 1e3,
        }
