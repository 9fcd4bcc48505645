"""Where a restarted node's time goes after a kill-all: phases from the torture harness's files.

Theory of operation: ``python -m rafka.chaos_tests.quorum_torture --patterns kill-all --out
OUT --work-dir WORK`` leaves one JSONL line per round (with ``heal_at``, the wall clock right
after the three processes were spawned) and, per node, ``WORK/node-N.log`` and
``WORK/node-N/data/events.jsonl``. For every kill-all round and node this reads the first
occurrence after the heal of each milestone below and prints, per milestone, the median and
max over all restarts of "seconds since the heal", plus, within each restart, the time from
the milestone reached just before it (p50 / max; the order of the clock, which is not always
the order listed — a broker can register before its first image — and such restarts are
counted per milestone):

* ``start``      the ``start`` event (imports, config and logging done; trio about to run);
* ``listening``  the client listener bound (``rafka.server: listening on``);
* ``membership`` a majority of voters answered the membership check (kraft/membership.py);
* ``raft-open``  the controller's Raft engine built (``controller-open`` event, this branch);
* ``catch-up``   the broker's metadata catch-up began (``folding the log from offset N``);
* ``leader``     the active controller answered the catch-up (``reports committed offset``);
* ``image``      the first image became current (``metadata-image`` ``first``);
* ``registered`` / ``unfenced``  the broker lifecycle (broker/lifecycle.py);
* ``commit``     the round's create acknowledged (``heal_at + heal_to_commit_s``; per round).

It also prints the records each catch-up folded (``catch-up`` events, this branch), per round
the time from the second controller's engine open to the first ``raft-leader`` event (the
election and activation once two voters run), and how far the term moved per round. ``python bench/restart_phases.py OUT WORK``.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from rafka.chaos_tests.quorum_torture import read_out

MILESTONES = {
    "listening": "rafka.server: listening on",
    "membership": "voters share this node's config",
    "catch-up": "metadata catch-up: folding the log",
    "leader": "reports committed offset",
    "registered": "registered as broker",
    "unfenced": "is now unfenced",
}
ORDER = ["start", "listening", "membership", "raft-open", "catch-up", "leader", "image",
         "registered", "unfenced", "commit"]
_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _log_times(path: Path) -> list[tuple[float, str]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = _TS.match(line)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
            out.append((t.timestamp(), line))
    return out


def _events(data: Path) -> list[dict]:
    out = []
    for name in ("events.jsonl.1", "events.jsonl"):
        p = data / name
        if p.exists():
            for line in p.read_text(errors="replace").splitlines():
                if '"hw"' in line or '"partition"' in line:
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def main(out_path: str, work: str) -> None:
    rounds = [r for r in read_out(Path(out_path))[1] if r["pattern"] == "kill-all" and r.get("heal_at")]
    work_dir = Path(work)
    nodes = sorted(int(p.name.split("-")[1]) for p in work_dir.glob("node-*") if p.is_dir())
    logs = {n: _log_times(work_dir / f"node-{n}.log") for n in nodes}
    events = {n: _events(work_dir / f"node-{n}" / "data") for n in nodes}
    phases: dict[str, list[float]] = {}
    folded: list[int] = []
    steps: dict[str, list[float]] = {}  # milestone -> its time after the one before it, per restart
    reordered: Counter[str] = Counter()  # milestone -> restarts in which it came before one ORDER puts first
    term_steps: list[int] = []
    elections: list[float] = []  # per round: the second Raft engine open -> the first raft-leader
    for i, r in enumerate(rounds):
        t0 = r["heal_at"]
        t1 = rounds[i + 1]["heal_at"] - rounds[i + 1]["fault_s"] - 0.1 if i + 1 < len(rounds) else float("inf")
        if r.get("term_after") is not None and r.get("term_before") is not None:
            term_steps.append(r["term_after"] - r["term_before"])
        if r.get("heal_to_commit_s") is not None:
            phases.setdefault("commit", []).append(r["heal_to_commit_s"])
        opens = sorted(ev["wall_ms"] / 1000 for n in nodes for ev in events[n]
                       if ev.get("event") == "controller-open" and t0 - 0.5 <= ev["wall_ms"] / 1000 < t1)
        actives = sorted(ev["wall_ms"] / 1000 for n in nodes for ev in events[n]
                         if ev.get("event") == "raft-leader" and t0 - 0.5 <= ev["wall_ms"] / 1000 < t1)
        if len(opens) >= 2 and actives:
            elections.append(actives[0] - opens[1])
        for n in nodes:
            seen: dict[str, float] = {}
            for ev in events[n]:
                t = ev.get("wall_ms", 0) / 1000
                if not t0 - 0.5 <= t < t1:
                    continue
                kind = ev.get("event")
                if kind == "start" and "start" not in seen:
                    seen["start"] = t
                elif kind == "controller-open" and "raft-open" not in seen:
                    seen["raft-open"] = t
                elif kind == "metadata-image" and ev.get("first") and "image" not in seen:
                    seen["image"] = t
                elif kind == "catch-up" and "folded" in ev:
                    folded.append(int(ev["folded"]))
            for t, line in logs[n]:
                if not t0 - 0.5 <= t < t1:
                    continue
                for name, marker in MILESTONES.items():
                    if name not in seen and marker in line:
                        seen[name] = t
            for name, t in seen.items():
                phases.setdefault(name, []).append(max(0.0, t - t0))
            # within this one restart, in the order they happened: a broker can register before
            # its first image is current, so ORDER is not always the order of the clock
            got = sorted(seen, key=lambda m: seen[m])
            for a, b in zip(got, got[1:], strict=False):
                steps.setdefault(b, []).append(seen[b] - seen[a])
                if ORDER.index(a) > ORDER.index(b):
                    reordered[b] += 1
    print(f"{len(rounds)} kill-all rounds, {len(nodes)} nodes; seconds after the heal (spawn)")
    print(f"{'milestone':<12} {'n':>4} {'p50':>7} {'max':>7}   per restart, after the milestone before it "
          "in time: p50 / max (restarts where it came earlier than listed)")
    for name in ORDER:
        xs = phases.get(name)
        if not xs:
            continue
        st = steps.get(name)
        step = f"{statistics.median(st):.2f} / {max(st):.2f}" if st else "-"
        if reordered[name]:
            step += f"  ({reordered[name]} earlier)"
        print(f"{name:<12} {len(xs):>4} {statistics.median(xs):7.2f} {max(xs):7.2f}   {step}")
    if folded:
        print(f"records folded per catch-up: p50 {statistics.median(folded):.0f}, max {max(folded)}")
    if elections:
        print(f"second Raft engine open -> active controller, per round: p50 "
              f"{statistics.median(elections):.2f}, min {min(elections):.2f}, max {max(elections):.2f}")
    if term_steps:
        steps = {s: term_steps.count(s) for s in sorted(set(term_steps))}
        print("term advance per round (advance: rounds):", steps)


if __name__ == "__main__":
    main(*sys.argv[1:3])
