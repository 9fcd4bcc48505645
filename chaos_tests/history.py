"""Operation histories: the record of what clients and the nemesis did and saw.

Theory of operation
-------------------
A chaos run is a set of *processes* (logical, single-threaded clients: a producer, a consumer,
the nemesis) that each perform one operation at a time.  Every operation is written twice:
an ``invoke`` event when it starts and one completion event when it ends:

* ``ok``   -- it definitely happened, with the value the client observed;
* ``fail`` -- it definitely did NOT happen (e.g. the broker answered with a non-retriable error
  before appending anything);
* ``info`` -- outcome unknown (timeout, connection lost).  A process whose op ends in ``info``
  should continue under a *new* process id (its client state is unknown), as Jepsen does.

One JSON object per line, in the order the writer saw the events::

    {"index": 17, "process": 3, "type": "invoke", "f": "send",
     "value": {...}, "node": 2, "time": 123456789}

``index``   0-based position in the history (assigned by the writer, dense).
``process`` int for clients, the string ``"nemesis"`` for faults.
``type``    ``invoke`` | ``ok`` | ``fail`` | ``info``.
``f``       the operation (below).
``node``    node id the client talked to, or null.  An invoke's is where the client meant
            to go (a send's: the leader it knew, null before its first metadata answer); a
            completion's is the node that answered, which ``complete`` takes from its
            ``node`` argument, else from the invoke (the queue workload's module docstring
            says where each op kind's comes from).
``time``    ``time.monotonic_ns()`` minus the run start, in ns.  The writer stores its start in
            ``HistoryWriter.start_mono_ns`` so node events stamped with ``mono_ns`` (system-wide
            CLOCK_MONOTONIC) can be placed on the same axis.

Values (``value``), per ``f``.  A topic-partition is written ``"topic/partition"`` where a
string key is needed.  Record values are JSON scalars (int or str) and **unique per topic over
the whole run**: the checkers identify a message by ``(topic, value)``; a workload never reuses
a value, not even to retry (a retry is a new op with a new value).

``send``
    invoke ``{"topic": str, "partition": int | None, "key": str | None, "value": V}``
    (``partition`` None = let the partitioner choose);
    ok     ``{"topic", "partition": int, "key", "value", "offset": int}``;
    fail / info: the invoke value, optionally plus ``"error": str``.
``poll``
    invoke ``{}`` (or anything);
    ok ``{"records": [[topic, partition, offset, value], ...], "positions": {"t/p": next}}``;
    records of one partition in the order returned; ``positions`` optional, informational;
    ``leaders`` (``{"t/p": node}``) optional, informational: who led each partition returned.
``final-read``
    same shapes as ``poll`` (invoke ``{"topic", "partition"}``); a catch-up read from the
    beginning to the end of a partition after everything was healed.
``commit``
    invoke/ok ``{"group": str, "offsets": {"t/p": next_offset_to_consume}}``.
``assign``
    ``{"partitions": ["t/p", ...], "positions": {"t/p": offset}?}``: the consumer's assignment
    was set or *changed* (the workload records one whenever the client reports a rebalance).
    Resets the poll expectations of that process; a given position is where the next poll of
    that partition must start.
``subscribe``
    ``{"topics": [str], "group": str}``: resets all poll expectations of the process.
``seek``
    ``{"positions": {"t/p": offset}}``: resets expectations of those partitions.
``create-topic`` ``{"topic", "partitions", "replication_factor"}``; ``delete-topic`` ``{"topic"}``.
``nemesis`` (process ``"nemesis"``)
    invoke ``{"action": "start", "fault": kind, "targets": [...], "id": n, ...params}`` then
    ok/info with the same value; later ``{"action": "stop", "id": n}`` (and ``{"action":
    "heal-all"}`` at the end).  The fault window of ``id`` is from the start completion to the
    stop invoke.

Reading tolerates a truncated last line (a crashed writer).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "COMPLETIONS",
    "INVOKE",
    "OK",
    "FAIL",
    "INFO",
    "NEMESIS",
    "Op",
    "HistoryWriter",
    "iter_history",
    "read_history",
    "from_dicts",
    "pair_ops",
    "completed",
    "tp_key",
    "parse_tp",
]

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"
COMPLETIONS = frozenset({OK, FAIL, INFO})
TYPES = frozenset({INVOKE, OK, FAIL, INFO})
NEMESIS = "nemesis"


def tp_key(topic: str, partition: int) -> str:
    """``"topic/partition"``, the string form of a topic-partition."""
    return f"{topic}/{partition}"


def parse_tp(key: str) -> tuple[str, int]:
    """Inverse of :func:`tp_key` (topic names may contain ``/``; the partition is last)."""
    topic, _, part = key.rpartition("/")
    return topic, int(part)


@dataclass(frozen=True, slots=True)
class Op:
    """One history event (an invocation or a completion)."""

    index: int
    process: int | str
    type: str
    f: str
    value: Any = None
    node: int | None = None
    time: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
            "node": self.node,
            "time": self.time,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Op:
        t = d["type"]
        if t not in TYPES:
            raise ValueError(f"bad op type {t!r} in {d!r}")
        return cls(
            index=int(d["index"]),
            process=d["process"],
            type=t,
            f=d["f"],
            value=d.get("value"),
            node=d.get("node"),
            time=int(d.get("time", 0)),
        )


class HistoryWriter:
    """Appends events as JSON lines; safe from threads and trio tasks alike.

    A ``threading.Lock`` guards the index counter and the buffer (never held across an
    ``await``, so trio tasks may call it directly).  Lines are buffered up to ``buffer_lines``
    and then written and flushed; :meth:`flush` / :meth:`close` force it (``fsync=True`` also
    fsyncs).  Use as a context manager.
    """

    def __init__(self, path: str | os.PathLike[str], *, buffer_lines: int = 256,
                 start_mono_ns: int | None = None) -> None:
        if buffer_lines < 1:
            raise ValueError("buffer_lines must be >= 1")
        self.path = Path(path)
        self.start_mono_ns = time.monotonic_ns() if start_mono_ns is None else start_mono_ns
        self._buffer_lines = buffer_lines
        self._lock = threading.Lock()
        self._buf: list[str] = []
        self._next_index = 0
        self._file: TextIO | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now_ns(self) -> int:
        return time.monotonic_ns() - self.start_mono_ns

    def append(self, process: int | str, type: str, f: str, value: Any = None,
               node: int | None = None, time_ns: int | None = None) -> Op:
        """Record one event and return it (with its index)."""
        if type not in TYPES:
            raise ValueError(f"bad op type {type!r}")
        with self._lock:
            if self._file is None:
                raise RuntimeError("history writer is closed")
            op = Op(self._next_index, process, type, f, value, node,
                    self.now_ns() if time_ns is None else time_ns)
            self._next_index += 1
            self._buf.append(json.dumps(op.to_dict(), separators=(",", ":")))
            if len(self._buf) >= self._buffer_lines:
                self._flush_locked(fsync=False)
        return op

    def invoke(self, process: int | str, f: str, value: Any = None,
               node: int | None = None) -> Op:
        return self.append(process, INVOKE, f, value, node)

    def complete(self, invocation: Op, type: str, value: Any = None,
                 node: int | None = None) -> Op:
        """Record the completion (ok/fail/info) of ``invocation``."""
        if type not in COMPLETIONS:
            raise ValueError(f"{type!r} is not a completion type")
        return self.append(invocation.process, type, invocation.f,
                           invocation.value if value is None else value,
                           invocation.node if node is None else node)

    def ok(self, invocation: Op, value: Any = None, node: int | None = None) -> Op:
        return self.complete(invocation, OK, value, node)

    def fail(self, invocation: Op, value: Any = None, node: int | None = None) -> Op:
        return self.complete(invocation, FAIL, value, node)

    def info(self, invocation: Op, value: Any = None, node: int | None = None) -> Op:
        return self.complete(invocation, INFO, value, node)

    def _flush_locked(self, *, fsync: bool) -> None:
        assert self._file is not None
        if self._buf:
            self._file.write("\n".join(self._buf) + "\n")
            self._buf.clear()
        self._file.flush()
        if fsync:
            os.fsync(self._file.fileno())

    def flush(self, *, fsync: bool = False) -> None:
        with self._lock:
            if self._file is not None:
                self._flush_locked(fsync=fsync)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._flush_locked(fsync=True)
                self._file.close()
                self._file = None

    def statistics(self) -> dict[str, int]:
        with self._lock:
            return {"events": self._next_index, "buffered": len(self._buf)}


def iter_history(path: str | os.PathLike[str]) -> Iterator[Op]:
    """Stream the events of a history file; a truncated (unparseable) last line is skipped."""
    with open(path, encoding="utf-8") as fh:
        pending: str | None = None
        for line in fh:
            if pending is not None:
                yield Op.from_dict(json.loads(pending))
            pending = line if line.strip() else None
        if pending is not None:
            try:
                d = json.loads(pending)
            except json.JSONDecodeError:
                return
            yield Op.from_dict(d)


def read_history(path: str | os.PathLike[str]) -> list[Op]:
    return list(iter_history(path))


def from_dicts(events: Iterable[Mapping[str, Any] | Op]) -> list[Op]:
    """Normalise a list of dicts (or Ops) to Ops; missing indexes are filled in order."""
    out: list[Op] = []
    for i, e in enumerate(events):
        if isinstance(e, Op):
            out.append(e)
        else:
            d = dict(e)
            d.setdefault("index", i)
            out.append(Op.from_dict(d))
    return out


def pair_ops(history: Iterable[Op]) -> dict[int, int]:
    """Map each invoke's index to the index of its completion.

    A process has at most one op in flight, so its next completion event completes its
    pending invoke.  Invokes that never completed are absent from the map.
    """
    pending: dict[int | str, int] = {}
    pairs: dict[int, int] = {}
    for op in history:
        if op.type == INVOKE:
            pending[op.process] = op.index
        else:
            inv = pending.pop(op.process, None)
            if inv is not None:
                pairs[inv] = op.index
    return pairs


def completed(history: list[Op]) -> Iterator[tuple[Op, Op | None]]:
    """Yield ``(invoke, completion or None)`` for every invocation, in invocation order.

    """
    pairs = pair_ops(history)
    aligned = all(op.index == i for i, op in enumerate(history))
    by_index: Mapping[int, Op] | list[Op] = (
        history if aligned else {op.index: op for op in history})
    for op in history:
        if op.type == INVOKE:
            c = pairs.get(op.index)
            yield op, (by_index[c] if c is not None else None)
