"""``rafka group reset-offsets`` as ``kafka-consumer-groups --reset-offsets`` plans it (issue 25).

Theory of operation
-------------------
A reset is computed before anything changes, as a *plan*: per partition the committed offset
now (``old``, None when the group has none) and the offset it would get (``new``). The CLI prints
the plan as a table ``old → new``, and changes the group only with ``--execute`` (a dry run is
the default, as Kafka's tool). This module is the pure part, tested without a broker:

* ``parse_topic_selection`` reads ``--topic t`` (every partition) and ``--topic t:0,1`` (those);
* ``parse_duration`` reads ``--by-duration`` (ISO-8601 ``PnDTnHnMnS``, e.g. ``PT1H30M``, as
  Kafka's tool; also a plain number of seconds) and ``parse_datetime`` ``--to-datetime``
  (ISO-8601; no zone means local time);
* ``read_plan_file`` reads ``--from-file`` (Kafka's CSV: ``topic,partition,offset`` per line,
  which is also what ``--export`` writes);
* ``Strategy`` is the chosen rule; ``Strategy.target(old, start, end, found)`` gives one
  partition's new offset from its committed offset, log start, log end and (for a time) the
  offset found for it; ``plan`` applies it and clamps every result into ``[start, end]``,
  noting each clamp, so no strategy can leave a group pointing outside a log.

The I/O (list offsets, fetch committed offsets, refuse a group with live members, alter the
offsets) is ``client/cli/group.py``'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from rafka.client.types import TopicPartition

__all__ = ["PlanRow", "Strategy", "parse_datetime", "parse_duration", "parse_topic_selection",
           "plan", "read_plan_file", "format_plan"]

Kind = Literal["earliest", "latest", "current", "offset", "shift", "time", "file"]


@dataclass(frozen=True, slots=True)
class Strategy:
    """One reset rule: ``value`` is the offset (``offset``), the shift (``shift``), the time in
    ms (``time``); unused otherwise. ``file`` takes each partition's offset from the file."""

    kind: Kind
    value: int = 0

    def target(self, old: int | None, start: int, end: int, found: int | None = None) -> int:
        """The new offset of one partition, before clamping."""
        if self.kind == "earliest":
            return start
        if self.kind == "latest":
            return end
        if self.kind == "current":  # no committed offset: where a new member would start (end)
            return end if old is None else old
        if self.kind == "offset":
            return self.value
        if self.kind == "shift":
            return (end if old is None else old) + self.value
        if self.kind == "time":  # no record at/after the time: the end
            return end if found is None or found < 0 else found
        raise ValueError(f"strategy {self.kind} takes its offsets from the file")


@dataclass(frozen=True, slots=True)
class PlanRow:
    tp: TopicPartition
    old: int | None
    new: int


def plan(strategy: Strategy, tps: Iterable[TopicPartition], old: Mapping[TopicPartition, int | None],
         starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int],
         found: Mapping[TopicPartition, int] | None = None,
         from_file: Mapping[TopicPartition, int] | None = None) -> tuple[list[PlanRow], list[str]]:
    """Rows (sorted) and notes: one per new offset clamped into its partition's log."""
    rows, notes = [], []
    for tp in sorted(set(tps)):
        start, end = starts[tp], ends[tp]
        if strategy.kind == "file":
            want = (from_file or {})[tp]
        else:
            want = strategy.target(old.get(tp), start, end, (found or {}).get(tp))
        new = min(max(want, start), end)
        if want > end:
            notes.append(f"offset {want} is past the log end {end} of {tp.topic}-{tp.partition}: reset to {end}")
        elif want < start:
            notes.append(f"offset {want} is before the log start {start} of {tp.topic}-{tp.partition}: "
                         f"reset to {start}")
        rows.append(PlanRow(tp, old.get(tp), new))
    return rows, notes


def parse_topic_selection(spec: str) -> tuple[str, list[int] | None]:
    """``t`` → (t, None: every partition); ``t:0,1`` → (t, [0, 1])."""
    topic, sep, parts = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not sep:
        return spec, None
    try:
        chosen = sorted({int(p) for p in parts.split(",") if p.strip() != ""})
    except ValueError:
        raise ValueError(f"--topic {spec!r}: partitions are numbers, as in t:0,1") from None
    if not topic or not chosen or min(chosen) < 0:
        raise ValueError(f"--topic {spec!r}: expected TOPIC or TOPIC:P[,P...]")
    return topic, chosen


_DURATION = re.compile(r"^-?P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?"
                       r"(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_duration(text: str) -> timedelta:
    """``PT1H``, ``P1DT2H30M``, ``PT90S`` (Kafka's ``--by-duration``), or plain seconds."""
    s = text.strip()
    try:
        return timedelta(seconds=float(s))
    except ValueError:
        pass
    m = _DURATION.match(s)
    if not m or not any(m.groups()):
        raise ValueError(f"--by-duration {text!r}: expected an ISO-8601 duration such as PT1H or P1DT30M")
    d, h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
    return timedelta(days=d, hours=h, minutes=mi, seconds=sec)


def parse_datetime(text: str) -> int:
    """``--to-datetime`` (ISO-8601, e.g. ``2026-11-21T12:00:00``, ``...Z``, ``...+01:00``;
    no zone: local time, as Kafka's tool) → ms since the epoch."""
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"--to-datetime {text!r}: expected ISO-8601, e.g. 2026-11-21T12:00:00") from None
    return int(when.timestamp() * 1000)  # naive: local time, as Kafka's tool


def read_plan_file(text: str, source: str = "--from-file") -> dict[TopicPartition, int]:
    """Kafka's reset CSV: ``topic,partition,offset`` per line (blank lines and ``#`` skipped;
    a 4-column line with the group first, as some tools write, is accepted too)."""
    out: dict[TopicPartition, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 4:
            cols = cols[1:]
        try:
            topic, part, off = cols
            out[TopicPartition(topic, int(part))] = int(off)
        except ValueError:
            raise ValueError(f"{source} line {n}: expected topic,partition,offset, got {line!r}") from None
    return out


def format_plan(group_id: str, rows: list[PlanRow]) -> list[str]:
    """The table Kafka's tool prints, with the old offset too."""
    out = [f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'OLD-OFFSET':>11}    {'NEW-OFFSET':>10}"]
    for r in rows:
        old = "-" if r.old is None else str(r.old)
        out.append(f"{group_id:<20} {r.tp.topic:<20} {r.tp.partition:>9} {old:>11} -> {r.new:>10}")
    return out
