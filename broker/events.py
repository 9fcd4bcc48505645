"""Structured node events for the chaos checker: one JSON object per line in
``DATA_DIR/events.jsonl``.

Theory of operation: the broker reports facts the checker verifies from outside — a high
watermark moved, a log was truncated, leadership changed — as small JSON lines, each appended
with one ``os.write`` on an ``O_APPEND`` descriptor (no fsync: a lost tail after a machine
crash only hides evidence, it cannot invent any). Best effort: a line that cannot be written
(disk full, EIO) is dropped whole — a short write is cut back off the file, so the file never
holds a partial line — and counted in ``dropped``; ``emit`` never raises. The format is the one ``chaos_tests/node_events.py`` reads; every line has
``event``, ``node``, ``mono_ns`` (CLOCK_MONOTONIC, comparable with the harness) and ``wall_ms``:

    {"event": "start", "node": 1}
    {"event": "raft-leader", "node": 1, "epoch": 5}   (kraft/service.py: this node became the
     active controller for Raft epoch 5, i.e. its LeaderChange record for 5 was applied)
    {"event": "hw", "node": 1, "tp": "t/0", "leader_epoch": 3, "hw": 10, "isr": [1, 3]}
     ("isr" only from a leader: its maximal ISR when the HW moved — the replicas that hold
     every record below it, which ``acks=all`` counted; issue 28)
    {"event": "isr", "node": 1, "tp": "t/0", "leader_epoch": 3, "partition_epoch": 8,
     "isr": [1, 3]}   (the leader adopted this committed ISR — from the controller's
     AlterPartition answer, usually before any node's metadata image shows it)
    {"event": "truncate", "node": 1, "tp": "t/0", "to": 7, "from": 9, "leader_epoch": 4,
     "reason": "diverging-epoch" | "recovery"}
    {"event": "partition", "node": 1, "tp": "t/0", "leader": 2, "leader_epoch": 3,
     "partition_epoch": 7, "replicas": [1, 2, 3], "isr": [1, 2]}
    {"event": "delete-partition", "node": 1, "tp": "t/0"}
    {"event": "stray-partition", "node": 1, "tp": "t/0", "topic_id": "...", "created_at": 40,
     "image": 812, "verdict": "stray"}   (a directory of a topic deleted or moved away while
                                          this broker was down, removed: broker/partition_dirs.py)
    {"event": "metadata-image", "node": 1, "offset": 812, "local_changes": 200, "first": true}
     (broker/metadata_listener.py: this image became current — the first one after a start,
     and any that changed a local partition's role)

``EventLog(None)`` discards everything (tests that do not care).

Volume. ``hw`` lines come with every high-watermark move of every partition — on a loaded
broker thousands per second, each a ``json.dumps`` and a ``write`` on the request path (~6 %
of the brokers' CPU per single-record acks=all produce, measured) and an ever-growing file.
They are evidence for the chaos checker, not something an operator reads, so a node writes them
only with the broker setting ``events.hw.enable = true`` (the chaos harness sets it); the other
events are rare (a start, a role change, a truncation). ``events.max.bytes`` bounds the file
either way: a line that would take it past the limit first renames it to ``events.jsonl.1``
(replacing the previous one) and starts a new file, so the events take at most twice the limit
on disk; :func:`event_files` lists a data dir's files oldest first for readers.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["EventLog", "tp_name", "event_files", "DEFAULT_MAX_BYTES"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024

log = logging.getLogger("rafka.events")


def tp_name(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def event_files(path: Path) -> list[Path]:
    """``path`` (``DATA_DIR/events.jsonl``) and its rotated predecessor, oldest first, those
    that exist."""
    return [p for p in (path.with_name(path.name + ".1"), path) if p.exists()]


class EventLog:
    """Appends event lines to ``path``, whole lines or nothing; ``emit`` never raises."""

    def __init__(self, path: Path | None, node_id: int, *, hw: bool = True,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.node_id = node_id
        self.path = path
        self.hw_enabled = hw  # write a line per high-watermark move (see the module docstring)
        self.max_bytes = max_bytes
        self._fd = -1
        self._size = 0
        self.dropped = 0  # lines not written (disk full...)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._open()

    def _open(self) -> None:
        assert self.path is not None
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size

    def _rotate(self) -> None:
        """``events.jsonl`` → ``events.jsonl.1``, and a new empty file; on failure the old file
        stays open and in use (best effort, as every write here)."""
        assert self.path is not None
        try:
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        except OSError as exc:
            log.warning("%s: cannot rotate (%s); appending past events.max.bytes", self.path, exc)
            self._size = 0  # do not retry on every line; next attempt after another max_bytes
            return
        os.close(self._fd)
        try:
            self._open()
        except OSError as exc:
            self._fd = -1
            log.warning("%s: cannot reopen after rotating (%s); events stop", self.path, exc)

    def emit(self, event: str, **fields: Any) -> None:
        if self._fd < 0:
            return
        line = {"event": event, "node": self.node_id, **fields,
                "mono_ns": time.monotonic_ns(), "wall_ms": int(time.time() * 1000)}
        try:
            data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        except (TypeError, ValueError):
            self._drop(event, "not JSON-serialisable")
            return
        if self._size + len(data) > self.max_bytes and self._size > 0:
            self._rotate()
            if self._fd < 0:
                return
        try:
            n = os.write(self._fd, data)
        except OSError as exc:
            self._drop(event, exc)
            return
        if n < len(data):  # a short write (the disk just filled up): no partial line stays
            try:
                os.ftruncate(self._fd, os.fstat(self._fd).st_size - n)
            except OSError:
                pass
            self._drop(event, "short write")
            return
        self._size += n

    def _drop(self, event: str, why: object) -> None:
        """Evidence only; never take the broker down for it (first drop of a run logged)."""
        if self.dropped == 0:
            log.warning("%s: event %r not written (%s); events are best effort",
                        self.path, event, why)
        self.dropped += 1

    def hw(self, topic: str, partition: int, hw: int, leader_epoch: int,
           isr: tuple[int, ...] | None = None) -> None:
        if not self.hw_enabled:
            return
        if isr is None:
            self.emit("hw", tp=tp_name(topic, partition), leader_epoch=leader_epoch, hw=hw)
        else:
            self.emit("hw", tp=tp_name(topic, partition), leader_epoch=leader_epoch, hw=hw,
                      isr=list(isr))

    def isr(self, topic: str, partition: int, leader_epoch: int, partition_epoch: int,
            isr: tuple[int, ...]) -> None:
        self.emit("isr", tp=tp_name(topic, partition), leader_epoch=leader_epoch,
                  partition_epoch=partition_epoch, isr=list(isr))

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
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
