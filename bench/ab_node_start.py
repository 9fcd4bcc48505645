"""A/B of a node process's start-up: exec of ``rafka server`` → its ``start`` event, and the
build of its controller's Raft engine from a copy of a real controller data dir.

Theory of operation: issue 27's kill-all heal → commit starts with three Python processes
starting at once. This isolates two parts of that on one node, alternating two installs
(e.g. a worktree of main and the branch, each with its own ``.venv``) so both see the same
load: ``start`` spawns ``VENV/bin/rafka server --config`` on a copy of a torture run's node-1
data dir (its own ports: the run must be over) and reads the wall-clock ``start`` event from its ``events.jsonl``
(imports, config and logging done), then kills it; ``open`` builds the controller's
``SyncObjQuorum`` from a fresh copy of ``node-1/data/controller`` in a child process and
prints the seconds (the ``@metadata`` log's recovery, pysyncobj's journal). Medians and the
load average are printed per arm.

    python bench/ab_node_start.py WORK_DIR_OF_A_TORTURE_RUN BASE_VENV BRANCH_VENV [N]
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_OPEN = """
import sys, time, trio
from rafka.kraft.syncobj_engine import SyncObjQuorum
async def main():
    t = time.perf_counter()
    SyncObjQuorum(1, [(1, ("127.0.0.1", 29991)), (2, ("127.0.0.1", 29992)), (3, ("127.0.0.1", 29993))],
                  sys.argv[1], "x" * 32, {}, bind_address=("127.0.0.1", 29991))
    print(round(time.perf_counter() - t, 4), flush=True)
    import os; os._exit(0)
trio.run(main)
"""


def _start_s(venv: Path, work: Path, scratch: Path) -> float:
    d = scratch / "node"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(work / "node-1" / "data", d / "data")
    cfg = (work / "node-1.toml").read_text().replace(str(work / "node-1" / "data"), str(d / "data"))
    (d / "node.toml").write_text(cfg)  # the run's own ports: run this once that cluster is down
    t0 = time.time()
    p = subprocess.Popen([str(venv / "bin" / "rafka"), "server", "--config", str(d / "node.toml")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ev, start = d / "data" / "events.jsonl", None
    deadline = time.time() + 30
    while start is None and time.time() < deadline:
        time.sleep(0.02)
        if ev.exists():
            for line in ev.read_text().splitlines():
                o = json.loads(line)
                if o["event"] == "start" and o["wall_ms"] / 1000 > t0:
                    start = o["wall_ms"] / 1000 - t0
    p.send_signal(signal.SIGKILL)
    p.wait()
    if start is None:
        raise RuntimeError(f"{venv}: no start event within 30 s")
    return start


def _open_s(venv: Path, work: Path, scratch: Path) -> float:
    d = scratch / "controller"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(work / "node-1" / "data" / "controller", d)
    out = subprocess.run([str(venv / "bin" / "python"), "-c", _OPEN, str(d)], capture_output=True,
                         text=True, timeout=60)
    return float(out.stdout.split()[0])


def main(work: str, base: str, branch: str, n: str = "6") -> None:
    arms = {"base": Path(base), "branch": Path(branch)}
    res: dict[tuple[str, str], list[float]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(int(n)):
            order = list(arms.items()) if i % 2 == 0 else list(arms.items())[::-1]  # ABBA
            for name, venv in order:
                for part, fn in (("start", _start_s), ("open", _open_s)):
                    res.setdefault((name, part), []).append(fn(venv, Path(work), Path(tmp)))
                loads.append(os.getloadavg()[0])
    print(f"load average (1 min) during the runs: median {statistics.median(loads):.2f}, "
          f"{min(loads):.2f}-{max(loads):.2f}")
    for (name, part), xs in sorted(res.items()):
        label = "exec -> start event" if part == "start" else "controller engine open"
        print(f"{name:<7} {label:<24} median {statistics.median(xs):.3f} s  "
              f"({', '.join(f'{x:.2f}' for x in xs)})")


if __name__ == "__main__":
    main(*sys.argv[1:])
