"""The report writes a readable summary, valid JSON and a real PNG."""

from __future__ import annotations

import json

from rafka.chaos_tests.checkers import check_all
from rafka.chaos_tests.history import from_dicts
from rafka.chaos_tests.report import fault_windows, write_report
from rafka.chaos_tests.tests.histgen import Builder


def _history() -> list[dict]:
    b = Builder()
    b.send(1, 0, "a", 0)
    b.op("nemesis", "nemesis", {"action": "start", "id": 0, "fault": "partition-halves",
                                "targets": [1, 2, 3]})
    b.send(1, 0, "b", type="info")
    b.send(2, 1, "c", 0)
    b.send(2, 1, "d", type="fail")
    b.poll(10, [(0, 1, "zzz")])
    b.op("nemesis", "nemesis", {"action": "stop", "id": 0, "fault": "partition-halves"})
    b.event(3, "invoke", "send", {"topic": "t", "partition": 0, "key": None, "value": "e"})
    b.send(1, 0, "f", 2)
    b.final(0, [(0, "a"), (1, "zzz")])
    b.final(1, [(0, "c")])
    return b.ops


def test_report_files(tmp_path):
    ops = _history()
    summary = check_all(ops)
    assert not summary.valid  # f acked at offset 2 was never read: unseen
    paths = write_report(tmp_path, ops, summary, seed=7)
    png = paths["timeline"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    results = json.loads(paths["results"].read_text())
    assert results["valid"] is False and results["seed"] == 7
    assert results["counts"]["send"] == {"ok": 3, "info": 1, "fail": 1}
    assert results["checkers"]["unseen"]["valid"] is False
    text = paths["summary"].read_text()
    assert "INVALID" in text and "unseen" in text and '"value":"f"' in text.replace(" ", "")


def test_fault_windows():
    w = fault_windows(from_dicts(_history()))
    assert len(w) == 1 and w[0][2] == "partition-halves" and w[0][0] < w[0][1]


def test_empty_history_plots(tmp_path):
    paths = write_report(tmp_path, [], check_all([]))
    assert paths["timeline"].read_bytes()[:4] == b"\x89PNG"
