"""Benchmark runner: ``python -m bench [--only NAME] [--runs N]``.

Theory of operation: every ``bench/bench_<name>.py`` module exposes ``run(runs: int) -> dict``
mapping a metric name to ``{"median": float, "unit": str, "runs": [floats...]}`` and, for
comparisons measured side by side in the same run, ``{"ratio_of": "<other metric>"}`` entries
are computed here. Figures are medians of ``runs`` repetitions; machines are noisy, so ratios
taken in one run matter more than absolute numbers. The table is printed and the same figures
are written to ``bench/results/latest.json`` (metric → median, unit, runs, ratios) so they can
be tracked over time. A figure that carries ``path_counts`` is also divided by its path floor
(``bench.bench_floor.path_floor_us``: its messages and fsyncs at this run's floor prices).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench.bench_floor import path_floor_us

RESULTS = Path(__file__).parent / "results"


def _modules(only: list[str] | None) -> list[str]:
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))
    if only:
        names = [n for n in names if any(o in n for o in only)]
    return names


def _fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:,.2f}"
    return f"{v:.4f}"


def _loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench")
    ap.add_argument("--only", action="append", help="run only bench modules whose name contains this")
    ap.add_argument("--runs", type=int, default=3, help="repetitions per figure (medians are reported)")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {}
    failures: dict[str, str] = {}
    for name in _modules(args.only):
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        load_before = _loadavg()
        try:
            mod = importlib.import_module(f"bench.{name}")
            got = mod.run(args.runs)
        except Exception:
            failures[name] = traceback.format_exc()
            print(failures[name], file=sys.stderr)
            continue
        load = (load_before, _loadavg())
        for metric, fig in got.items():
            if "median" not in fig and fig.get("runs"):
                fig["median"] = statistics.median(fig["runs"])
            fig.setdefault("loadavg_1min_before_after", load)  # the machine is shared: context
            results[f"{name[6:]}.{metric}"] = fig
        print(f"   ({time.monotonic() - t0:.0f} s; load average {load[0]:.2f} -> {load[1]:.2f})", flush=True)
    # ratios: a figure may name the figure it is compared with (same module)
    for key, fig in results.items():
        other = fig.get("ratio_of")
        if other:
            mod = key.split(".", 1)[0]
            base = results.get(f"{mod}.{other}") or results.get(other)
            if base and base.get("median"):
                fig["ratio"] = fig["median"] / base["median"]
    # issue 26: every CPU-per-operation figure also as a multiple of the same run's echo floor
    floor = results.get("floor.echo_cpu_us_per_message", {}).get("median")
    if floor:
        for key, fig in results.items():
            if "cpu_us" in key and not key.startswith("floor.") and fig.get("median") is not None:
                fig["x_echo_floor"] = fig["median"] / floor
    # ...and of its own path floor: its messages and fsyncs at this run's floor prices
    prices = {k[len("floor."):]: f.get("median") for k, f in results.items() if k.startswith("floor.")}
    for fig in results.values():
        counts = fig.get("path_counts")
        if counts and fig.get("median") is not None:
            path_floor = path_floor_us(counts, prices)
            if path_floor:
                fig["path_floor_us"] = path_floor
                fig["x_path_floor"] = fig["median"] * counts.get("unit_us", 1.0) / path_floor
                if floor:
                    fig["path_floor_x_echo_floor"] = path_floor / floor
    # a pair of figures may compare their path floors (the ratio left if brokers cost nothing)
    for key, fig in results.items():
        name = fig.get("path_floor_ratio_of")
        other = results.get(f"{key.split('.', 1)[0]}.{name}") if name else None
        if other and fig.get("path_floor_us") and other.get("path_floor_us"):
            fig["path_floor_ratio"] = fig["path_floor_us"] / other["path_floor_us"]
    print()
    print(f"{'metric':58} {'median':>14} {'unit':<10} {'ratio':>8}  vs")
    for key, fig in results.items():
        ratio = f"{fig['ratio']:.2f}x" if "ratio" in fig else ""
        vs = fig.get("ratio_of", "")
        if "x_echo_floor" in fig:
            vs = f"{vs}  [{fig['x_echo_floor']:.1f}x echo floor]".strip()
        if "x_path_floor" in fig:
            vs = (f"{vs}  [{fig['x_path_floor']:.1f}x its path floor of {fig['path_floor_us']:.0f} µs"
                  f" = {fig.get('path_floor_x_echo_floor', 0):.1f}x echo]")
        if "path_floor_ratio" in fig:
            vs = f"{vs}  [path floor {fig['path_floor_ratio']:.2f}x {fig['path_floor_ratio_of']}'s]"
        print(f"{key:58} {_fmt(fig['median']):>14} {fig.get('unit',''):<10} {ratio:>8}  {vs}")
    RESULTS.mkdir(exist_ok=True)
    doc = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "runs": args.runs,
        "metrics": results,
        "failures": {k: v.splitlines()[-1] for k, v in failures.items()},
    }
    (RESULTS / "latest.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
    print(f"\nwrote {RESULTS / 'latest.json'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
