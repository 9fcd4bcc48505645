"""``rafka chaos table``: the gate's verdict table from results folders (seed_table.py)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from rafka.chaos_tests.cli import chaos


def results(folder: Path, seed: int, valid: bool, anomalies: int = 0) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "valid": valid, "seed": seed,
        "checkers": {"lost-write": {"valid": valid, "stats": {"anomalies": anomalies}},
                     "duplicate": {"valid": True, "anomalies": []}},
        "counts": {"send": {"ok": 10, "fail": 2, "info": 1}},
        "notes": {"schedule": [{}, {}, {}], "nemesis_errors": []}}))
    return folder


def test_table_rows_and_exit_status(tmp_path: Path) -> None:
    a = results(tmp_path / "seed1", 1, True)
    b = results(tmp_path / "seed2", 2, False, anomalies=3)
    run = CliRunner().invoke(chaos, ["table", f"{a}:0", str(b), f"{tmp_path / 'seed3'}:2",
                                     "--title", "t", "--append", str(tmp_path / "t.md")])
    assert run.exit_code == 2, run.output  # a seed that did not run outranks an invalid one
    lines = run.output.splitlines()
    assert "| 1 | VALID | 0 | 3 (0) | 10/2/1 |" in lines
    assert "| 2 | INVALID | lost-write 3 | 3 (0) | 10/2/1 |" in lines
    assert "| seed3 | NOT RUN (exit 2) |  |  |  |" in lines
    assert "1 of 3 valid." in lines
    assert (tmp_path / "t.md").read_text().strip().endswith("1 of 3 valid.")
    assert CliRunner().invoke(chaos, ["table", str(a)]).exit_code == 0
    assert CliRunner().invoke(chaos, ["table", str(a), str(b)]).exit_code == 1
