"""Python calls per single-record acks=all produce, per node, by where the code lives.

Theory of operation: the broker's CPU per produce that its path floor does not explain
(``bench/bench_floor.py``, "The path floor") is the interpreter running the brokers' own code.
This counts it. A 3-node ``rafka cluster up`` (RF 3, ``min.insync.replicas=2``) is started with
``bench/call_profile_site/sitecustomize.py`` on its ``PYTHONPATH``; every node's trio thread is
profiled (``cProfile``, thread CPU) only while ``n`` produces run — one at a time, or from
``--concurrent`` producers each waiting for its answer (as ``bench_replication``'s two CPU
figures). Printed per node: Python-level and C-level calls per produce, and the profiled CPU
per produce grouped by module (trio, prometheus_client, each rafka module, builtins), the
biggest first. Call counts are exact; profiled times are inflated by the profiler and only
their shares mean something.

``python -m bench.call_profile [-n 2000] [--concurrent 32] [--top 15]``
"""

from __future__ import annotations

import argparse
import collections
import os
import pstats
import signal
import tempfile
import time
from pathlib import Path

from rafka.client import Producer

from bench.bench_replication import (
    KEYS,
    VALUE,
    _cluster,
    _create,
    _leader_and_isr,
    concurrent_produces,
)
from rafka.cluster import load_cluster

TOPIC = "calls"
SITE = Path(__file__).parent / "call_profile_site"


def _group(filename: str, func: str) -> str:
    if filename == "~":  # a C function: name it
        return "C " + (func.split("'")[1] if "'" in func else func.strip("<>").split()[-1])
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/")[0]
    parts = Path(filename).parts
    for i, p in enumerate(parts):
        if p in ("broker", "log", "wire", "kraft", "metadata", "security", "client"):
            return "rafka " + "/".join(parts[i:])
    return "stdlib " + Path(filename).name


def report(prof: Path, n: int, top: int) -> list[str]:
    st = pstats.Stats(str(prof)).stats  # type: ignore[attr-defined]
    cpu: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    py = c = 0
    for (filename, _line, func), (_cc, nc, tt, _ct, _callers) in st.items():
        g = _group(filename, func)
        cpu[g] += tt
        calls[g] += nc
        if filename == "~":
            c += nc
        else:
            py += nc
    total = sum(cpu.values())
    out = [f"Python calls per produce {py / n:.0f}, C calls {c / n:.0f}; "
           f"profiled CPU per produce {total / n * 1e6:.0f} µs"]
    for g, t in cpu.most_common(top):
        out.append(f"  {t / total * 100:5.1f} %  {calls[g] / n:6.1f} calls  {g}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000, help="produces one at a time")
    ap.add_argument("--concurrent", type=int, default=0, help="producers in flight (for 5 s)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="rafka-call-profile-"))
    os.environ["RAFKA_CALL_PROFILE_DIR"] = str(out)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))
    with _cluster() as st:
        _create(st["bootstrap"], TOPIC, 1)
        leader, _ = _leader_and_isr(st["bootstrap"], TOPIC)
        nodes = load_cluster(st["data_dir"])["nodes"]
        role = {n.pid: ("leader" if n.id == leader else f"follower {n.id}") for n in nodes if n.pid}

        def signal_all(sig: int) -> None:
            for pid in role:
                os.kill(pid, sig)

        if args.concurrent:
            n = concurrent_produces(st["bootstrap"], TOPIC, args.concurrent, 5.0,
                                    lambda: signal_all(signal.SIGUSR1))
            signal_all(signal.SIGUSR2)
        else:
            n = args.n
            with Producer(bootstrap_servers=st["bootstrap"], acks="all", enable_idempotence=True,
                          linger_ms=0) as p:
                for _ in range(50):
                    p.send(TOPIC, value=VALUE, partition=0).result(timeout=30)
                signal_all(signal.SIGUSR1)
                for i in range(n):
                    p.send(TOPIC, value=VALUE, key=KEYS[i & 1023], partition=0).result(timeout=30)
                signal_all(signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all((out / f"{pid}.prof").exists() for pid in role):
            time.sleep(0.1)
    mode = f"{args.concurrent} producers in flight" if args.concurrent else "one at a time"
    print(f"{n} single-record acks=all produces, {mode}")
    for pid, name in sorted(role.items(), key=lambda kv: kv[1]):
        print(f"== {name}: " + "\n".join(report(out / f"{pid}.prof", n, args.top)))


if __name__ == "__main__":
    main()
