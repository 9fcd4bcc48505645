"""``DATA_DIR/events.jsonl`` (broker/events.py): high-watermark lines only when asked for, and
a file bounded by ``events.max.bytes`` through rotation (a real node: tests/integration/test_events_file.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rafka.broker.config import parse_config
from rafka.broker.events import EventLog, event_files

from tests.broker.test_config import BASE


def _lines(paths: list[Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for p in paths for line in p.read_text().splitlines()]


def test_hw_lines_only_when_enabled(tmp_path: Path) -> None:
    off = EventLog(tmp_path / "off.jsonl", 1, hw=False)
    on = EventLog(tmp_path / "on.jsonl", 1)
    for ev in (off, on):
        ev.hw("t", 0, 5, 2)
        ev.truncate("t", 0, 3, 5, 2, "recovery")
        ev.close()
    assert [e["event"] for e in _lines([tmp_path / "off.jsonl"])] == ["truncate"]
    assert [e["event"] for e in _lines([tmp_path / "on.jsonl"])] == ["hw", "truncate"]


def test_rotation_bounds_the_file_and_keeps_the_newest_lines_whole(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    ev = EventLog(path, 7, max_bytes=4096)
    for i in range(1000):  # ~80 bytes a line: several rotations
        ev.hw("topic", 0, i, 1)
    ev.close()
    files = event_files(path)
    assert files == [path.with_name("events.jsonl.1"), path]
    assert all(p.stat().st_size <= 4096 for p in files)
    hws = [e["hw"] for e in _lines(files)]  # every line parses: none was cut
    assert hws == list(range(hws[0], 1000)) and hws[0] > 0  # the newest, in order, no gap

    # reopened (a restart): the size so far counts, so the limit holds across restarts
    before = path.stat().st_size
    ev = EventLog(path, 7, max_bytes=4096)
    ev.emit("start", pad="x" * (4096 - before))  # would cross the limit: rotates first
    ev.close()
    assert [e["event"] for e in _lines([path])] == ["start"]
    assert _lines([path.with_name("events.jsonl.1")])[-1]["hw"] == 999


def test_settings_default_off_and_parse() -> None:
    cfg = parse_config(BASE, "t.toml")
    assert cfg.broker["events.hw.enable"] is False
    assert cfg.broker["events.max.bytes"] == 64 * 1024 * 1024
    cfg = parse_config({**BASE, "broker": {"events.hw.enable": True, "events.max.bytes": 8192}},
                       "t.toml")
    assert cfg.broker["events.hw.enable"] is True and cfg.broker["events.max.bytes"] == 8192
