"""Offset arithmetic of the Spark source (pure: no Spark, no sockets).

Theory of operation
-------------------
A source offset is the JSON object ``{"topic": {"partition": next_offset}}``: for every
partition, the offset of the next record to read. Partition keys are *strings* (JSON object keys
always come back as strings from Spark's checkpoint) and every map is built in sorted order
(topics by name, partitions by number), because Spark compares offsets as serialized JSON:
two equal positions must serialize identically or Spark sees phantom progress.

A micro-batch is the set of half-open ranges ``[start[tp], end[tp])``. Three pure functions
decide the ranges:

* ``admit`` — admission control: cut ``latest`` down so at most ``max_rows`` records are admitted,
  apportioned to partitions in proportion to their backlog (largest-remainder method, so the
  total is exactly ``min(max_rows, backlog)`` and no partition is starved for ever).
* ``ranges_between`` — the non-empty per-partition ranges between two offset maps.
* ``split_ranges`` — ``minPartitions``: cut big ranges into contiguous pieces until there are at
  least that many, pieces of one range differing in size by at most one record.

``min_rows_ready`` is the ``minOffsetsPerTrigger`` / ``maxTriggerDelay`` decision.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TopicPartition",
    "OffsetMap",
    "OffsetRange",
    "to_json_offset",
    "from_json_offset",
    "offset_json_str",
    "admit",
    "ranges_between",
    "split_ranges",
    "min_rows_ready",
    "backlog",
]

TopicPartition = tuple[str, int]
OffsetMap = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        assert 0 <= self.start <= self.end, self

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json_offset(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` → ``{"t": {"p": o}}`` with topics and partitions in sorted order."""
    out: dict[str, dict[str, int]] = {}
    for (topic, part) in sorted(offsets):
        out.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return out


def from_json_offset(obj: Mapping[str, Any] | str | None) -> OffsetMap:
    """Inverse of ``to_json_offset``; accepts the dict or its JSON text."""
    if obj is None:
        return {}
    if isinstance(obj, str):
        obj = json.loads(obj)
    out: OffsetMap = {}
    for topic, parts in obj.items():  # type: ignore[union-attr]
        for part, off in parts.items():
            out[(str(topic), int(part))] = int(off)
    return out


def offset_json_str(offsets: Mapping[TopicPartition, int]) -> str:
    """The canonical text of an offset (what Spark would store)."""
    return json.dumps(to_json_offset(offsets), sort_keys=False)


def backlog(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    return sum(max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest)


def admit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
          max_rows: int | None) -> OffsetMap:
    """The end offsets of a batch that admits at most ``max_rows`` records.

    ``start`` holds every partition of ``latest`` (callers add new partitions first); a
    partition whose latest is below its start (data loss) keeps ``latest``. With
    ``max_rows=None`` the answer is ``latest``. Otherwise each partition gets
    ``floor(max_rows * lag / total)`` and the remaining records go one at a time to the
    partitions with the largest fractional share (ties: sorted order), never above their lag.
    """
    end = dict(latest)
    lags = {tp: max(0, latest[tp] - start[tp]) for tp in sorted(latest)}
    total = sum(lags.values())
    if max_rows is None or total <= max_rows:
        return end
    assert max_rows >= 0
    shares: dict[TopicPartition, int] = {}
    fracs: list[tuple[int, TopicPartition]] = []
    for tp, lag in lags.items():
        q, r = divmod(max_rows * lag, total)   # exact integer arithmetic, no float drift
        shares[tp] = q
        fracs.append((-r, tp))
    left = max_rows - sum(shares.values())
    for _, tp in sorted(fracs):
        if left <= 0:
            break
        if shares[tp] < lags[tp]:
            shares[tp] += 1
            left -= 1
    for tp, lag in lags.items():
        if lag > 0 or latest[tp] >= start[tp]:
            end[tp] = start[tp] + shares[tp]
    assert sum(end[tp] - start[tp] for tp in lags if lags[tp]) <= max_rows
    return end


def ranges_between(start: Mapping[TopicPartition, int],
                   end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """Non-empty ranges ``[start, end)`` for partitions in both maps, sorted."""
    out = []
    for tp in sorted(end):
        if tp in start and end[tp] > start[tp]:
            out.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
    return out


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split ranges so there are at least ``min_partitions`` of them (when records allow).

    A range of ``n`` records gets ``ceil(min_partitions * n / total)`` pieces (at most ``n``);
    pieces of one range are contiguous and differ in size by at most one.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = min(r.size, max(1, math.ceil(min_partitions * r.size / total)))
        base, extra = divmod(r.size, pieces)
        pos = r.start
        for i in range(pieces):
            n = base + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, pos, pos + n))
            pos += n
        assert pos == r.end
    return out


def min_rows_ready(available: int, min_rows: int | None, last_trigger_ms: float,
                   now_ms: float, max_trigger_delay_ms: int) -> bool:
    """``minOffsetsPerTrigger``: run a batch now? Yes when enough records are waiting, or when
    some are and ``maxTriggerDelay`` has passed since the last batch ran."""
    if available <= 0:
        return False
    if min_rows is None or available >= min_rows:
        return True
    return now_ms - last_trigger_ms >= max_trigger_delay_ms
