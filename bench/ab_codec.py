"""A/B of the codec's hot path between two checkouts, interleaved (ABBA) in one time window.

``python bench/ab_codec.py BASE_DIR [REPS]`` (from the project root, its .venv python; BASE_DIR
another checkout with its own ``make install``, e.g. ``git archive <commit> | tar -x -C
BASE_DIR``). Each repetition runs, for base and new in ABBA order (base, new, new, base, …),
each tree's own code in its own python:

* micro-benchmarks, ns per operation (median of 7 timings): the client encoding a PRODUCE of
  one 16 KiB batch (one frame) and of a 1 MiB batch (the two-part write: prefix + the encoder's
  buffer), the broker decoding the 16 KiB PRODUCE, the broker's FETCH response head, the client
  decoding a FETCH response with 16 KiB of records, and ``NodeApi.dispatch`` routing a PRODUCE
  and a FETCH to its handler (the handler stubbed);
* one produce throughput figure (``bench_foundation._producer_rate_threads``: sync
  ``Producer.send``, 200 B values, acks=1) against a one-node cluster of that tree.

Prints each run, then the medians per tree and the ratio new / base.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

MICRO = r'''
import asyncio, json, sys, tempfile, timeit
sys.path.insert(0, ".")
from rafka.wire.protocol import ApiKey, Request, decode_request, decode_response, encode_response_head
from rafka.wire.connection import Connection

class _Stream:  # never written to: only the frame building is timed
    pass

conn = Connection(_Stream(), client_id="bench")
def produce(n):
    return {"acks": 1, "timeout_ms": 30000,
            "topics": [{"name": "t", "partitions": [{"partition": 0, "records": b"r" * n}]}]}
small, large = produce(16384), produce(1 << 20)

if hasattr(conn, "_encoder"):  # the codec's RequestEncoder, as Connection calls it
    encoder = conn._encoder

    def encode_small():
        return encoder.frame(ApiKey.PRODUCE, 7, small, split_at=65536)

    def encode_large():
        assert encoder.frame(ApiKey.PRODUCE, 7, large, split_at=65536) is None
        view = encoder.payload()
        len(view)
        view.release()
else:  # before: Connection packed frames itself
    def encode_small():
        return conn._small_frame(ApiKey.PRODUCE, 7, small)

    def encode_large():
        assert conn._small_frame(ApiKey.PRODUCE, 7, large) is None
        view = conn._packer.getbuffer()
        len(view)
        view.release()

payload = encode_small()[4:]
fetch_body = {"topics": [{"name": "t", "partitions": [{
    "partition": 0, "error": 0, "message": None, "high_watermark": 1000, "log_start_offset": 0,
    "log_end_offset": 1000, "diverging_epoch": None, "records_len": 16384,
    "last_stable_offset": 1000, "aborted_transactions": None}]}]}
records = b"x" * 16384
fetch_frame = encode_response_head(7, fetch_body, len(records)) + records

def decode_produce():
    decode_request(payload)

def fetch_head():
    encode_response_head(7, fetch_body, 16384)

def decode_fetch():
    decode_response(fetch_frame[4:])

from tests.broker.harness import node_config
from rafka.broker.events import EventLog
from rafka.broker.handlers import NodeApi, data
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.broker.replica_manager import ReplicaManager

async def _answer(*a, **k):
    return {"topics": []}
data.produce = data.fetch = _answer
tmp = tempfile.TemporaryDirectory()
from pathlib import Path
cfg = node_config(Path(tmp.name))
events = EventLog(cfg.data_dir / "events.jsonl", 1)
rm = ReplicaManager(1, cfg.data_dir, dict(cfg.broker), cfg.topic_defaults(), events)
api = NodeApi(cluster_id="b", replica_manager=rm, publisher=MetadataPublisher(1), channel=None)
produce_req = Request(ApiKey.PRODUCE, 7, small)
fetch_req = Request(ApiKey.FETCH, 8, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
                                      "max_bytes": 1 << 20, "topics": []})

def _run(req):
    coro = api.dispatch(req)
    try:
        coro.send(None)
    except StopIteration:
        return
    raise AssertionError("the stub handler suspended")

def dispatch_produce():
    _run(produce_req)

def dispatch_fetch():
    _run(fetch_req)

out = {}
for fn, number in ((encode_small, 20000), (encode_large, 300), (decode_produce, 20000),
                   (fetch_head, 50000), (decode_fetch, 50000), (dispatch_produce, 50000),
                   (dispatch_fetch, 50000)):
    times = timeit.repeat(fn, number=number, repeat=7)
    out[fn.__name__ + "_ns"] = sorted(times)[3] / number * 1e9
rm.close()
events.close()
print(json.dumps(out))
'''

PRODUCE = r'''
import json, sys
sys.path.insert(0, ".")
from bench import bench_foundation as bf
rate, cpu, caller = bf._producer_rate_threads(sys.argv[1], sys.argv[2], int(sys.argv[3]))
print(json.dumps({"produce_rec_s": rate, "produce_client_cpu_us": cpu}))
'''

N_PRODUCE = 150_000


def _py(tree: Path) -> str:
    return str(tree / ".venv" / "bin" / "python")


def _run(tree: Path, code: str, *args: str) -> dict[str, float]:
    out = subprocess.run([_py(tree), "-c", code, *args], cwd=tree, capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, PYTHONHASHSEED="0"))
    if out.returncode:
        raise RuntimeError(f"{tree}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cluster_up(tree: Path, port: int) -> Path:
    data = Path(tempfile.mkdtemp(prefix="rafka-abcodec-"))
    subprocess.run([_py(tree), "-m", "rafka.cli", "cluster", "up", "--nodes", "1", "--data-dir",
                    str(data), "--port", str(port), "--detach"], cwd=tree, check=True,
                   capture_output=True, timeout=120)
    return data


def _cluster_down(tree: Path, data: Path) -> None:
    subprocess.run([_py(tree), "-m", "rafka.cli", "cluster", "down", "--data-dir", str(data)],
                   cwd=tree, capture_output=True, timeout=120)


def main() -> None:
    sys.path.insert(0, str(HERE))
    from rafka.client import Admin

    from bench.cluster import free_port_block

    base_dir = Path(sys.argv[1]).resolve()
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    trees = {"base": base_dir, "new": HERE}
    clusters: dict[str, tuple[Path, str]] = {}
    try:
        for name, tree in trees.items():
            port = free_port_block(1)
            clusters[name] = (_cluster_up(tree, port), f"127.0.0.1:{port}")
            with Admin(bootstrap_servers=clusters[name][1]) as admin:
                for r in range(reps):
                    admin.create_topic(f"ab{r}", partitions=3, replication_factor=1)
        results: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
        for rep in range(reps):
            for name in (("base", "new") if rep % 2 == 0 else ("new", "base")):
                tree = trees[name]
                fig = _run(tree, MICRO)
                fig.update(_run(tree, PRODUCE, clusters[name][1], f"ab{rep}", str(N_PRODUCE)))
                results[name].append(fig)
                print(name, " ".join(f"{k}={v:.1f}" for k, v in fig.items()), flush=True)
        print(f"\nmedians of {reps} runs per tree (ABBA order)")
        for key in results["base"][0]:
            b = statistics.median(f[key] for f in results["base"])
            n = statistics.median(f[key] for f in results["new"])
            print(f"{key:28s} base {b:12.1f}  new {n:12.1f}  new/base {n / b:.3f}")
    finally:
        for name, (data, _) in clusters.items():
            _cluster_down(trees[name], data)


if __name__ == "__main__":
    main()
