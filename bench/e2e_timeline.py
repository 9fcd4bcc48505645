"""Where a record's end-to-end time goes at linger 0, hop by hop (issue 26).

Theory of operation: ``bench_replication``'s end-to-end run (a 3-node cluster, RF 3,
``min.insync.replicas`` 2, a 1-partition topic, one producer process sending single records at
``E2E_RATE`` with linger 0, acks=all, one consumer process tailing) with the nodes started
under ``bench/e2e_timeline_site/sitecustomize.py``: each node records when the record's offset
passed each step (its docstring lists the events), all on CLOCK_MONOTONIC like the producer's
send time in the record and the consumer's receive time. For every record received this sets
the steps side by side:

    send → leader append → (per follower: leader answers its fetch → follower appended →
    follower sends its next fetch → leader takes its position) and leader group commit →
    high watermark → leader answers the consumer's fetch → consumer receives

and prints each hop's p50 / p90 over the records. Hops are medians of their own, so they do not
add up to the total exactly. Beside them: each node's ``fdatasync`` time (the ``flush`` of the
topic's log) against the same filesystem's idle ``fdatasync`` measured first
(``bench_floor._fsync``), the leader's group-commit rounds, and which of the leader's flush or
a follower's position was last before each high-watermark move. The wrappers cost a few µs
per call, so this is for where the time goes; CPU figures are ``bench.e2e_counts``'.

``python -m bench.e2e_timeline [--seconds 3] [--set key=value ...] [--json]``
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import signal
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from unittest import mock

import bench.bench_replication as br
from bench.bench_floor import _fsync
from rafka.cluster import load_cluster

TOPIC = "e2e"
SITE = Path(__file__).parent / "e2e_timeline_site"
_LAST_FLUSH = "last"  # hops(): 1 when the leader's flush came after both followers' positions


class _Steps:
    """One node's events: for each kind, when its value first exceeded each offset."""

    def __init__(self, events: Iterable[tuple[str, int, float]]) -> None:
        self.raw: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for kind, value, t in events:
            self.raw[kind].append((value, t))
        self.values: dict[str, list[int]] = {}
        self.times: dict[str, list[float]] = {}
        for kind, xs in self.raw.items():
            vals: list[int] = []
            times: list[float] = []
            for v, t in sorted(xs, key=lambda x: x[1]):  # the running maximum: when each new highest value appeared
                if not vals or v > vals[-1]:
                    vals.append(v)
                    times.append(t)
            self.values[kind], self.times[kind] = vals, times

    def passed(self, kind: str, offset: int) -> float | None:
        """When ``kind``'s value first exceeded ``offset`` (None: never, or no such events)."""
        vals = self.values.get(kind)
        if not vals:
            return None
        i = bisect.bisect_right(vals, offset)
        return self.times[kind][i] if i < len(vals) else None


def hops(seen: list[tuple[int, float, float]], leader: _Steps,
         followers: dict[int, _Steps]) -> dict[str, list[float]]:
    """Per hop, its duration in ms for every record the whole path is known for."""
    out: dict[str, list[float]] = defaultdict(list)
    sync_firsts = {n: sorted(t for _v, t in f.raw.get("sync", ())) for n, f in followers.items()}
    for offset, sent, received in seen:
        t_app = leader.passed("append", offset)
        t_flush = leader.passed("flushed", offset)
        t_hw = leader.passed("hw", offset)
        t_cons = leader.passed("served-consumer", offset)
        if None in (t_app, t_flush, t_hw, t_cons):
            continue
        assert t_app is not None and t_flush is not None and t_hw is not None and t_cons is not None
        row: dict[str, float] = {
            "send → leader append": t_app - sent,
            "leader append → leader flushed": t_flush - t_app,
        }
        last_pos = 0.0
        for n, f in sorted(followers.items()):
            t_served = leader.passed(f"served{n}", offset)
            t_appended = f.passed("appended", offset)
            t_fetch = f.passed("fetch", offset)
            t_pos = leader.passed(f"pos{n}", offset)
            if None in (t_served, t_appended, t_fetch, t_pos):
                break
            assert t_served is not None and t_appended is not None
            assert t_fetch is not None and t_pos is not None
            syncs = sync_firsts[n]
            i = bisect.bisect_left(syncs, t_appended)
            t_sync = syncs[i] if i < len(syncs) and syncs[i] <= t_fetch else None
            row[f"follower {n}: leader append → its fetch answered"] = t_served - t_app
            row[f"follower {n}: answered → appended"] = t_appended - t_served
            if t_sync is not None:
                row[f"follower {n}: appended → sync started"] = t_sync - t_appended
                row[f"follower {n}: sync started → next fetch sent"] = t_fetch - t_sync
            row[f"follower {n}: appended → next fetch sent"] = t_fetch - t_appended
            row[f"follower {n}: next fetch sent → leader took it"] = t_pos - t_fetch
            row[f"follower {n}: leader append → position taken"] = t_pos - t_app
            last_pos = max(last_pos, t_pos)
        else:
            row["leader append → high watermark"] = t_hw - t_app
            row["high watermark → consumer's fetch answered"] = t_cons - t_hw
            row["consumer's fetch answered → received"] = received - t_cons
            row["end to end"] = received - sent
            for k, v in row.items():
                out[k].append(v * 1000)
            out[_LAST_FLUSH].append(1.0 if t_flush >= last_pos else 0.0)
    return out


def _node_fsyncs(steps: _Steps) -> list[float]:
    return [v / 1000 for v, _t in steps.raw.get("fsync", ())]


def _rounds(steps: _Steps) -> tuple[list[float], list[int]]:
    starts = sorted(steps.raw.get("round", ()), key=lambda x: x[1])
    ends = sorted(steps.raw.get("round-end", ()), key=lambda x: x[1])
    # a round still running when the nodes wrote their events has no end: zip drops it
    return ([(e[1] - s[1]) * 1000 for s, e in zip(starts, ends, strict=False)],
            [s[0] for s in starts])


def measure(seconds: float, broker_config: dict[str, str] | None) -> dict[str, Any]:
    disk = _fsync()
    out_dir = Path(tempfile.mkdtemp(prefix="rafka-e2e-timeline-"))
    env = {"RAFKA_TIMELINE_DIR": str(out_dir), "RAFKA_TIMELINE_TOPIC": TOPIC,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))}
    with contextlib.ExitStack() as stack:
        with mock.patch.dict(os.environ, env):  # the nodes inherit it, the consumer process not
            st = stack.enter_context(br._cluster(broker_config))
        br._create(st["bootstrap"], TOPIC, 1, 3, {"min.insync.replicas": "2"})
        time.sleep(1)
        leader_id, _ = br._leader_and_isr(st["bootstrap"], TOPIC)
        nodes = {n.pid: n.id for n in load_cluster(st["data_dir"])["nodes"] if n.pid}
        for pid in nodes:
            os.kill(pid, signal.SIGUSR1)
        time.sleep(0.2)
        errors = [p.read_text() for p in out_dir.glob("*.error")]
        if errors:
            raise RuntimeError(f"the timeline hooks did not install: {errors}")
        seen = br._e2e_latencies_ms(st["bootstrap"], TOPIC, seconds, linger_ms=0, detail=True)
        for pid in nodes:
            os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10  # each file appears whole (written, then renamed)
        while time.monotonic() < deadline and not all(
                (out_dir / f"{pid}.json").exists() for pid in nodes):
            time.sleep(0.1)
    steps = {nodes[pid]: _Steps(json.loads((out_dir / f"{pid}.json").read_text())) for pid in nodes}
    leader = steps.pop(leader_id)
    table = hops(seen, leader, steps)
    last_flush = table.pop(_LAST_FLUSH, [])
    durations, records = _rounds(leader)
    res: dict[str, Any] = {
        "records": len(seen),
        "hops_ms": {k: {"p50": round(statistics.median(v), 3), "p90": round(br._pct(v, 0.9), 3),
                        "n": len(v)} for k, v in table.items()},
        "hw_last_waited_for_leader_flush": round(statistics.mean(last_flush), 2) if last_flush else None,
        "idle_disk_fdatasync_p50_ms": round(disk["fdatasync_wall_p50_us"] / 1000, 3),
        "fdatasync_ms": {("leader" if n == leader_id else f"follower {n}"): {
            "p50": round(statistics.median(xs), 3), "p90": round(br._pct(xs, 0.9), 3), "n": len(xs)}
            for n, xs in [(leader_id, _node_fsyncs(leader))] + [(n, _node_fsyncs(s)) for n, s in steps.items()]
            if xs},
        "leader_rounds": {"n": len(durations),
                          "duration_p50_ms": round(statistics.median(durations), 3) if durations else None,
                          "records_p50": statistics.median(records) if records else None},
        "load": os.getloadavg()[0],
    }
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--set", action="append", default=[], help="broker setting key=value")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = measure(args.seconds, dict(kv.split("=", 1) for kv in args.set) or None)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{res['records']} records at {br.E2E_RATE}/s, linger 0, acks=all, RF 3 "
          f"(load {res['load']:.1f})")
    for k, v in res["hops_ms"].items():
        print(f"  {k:58s} p50 {v['p50']:7.3f} ms   p90 {v['p90']:7.3f} ms")
    print(f"  fdatasync of the topic's log, ms (idle disk p50 {res['idle_disk_fdatasync_p50_ms']}):")
    for who, v in res["fdatasync_ms"].items():
        print(f"    {who:12s} p50 {v['p50']:.3f}  p90 {v['p90']:.3f}  ({v['n']})")
    print(f"  the high watermark's last wait was the leader's own flush for "
          f"{res['hw_last_waited_for_leader_flush']} of the records, a follower's position for the rest")
    r = res["leader_rounds"]
    print(f"  leader group-commit rounds: {r['n']}, duration p50 {r['duration_p50_ms']} ms, "
          f"records p50 {r['records_p50']}")


if __name__ == "__main__":  # the e2e consumer is a spawned process: it re-imports this module
    main()
