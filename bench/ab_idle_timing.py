"""ABBA of an idle 3-node cluster's CPU under Raft and broker-heartbeat timings (issue 26).

Theory of operation: each arm starts a fresh ``cluster up`` with its controller / broker
overrides (config only, no code differs between arms), lets it settle 12 s, reads every
thread's CPU and voluntary context switches over 20 s (``bench/idle_threads.py``) and prints
the three processes' totals with the load average; ``PER_THREAD=1`` also prints each thread.
Give the arms in ABBA order so both see the same drift of the machine:

    python -m bench.ab_idle_timing A-default,E-slow,E-slow,A-default

Since session 23 the default Raft timing is ``_SLOW_RAFT``'s (arm B adds nothing to A); arm
``O-raft100`` is the timing before it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.idle_threads import thread_rates
from rafka.cluster import cluster_down, cluster_up, free_port_block

_SLOW_RAFT = {"raft.append.entries.period.ms": "200", "raft.min.timeout.ms": "700",
              "raft.max.timeout.ms": "2000"}
# arm -> (controller overrides, broker overrides)
ARMS: dict[str, tuple[dict[str, str] | None, dict[str, str] | None]] = {
    "A-default": (None, None),
    # session 13-22's Raft timing (the default until session 23's 700-2000 ms / 200 ms)
    "O-raft100": ({"raft.append.entries.period.ms": "100", "raft.min.timeout.ms": "350",
                   "raft.max.timeout.ms": "1000"}, None),
    "B-heartbeat200": (_SLOW_RAFT, None),
    "C-broker-hb1s": (_SLOW_RAFT, {"broker.heartbeat.interval.ms": "1000"}),
    "D-tick100": ({**_SLOW_RAFT, "raft.tick.ms": "100"}, {"broker.heartbeat.interval.ms": "1000"}),
    "E-slow": ({**_SLOW_RAFT, "raft.tick.ms": "200"}, {"broker.heartbeat.interval.ms": "1000"}),
    # the tick thread at a fixed raft.tick.ms, as before kraft/tick_wait.py
    "F-fixed-tick": ({"raft.tick.until.deadline": "false"}, None),
    # the default Raft timing with 1 s broker heartbeats (the session timeout stays 3 s)
    "G-broker-hb1s": (None, {"broker.heartbeat.interval.ms": "1000"}),
    # Raft frames sealed with Fernet, as pysyncobj does on its own (before kraft/raft_cipher.py)
    "H-fernet": ({"raft.frame.cipher": "fernet"}, None),
    # every Raft message deflated, as pysyncobj does on its own (before kraft/raft_zlib.py)
    "I-deflate-all": ({"raft.compress.min.bytes": "0"}, None),
}


def one(arm: str, settle_s: float = 12.0, window_s: float = 20.0) -> tuple[float, float]:
    controller, broker = ARMS[arm]
    data = Path(tempfile.mkdtemp(prefix="rafka-ab-idle-"))
    try:
        state = cluster_up(data, 3, "127.0.0.1", free_port_block(3), echo=lambda _m: None,
                           controller_config=controller, broker_config=broker)
        pids = [n.pid for n in state["nodes"] if n.pid]
        time.sleep(settle_s)
        rows = thread_rates(pids, window_s)
        if os.environ.get("PER_THREAD"):
            for p, _tid, name, cpu_ms, wakes in rows:
                if cpu_ms > 0.2 or wakes > 2:
                    print(f"   pid {p} {name:12s} {cpu_ms:5.2f} ms/s {wakes:5.1f} wake-ups/s")
        return sum(r[3] for r in rows), sum(r[4] for r in rows)
    finally:
        with contextlib.suppress(Exception):
            cluster_down(data)
        shutil.rmtree(data, ignore_errors=True)


def main(arms: list[str]) -> None:
    for arm in arms:
        cpu, wakes = one(arm)
        print(f"{arm:15s} {cpu:6.2f} ms/s {wakes:6.0f} wake-ups/s  load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else ["A-default", "E-slow", "E-slow", "A-default"])
