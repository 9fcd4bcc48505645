"""Replication benchmark: 3 brokers on this machine, RF=3, acks=all, 200-byte values.

Figures (medians of ``runs`` unless said otherwise):

* ``producer_acks_all`` / ``producer_acks_all_mb``: records/s (and MB/s of values + 16-byte
  keys) through the sync ``Producer`` (acks=all, idempotent, linger 5 ms, 256 KiB batches), one
  topic of 3 partitions whose leaders sit on the 3 brokers, min.insync.replicas=2.
* ``produce_latency_p50/p99``: send → acknowledged, at a fixed 2,000 records/s, linger 0.
* ``e2e_latency_p50/p99``: send → seen by a consumer (another process), at 10,000 records/s,
  with the producer's default ``linger_ms`` (5 ms, as Kafka 4.0's); ``e2e_latency_linger1_*`` /
  ``e2e_latency_linger0_*``: the same with ``linger_ms`` 1 and 0 (issue 26's target is set at
  linger 0). ``cpu_steal_pct`` says how much CPU the hypervisor took from this VM during each of
  those runs. ``loopback_rtt_p50_us`` / ``p99``: a 100-byte round trip between two processes
  over loopback (``bench/bench_floor.py``), measured right before each run's end-to-end
  figures, so the machine's own network latency of that moment stands beside them.
* ``broker_cpu_us_per_produce``: CPU (user + system, all three node processes, their idle rate
  subtracted: ``bench/broker_cpu.py``) per single-record ``acks=all`` produce request, one
  request at a time (``CPU_REQUESTS`` of them, linger 0), with ``ratio_of`` issue 13's target
  (``broker_cpu_target_us_per_produce``, a constant row); ``..._busiest_node_...`` is the
  leader's share; ``requests`` lists what one produce caused (2 follower fetches).
  ``broker_cpu_us_per_produce_concurrent``: the same request (one record, acks=all) sent by
  ``CONCURRENT_PRODUCERS`` producers at once, each waiting for its answer before the next
  (``CONCURRENT_S`` s): per-request CPU of a busy broker, where the hops' wake-ups and the
  follower fetches are shared by the requests in flight instead of paid one request at a time.
  ``broker_cpu_us_per_idle_fetch``: the same per long-poll FETCH of a consumer on an empty
  partition (``max_wait_ms`` 10: many, so they outweigh the idle CPU subtracted) that times out;
  noisy on a loaded machine. Both produce figures carry ``flush_rounds`` (every node's fsync
  rounds per produce) and ``path_counts``: the runner prices those messages and fsyncs at the
  same run's floor (``bench.bench_floor.path_floor_us``) and prints the figure's multiple of it.
* ``unavailability``: kill -9 of a partition's leader → the next acknowledged acks=all write
  (one writer sending record after record). Median of ``UNAVAIL_TRIALS`` kills in one run, on a
  second cluster with ``broker.session.timeout.ms`` = ``SESSION_TIMEOUT_MS`` (the controller
  moves leadership only once the dead broker's session expires; the killed node is restarted
  between trials).

Flush policy ``batch`` everywhere but in the ``…_flush_none`` figures: the leader fsyncs
before counting its own append and every follower fsyncs before its next fetch reports the
records (one fsync per fetch response), so an acknowledged record is on disk on every ISR
member. Every figure names the policy in the JSON. The ``…_flush_none`` figures
(``broker_cpu_us_per_produce…``, ``…_concurrent…`` and ``e2e_latency_linger0_p50/p99``, on a
cluster of their own) measure issue 26's targets again at ``log.flush.policy=none``, Kafka's
default durability (an acknowledged record is in every ISR member's page cache, not yet on its
disk: docs/durability.md), so each target shows what rafka's stronger default costs on this
machine.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import statistics
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rafka.client import Admin, Consumer, Producer, TopicPartition
from rafka.wire.errors import UnknownTopicOrPartitionError

from bench.bench_floor import loopback_rtt_us
from bench.broker_cpu import CpuMeter, cluster_pids_and_metrics, path_counts
from bench.pacing import send_latencies_ms
from rafka.cluster import cluster_down, cluster_up, free_port_block, is_running

N_RECORDS = 200_000
VALUE = b"v" * 200
KEYS = [f"key-{i:012d}".encode() for i in range(1024)]  # 16 bytes each
FLUSH = "batch"
TOPIC_CONFIG = {"min.insync.replicas": "2"}
LATENCY_RATE = 2000
E2E_RATE = 10_000
E2E_LINGER_MS = 5  # the producer's default (Kafka 4.0's default too, KIP-1030)
E2E_TICK_S = 0.001
UNAVAIL_TRIALS = 10
SESSION_TIMEOUT_MS = 1500
HEARTBEAT_MS = 250
CPU_REQUESTS = 2000
CONCURRENT_PRODUCERS = 32
CONCURRENT_S = 3.0
CPU_TARGET_US = 200  # issue 13: broker CPU per single-record acks=all produce, 3 nodes RF 3
IDLE_FETCH_S = 4.0
IDLE_FETCH_WAIT_MS = 10  # short: more fetches per second against the idle CPU subtracted


@contextlib.contextmanager
def _cluster(broker_config: dict[str, str] | None = None,
             controller_config: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    data = Path(tempfile.mkdtemp(prefix="rafka-bench-repl-"))
    try:
        state = cluster_up(data, 3, "127.0.0.1", free_port_block(3), echo=lambda _m: None,
                           broker_config=broker_config, controller_config=controller_config)
        state["data_dir"] = data
        state["bootstrap"] = ",".join(n.client for n in state["nodes"])
        yield state
    finally:
        with contextlib.suppress(Exception):
            cluster_down(data)
        shutil.rmtree(data, ignore_errors=True)


def _create(bootstrap: str, name: str, partitions: int, replication_factor: int = 3,
            config: dict[str, str] | None = None) -> None:
    """Create the topic and wait until every partition has a leader and a full ISR."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic(name, partitions=partitions, replication_factor=replication_factor,
                           config=TOPIC_CONFIG if config is None else config)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                d = admin.describe_topic(name)
            except UnknownTopicOrPartitionError:  # the answering broker's image is behind
                d = None
            if d is not None and all(p.leader >= 0 and len(p.isr) == replication_factor
                                     for p in d.partitions):
                return
            time.sleep(0.1)
    raise RuntimeError(f"{name}: ISR never reached {replication_factor}")


def _producer_rate(bootstrap: str, topic: str, n: int) -> float:
    with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                  batch_size=256 * 1024) as p:
        for part in range(3):
            p.send(topic, value=VALUE, key=KEYS[0], partition=part).result(timeout=30)
        send = p.send
        t0 = time.perf_counter()
        for i in range(n):
            send(topic, value=VALUE, key=KEYS[i & 1023])
        p.flush()
        return n / (time.perf_counter() - t0)


def _paced_ticks(rate: int, seconds: float, tick_s: float = E2E_TICK_S) -> Iterator[int]:
    """``paced`` (bench/pacing.py) with a coarser clock: wake once per ``tick_s`` and yield
    every record due.

    At 10k records/s ``paced`` sleeps once per record (~0.1 ms each). On 2 vCPUs shared with 3
    brokers and a consumer, the producer process then used 1.28 CPU-seconds per 3 s run; with
    ticks, 0.98. That is about a tenth of a core handed back to the system under test. Records
    still go out at ``rate`` on average, at most ``tick_s`` later than their ideal time.
    Latency is measured from the real send, so that lateness is not hidden."""
    t_start = time.perf_counter()
    n = int(rate * seconds)
    i = 0
    while i < n:
        now = time.perf_counter()
        due = min(n, int((now - t_start) * rate) + 1)
        while i < due:
            yield i
            i += 1
        if i < n:
            time.sleep(max(0.0, t_start + i / rate - time.perf_counter()) + tick_s * 0.9)


def _cpu_steal() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs so far (``/proc/stat``); (0, 0) where unavailable."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def _produce_latencies_ms(bootstrap: str, topic: str, seconds: float = 3.0) -> list[float]:
    with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                  linger_ms=0) as p:
        return send_latencies_ms(p, topic, LATENCY_RATE, seconds, VALUE, KEYS, partition=0)


def _e2e_consumer(bootstrap: str, topic: str, n: int, seconds: float, out: Any, ready: Any,
                  detail: bool = False) -> None:
    """The consumer process of ``_e2e_latencies_ms``: poll partition 0 from its end; for each
    record, now − the send time the producer wrote into its first 8 bytes (``detail``: the
    record's offset, send time and receive time instead, ``bench/e2e_timeline.py``)."""
    tp = TopicPartition(topic, 0)
    seen: list[Any] = []
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                  fetch_max_wait_ms=100) as c:
        c.assign([tp])
        c.seek_to_end(tp)
        c.position(tp)
        ready.set()
        deadline = time.monotonic() + seconds + 30
        while len(seen) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=100, max_records=10_000).values():
                now = time.perf_counter()
                if detail:
                    seen.extend((r.offset, struct.unpack_from(">d", r.value)[0], now) for r in recs)
                else:
                    seen.extend((now - struct.unpack_from(">d", r.value)[0]) * 1000 for r in recs)
    out.put(seen)


def _e2e_latencies_ms(bootstrap: str, topic: str, seconds: float = 3.0,
                      linger_ms: float = E2E_LINGER_MS, detail: bool = False) -> list[Any]:
    """A consumer *process* polls partition 0 while this one produces at ``E2E_RATE``.

    Two processes, as producers and consumers are deployed: in one process the producer's and
    the consumer's loop threads and the pacing loop share one GIL, and its 5 ms switch interval
    shows up in the tail. Send times cross the process boundary as ``time.perf_counter()``
    (CLOCK_MONOTONIC on Linux: one clock for every process on the machine)."""
    n = int(E2E_RATE * seconds)
    ctx = multiprocessing.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_e2e_consumer, args=(bootstrap, topic, n, seconds, out, ready, detail))
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the e2e consumer process did not start")
        with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                      linger_ms=linger_ms) as p:
            for i in _paced_ticks(E2E_RATE, seconds):
                p.send(topic, value=struct.pack(">d", time.perf_counter()) + VALUE[8:],
                       key=KEYS[i & 1023], partition=0)
            p.flush()
        return out.get(timeout=seconds + 60)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def _broker_cpu(state: dict[str, Any], topic: str, idle_topic: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(per single-record acks=all produce, per idle long-poll fetch): ``CpuMeter.stop``."""
    pids, urls = cluster_pids_and_metrics(state["data_dir"])
    meter = CpuMeter(pids, urls)
    with Producer(bootstrap_servers=state["bootstrap"], acks="all", enable_idempotence=True,
                  linger_ms=0) as p:
        for _ in range(50):
            p.send(topic, value=VALUE, partition=0).result(timeout=30)
        meter.idle(2.0)
        meter.start()
        for i in range(CPU_REQUESTS):
            p.send(topic, value=VALUE, key=KEYS[i & 1023], partition=0).result(timeout=30)
        produce = meter.stop(CPU_REQUESTS)
    tp = TopicPartition(idle_topic, 0)
    with Consumer(bootstrap_servers=state["bootstrap"], enable_auto_commit=False,
                  fetch_max_wait_ms=IDLE_FETCH_WAIT_MS) as c:
        c.assign([tp])
        c.seek_to_end(tp)
        c.position(tp)
        meter.start()
        t_end = time.monotonic() + IDLE_FETCH_S
        while time.monotonic() < t_end:
            c.poll(timeout_ms=200)
        idle_fetch = meter.stop(per_api="fetch")
    return produce, idle_fetch


def concurrent_produces(bootstrap: str, topic: str, producers: int, seconds: float,
                        on_start: Callable[[], None]) -> int:
    """``producers`` AsyncProducers each sending single-record acks=all produces to partition 0
    of ``topic``, one at a time and waiting for each answer, for ``seconds``; ``on_start()``
    runs once every producer is connected, right before they start together. Returns when
    every request sent has been answered, with how many were sent."""
    import trio
    from rafka.client.aio import AsyncProducer

    sent = [0]

    async def one(start: trio.Event, stop_at: list[float]) -> None:
        async with AsyncProducer(bootstrap_servers=bootstrap, acks="all",
                                 enable_idempotence=True, linger_ms=0) as p:
            await (await p.send(topic, value=VALUE, partition=0))  # connected, metadata known
            await start.wait()
            i = 0
            while time.perf_counter() < stop_at[0]:
                await (await p.send(topic, value=VALUE, key=KEYS[i & 1023], partition=0))
                i += 1
            sent[0] += i

    async def main() -> None:
        start, stop_at = trio.Event(), [0.0]
        async with trio.open_nursery() as nursery:
            for _ in range(producers):
                nursery.start_soon(one, start, stop_at)
            await trio.sleep(1.0)  # every producer has sent its first record
            on_start()
            stop_at[0] = time.perf_counter() + seconds
            start.set()
        # the nursery has joined: every request counted has been answered

    trio.run(main)
    return sent[0]


def _broker_cpu_concurrent(state: dict[str, Any], topic: str) -> dict[str, Any]:
    """Per single-record acks=all produce request with CONCURRENT_PRODUCERS in flight at once."""
    pids, urls = cluster_pids_and_metrics(state["data_dir"])
    meter = CpuMeter(pids, urls)
    meter.idle(2.0)
    concurrent_produces(state["bootstrap"], topic, CONCURRENT_PRODUCERS, CONCURRENT_S, meter.start)
    return meter.stop(per_api="produce")


def _leader_and_isr(bootstrap: str, topic: str) -> tuple[int, tuple[int, ...]]:
    with Admin(bootstrap_servers=bootstrap) as admin:
        p = admin.describe_topic(topic).partitions[0]
        return p.leader, p.isr


def _wait_full_isr(bootstrap: str, topic: str) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            leader, isr = _leader_and_isr(bootstrap, topic)
            if leader >= 0 and len(isr) == 3:
                return leader
        time.sleep(0.1)
    raise RuntimeError(f"{topic}: ISR never came back to 3")


def _unavailability_s(state: dict[str, Any], topic: str, trials: int) -> list[float]:
    """kill -9 the leader, measure until the next acknowledged write; restart; repeat."""
    bootstrap = state["bootstrap"]
    out: list[float] = []
    for _ in range(trials):
        leader = _wait_full_isr(bootstrap, topic)
        acks: list[float] = []
        stop = threading.Event()

        def writer(acks: list[float] = acks, stop: threading.Event = stop) -> None:
            with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                          linger_ms=0, retry_backoff_ms=20, request_timeout_ms=2000,
                          metadata_max_age_ms=1000) as p:
                while not stop.is_set():
                    with contextlib.suppress(Exception):
                        p.send(topic, value=VALUE, partition=0).result(timeout=30)
                        acks.append(time.perf_counter())

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        while not acks:
            time.sleep(0.01)
        time.sleep(0.3)
        node = next(n for n in state["nodes"] if n.id == leader)
        killed_at = time.perf_counter()
        os.kill(node.pid, signal.SIGKILL)
        while is_running(node):
            time.sleep(0.005)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(a > killed_at for a in acks):
            time.sleep(0.005)
        after = [a for a in acks if a > killed_at]
        stop.set()
        t.join(40)
        if after:
            out.append(after[0] - killed_at)
        # restart the killed node (same data) before the next trial
        state["nodes"] = cluster_up(state["data_dir"], 3, "127.0.0.1", state["nodes"][0].port,
                                    echo=lambda _m: None)["nodes"]
    return out


def _fig(values: list[float], unit: str, **extra: Any) -> dict[str, Any]:
    return {"median": statistics.median(values), "unit": unit, "runs": values, **extra}


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


def _flush_none_figures(cpu: list[dict[str, Any]], conc: list[dict[str, Any]], p50: list[float],
                        p99: list[float], common: dict[str, Any]) -> dict[str, Any]:
    """The ``…_flush_none`` figures: issue 26's one-at-a-time, 32-in-flight and linger-0
    end-to-end targets at ``log.flush.policy=none``, each beside its ``batch`` twin."""
    def per_produce(runs_: list[dict[str, Any]], window: int, **kw: Any) -> dict[str, Any]:
        return _fig([c["cpu_us"] for c in runs_], "µs", requests=[c["requests"] for c in runs_],
                    flush_rounds=[c["flush_rounds"] for c in runs_],
                    path_counts=path_counts(runs_, window), **kw, **common)
    return {
        "broker_cpu_us_per_produce_flush_none": per_produce(cpu, 1),
        "broker_cpu_us_per_produce_concurrent_flush_none": per_produce(
            conc, CONCURRENT_PRODUCERS, producers=CONCURRENT_PRODUCERS),
        "e2e_latency_linger0_p50_flush_none": _fig(p50, "ms", rate=f"{E2E_RATE} rec/s",
                                                   linger_ms=0, **common),
        "e2e_latency_linger0_p99_flush_none": _fig(p99, "ms", rate=f"{E2E_RATE} rec/s",
                                                   linger_ms=0, **common),
    }


def run(runs: int = 3) -> dict[str, Any]:
    prod, p50, p99, e50, e99, l50, l99, steal = [], [], [], [], [], [], [], []
    z50: list[float] = []
    z99: list[float] = []
    rtt50: list[float] = []
    rtt99: list[float] = []
    cpu: list[dict[str, Any]] = []
    cpu_conc: list[dict[str, Any]] = []
    fetch_cpu: list[dict[str, Any]] = []
    with _cluster() as st:
        bootstrap = st["bootstrap"]
        _create(bootstrap, "lat", 1)
        _create(bootstrap, "e2e", 1)
        _create(bootstrap, "cpu", 1)
        _create(bootstrap, "idle", 1)
        for r in range(runs):
            _create(bootstrap, f"perf{r}", 3)
        for r in range(runs):
            produce_cpu, idle_fetch_cpu = _broker_cpu(st, "cpu", "idle")
            cpu.append(produce_cpu)
            fetch_cpu.append(idle_fetch_cpu)
            cpu_conc.append(_broker_cpu_concurrent(st, "cpu"))
            prod.append(_producer_rate(bootstrap, f"perf{r}", N_RECORDS))
            lat = _produce_latencies_ms(bootstrap, "lat")
            p50.append(_pct(lat, 0.5))
            p99.append(_pct(lat, 0.99))
            rtt = loopback_rtt_us()  # the machine's own round trip, beside the e2e figures
            rtt50.append(rtt[0])
            rtt99.append(rtt[1])
            s0, t0 = _cpu_steal()
            e2e = _e2e_latencies_ms(bootstrap, "e2e")
            s1, t1 = _cpu_steal()
            steal.append(round(100 * (s1 - s0) / max(1, t1 - t0), 1))
            e50.append(_pct(e2e, 0.5))
            e99.append(_pct(e2e, 0.99))
            e2e = _e2e_latencies_ms(bootstrap, "e2e", linger_ms=1)
            l50.append(_pct(e2e, 0.5))
            l99.append(_pct(e2e, 0.99))
            e2e = _e2e_latencies_ms(bootstrap, "e2e", linger_ms=0)
            z50.append(_pct(e2e, 0.5))
            z99.append(_pct(e2e, 0.99))
    # the three issue-26 figures again at Kafka's default durability (module docstring)
    none_cpu: list[dict[str, Any]] = []
    none_conc: list[dict[str, Any]] = []
    n50: list[float] = []
    n99: list[float] = []
    with _cluster(broker_config={"log.flush.policy": "none"}) as st:
        for t in ("cpu", "idle", "e2e"):
            _create(st["bootstrap"], t, 1)
        for _ in range(runs):
            none_cpu.append(_broker_cpu(st, "cpu", "idle")[0])
            none_conc.append(_broker_cpu_concurrent(st, "cpu"))
            e2e = _e2e_latencies_ms(st["bootstrap"], "e2e", linger_ms=0)
            n50.append(_pct(e2e, 0.5))
            n99.append(_pct(e2e, 0.99))
    with _cluster(broker_config={"broker.heartbeat.interval.ms": str(HEARTBEAT_MS)},
                  controller_config={"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)}) as st:
        _create(st["bootstrap"], "avail", 1)
        unavail = _unavailability_s(st, "avail", UNAVAIL_TRIALS)
    rec_mb = (len(VALUE) + 16) / 1e6
    common = {"flush_policy": FLUSH, "replication_factor": 3, "acks": "all",
              "min_insync_replicas": 2}
    return {
        "broker_cpu_us_per_produce": _fig(
            [c["cpu_us"] for c in cpu], "µs", ratio_of="broker_cpu_target_us_per_produce",
            requests=[c["requests"] for c in cpu], produces_per_s=[c["ops_per_s"] for c in cpu],
            wakeups=[c["wakeups"] for c in cpu], syscalls=[c["syscalls"] for c in cpu],
            idle_cpu_ms_per_s=[c["idle_cpu_ms_per_s"] for c in cpu],
            flush_rounds=[c["flush_rounds"] for c in cpu], path_counts=path_counts(cpu, 1),
            target="<= 10x the echo floor (issue 26)", **common),
        "broker_cpu_busiest_node_us_per_produce": _fig([c["busiest_node_us"] for c in cpu], "µs",
                                                       **common),
        "broker_cpu_us_per_produce_concurrent": _fig(
            [c["cpu_us"] for c in cpu_conc], "µs", ratio_of="broker_cpu_target_us_per_produce",
            requests=[c["requests"] for c in cpu_conc],
            produces_per_s=[c["ops_per_s"] for c in cpu_conc],
            wakeups=[c["wakeups"] for c in cpu_conc], syscalls=[c["syscalls"] for c in cpu_conc],
            idle_cpu_ms_per_s=[c["idle_cpu_ms_per_s"] for c in cpu_conc],
            flush_rounds=[c["flush_rounds"] for c in cpu_conc],
            path_counts=path_counts(cpu_conc, CONCURRENT_PRODUCERS),
            target="<= 2x the echo floor (issue 26)", producers=CONCURRENT_PRODUCERS, **common),
        "broker_cpu_busiest_node_us_per_produce_concurrent": _fig(
            [c["busiest_node_us"] for c in cpu_conc], "µs", producers=CONCURRENT_PRODUCERS, **common),
        "broker_cpu_target_us_per_produce": _fig([CPU_TARGET_US], "µs",
                                                 note="issue 13's target, not a measurement"),
        "broker_cpu_us_per_idle_fetch": _fig([c["cpu_us"] for c in fetch_cpu], "µs",
                                             fetches=[c["ops"] for c in fetch_cpu],
                                             max_wait_ms=IDLE_FETCH_WAIT_MS),
        "producer_acks_all": _fig(prod, "rec/s", partitions=3, **common),
        "producer_acks_all_mb": _fig([x * rec_mb for x in prod], "MB/s", partitions=3, **common),
        "produce_latency_p50": _fig(p50, "ms", rate=f"{LATENCY_RATE} rec/s", **common),
        "produce_latency_p99": _fig(p99, "ms", rate=f"{LATENCY_RATE} rec/s", **common),
        "e2e_latency_p50": _fig(e50, "ms", rate=f"{E2E_RATE} rec/s", linger_ms=E2E_LINGER_MS,
                                cpu_steal_pct=steal, **common),
        "e2e_latency_p99": _fig(e99, "ms", rate=f"{E2E_RATE} rec/s", linger_ms=E2E_LINGER_MS,
                                cpu_steal_pct=steal, **common),
        "loopback_rtt_p50_us": _fig(rtt50, "µs", size_bytes=100,
                                    note="a blocking-socket echo between two processes, measured"
                                         " right before each end-to-end run"),
        "loopback_rtt_p99_us": _fig(rtt99, "µs", size_bytes=100),
        "e2e_latency_linger1_p50": _fig(l50, "ms", rate=f"{E2E_RATE} rec/s", linger_ms=1, **common),
        "e2e_latency_linger1_p99": _fig(l99, "ms", rate=f"{E2E_RATE} rec/s", linger_ms=1, **common),
        "e2e_latency_linger0_p50": _fig(z50, "ms", rate=f"{E2E_RATE} rec/s", linger_ms=0,
                                        target="<= 3 ms (issue 26)", **common),
        "e2e_latency_linger0_p99": _fig(z99, "ms", rate=f"{E2E_RATE} rec/s", linger_ms=0,
                                        target="<= 10 ms (issue 26)", **common),
        **_flush_none_figures(none_cpu, none_conc, n50, n99, {**common, "flush_policy": "none"}),
        "unavailability": _fig(unavail, "s", trials=len(unavail),
                               session_timeout_ms=SESSION_TIMEOUT_MS,
                               heartbeat_interval_ms=HEARTBEAT_MS, **common),
    }
