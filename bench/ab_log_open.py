"""A/B/C of how a restarted broker opens its partition logs (issue 27, broker/replica_manager.py).

``python bench/ab_log_open.py [PARTITIONS] [BATCHES] [REPS]`` (from the project root, its .venv
python): builds one data dir of PARTITIONS single-partition topics with BATCHES 1 KiB batches
each, then, per repetition, copies it, removes the clean-shutdown markers (every open is a
recovery, as after ``kill -9``) and publishes the first image naming every partition into a
real in-process ReplicaManager, in three modes, interleaved (order rotated each repetition):

* ``inline`` — the image becomes current only once every log is open, each opened on the
  trio thread (the code before the change, emulated: a subscriber that waits for the queue);
* ``trio`` — the image current at once, the queue opened on the trio thread;
* ``thread`` — the image current at once, each recovery in a worker thread (the default).

Per mode: image current (publish → current), all open (publish → queue drained), and the
longest stall of the trio loop meanwhile (a task that sleeps 1 ms and records the largest gap
between wake-ups: what a request arriving then would wait). Medians, with the load average.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
import rafka.broker.replica_manager as rm_mod  # noqa: E402
from rafka.broker.events import EventLog  # noqa: E402
from rafka.broker.metadata_listener import MetadataPublisher  # noqa: E402
from rafka.log.batch import build_batch  # noqa: E402
from rafka.log.config import LogConfig  # noqa: E402
from rafka.log.partition_log import CLEAN_SHUTDOWN_FILE, PartitionLog  # noqa: E402
from rafka.metadata.records import Partition, RegisterBroker, Topic, UnfenceBroker  # noqa: E402


def build(template: Path, partitions: int, batches: int) -> None:
    value = b"x" * 1000
    for i in range(partitions):
        plog = PartitionLog.open(template / f"t{i:04d}-0", LogConfig())
        for _ in range(batches):
            plog.append(build_batch([(None, value, [], 1000)]), leader_epoch=0)
        plog.close()


def entries(partitions: int) -> list[tuple[int, int, Any]]:
    recs: list[Any] = [RegisterBroker(1, "inc", "127.0.0.1", 1), UnfenceBroker(1)]
    for i in range(partitions):
        recs += [Topic(f"t{i:04d}", f"id{i}"), Partition(f"id{i}", 0, (1,), (1,), 1, 0, 0)]
    return [(o, 1, r) for o, r in enumerate(recs)]


async def one(data: Path, mode: str, partitions: int) -> tuple[float, float, float]:
    rm = rm_mod.ReplicaManager(1, data, {}, {}, EventLog(None, 1), open_logs_in_thread=mode == "thread")
    pub = MetadataPublisher(1)
    if mode == "inline":  # the code before: every log opened before the image is current
        async def open_all(image: Any, changes: Any) -> None:
            await rm.on_metadata(image, changes)
            await rm.wait_logs_open()
        pub.subscribe(open_all)
    else:
        pub.subscribe(rm.on_metadata)
    stall = 0.0
    stop = trio.Event()

    async def ticker() -> None:
        nonlocal stall
        last = time.perf_counter()
        while not stop.is_set():
            await trio.sleep(0.001)
            now = time.perf_counter()
            stall = max(stall, now - last)
            last = now

    async with trio.open_nursery() as nursery:
        await nursery.start(rm.run)
        nursery.start_soon(ticker)
        await trio.sleep(0.05)
        stall = 0.0
        t0 = time.perf_counter()
        await pub.publish_records(entries(partitions))
        current = time.perf_counter() - t0
        await rm.wait_logs_open()
        all_open = time.perf_counter() - t0
        assert len(rm.partitions) == partitions
        stop.set()
        nursery.cancel_scope.cancel()
    rm.close()
    return current, all_open, stall


def main() -> None:
    partitions = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    modes = ["inline", "trio", "thread"]
    results: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ab-log-open-") as tmp:
        template = Path(tmp) / "template"
        build(template, partitions, batches)
        for rep in range(reps):
            order = modes[rep % 3:] + modes[:rep % 3]
            if rep % 2:
                order.reverse()
            for mode in order:
                data = Path(tmp) / "run"
                shutil.rmtree(data, ignore_errors=True)
                shutil.copytree(template, data)
                for d in data.iterdir():
                    (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
                loads.append(os.getloadavg()[0])
                r = trio.run(one, data, mode, partitions)
                results[mode].append(r)
                print(f"rep {rep} {mode:6s} current {r[0]:.3f} s  all open {r[1]:.3f} s  "
                      f"max loop stall {r[2] * 1000:.1f} ms  load {loads[-1]:.2f}", flush=True)
    print(f"{partitions} partitions x {batches} batches of 1 KiB, unclean; medians of {reps}, "
          f"load average {min(loads):.2f}-{max(loads):.2f}")
    for mode in modes:
        cur, allo, st = (statistics.median(x[i] for x in results[mode]) for i in range(3))
        print(f"{mode:6s}  image current {cur:.3f} s   all open {allo:.3f} s   max loop stall {st * 1000:.1f} ms")


if __name__ == "__main__":
    main()
