"""The verdict table of several campaign runs (``rafka chaos table DIR...``).

Theory of operation
-------------------
Every campaign writes ``results.json`` into its results folder (``campaign.py``): verdict,
per-checker results, the fault schedule, nemesis errors and op counts. A gate is several seeds
(issue 28: ten docker and ten netns seeds must all be valid), so both ``make chaos`` and
``make chaos-docker`` run seeds in turn and then print one Markdown table from those files —
the one in docs/chaos-results.md. A folder without a readable ``results.json`` is a seed that
did not run: it gets a ``NOT RUN`` row (with the exit status when the caller passes
``DIR:EXIT``) and makes the table's verdict false.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SeedRow", "read_row", "render_table", "all_valid"]


@dataclass(frozen=True)
class SeedRow:
    folder: Path
    seed: str
    valid: bool | None  # None: did not run
    anomalies: str
    faults: str
    sends: str
    note: str = ""


def _parse_arg(arg: str) -> tuple[Path, str]:
    head, sep, tail = arg.rpartition(":")
    if sep and tail.isdigit():
        return Path(head), tail
    return Path(arg), ""


def read_row(arg: str) -> SeedRow:
    """One table row from ``DIR`` or ``DIR:EXIT`` (the campaign's exit status)."""
    folder, rc = _parse_arg(arg)
    try:
        r: dict[str, Any] = json.loads((folder / "results.json").read_text())
    except (OSError, ValueError):
        return SeedRow(folder, folder.name, None, "", "", "", f"exit {rc}" if rc else "no results")
    counts = {k: c.get("stats", {}).get("anomalies", len(c.get("anomalies") or []))
              for k, c in r.get("checkers", {}).items()}
    notes = r.get("notes", {})
    sends = r.get("counts", {}).get("send", {})
    return SeedRow(
        folder, str(r.get("seed", folder.name)), bool(r.get("valid")),
        ", ".join(f"{k} {n}" for k, n in counts.items() if n) or "0",
        f"{len(notes.get('schedule') or [])} ({len(notes.get('nemesis_errors') or [])})",
        f"{sends.get('ok', 0)}/{sends.get('fail', 0)}/{sends.get('info', 0)}")


def render_table(rows: Sequence[SeedRow], title: str) -> str:
    lines = [f"### {title} ({time.strftime('%Y-%m-%d %H:%M')})", "",
             "| seed | verdict | anomalies | faults (not applied) | sends ok/fail/info |",
             "| ---: | --- | --- | --- | --- |"]
    for row in rows:
        verdict = ("NOT RUN (" + row.note + ")" if row.valid is None
                   else "VALID" if row.valid else "INVALID")
        lines.append(f"| {row.seed} | {verdict} | {row.anomalies} | {row.faults} | {row.sends} |")
    ok = sum(1 for r in rows if r.valid)
    lines += ["", f"{ok} of {len(rows)} valid."]
    return "\n".join(lines) + "\n"


def all_valid(rows: Iterable[SeedRow]) -> bool:
    return all(r.valid for r in rows)
