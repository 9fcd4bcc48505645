"""Structured node events for the chaos checker: one JSON object per line in
``DATA_DIR/events.jsonl``.

Theory of operation: the broker reports facts the checker verifies from outside — a high
watermark moved, a log was truncated, leadership changed — as small JSON lines, appended and
flushed at once (no fsync: a lost tail after a machine crash only hides evidence, it cannot
invent any). The format is the one ``chaos_tests/node_events.py`` reads; every line has
``event``, ``node``, ``mono_ns`` (CLOCK_MONOTONIC, comparable with the harness) and ``wall_ms``:

    {"event": "start", "node": 1}
    {"event": "raft-leader", "node": 1, "epoch": 5}   (kraft/service.py: this node became the
     active controller for Raft epoch 5, i.e. its LeaderChange record for 5 was applied)
    {"event": "hw", "node": 1, "tp": "t/0", "leader_epoch": 3, "hw": 10}
    {"event": "truncate", "node": 1, "tp": "t/0", "to": 7, "from": 9, "leader_epoch": 4,
     "reason": "diverging-epoch" | "recovery"}
    {"event": "partition", "node": 1, "tp": "t/0", "leader": 2, "leader_epoch": 3,
     "partition_epoch": 7, "replicas": [1, 2, 3], "isr": [1, 2]}
    {"event": "delete-partition", "node": 1, "tp": "t/0"}

``EventLog(None)`` discards everything (tests that do not care).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

__all__ = ["EventLog", "tp_name"]


def tp_name(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


class EventLog:
    """Appends event lines to ``path`` (line-buffered); ``emit`` never raises."""

    def __init__(self, path: Path | None, node_id: int) -> None:
        self.node_id = node_id
        self.path = path
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def emit(self, event: str, **fields: Any) -> None:
        if self._file is None:
            return
        line = {"event": event, "node": self.node_id, **fields,
                "mono_ns": time.monotonic_ns(), "wall_ms": int(time.time() * 1000)}
        try:
            self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        except (OSError, ValueError):
            pass  # evidence only; never take the broker down for it

    def hw(self, topic: str, partition: int, hw: int, leader_epoch: int) -> None:
        self.emit("hw", tp=tp_name(topic, partition), leader_epoch=leader_epoch, hw=hw)

    def truncate(self, topic: str, partition: int, to: int, from_offset: int,
                 leader_epoch: int, reason: str) -> None:
        self.emit("truncate", tp=tp_name(topic, partition), to=to, leader_epoch=leader_epoch,
                  reason=reason, **{"from": from_offset})

    def partition(self, topic: str, partition: int, leader: int, leader_epoch: int,
                  partition_epoch: int, replicas: list[int], isr: list[int]) -> None:
        self.emit("partition", tp=tp_name(topic, partition), leader=leader,
                  leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                  replicas=list(replicas), isr=list(isr))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
