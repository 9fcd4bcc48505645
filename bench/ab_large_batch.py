"""A/B of the large-batch produce path between two checkouts, interleaved in one time window.

``python bench/ab_large_batch.py BASE_DIR [REPS]`` (from the project root, its .venv python):
brings up one single-broker cluster from ``BASE_DIR`` (e.g. ``git archive <commit> | tar -x -C
BASE_DIR``) and one from this tree, then alternates base/new (order flipped every repetition),
each 256 MB of pipelined 1 MiB PRODUCE requests right after a raw socket → file copy; prints
MB/s, the ratio to that raw copy and the broker's CPU ms per MB (``/proc/<pid>/stat``).
"""
import contextlib
import os
import statistics
import sys
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
from rafka.client import Admin  # noqa: E402

from bench import bench_foundation as bf  # noqa: E402
from bench.cluster import cluster  # noqa: E402
from bench.peers import raw_socket_to_file_mb_s  # noqa: E402


def broker_cpu(bootstrap):
    import subprocess
    port = bootstrap.split(":")[1]
    pid = subprocess.run(["lsof", "-ti", f"tcp:{port}", "-sTCP:LISTEN"], capture_output=True, text=True).stdout.split()[0]
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

@contextlib.contextmanager
def in_dir(d):
    old = os.getcwd()
    os.chdir(d)
    try:
        yield
    finally:
        os.chdir(old)

with contextlib.ExitStack() as st:
    with in_dir(sys.argv[1]):
        base = st.enter_context(cluster(nodes=1))
    with in_dir(str(HERE)):
        new = st.enter_context(cluster(nodes=1))
    for b in (base, new):
        with Admin(bootstrap_servers=b) as a:
            a.create_topic("big", partitions=1, replication_factor=1)
    res = {"base": [], "new": []}
    for rep in range(int(sys.argv[2]) if len(sys.argv) > 2 else 6):
        order = ("base", "new") if rep % 2 == 0 else ("new", "base")
        for name in order:
            raw = raw_socket_to_file_mb_s(256)
            bs = base if name == "base" else new
            c0 = broker_cpu(bs)
            mb = trio.run(bf._large_batch_mb_s, bs, "big", 256)
            cpu = (broker_cpu(bs) - c0) / (256 * 1.048576) * 1e3  # broker CPU ms per MB
            res[name].append((mb, raw, mb / raw, cpu))
            print(name, f"{mb:.0f} MB/s raw {raw:.0f} ratio {mb/raw:.2f} broker {cpu:.3f} ms/MB", flush=True)
    for k, v in res.items():
        print(k, "median MB/s", round(statistics.median(x[0] for x in v)), "median pair ratio",
              round(statistics.median(x[2] for x in v), 3))
    for k, v in res.items():
        print(k, "broker CPU ms/MB median", round(statistics.median(x[3] for x in v), 3), [round(x[3], 3) for x in v])
    print("new/base per rep:", [round(n[0]/b[0], 2) for n, b in zip(res["new"], res["base"], strict=True)])
