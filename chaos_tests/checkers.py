"""Checkers: find the anomalies of the Jepsen Kafka queue catalogue in a history.

Theory of operation
-------------------
:func:`analyse` makes one pass over the history (pairing each invoke with its completion by
process) and folds it into :class:`Facts`: every send by message identity ``(topic, value)``,
every observation "``(topic, partition, offset)`` holds ``value``" (from acknowledged sends and
from reads), the per-process sequence of consumer events (reads and resets), and the commits.
Each checker then works from those dicts and returns a :class:`CheckResult`
``{valid, anomalies: [{type, details, ops}], stats}``; ``ops`` are history indexes.  Everything
is a dict look-up or a sort, so a 1e6-op history is fine.

Reads are ``ok`` completions of ``poll`` and ``final-read``.  An offset is *known to exist* if
some read returned it (rafka has no compaction of chaos topics and no transactions, so offsets
are dense; we still only trust offsets someone actually read).

=============================  ========================================================
lost-write                     acked send, never read, below the highest offset read in its
                               partition
unseen                         acked send, never read, in a partition that had a final read
inconsistent-offsets           one (topic, partition, offset) seen with two values
duplicate                      one (topic, value) seen at two (partition, offset)s
nonmonotonic-send              a process's later acked send to a partition got a lower offset
nonmonotonic-poll              a process read offset o of a partition after having read o' >= o
poll-skip                      a process read o after o' < o - 1 and some offset in between is
                               known to exist.  ``assign``/``subscribe``/``seek`` reset the
                               expectation (a given position becomes the expected next
                               offset); a poll that ends in ``info``/``fail`` resets the skip
                               expectation of its process (records may have been consumed
                               unseen); each ``final-read`` op starts fresh.
aborted-read (G1a)             a read returned a value whose send ended in ``fail``
committed-offset-regression    for a (group, partition) a commit that began after another
                               commit completed stored a lower offset (real-time order, so
                               concurrent commits do not count).  Assumes the workload never
                               deliberately commits a lower offset (no backward seeks).
=============================  ========================================================

Node-side invariants live in :mod:`rafka.chaos_tests.node_events`; :func:`check_all` runs both.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .history import FAIL, INFO, INVOKE, OK, Op, from_dicts, parse_tp

__all__ = [
    "Anomaly",
    "CheckResult",
    "Summary",
    "Facts",
    "SendInfo",
    "analyse",
    "check_lost_write",
    "check_unseen",
    "check_inconsistent_offsets",
    "check_duplicate",
    "check_nonmonotonic_send",
    "check_nonmonotonic_poll",
    "check_poll_skip",
    "check_aborted_read",
    "check_committed_offset_regression",
    "HISTORY_CHECKERS",
    "check_all",
    "MAX_ANOMALIES",
]

MAX_ANOMALIES = 1000  # per checker; ``stats["anomalies"]`` keeps the true count

READ_FS = frozenset({"poll", "final-read"})
RESET_FS = frozenset({"assign", "subscribe", "seek"})

TP = tuple[str, int]


@dataclass
class Anomaly:
    type: str
    details: dict[str, Any]
    ops: list[int]
    events: list[int] = field(default_factory=list)  # node-event positions (node checkers)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type, "details": self.details, "ops": self.ops}
        if self.events:
            d["events"] = self.events
        return d


@dataclass
class CheckResult:
    valid: bool
    anomalies: list[Anomaly]
    stats: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "anomalies": [a.to_dict() for a in self.anomalies],
                "stats": self.stats}


@dataclass
class Summary:
    """Combined result of :func:`check_all`."""

    valid: bool
    anomalies: list[Anomaly]
    checkers: dict[str, CheckResult]

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "anomalies": [a.to_dict() for a in self.anomalies],
                "checkers": {k: v.to_dict() for k, v in self.checkers.items()}}


class _Collector:
    """Collects anomalies up to MAX_ANOMALIES, counting all."""

    def __init__(self) -> None:
        self.anomalies: list[Anomaly] = []
        self.count = 0

    def add(self, a: Anomaly) -> None:
        self.count += 1
        if len(self.anomalies) < MAX_ANOMALIES:
            self.anomalies.append(a)

    def result(self, **stats: Any) -> CheckResult:
        return CheckResult(self.count == 0, self.anomalies, {"anomalies": self.count, **stats})


@dataclass(slots=True)
class SendInfo:
    process: int | str
    invoke: int
    completion: int | None
    type: str | None  # ok / fail / info / None (never completed)
    topic: str
    value: Any
    partition: int | None
    offset: int | None
    time: int  # completion time (ns), or invoke time
    acks: Any = "all"


@dataclass
class Facts:
    """Everything the checkers need, built in one pass by :func:`analyse`."""

    history: list[Op]
    sends: dict[tuple[str, Any], SendInfo] = field(default_factory=dict)
    acked_order: list[SendInfo] = field(default_factory=list)  # ok sends in completion order
    # reads: (op index, process, f, records)
    reads: list[tuple[int, int | str, str, list[Any]]] = field(default_factory=list)
    # per process consumer events: ("read", op, records, f) | ("reset", op, tps|None, positions)
    # | ("lost", op) for a poll ending info/fail
    consumer: dict[int | str, list[tuple[Any, ...]]] = field(default_factory=dict)
    # commits: (group, tp) -> [(invoke, completion, offset)]
    commits: dict[tuple[str, TP], list[tuple[int, int, int]]] = field(default_factory=dict)
    final_read_tps: set[TP] = field(default_factory=set)

    def read_values(self) -> dict[tuple[str, Any], int]:
        """(topic, value) -> index of the first read op that returned it."""
        out: dict[tuple[str, Any], int] = {}
        for op, _p, _f, records in self.reads:
            for t, _part, _o, v in records:
                out.setdefault((t, v), op)
        return out

    def max_read_offsets(self) -> dict[TP, tuple[int, int]]:
        out: dict[TP, tuple[int, int]] = {}
        for op, _p, _f, records in self.reads:
            for t, part, o, _v in records:
                cur = out.get((t, part))
                if cur is None or o > cur[0]:
                    out[(t, part)] = (o, op)
        return out

    def known_offsets(self) -> dict[TP, list[int]]:
        sets: dict[TP, set[int]] = defaultdict(set)
        for _op, _p, _f, records in self.reads:
            for t, part, o, _v in records:
                sets[(t, part)].add(o)
        return {k: sorted(v) for k, v in sets.items()}


def _tps(value: Any, key: str) -> list[TP] | None:
    if not isinstance(value, Mapping) or key not in value:
        return None
    raw = value[key]
    if isinstance(raw, Mapping):
        raw = list(raw)
    return [parse_tp(k) for k in raw]


def analyse(history: Iterable[Op | Mapping[str, Any]] | Facts) -> Facts:
    """Fold a history into :class:`Facts` (idempotent on Facts)."""
    if isinstance(history, Facts):
        return history
    ops = from_dicts(history)
    facts = Facts(ops)
    pending: dict[int | str, Op] = {}
    for op in ops:
        if op.type == INVOKE:
            pending[op.process] = op
            if op.f == "send" and isinstance(op.value, Mapping):
                v = op.value
                facts.sends[(v["topic"], v["value"])] = SendInfo(
                    op.process, op.index, None, None, v["topic"], v["value"], v.get("partition"), None,
                    op.time, v.get("acks", "all"))
            continue
        inv = pending.pop(op.process, None)
        inv_index = inv.index if inv is not None else op.index
        f = op.f
        if f == "send":
            v = op.value if isinstance(op.value, Mapping) else (inv.value if inv else {})
            key = (v["topic"], v["value"])
            info = facts.sends.get(key)
            if info is None:
                info = SendInfo(op.process, inv_index, None, None, v["topic"], v["value"], None,
                                None, 0)
                facts.sends[key] = info
            info.completion, info.type, info.time = op.index, op.type, op.time
            if op.type == OK:
                info.partition, info.offset = v["partition"], v["offset"]
                facts.acked_order.append(info)
        elif f in READ_FS:
            seq = facts.consumer.setdefault(op.process, [])
            if op.type == OK:
                records = (op.value or {}).get("records", [])
                if f == "final-read":
                    seq.append(("reset", op.index, None, {}))
                    for t, part, _o, _v in records:
                        facts.final_read_tps.add((t, part))
                    if inv is not None and isinstance(inv.value, Mapping) \
                            and "topic" in inv.value and "partition" in inv.value:
                        facts.final_read_tps.add((inv.value["topic"], inv.value["partition"]))
                facts.reads.append((op.index, op.process, f, records))
                seq.append(("read", op.index, records, f))
            elif op.type in (INFO, FAIL):
                seq.append(("lost", op.index))
        elif f in RESET_FS:
            v = op.value if isinstance(op.value, Mapping) else {}
            positions = {parse_tp(k): int(o) for k, o in (v.get("positions") or {}).items()}
            tps = None if f == "subscribe" else (_tps(v, "partitions") or list(positions))
            facts.consumer.setdefault(op.process, []).append(
                ("reset", op.index, tps, positions))
        elif f == "commit" and op.type == OK:
            v = op.value if isinstance(op.value, Mapping) else {}
            group = v.get("group")
            for k, off in (v.get("offsets") or {}).items():
                facts.commits.setdefault((group, parse_tp(k)), []).append(
                    (inv_index, op.index, int(off)))
    return facts


# --------------------------------------------------------------------------- writes vs reads

def _lost_and_unseen(facts: Facts) -> tuple[CheckResult, CheckResult]:
    read_vals = facts.read_values()
    max_read = facts.max_read_offsets()
    lost, unseen = _Collector(), _Collector()
    unchecked = 0
    for s in facts.acked_order:
        if (s.topic, s.value) in read_vals:
            continue
        tp = (s.topic, s.partition)
        assert s.offset is not None and s.completion is not None
        top = max_read.get(tp)  # type: ignore[arg-type]
        ops = [s.invoke, s.completion]
        details = {"topic": s.topic, "partition": s.partition, "offset": s.offset,
                   "value": s.value}
        if top is not None and s.offset < top[0]:
            lost.add(Anomaly("lost-write", {**details, "max_read_offset": top[0]},
                             ops + [top[1]]))
        elif tp in facts.final_read_tps:
            unseen.add(Anomaly("unseen", details, ops))
        else:
            unchecked += 1
    return (lost.result(acked=len(facts.acked_order)),
            unseen.result(acked=len(facts.acked_order), unchecked_no_final_read=unchecked))


def check_lost_write(history: Any) -> CheckResult:
    return _lost_and_unseen(analyse(history))[0]


def check_unseen(history: Any) -> CheckResult:
    return _lost_and_unseen(analyse(history))[1]


def _observations(facts: Facts) -> Iterable[tuple[str, int, int, Any, int]]:
    """(topic, partition, offset, value, op) from acked sends and from reads."""
    for (topic, value), s in facts.sends.items():
        if s.type == OK:
            assert s.partition is not None and s.offset is not None and s.completion is not None
            yield topic, s.partition, s.offset, value, s.completion
    for op, _p, _f, records in facts.reads:
        for t, part, o, v in records:
            yield t, part, o, v, op


def check_inconsistent_offsets(history: Any) -> CheckResult:
    facts = analyse(history)
    first: dict[tuple[str, int, int], tuple[Any, int]] = {}
    bad: dict[tuple[str, int, int], dict[Any, int]] = {}
    for t, part, o, v, op in _observations(facts):
        key = (t, part, o)
        seen = first.get(key)
        if seen is None:
            first[key] = (v, op)
        elif seen[0] != v:
            vals = bad.setdefault(key, {seen[0]: seen[1]})
            vals.setdefault(v, op)
    out = _Collector()
    for (t, part, o), vals in bad.items():
        out.add(Anomaly("inconsistent-offsets",
                        {"topic": t, "partition": part, "offset": o, "values": list(vals)},
                        sorted(set(vals.values()))))
    return out.result(offsets=len(first))


def check_duplicate(history: Any) -> CheckResult:
    facts = analyse(history)
    first: dict[tuple[str, Any], tuple[int, int, int]] = {}
    bad: dict[tuple[str, Any], dict[tuple[int, int], int]] = {}
    for t, part, o, v, op in _observations(facts):
        key = (t, v)
        seen = first.get(key)
        if seen is None:
            first[key] = (part, o, op)
        elif (seen[0], seen[1]) != (part, o):
            pos = bad.setdefault(key, {(seen[0], seen[1]): seen[2]})
            pos.setdefault((part, o), op)
    out = _Collector()
    for (t, v), pos in bad.items():
        out.add(Anomaly("duplicate",
                        {"topic": t, "value": v, "positions": [list(p) for p in pos]},
                        sorted(set(pos.values()))))
    return out.result(values=len(first))


def check_aborted_read(history: Any) -> CheckResult:
    facts = analyse(history)
    out = _Collector()
    reported: set[tuple[str, Any]] = set()
    for op, _p, _f, records in facts.reads:
        for t, part, o, v in records:
            s = facts.sends.get((t, v))
            if s is not None and s.type == FAIL and (t, v) not in reported:
                reported.add((t, v))
                assert s.completion is not None
                out.add(Anomaly("aborted-read",
                                {"topic": t, "partition": part, "offset": o, "value": v},
                                [s.invoke, s.completion, op]))
    return out.result(failed_sends=sum(1 for s in facts.sends.values() if s.type == FAIL))


# --------------------------------------------------------------------------- orderings

def check_nonmonotonic_send(history: Any) -> CheckResult:
    facts = analyse(history)
    last: dict[tuple[int | str, str, int], SendInfo] = {}
    out = _Collector()
    for s in facts.acked_order:
        assert s.partition is not None and s.offset is not None and s.completion is not None
        key = (s.process, s.topic, s.partition)
        prev = last.get(key)
        if prev is not None and prev.offset is not None and s.offset <= prev.offset:
            assert prev.completion is not None
            out.add(Anomaly("nonmonotonic-send",
                            {"process": s.process, "topic": s.topic, "partition": s.partition,
                             "offsets": [prev.offset, s.offset]},
                            [prev.invoke, prev.completion, s.invoke, s.completion]))
        last[key] = s
    return out.result()


def _consumer_orderings(facts: Facts) -> tuple[CheckResult, CheckResult]:
    known = facts.known_offsets()
    mono, skip = _Collector(), _Collector()
    for process, seq in facts.consumer.items():
        last_mono: dict[TP, tuple[int, int]] = {}
        last_skip: dict[TP, tuple[int, int]] = {}
        for ev in seq:
            kind = ev[0]
            if kind == "reset":
                _, op, tps, positions = ev
                if tps is None:
                    last_mono.clear()
                    last_skip.clear()
                else:
                    for tp in tps:
                        last_mono.pop(tp, None)
                        last_skip.pop(tp, None)
                for tp, pos in positions.items():
                    last_skip[tp] = (pos - 1, op)
                continue
            if kind == "lost":
                last_skip.clear()
                continue
            _, op, records, _f = ev
            for t, part, o, _v in records:
                tp = (t, part)
                prev = last_mono.get(tp)
                if prev is not None and o <= prev[0]:
                    mono.add(Anomaly("nonmonotonic-poll",
                                     {"process": process, "topic": t, "partition": part,
                                      "offsets": [prev[0], o]},
                                     sorted({prev[1], op})))
                prev = last_skip.get(tp)
                if prev is not None and o > prev[0] + 1:
                    ks = known.get(tp, ())
                    lo = bisect_right(ks, prev[0])
                    hi = bisect_left(ks, o)
                    if lo < hi:
                        skip.add(Anomaly("poll-skip",
                                         {"process": process, "topic": t, "partition": part,
                                          "from": prev[0], "to": o, "skipped": hi - lo,
                                          "first_skipped": ks[lo]},
                                         sorted({prev[1], op})))
                last_mono[tp] = (o, op)
                last_skip[tp] = (o, op)
    return mono.result(), skip.result()


def check_nonmonotonic_poll(history: Any) -> CheckResult:
    return _consumer_orderings(analyse(history))[0]


def check_poll_skip(history: Any) -> CheckResult:
    return _consumer_orderings(analyse(history))[1]


def check_committed_offset_regression(history: Any) -> CheckResult:
    facts = analyse(history)
    out = _Collector()
    for (group, (t, part)), commits in facts.commits.items():
        by_invoke = sorted(commits)
        by_completion = sorted(commits, key=lambda c: c[1])
        j = 0
        best: tuple[int, int, int] | None = None  # commit with the max offset completed so far
        for c in by_invoke:
            while j < len(by_completion) and by_completion[j][1] < c[0]:
                d = by_completion[j]
                if best is None or d[2] > best[2]:
                    best = d
                j += 1
            if best is not None and c[2] < best[2]:
                out.add(Anomaly("committed-offset-regression",
                                {"group": group, "topic": t, "partition": part,
                                 "offsets": [best[2], c[2]]},
                                [best[0], best[1], c[0], c[1]]))
    return out.result(commits=sum(len(c) for c in facts.commits.values()))


# --------------------------------------------------------------------------- all together

def _history_checks(facts: Facts) -> dict[str, CheckResult]:
    lost, unseen = _lost_and_unseen(facts)
    mono, skip = _consumer_orderings(facts)
    return {
        "lost-write": lost,
        "unseen": unseen,
        "inconsistent-offsets": check_inconsistent_offsets(facts),
        "duplicate": check_duplicate(facts),
        "nonmonotonic-send": check_nonmonotonic_send(facts),
        "nonmonotonic-poll": mono,
        "poll-skip": skip,
        "aborted-read": check_aborted_read(facts),
        "committed-offset-regression": check_committed_offset_regression(facts),
    }


HISTORY_CHECKERS = (
    "lost-write", "unseen", "inconsistent-offsets", "duplicate", "nonmonotonic-send",
    "nonmonotonic-poll", "poll-skip", "aborted-read", "committed-offset-regression",
)


def check_all(history: Iterable[Op | Mapping[str, Any]] | Facts,
              node_events: Sequence[Mapping[str, Any]] = (), *,
              start_mono_ns: int | None = None) -> Summary:
    """Run every history checker, and the node-event checkers when events are given.

    ``start_mono_ns`` (``HistoryWriter.start_mono_ns``) lets the acked-truncated check put
    node events stamped with ``mono_ns`` on the history's time axis.
    """
    from .node_events import check_node_events  # local: node_events imports this module

    facts = analyse(history)
    results = _history_checks(facts)
    results.update(check_node_events(node_events, facts, start_mono_ns=start_mono_ns))
    anomalies = [a for r in results.values() for a in r.anomalies]
    return Summary(all(r.valid for r in results.values()), anomalies, results)
