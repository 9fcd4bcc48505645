"""Node invariants, checked from structured event lines that rafka nodes write to their logs.

Log line format (for the broker / controller engineers)
-------------------------------------------------------
A node event is one JSON object on one line of the node's log (stdout/stderr or a log file).
Either the whole line is the object, or the object follows the marker ``rafka-event: `` (so a
logging prefix such as a timestamp and level is allowed before it).  Every other line is
ignored.  Keys (``tp`` is ``"topic/partition"``)::

    {"event": "start", "node": 1}
        the node process (re)started; begins a new *incarnation* of that node
    {"event": "raft-leader", "node": 1, "epoch": 5}
        node 1 became the active controller (Raft leader) for Raft term/epoch 5
    {"event": "hw", "node": 1, "tp": "t/0", "leader_epoch": 3, "hw": 10, "isr": [1, 3]}
        node 1's high watermark of t/0 is now 10 (emit on every change, leader and follower);
        ``isr`` (leaders only): the replicas the leader counted, all holding every record below
    {"event": "isr", "node": 1, "tp": "t/0", "leader_epoch": 3, "partition_epoch": 8,
     "isr": [1, 3]}
        leader node 1 adopted this committed ISR (the controller's AlterPartition answer)
    {"event": "truncate", "node": 1, "tp": "t/0", "to": 7, "from": 9, "leader_epoch": 4,
     "reason": "diverging-epoch"}
        node 1 removed offsets [to, from) of t/0 (``from`` = log end offset before; optional).
        Emit for EVERY suffix removal, including recovery after an unclean start
        (``"reason": "recovery"``).
    {"event": "partition", "node": 1, "tp": "t/0", "leader": 2, "leader_epoch": 3,
     "partition_epoch": 7, "replicas": [1, 2, 3], "isr": [1, 2]}
        node 1 applied this partition state from the metadata log (leader -1 = none)

Optional on every event: ``"mono_ns"`` = ``time.monotonic_ns()`` when it happened (CLOCK_MONOTONIC
is system-wide on Linux, and libfaketime is told not to fake it, so it is comparable with the
harness's history clock), ``"wall_ms"``.  Unknown events and keys are ignored.

Invariants
----------
``multiple-controller-leaders``  two nodes claimed controller leadership in the same epoch.
``multiple-partition-leaders``   two different leaders reported for one (tp, leader_epoch).
``isr-not-subset``               ISR not a subset of replicas, or the leader not in the ISR.
``hw-regression``                a node's hw for a tp went down within one (incarnation,
                                 leader_epoch).
``acked-truncated``              (a) a node truncated below a high watermark it had itself
                                 reported in the same incarnation (committed data removed); or
                                 (b) given ``start_mono_ns``, a truncation stamped after an
                                 ``acks=all`` send to that tp was acknowledged removed its offset
                                 — unless it was a diverging-epoch truncation by a node outside
                                 the ISR when the send was invoked and acknowledged (it may hold
                                 another record there), or of an epoch older than the acking
                                 leader's.
                                 Not (b) either: a diverging-epoch truncation by a node the
                                 leader's high watermark did not count when it first passed the
                                 offset (the ``isr`` of that ``hw`` event): the record's copies
                                 were elsewhere, and an ISR view that lags the leader's (a
                                 node's own metadata) cannot make it an ISR member (issue 28).
                                 Not (b): a ``diverging-epoch`` truncation fetching in leader
                                 epoch E removes only records of epochs < E, so it cannot remove
                                 a record acknowledged by a node that, by its own ``partition``
                                 events, already led the tp in an epoch >= E when the send was
                                 invoked (same offset, different record: an isolated old leader
                                 dropping its unacknowledged suffix).
"""

from __future__ import annotations

import json
import os
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .checkers import Anomaly, CheckResult, Facts, _Collector

__all__ = [
    "EVENT_MARKER",
    "NODE_CHECKERS",
    "parse_node_log_line",
    "read_node_events",
    "check_controller_leaders",
    "check_partition_states",
    "check_hw_monotonic",
    "check_acked_not_truncated",
    "check_node_events",
]

EVENT_MARKER = "rafka-event: "
NODE_CHECKERS = ("controller-leader", "partition-state", "hw-monotonic", "acked-not-truncated")


def parse_node_log_line(line: str) -> dict[str, Any] | None:
    """The event on this log line, or None when the line carries none."""
    i = line.find(EVENT_MARKER)
    text = line[i + len(EVENT_MARKER):] if i >= 0 else line.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        return None
    return obj


def read_node_events(paths: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Events from node log files, file after file, each in file order.

    Each event gets ``"_src": "path:line"``; an anomaly's ``events`` are positions in the list.
    """
    out: list[dict[str, Any]] = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                ev = parse_node_log_line(line)
                if ev is not None:
                    ev["_src"] = f"{path}:{n}"
                    out.append(ev)
    return out


def check_controller_leaders(events: Sequence[Mapping[str, Any]]) -> CheckResult:
    out = _Collector()
    leaders: dict[int, tuple[Any, int]] = {}
    reported: set[int] = set()
    for i, ev in enumerate(events):
        if ev.get("event") != "raft-leader":
            continue
        epoch, node = ev["epoch"], ev["node"]
        first = leaders.setdefault(epoch, (node, i))
        if first[0] != node and epoch not in reported:
            reported.add(epoch)
            out.add(Anomaly("multiple-controller-leaders",
                            {"epoch": epoch, "nodes": [first[0], node]}, [], [first[1], i]))
    return out.result(epochs=len(leaders))


def check_partition_states(events: Sequence[Mapping[str, Any]]) -> CheckResult:
    out = _Collector()
    leaders: dict[tuple[str, int], tuple[int, int]] = {}
    reported: set[tuple[str, int]] = set()
    for i, ev in enumerate(events):
        if ev.get("event") != "partition":
            continue
        replicas, isr, leader = set(ev.get("replicas", ())), set(ev.get("isr", ())), ev["leader"]
        if not isr <= replicas or (leader != -1 and isr and leader not in isr):
            out.add(Anomaly("isr-not-subset",
                            {"node": ev.get("node"), "tp": ev["tp"], "leader": leader,
                             "replicas": sorted(replicas), "isr": sorted(isr)}, [], [i]))
        if leader == -1:
            continue
        key = (ev["tp"], ev["leader_epoch"])
        first = leaders.setdefault(key, (leader, i))
        if first[0] != leader and key not in reported:
            reported.add(key)
            out.add(Anomaly("multiple-partition-leaders",
                            {"tp": key[0], "leader_epoch": key[1], "leaders": [first[0], leader]},
                            [], [first[1], i]))
    return out.result()


def _incarnations(events: Sequence[Mapping[str, Any]]) -> list[int]:
    """Incarnation number of each event's node at that event (bumped by ``start``)."""
    inc: dict[Any, int] = {}
    out = []
    for ev in events:
        node = ev.get("node")
        if ev.get("event") == "start":
            inc[node] = inc.get(node, 0) + 1
        out.append(inc.get(node, 0))
    return out


def check_hw_monotonic(events: Sequence[Mapping[str, Any]]) -> CheckResult:
    out = _Collector()
    incs = _incarnations(events)
    last: dict[tuple[Any, int, str, Any], tuple[int, int]] = {}
    for i, ev in enumerate(events):
        if ev.get("event") != "hw":
            continue
        key = (ev["node"], incs[i], ev["tp"], ev.get("leader_epoch"))
        prev = last.get(key)
        hw = int(ev["hw"])
        if prev is not None and hw < prev[0]:
            out.add(Anomaly("hw-regression",
                            {"node": ev["node"], "tp": ev["tp"],
                             "leader_epoch": ev.get("leader_epoch"), "hw": [prev[0], hw]},
                            [], [prev[1], i]))
        if prev is None or hw >= prev[0]:
            last[key] = (hw, i)
    return out.result()


def check_acked_not_truncated(events: Sequence[Mapping[str, Any]], facts: Facts | None = None,
                              *, start_mono_ns: int | None = None) -> CheckResult:
    out = _Collector()
    incs = _incarnations(events)
    max_hw: dict[tuple[Any, int, str], tuple[int, int]] = {}
    truncations: list[tuple[int, Mapping[str, Any]]] = []
    for i, ev in enumerate(events):
        kind = ev.get("event")
        if kind == "hw":
            key = (ev["node"], incs[i], ev["tp"])
            if key not in max_hw or ev["hw"] > max_hw[key][0]:
                max_hw[key] = (int(ev["hw"]), i)
        elif kind == "truncate":
            truncations.append((i, ev))
            top = max_hw.get((ev["node"], incs[i], ev["tp"]))
            if top is not None and ev["to"] < top[0]:
                out.add(Anomaly("acked-truncated",
                                {"why": "below-own-hw", "node": ev["node"], "tp": ev["tp"],
                                 "to": ev["to"], "hw": top[0]}, [], [top[1], i]))
    if facts is not None and start_mono_ns is not None:
        _truncated_acks(out, facts, truncations, start_mono_ns, events)
    return out.result(truncations=len(truncations))


def _truncated_acks(out: _Collector, facts: Facts, truncations: list[tuple[int, Any]],
                    start_mono_ns: int, events: Sequence[Mapping[str, Any]] = ()) -> None:
    # per tp: acks=all sends sorted by ack time: (time, offset, invoke, completion)
    acks: dict[str, list[tuple[int, int, int, int]]] = {}
    for s in facts.acked_order:
        if s.acks in ("all", -1, "-1"):
            assert s.offset is not None and s.completion is not None
            acks.setdefault(f"{s.topic}/{s.partition}", []).append(
                (s.time, s.offset, s.invoke, s.completion))
    times: dict[str, list[int]] = {}
    for tp, rows in acks.items():
        rows.sort()
        times[tp] = [r[0] for r in rows]
    ops = {op.index: op for op in facts.history}
    # One pass over the node events, four time-sorted indexes:
    # views: (tp, node) -> [(history time, leader, leader_epoch)], that node's own partition events
    # own:   (tp, node) -> [(history time, partition_epoch, leader, isr)], the same with the ISR
    # isrs:  tp -> [(history time, partition_epoch, isr)] from every node's partition events
    # hws:   tp -> [(history time, hw, node, counted isr or None)] of every hw event with a
    #        known leader epoch (a leader's names the replicas it counted)
    # Times: a node event's ``mono_ns`` minus the history's ``start_mono_ns`` is on the
    # history's clock (both CLOCK_MONOTONIC of one kernel: the netns and docker backends run
    # every node on the harness's host, and libfaketime leaves monotonic time alone). Ties
    # count as "before": an event stamped at the same ns as an op is taken to precede it.
    views: dict[tuple[str, Any], list[tuple[int, int, int]]] = {}
    own: dict[tuple[str, Any], list[tuple[int, int, int, tuple[int, ...]]]] = {}
    isrs: dict[str, list[tuple[int, int, tuple[int, ...]]]] = {}
    hws: dict[str, list[tuple[int, int, Any, tuple[int, ...] | None]]] = {}
    for ev in events:
        if "mono_ns" not in ev:
            continue
        t_ev = int(ev["mono_ns"]) - start_mono_ns
        kind = ev.get("event")
        if kind == "partition":
            key = (ev["tp"], ev.get("node"))
            views.setdefault(key, []).append((t_ev, ev["leader"], int(ev["leader_epoch"])))
            if "isr" in ev:
                pe, isr = int(ev.get("partition_epoch", -1)), tuple(ev["isr"])
                isrs.setdefault(ev["tp"], []).append((t_ev, pe, isr))
                own.setdefault(key, []).append((t_ev, pe, int(ev["leader"]), isr))
        elif kind == "isr":
            isrs.setdefault(ev["tp"], []).append(
                (t_ev, int(ev.get("partition_epoch", -1)), tuple(ev["isr"])))
        elif kind == "hw" and int(ev.get("leader_epoch", -1)) >= 0:
            counted = tuple(ev["isr"]) if isinstance(ev.get("isr"), list) else None
            hws.setdefault(ev["tp"], []).append((t_ev, int(ev["hw"]), ev.get("node"), counted))
    for index in (views, own, isrs, hws):
        for v in index.values():
            v.sort(key=lambda r: r[0])  # by time (stable: same-time rows keep file order)

    def isr_at(tp: str, t: int) -> tuple[int, ...] | None:
        """The ISR of the newest partition epoch any node had applied by history time t."""
        rows = isrs.get(tp, [])
        known = rows[:bisect_left(rows, (t + 1,))]
        return max(known, key=lambda r: r[1])[2] if known else None

    def outside_isr_when_acked(tp: str, node: Any, inv: int, comp: int) -> bool:
        """acks=all waits for the ISR only: a replica outside it may hold another record at
        the acked offset (an isolated old leader's own suffix), and truncating that is fine."""
        times = [op.time for op in (ops.get(inv), ops.get(comp)) if op is not None]
        found = [isr_at(tp, t) for t in times]
        return bool(found) and all(isr is not None and node not in isr for isr in found)

    def outside_isr_when_committed(tp: str, node: Any, offset: int, comp: int) -> bool:
        """The ISR that committed the record did not hold ``node``: the first high watermark
        past ``offset`` (the commit; its leader emits it before answering) came from a node that
        led the partition then with an ISR without ``node``, and the newest ISR any node knew
        at the answer excludes it too. Covers a send invoked before a leader change and
        acknowledged after it (acceptance seed 9 of the second campaign: node 1, paused while
        leading epoch 1 with an unreplicated record at 427, was outside epoch 2's ISR [3, 2]
        that committed another record there)."""
        op = ops.get(comp)
        if op is None:
            return False
        first = next(((t, n, c) for t, hw, n, c in hws.get(tp, ())
                      if hw > offset and t <= op.time), None)
        if first is None:
            return False
        t_c, leader, counted = first
        if counted is not None:
            # the leader says which replicas held the record when it committed it
            return node not in counted
        view = [r for r in own.get((tp, leader), ()) if r[0] <= t_c]
        if not view:
            return False
        _t, _pe, view_leader, isr = max(view, key=lambda r: r[1])
        now = isr_at(tp, op.time)
        return view_leader == leader and node not in isr and now is not None and node not in now

    def acked_in_epoch_at_least(tp: str, inv: int, comp: int, epoch: int) -> bool:
        node, op_inv = ops[comp].node if comp in ops else None, ops.get(inv)
        view = views.get((tp, node))
        if node is None or op_inv is None or not view:
            return False
        k = bisect_left(view, op_inv.time + 1, key=lambda r: r[0])
        return k > 0 and view[k - 1][1] == node and view[k - 1][2] >= epoch

    for i, ev in truncations:
        if "mono_ns" not in ev or ev["tp"] not in acks:
            continue
        t = int(ev["mono_ns"]) - start_mono_ns
        rows = acks[ev["tp"]]
        k = bisect_left(times[ev["tp"]], t)  # acks strictly before the truncation
        removed_end = ev.get("from")
        epoch = ev.get("leader_epoch") if ev.get("reason") == "diverging-epoch" else None
        for _t, offset, inv, comp in rows[:k]:
            if offset < ev["to"] or (removed_end is not None and offset >= removed_end):
                continue
            if epoch is not None and acked_in_epoch_at_least(ev["tp"], inv, comp, int(epoch)):
                continue
            if epoch is not None and outside_isr_when_acked(ev["tp"], ev["node"], inv, comp):
                continue
            if epoch is not None and outside_isr_when_committed(ev["tp"], ev["node"], offset, comp):
                continue
            out.add(Anomaly("acked-truncated",
                            {"why": "acked-offset-removed", "node": ev["node"], "tp": ev["tp"],
                             "to": ev["to"], "acked_offset": offset}, [inv, comp], [i]))
            break


def check_node_events(events: Sequence[Mapping[str, Any]], facts: Facts | None = None, *,
                      start_mono_ns: int | None = None) -> dict[str, CheckResult]:
    return {
        "controller-leader": check_controller_leaders(events),
        "partition-state": check_partition_states(events),
        "hw-monotonic": check_hw_monotonic(events),
        "acked-not-truncated": check_acked_not_truncated(events, facts,
                                                         start_mono_ns=start_mono_ns),
    }
