"""Checkers of the ``txn`` workload: atomicity and isolation of transactions, exactly-once transform.

Theory of operation
-------------------
:func:`analyse_txn` folds a history into :class:`TxnFacts`: every transaction (ops ``txn`` of
the writers and ``transform`` of the consume-transform-produce process) with its intended
writes ``(topic, partition, value)`` and its outcome, every read split by isolation level
(``"isolation"`` in a ``poll`` / ``final-read`` value, or in the ``assign`` / ``subscribe`` of its
process; read_uncommitted when absent), and the
final reads per partition.  Its :class:`~chaos_tests.checkers.Facts` (the queue analysis of the
same history) is kept, so the queue checkers that stay sound with transactions run unchanged.

Outcomes: ``ok`` = committed (``commit_transaction`` returned); ``fail`` = definitely not
committed (aborted, or failed before the commit was sent: a transaction whose commit was never
requested can only be aborted); ``info`` = commit sent, outcome unknown.  An ``info``
transaction *committed* iff one of its values is in the final read_committed reads.

A partition's final read_committed read is *stable* when it is complete and its end (the last
stable offset the reader was given) reached the high watermark recorded before it (``hw``):
every transaction in it is decided.  Checks that conclude from a value's absence use stable
final reads only (others are counted as ``unchecked``); ``txn-hanging`` reports the unstable.

=========================  ============================================================
txn-aborted-read           a read_committed read returned a value only ``fail`` txns wrote
txn-intermediate-read      a read_committed read returned a value (a) of an ``info`` txn
                           that did not commit (absent from a stable final read), or (b)
                           before its producer had even asked to commit
txn-lost-write             a value of an ``ok`` txn absent from the stable final read
txn-partial                a txn some of whose values are in the stable final reads and
                           others not (txns whose values no other txn wrote: a transform's
                           retry writes the same outputs again)
txn-write-cycle            a cycle of write order and real time: see below
txn-hanging                a final read_committed read whose LSO stayed below the high
                           watermark after the heal (an open transaction nobody ends)
transform-exactly-once     per input partition with final group offset C: each input
                           record below C has its output ``"t:" + value`` exactly once in
                           the committed output, each at or above C not at all
=========================  ============================================================

Write cycles.  Kafka does not order concurrent transactions: A before B in one partition and B
before A in another, both committed, is allowed (Jepsen, Redpanda 21.10.1, "write-write
conflicts in Kafka's transaction model"), so a pure write-order cycle is only counted
(``stats["ww_cycles"]``).  What is forbidden is a cycle that contradicts real time.  Each
committed record is a point in time inside its transaction's interval; the graph has one node
per record and one per txn invoke/completion event, with edges "happens before": the history
events in order, invoke → each record of the txn → completion (``ok`` only: an ``info`` txn may
end any time), and per partition each committed record → the next committed record.  Any cycle
(a strongly connected component of two or more nodes) is impossible in a correct log: e.g. a
writer's later transaction whose record lies below its earlier transaction's in some partition.

:func:`check_all_txn` runs these, the queue checkers that are sound here (``poll-skip`` once
per isolation level: a read_committed reader legitimately skips aborted offsets that
read_uncommitted readers saw) and the node-event checkers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .checkers import (
    READ_FS,
    RESET_FS,
    Anomaly,
    CheckResult,
    Facts,
    Summary,
    _Collector,
    _history_checks,
    analyse,
    check_duplicate,
    check_poll_skip,
)
from .history import FAIL, INFO, INVOKE, OK, Op, from_dicts, parse_tp

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "TXN_FS",
    "TRANSFORM_PREFIX",
    "Txn",
    "FinalRead",
    "TxnFacts",
    "analyse_txn",
    "check_txn_aborted_read",
    "check_txn_intermediate_read",
    "check_txn_lost_write",
    "check_txn_partial",
    "check_txn_write_cycle",
    "check_txn_hanging",
    "check_transform_exactly_once",
    "TXN_CHECKERS",
    "check_all_txn",
]

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
TXN_FS = frozenset({"txn", "transform"})
TRANSFORM_PREFIX = "t:"

TP = tuple[str, int]


@dataclass(slots=True)
class Txn:
    """One transaction of the history (a ``txn`` or ``transform`` op)."""

    f: str
    process: int | str
    invoke: int
    completion: int | None = None
    type: str | None = None  # ok / fail / info / None (never completed)
    writes: list[tuple[str, int, Any]] = field(default_factory=list)
    offsets: dict[tuple[str, Any], int] = field(default_factory=dict)  # from the completion
    commit_ns: int | None = None  # history time the producer asked to commit
    consumed: list[tuple[str, int, int, Any]] = field(default_factory=list)  # transform input

    @property
    def ops(self) -> list[int]:
        return [self.invoke] if self.completion is None else [self.invoke, self.completion]


@dataclass(slots=True)
class FinalRead:
    op: int
    records: list[list[Any]]
    end: int | None
    hw: int | None
    complete: bool

    @property
    def stable(self) -> bool:
        return self.complete and self.end is not None and (self.hw is None or self.end >= self.hw)


@dataclass
class TxnFacts:
    facts: Facts
    txns: list[Txn] = field(default_factory=list)
    # (topic, value) -> every txn that wrote it: one for writers' values; a transform's output
    # is written again by the transaction that retries its input after an abort
    by_value: dict[tuple[str, Any], list[Txn]] = field(default_factory=dict)
    # read_committed reads (poll and final): (op index, completion time, records)
    committed_reads: list[tuple[int, int, list[list[Any]]]] = field(default_factory=list)
    uncommitted_values: set[tuple[str, Any]] = field(default_factory=set)
    final_committed: dict[TP, FinalRead] = field(default_factory=dict)
    group_offsets: dict[str, dict[TP, int]] = field(default_factory=dict)
    processes: dict[str, set[int | str]] = field(default_factory=lambda: defaultdict(set))

    def final_values(self) -> dict[tuple[str, Any], tuple[int, int, int]]:
        """(topic, value) -> (partition, offset, op) of the final read_committed reads."""
        out: dict[tuple[str, Any], tuple[int, int, int]] = {}
        for fr in self.final_committed.values():
            for t, p, o, v in fr.records:
                out.setdefault((t, v), (p, o, fr.op))
        return out

    def sole(self, topic: str, value: Any) -> Txn | None:
        """The one transaction that wrote ``value`` (None: none or several)."""
        ws = self.by_value.get((topic, value), ())
        return ws[0] if len(ws) == 1 else None

    def stable(self, topic: str, partition: int) -> FinalRead | None:
        fr = self.final_committed.get((topic, partition))
        return fr if fr is not None and fr.stable else None


def _isolation(*values: Any, default: str = READ_UNCOMMITTED) -> str:
    for v in values:
        if isinstance(v, Mapping) and v.get("isolation"):
            return str(v["isolation"])
    return default


def _fill_txn(txn: Txn, v: Any) -> None:
    if not isinstance(v, Mapping):
        return
    if v.get("writes") and not txn.writes:
        txn.writes = [(w[0], int(w[1]), w[2]) for w in v["writes"]]
    for w in v.get("writes") or ():
        if len(w) > 3 and w[3] is not None:
            txn.offsets[(w[0], w[2])] = int(w[3])
    if v.get("commit_ns") is not None:
        txn.commit_ns = int(v["commit_ns"])
    if v.get("consumed") and not txn.consumed:
        txn.consumed = [(c[0], int(c[1]), int(c[2]), c[3]) for c in v["consumed"]]


def analyse_txn(history: Iterable[Op | Mapping[str, Any]] | TxnFacts) -> TxnFacts:
    """Fold a history into :class:`TxnFacts` (idempotent on TxnFacts)."""
    if isinstance(history, TxnFacts):
        return history
    ops = from_dicts(history)
    tf = TxnFacts(analyse(ops))
    pending: dict[int | str, Op] = {}
    open_txn: dict[int | str, Txn] = {}
    proc_iso: dict[int | str, str] = {}  # from "isolation" in assign/subscribe values
    for op in ops:
        if op.f in RESET_FS and isinstance(op.value, Mapping) and op.value.get("isolation"):
            proc_iso[op.process] = str(op.value["isolation"])
        if op.type == INVOKE:
            pending[op.process] = op
            if op.f in TXN_FS:
                txn = Txn(op.f, op.process, op.index)
                _fill_txn(txn, op.value)
                open_txn[op.process] = txn
                tf.txns.append(txn)
            continue
        inv = pending.pop(op.process, None)
        if op.f in TXN_FS:
            txn = open_txn.pop(op.process, None)
            if txn is None:
                continue
            txn.completion, txn.type = op.index, op.type
            _fill_txn(txn, op.value)
        elif op.f in READ_FS and op.type == OK:
            v = op.value if isinstance(op.value, Mapping) else {}
            iso = _isolation(v, inv.value if inv is not None else None,
                             default=proc_iso.get(op.process, READ_UNCOMMITTED))
            tf.processes[iso].add(op.process)
            records = v.get("records") or []
            if iso == READ_COMMITTED:
                tf.committed_reads.append((op.index, op.time, records))
            else:
                tf.uncommitted_values.update((r[0], r[3]) for r in records)
            if op.f == "final-read" and iso == READ_COMMITTED:
                iv = inv.value if inv is not None and isinstance(inv.value, Mapping) else {}
                tp = (iv["topic"], int(iv["partition"])) if "topic" in iv else None
                if tp is None and records:
                    tp = (records[0][0], int(records[0][1]))
                if tp is not None:
                    tf.final_committed[tp] = FinalRead(op.index, records, v.get("end"),
                                                       v.get("hw"), bool(v.get("complete")))
        elif op.f == "group-offsets" and op.type == OK and isinstance(op.value, Mapping):
            tf.group_offsets[op.value["group"]] = {
                parse_tp(k): int(o) for k, o in (op.value.get("offsets") or {}).items()}
    for txn in tf.txns:
        for t, _p, v in txn.writes:
            tf.by_value.setdefault((t, v), []).append(txn)
    return tf


def _committed_status(tf: TxnFacts, txn: Txn, final: Mapping[tuple[str, Any], Any]
                      ) -> tuple[list[tuple[str, int, Any]], list[tuple[str, int, Any]], int]:
    """(present, absent-from-a-stable-final-read, unchecked) writes of ``txn``."""
    present, absent, unchecked = [], [], 0
    for w in txn.writes:
        t, p, v = w
        if (t, v) in final:
            present.append(w)
            continue
        fr = tf.stable(t, p)
        off = txn.offsets.get((t, v))
        if fr is None or (off is not None and fr.end is not None and off >= fr.end):
            unchecked += 1
        else:
            absent.append(w)
    return present, absent, unchecked


# --------------------------------------------------------------------------- isolation

def check_txn_aborted_read(history: Any) -> CheckResult:
    tf = analyse_txn(history)
    out = _Collector()
    reported: set[tuple[str, Any]] = set()
    for op, _time, records in tf.committed_reads:
        for t, p, o, v in records:
            ws = tf.by_value.get((t, v))
            if ws and all(x.type == FAIL for x in ws) and (t, v) not in reported:
                reported.add((t, v))
                out.add(Anomaly("txn-aborted-read",
                                {"topic": t, "partition": p, "offset": o, "value": v},
                                [*(i for x in ws[:5] for i in x.ops), op]))
    aborted = [x for x in tf.txns if x.type == FAIL]
    seen_uncommitted = sum(1 for x in aborted for t, _p, v in x.writes
                           if (t, v) in tf.uncommitted_values)
    return out.result(aborted_txns=len(aborted),
                      aborted_values_seen_read_uncommitted=seen_uncommitted)


def check_txn_intermediate_read(history: Any) -> CheckResult:
    tf = analyse_txn(history)
    final = tf.final_values()
    out = _Collector()
    not_committed: dict[int, bool] = {}
    reported: set[tuple[str, Any]] = set()
    for op, time_ns, records in tf.committed_reads:
        for t, p, o, v in records:
            ws = [x for x in tf.by_value.get((t, v), ()) if x.type != FAIL]
            if not ws or (t, v) in reported:
                continue
            txn = ws[0]
            details = {"topic": t, "partition": p, "offset": o, "value": v, "txn": txn.invoke}
            if all(x.commit_ns is not None and time_ns < x.commit_ns for x in ws):
                reported.add((t, v))
                out.add(Anomaly("txn-intermediate-read",
                                {**details, "why": "read before the commit was requested"},
                                [*txn.ops, op]))
            elif txn.type == INFO and tf.sole(t, v) is txn:
                if txn.invoke not in not_committed:
                    present, absent, _ = _committed_status(tf, txn, final)
                    not_committed[txn.invoke] = not present and bool(absent)
                if not_committed[txn.invoke]:
                    reported.add((t, v))
                    out.add(Anomaly("txn-intermediate-read",
                                    {**details, "why": "its transaction did not commit"},
                                    [*txn.ops, op]))
    return out.result(committed_reads=len(tf.committed_reads))


# --------------------------------------------------------------------------- atomicity

def check_txn_lost_write(history: Any) -> CheckResult:
    tf = analyse_txn(history)
    final = tf.final_values()
    out = _Collector()
    unchecked = 0
    for txn in tf.txns:
        if txn.type != OK:
            continue
        _present, absent, n = _committed_status(tf, txn, final)
        unchecked += n
        for t, p, v in absent:
            out.add(Anomaly("txn-lost-write",
                            {"topic": t, "partition": p, "value": v,
                             "offset": txn.offsets.get((t, v))},
                            [*txn.ops, tf.final_committed[(t, p)].op]))
    return out.result(committed_txns=sum(1 for x in tf.txns if x.type == OK),
                      unchecked_unstable=unchecked)


def check_txn_partial(history: Any) -> CheckResult:
    tf = analyse_txn(history)
    final = tf.final_values()
    out = _Collector()
    for txn in tf.txns:
        if any(tf.sole(t, v) is not txn for t, _p, v in txn.writes):
            continue  # a transform's output written again by its retry: exactly-once's job
        present, absent, _ = _committed_status(tf, txn, final)
        if present and absent:
            out.add(Anomaly("txn-partial",
                            {"txn": txn.invoke, "outcome": txn.type,
                             "present": [list(w) for w in present],
                             "absent": [list(w) for w in absent]},
                            [*txn.ops, *sorted({tf.final_committed[(t, p)].op
                                                for t, p, _v in absent})]))
    return out.result(txns=len(tf.txns))


def check_txn_hanging(history: Any) -> CheckResult:
    tf = analyse_txn(history)
    out = _Collector()
    for (t, p), fr in sorted(tf.final_committed.items()):
        if fr.end is not None and fr.hw is not None and fr.end < fr.hw:
            out.add(Anomaly("txn-hanging", {"topic": t, "partition": p, "lso": fr.end,
                                            "hw": fr.hw}, [fr.op]))
    return out.result(final_reads=len(tf.final_committed))


# --------------------------------------------------------------------------- write order

def _sccs(adj: Mapping[Any, list[Any]]) -> list[list[Any]]:
    """Strongly connected components of size > 1 (iterative Tarjan)."""
    index: dict[Any, int] = {}
    low: dict[Any, int] = {}
    on_stack: set[Any] = set()
    stack: list[Any] = []
    out: list[list[Any]] = []
    counter = 0
    for root in list(adj):
        if root in index:
            continue
        work = [(root, iter(adj.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(adj.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def check_txn_write_cycle(history: Any) -> CheckResult:
    tf = analyse_txn(history)
    final = tf.final_values()
    committed: dict[tuple[str, Any], Txn] = {}
    for key in final:
        txn = tf.sole(*key)
        if txn is not None:
            committed[key] = txn
    adj: dict[Any, list[Any]] = defaultdict(list)
    events = sorted({i for txn in committed.values() for i in txn.ops})
    for a, b in zip(events, events[1:], strict=False):
        adj[("h", a)].append(("h", b))
    per_tp: dict[TP, list[tuple[int, tuple[str, Any]]]] = defaultdict(list)
    ww: dict[TP, list[int]] = defaultdict(list)
    for key, txn in committed.items():
        p, o, _op = final[key]
        node = ("r", key)
        adj[("h", txn.invoke)].append(node)
        if txn.type == OK and txn.completion is not None:
            adj[node].append(("h", txn.completion))
        per_tp[(key[0], p)].append((o, key))
    for tp, recs in per_tp.items():
        recs.sort()
        for (_o1, k1), (_o2, k2) in zip(recs, recs[1:], strict=False):
            adj[("r", k1)].append(("r", k2))
        ww[tp] = [committed[k].invoke for _o, k in recs]
    out = _Collector()
    for comp in _sccs(adj):
        txns = {committed[n[1]].invoke: committed[n[1]] for n in comp if n[0] == "r"}
        recs = sorted(([n[1][0], final[n[1]][0], final[n[1]][1], n[1][1]]
                       for n in comp if n[0] == "r"), key=lambda r: (r[0], r[1], r[2]))
        out.add(Anomaly("txn-write-cycle", {"txns": sorted(txns), "records": recs[:20]},
                        sorted({i for txn in txns.values() for i in txn.ops})))
    return out.result(committed_records=len(committed), ww_cycles=_ww_cycles(ww))


def _ww_cycles(order: Mapping[TP, list[int]]) -> int:
    """Pairs of transactions in opposite orders in two partitions (allowed; informational)."""
    first: dict[tuple[int, int], bool] = {}
    cycles = 0
    for txns in order.values():
        pos: dict[int, int] = {}
        for i, t in enumerate(txns):
            pos.setdefault(t, i)
        ts = sorted(pos, key=pos.__getitem__)
        for i, a in enumerate(ts):
            for b in ts[i + 1:i + 8]:  # neighbours only: bounded work, enough to count
                key = (min(a, b), max(a, b))
                fwd = a < b
                if key in first and first[key] != fwd:
                    cycles += 1
                first.setdefault(key, fwd)
    return cycles


# --------------------------------------------------------------------------- transform

def check_transform_exactly_once(history: Any) -> CheckResult:
    tf = analyse_txn(history)
    out = _Collector()
    transforms = [x for x in tf.txns if x.f == "transform"]
    outputs: dict[Any, list[tuple[str, int, int, int]]] = defaultdict(list)
    out_tps = {(t, p) for x in transforms for t, p, _v in x.writes}
    for tp in out_tps:
        fr = tf.final_committed.get(tp)
        for t, p, o, v in fr.records if fr is not None else ():
            outputs[v].append((t, p, o, fr.op))
    unchecked = not all(tf.stable(t, p) for t, p in out_tps)
    inputs: dict[TP, dict[int, Any]] = defaultdict(dict)
    for fr in tf.facts.reads:  # input records: from any read (the input is not transactional)
        for t, p, o, v in fr[3]:
            inputs[(t, p)].setdefault(o, v)
    consumed_by: dict[tuple[str, int, int], Txn] = {}
    for x in transforms:
        for t, p, o, _v in x.consumed:
            consumed_by.setdefault((t, p, o), x)
    checked = 0
    for group, committed_offsets in ([] if unchecked else tf.group_offsets.items()):
        for (it, ip), committed_offset in committed_offsets.items():
            for io, v in sorted(inputs.get((it, ip), {}).items()):
                checked += 1
                got = outputs.get(f"{TRANSFORM_PREFIX}{v}", [])
                want = 1 if io < committed_offset else 0
                if len(got) != want:
                    txn = consumed_by.get((it, ip, io))
                    kind = ("transform-output-without-offsets" if not want else
                            "transform-duplicate" if got else "transform-lost")
                    out.add(Anomaly(kind, {"group": group, "input": [it, ip, io, v],
                                           "committed_offset": committed_offset,
                                           "outputs": [list(g[:3]) for g in got]},
                                    sorted({*(txn.ops if txn else ()), *(g[3] for g in got)})))
    if not tf.group_offsets:  # no final group offsets: at least committed inputs, once each
        for x in transforms:
            if x.type != OK or unchecked:
                continue
            for t, p, o, v in x.consumed:
                checked += 1
                got = outputs.get(f"{TRANSFORM_PREFIX}{v}", [])
                if len(got) != 1:
                    out.add(Anomaly("transform-duplicate" if got else "transform-lost",
                                    {"input": [t, p, o, v],
                                     "outputs": [list(g[:3]) for g in got]},
                                    sorted({*x.ops, *(g[3] for g in got)})))
    return out.result(transforms=len(transforms), inputs_checked=checked,
                      unchecked_unstable_output=unchecked)


# --------------------------------------------------------------------------- all together

TXN_CHECKERS = (
    "txn-aborted-read", "txn-intermediate-read", "txn-lost-write", "txn-partial",
    "txn-write-cycle", "txn-hanging", "transform-exactly-once",
)


def _split_poll_skip(tf: TxnFacts) -> CheckResult:
    """poll-skip within each isolation level's readers (final reads included)."""
    results = []
    for iso in (READ_COMMITTED, READ_UNCOMMITTED):
        procs = tf.processes.get(iso, set())
        results.append(check_poll_skip([op for op in tf.facts.history if op.process in procs]))
    anomalies = [a for r in results for a in r.anomalies]
    count = sum(r.stats.get("anomalies", 0) for r in results)
    return CheckResult(count == 0, anomalies, {"anomalies": count})


def _split_duplicate(tf: TxnFacts) -> CheckResult:
    """duplicate, knowing that a value several transactions wrote (a transform's output written
    again by the transaction that retries its input after an abort) may stand at several offsets
    for read_uncommitted readers — the aborted attempt and the retry — but never twice in
    read_committed reads; a value one transaction wrote may stand once, for everyone."""
    uncommitted = tf.processes.get(READ_UNCOMMITTED, set())
    everyone = check_duplicate(tf.facts.history)
    committed = check_duplicate([op for op in tf.facts.history if op.process not in uncommitted])

    def key(a: Anomaly) -> tuple[str, Any]:
        return a.details["topic"], a.details["value"]

    keep = [a for a in everyone.anomalies if len(tf.by_value.get(key(a), ())) <= 1]
    kept = {key(a) for a in keep}
    keep += [a for a in committed.anomalies if key(a) not in kept]
    return CheckResult(not keep, keep, {**everyone.stats, "anomalies": len(keep)})


def check_all_txn(history: Iterable[Op | Mapping[str, Any]] | TxnFacts,
                  node_events: Sequence[Mapping[str, Any]] = (), *,
                  start_mono_ns: int | None = None) -> Summary:
    """The txn checkers, the sound queue checkers and the node-event checkers."""
    from .node_events import check_node_events

    tf = analyse_txn(history)
    results = _history_checks(tf.facts)
    results["poll-skip"] = _split_poll_skip(tf)
    results["duplicate"] = _split_duplicate(tf)
    results.update({
        "txn-aborted-read": check_txn_aborted_read(tf),
        "txn-intermediate-read": check_txn_intermediate_read(tf),
        "txn-lost-write": check_txn_lost_write(tf),
        "txn-partial": check_txn_partial(tf),
        "txn-write-cycle": check_txn_write_cycle(tf),
        "txn-hanging": check_txn_hanging(tf),
        "transform-exactly-once": check_transform_exactly_once(tf),
    })
    results.update(check_node_events(node_events, tf.facts, start_mono_ns=start_mono_ns))
    anomalies = [a for r in results.values() for a in r.anomalies]
    return Summary(all(r.valid for r in results.values()), anomalies, results)
