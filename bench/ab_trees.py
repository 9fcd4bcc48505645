"""A/B of whole ``make bench`` modules between two checkouts, interleaved (ABBA) in one window.

``python bench/ab_trees.py BASE_DIR [--only NAME ...] [--rounds N]`` (from the project root;
BASE_DIR another checkout with its own ``make install``, e.g. ``git worktree add /tmp/base
<commit> && make -C /tmp/base install``). Each round runs ``python -m bench --only NAME --runs
1`` once per tree, in ABBA order across rounds (base, new, new, base, …), each tree with its own
``.venv`` python and its own code, and reads the figures it wrote to that tree's
``bench/results/latest.json``. Prints, per figure, the median over rounds for each tree, the
ratio new / base, and the median of the per-round ratios (each round's pair runs back to back,
so it shares that moment's load); the load average is printed beside each run because the
machine is shared.

For a restructure that must not change speed (issue 22) this is the check: every figure's
ratio within the spread of its own base runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

NEW = Path(__file__).resolve().parent.parent


def _run(tree: Path, only: list[str]) -> dict[str, float]:
    args = [str(tree / ".venv" / "bin" / "python"), "-m", "bench", "--runs", "1"]
    for name in only:
        args += ["--only", name]
    subprocess.run(args, cwd=tree, check=False, stdout=subprocess.DEVNULL)
    doc = json.loads((tree / "bench" / "results" / "latest.json").read_text())
    return {k: float(v["median"]) for k, v in doc["metrics"].items() if "median" in v}


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/ab_trees.py")
    ap.add_argument("base", type=Path)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args(argv)
    trees = {"base": a.base.resolve(), "new": NEW}
    got: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    for r in range(a.rounds):
        order = ("base", "new") if r % 2 == 0 else ("new", "base")
        for side in order:
            load = _load()
            got[side].append(_run(trees[side], a.only))
            print(f"round {r} {side:4} load {load} -> {_load()}", flush=True)
    names = sorted(set().union(*got["base"], *got["new"]))
    print(f"\n{'figure':58} {'base':>12} {'new':>12} {'new/base':>9} {'pairs':>7}")
    for n in names:
        b = [x[n] for x in got["base"] if n in x]
        w = [x[n] for x in got["new"] if n in x]
        if not b or not w:
            continue
        pairs = [y / x for x, y in zip(b, w, strict=False) if x]
        mb, mw = statistics.median(b), statistics.median(w)
        ratio = mw / mb if mb else float("nan")
        pm = statistics.median(pairs) if pairs else float("nan")
        print(f"{n:58} {mb:12.4g} {mw:12.4g} {ratio:9.2f} {pm:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
