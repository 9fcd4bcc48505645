"""Every txn checker flags its anomaly in a small hand-made history and accepts a clean one."""

from __future__ import annotations

from typing import Any

from rafka.chaos_tests.checkers_txn import (
    TXN_CHECKERS,
    analyse_txn,
    check_all_txn,
    check_transform_exactly_once,
    check_txn_aborted_read,
    check_txn_hanging,
    check_txn_intermediate_read,
    check_txn_lost_write,
    check_txn_partial,
    check_txn_write_cycle,
)
from rafka.chaos_tests.tests.histgen import Builder

RC, RU = "read_committed", "read_uncommitted"


class TxnBuilder(Builder):
    """Builder plus the txn workload's ops (shapes in chaos_tests/workloads/txn.py)."""

    def txn(self, p: Any, writes: list[tuple[str, int, Any, int | None]], type: str = "ok",
            f: str = "txn", commit_ns: int | None = None, **extra: Any) -> tuple[int, int]:
        inv = {"writes": [[t, part, v] for t, part, v, _o in writes], "abort": type == "fail",
               **extra}
        res = dict(inv, writes=[list(w) for w in writes])
        if commit_ns is not None:
            res["commit_ns"] = commit_ns
        return self.op(p, f, inv, type, res)

    def read(self, p: Any, records: list[list[Any]], iso: str = RC) -> tuple[int, int]:
        return self.op(p, "poll", {"isolation": iso}, "ok",
                       {"records": records, "isolation": iso})

    def final(self, topic: str, part: int, records: list[list[Any]], *, iso: str = RC,
              end: int | None = None, hw: int | None = None, complete: bool = True
              ) -> tuple[int, int]:
        end = end if end is not None else (records[-1][2] + 2 if records else 0)
        res = {"records": records, "end": end, "hw": end if hw is None else hw,
               "complete": complete, "isolation": iso}
        return self.op(f"final-{topic}-{part}-{iso}", "final-read",
                       {"topic": topic, "partition": part, "isolation": iso}, "ok", res)


def _valid(result) -> bool:
    return result.valid and result.stats["anomalies"] == 0


def _two_partition_run(b: TxnBuilder, *, outcome: str = "ok", seen: tuple[bool, bool] = (True, True)
                       ) -> None:
    """One committed txn writing a/0 and a/1 (offsets 0), one aborted at offsets 2."""
    b.txn(1, [("a", 0, 1, 0), ("a", 1, 2, 0)], outcome)
    b.txn(1, [("a", 0, 3, 2), ("a", 1, 4, 2)], "fail")
    b.final("a", 0, [["a", 0, 0, 1]] if seen[0] else [], end=5, hw=5)
    b.final("a", 1, [["a", 1, 0, 2]] if seen[1] else [], end=5, hw=5)


# --------------------------------------------------------------------------- each checker

def test_aborted_read():
    ok = TxnBuilder()
    _two_partition_run(ok)
    ok.read(9, [["a", 0, 2, 3]], iso=RU)  # read_uncommitted may see the aborted value
    res = check_txn_aborted_read(ok.ops)
    assert _valid(res) and res.stats["aborted_values_seen_read_uncommitted"] == 1
    bad = TxnBuilder()
    _two_partition_run(bad)
    bad.read(9, [["a", 0, 0, 1], ["a", 0, 2, 3]])  # read_committed: must not
    res = check_txn_aborted_read(bad.ops)
    assert not res.valid and res.anomalies[0].details["value"] == 3


def test_intermediate_read_of_an_info_txn_that_never_committed():
    ok = TxnBuilder()
    ok.txn(1, [("a", 0, 1, None), ("a", 1, 2, None)], "info")
    ok.read(9, [["a", 0, 0, 1]])
    ok.final("a", 0, [["a", 0, 0, 1]])
    ok.final("a", 1, [["a", 1, 0, 2]])  # the info txn did commit: the read was fine
    assert _valid(check_txn_intermediate_read(ok.ops))
    bad = TxnBuilder()
    bad.txn(1, [("a", 0, 1, None), ("a", 1, 2, None)], "info")
    bad.read(9, [["a", 0, 0, 1]])
    bad.final("a", 0, [], end=3, hw=3)
    bad.final("a", 1, [], end=3, hw=3)
    res = check_txn_intermediate_read(bad.ops)
    assert not res.valid and "did not commit" in res.anomalies[0].details["why"]


def test_intermediate_read_before_the_commit_was_requested():
    b = TxnBuilder()
    b.read(9, [["a", 0, 0, 1]])  # completes at t = 2 ms
    b.txn(1, [("a", 0, 1, 0)], "ok", commit_ns=b.t + 500)  # the commit asked for later
    b.final("a", 0, [["a", 0, 0, 1]])
    res = check_txn_intermediate_read(b.ops)
    assert not res.valid and "before the commit" in res.anomalies[0].details["why"]
    ok = TxnBuilder()
    ok.txn(1, [("a", 0, 1, 0)], "ok", commit_ns=1)
    ok.read(9, [["a", 0, 0, 1]])
    ok.final("a", 0, [["a", 0, 0, 1]])
    assert _valid(check_txn_intermediate_read(ok.ops))


def test_lost_committed_write_only_from_a_stable_final_read():
    ok = TxnBuilder()
    _two_partition_run(ok)
    assert _valid(check_txn_lost_write(ok.ops))
    bad = TxnBuilder()
    _two_partition_run(bad, seen=(True, False))
    res = check_txn_lost_write(bad.ops)
    assert not res.valid and res.anomalies[0].details == {
        "topic": "a", "partition": 1, "value": 2, "offset": 0}
    unstable = TxnBuilder()  # LSO below the high watermark: absence proves nothing
    unstable.txn(1, [("a", 0, 1, 4)], "ok")
    unstable.final("a", 0, [], end=3, hw=6)
    res = check_txn_lost_write(unstable.ops)
    assert _valid(res) and res.stats["unchecked_unstable"] == 1
    assert not check_txn_hanging(unstable.ops).valid
    assert _valid(check_txn_hanging(ok.ops))


def test_partial_transaction():
    ok = TxnBuilder()
    _two_partition_run(ok, outcome="info")  # info, all values present: committed whole
    ok.txn(2, [("a", 0, 7, None), ("a", 1, 8, None)], "info")  # info, none present: aborted
    assert _valid(check_txn_partial(ok.ops))
    bad = TxnBuilder()
    _two_partition_run(bad, outcome="info", seen=(False, True))
    res = check_txn_partial(bad.ops)
    assert not res.valid
    assert res.anomalies[0].details["present"] == [["a", 1, 2]]
    assert res.anomalies[0].details["absent"] == [["a", 0, 1]]


def test_write_cycle_needs_real_time_not_just_opposite_orders():
    # concurrent A and B in opposite orders in two partitions: allowed in Kafka's model
    b = TxnBuilder()
    ia = b.event(1, "invoke", "txn", {"writes": [["a", 0, 1], ["a", 1, 2]]})
    ib = b.event(2, "invoke", "txn", {"writes": [["a", 0, 3], ["a", 1, 4]]})
    b.event(1, "ok", "txn", {"writes": [["a", 0, 1, 0], ["a", 1, 2, 1]]})
    b.event(2, "ok", "txn", {"writes": [["a", 0, 3, 1], ["a", 1, 4, 0]]})
    b.final("a", 0, [["a", 0, 0, 1], ["a", 0, 1, 3]])
    b.final("a", 1, [["a", 1, 0, 4], ["a", 1, 1, 2]])
    res = check_txn_write_cycle(b.ops)
    assert _valid(res) and res.stats["ww_cycles"] == 1 and ia < ib
    # the same orders, but A committed before B began: B's record below A's is impossible
    bad = TxnBuilder()
    bad.txn(1, [("a", 0, 1, 0), ("a", 1, 2, 1)])
    bad.txn(2, [("a", 0, 3, 1), ("a", 1, 4, 0)])
    bad.final("a", 0, [["a", 0, 0, 1], ["a", 0, 1, 3]])
    bad.final("a", 1, [["a", 1, 0, 4], ["a", 1, 1, 2]])
    res = check_txn_write_cycle(bad.ops)
    assert not res.valid and res.anomalies[0].details["txns"] == [0, 2]


def _transform_run(b: TxnBuilder, outputs: list[list[Any]], committed: int) -> None:
    b.send(5, 0, 10, offset=0, topic="in")
    b.send(5, 0, 11, offset=1, topic="in")
    b.txn(6, [("out", 0, "t:10", 0), ("out", 0, "t:11", 1)], "ok", f="transform",
          consumed=[["in", 0, 0, 10], ["in", 0, 1, 11]], group="g",
          offsets={"in/0": 2})
    b.final("in", 0, [["in", 0, 0, 10], ["in", 0, 1, 11]], iso=RU)
    b.final("out", 0, outputs, end=10, hw=10)
    b.op("h", "group-offsets", {"group": "g"}, "ok",
         {"group": "g", "offsets": {"in/0": committed}})


def test_transform_exactly_once():
    ok = TxnBuilder()
    _transform_run(ok, [["out", 0, 0, "t:10"], ["out", 0, 1, "t:11"]], committed=2)
    res = check_transform_exactly_once(ok.ops)
    assert _valid(res) and res.stats["inputs_checked"] == 2
    dup = TxnBuilder()  # offsets committed outside the txn, a crash in between: replayed
    _transform_run(dup, [["out", 0, 0, "t:10"], ["out", 0, 1, "t:11"], ["out", 0, 3, "t:10"]],
                   committed=2)
    assert {a.type for a in check_transform_exactly_once(dup.ops).anomalies} == {
        "transform-duplicate"}
    lost = TxnBuilder()  # offsets committed, output aborted
    _transform_run(lost, [["out", 0, 1, "t:11"]], committed=2)
    assert {a.type for a in check_transform_exactly_once(lost.ops).anomalies} == {
        "transform-lost"}
    ahead = TxnBuilder()  # output committed, offsets not
    _transform_run(ahead, [["out", 0, 0, "t:10"], ["out", 0, 1, "t:11"]], committed=1)
    assert {a.type for a in check_transform_exactly_once(ahead.ops).anomalies} == {
        "transform-output-without-offsets"}


# --------------------------------------------------------------------------- all together

def test_check_all_txn_valid_run_and_poll_skip_per_isolation():
    b = TxnBuilder()
    b.txn(1, [("a", 0, 1, 0), ("a", 1, 2, 0)])
    b.txn(1, [("a", 0, 3, 2), ("a", 1, 4, 2)], "fail")
    b.txn(1, [("a", 0, 5, 4)])
    b.read(8, [["a", 0, 0, 1], ["a", 0, 2, 3]], iso=RU)
    b.read(9, [["a", 0, 0, 1]])
    b.read(9, [["a", 0, 4, 5]])  # read_committed skipping the aborted offset 2: fine
    b.final("a", 0, [["a", 0, 0, 1], ["a", 0, 4, 5]])
    b.final("a", 1, [["a", 1, 0, 2]], end=4, hw=4)
    summary = check_all_txn(b.ops)
    bad = {k: r.stats for k, r in summary.checkers.items() if not r.valid}
    assert not bad, bad
    assert set(TXN_CHECKERS) <= set(summary.checkers) and "poll-skip" in summary.checkers
    b.read(8, [["a", 0, 4, 5]], iso=RU)  # read_uncommitted skipping a seen offset (2..3): not
    b.read(8, [["a", 0, 6, 9]], iso=RU)
    b.read(7, [["a", 0, 5, 6]], iso=RU)
    assert not check_all_txn(b.ops).checkers["poll-skip"].valid


def test_analyse_reads_isolation_and_outcomes():
    b = TxnBuilder()
    _two_partition_run(b)
    tf = analyse_txn(b.ops)
    assert [t.type for t in tf.txns] == ["ok", "fail"]
    assert tf.txns[0].offsets == {("a", 1): 0, ("a", 2): 0}
    assert set(tf.final_committed) == {("a", 0), ("a", 1)}
    assert all(fr.stable for fr in tf.final_committed.values())


def test_a_retried_transform_owns_the_outputs_its_aborted_attempt_wrote():
    """Seen in the first real txn campaign: a transform failed (KafkaTimeoutError while
    sending), the next member re-consumed the same input and committed the same outputs."""
    b = TxnBuilder()
    attempt = dict(f="transform", consumed=[["in", 0, 0, 10]], group="g", offsets={"in/0": 1})
    b.txn(6, [("out", 0, "t:10", None)], "fail", **attempt)
    b.txn(7, [("out", 0, "t:10", 0)], "ok", **attempt)
    b.read(9, [["out", 0, 0, "t:10"]])
    b.final("out", 0, [["out", 0, 0, "t:10"]])
    summary = check_all_txn(b.ops)
    assert summary.valid, {k: r.stats for k, r in summary.checkers.items() if not r.valid}
    only_failed = TxnBuilder()
    only_failed.txn(6, [("out", 0, "t:10", None)], "fail", **attempt)
    only_failed.read(9, [["out", 0, 0, "t:10"]])
    assert not check_txn_aborted_read(only_failed.ops).valid


def test_duplicate_allows_a_retried_output_twice_only_for_read_uncommitted():
    """Seen in txn campaign seed 3: a read_uncommitted reader saw a transform output at two
    offsets — the aborted attempt's and the retry's. That is no duplicate; the same in a
    read_committed read is, and so is a value one transaction wrote seen twice by anyone."""
    attempt = dict(f="transform", consumed=[["in", 0, 0, 10]], group="g", offsets={"in/0": 1})

    def run(reader_iso: str, *, retried: bool = True) -> Any:
        b = TxnBuilder()
        if retried:
            b.txn(6, [("out", 0, "t:10", 0)], "fail", **attempt)
        b.txn(7, [("out", 0, "t:10", 2)], "ok", **attempt)
        b.read(9, [["out", 0, 0, "t:10"], ["out", 0, 2, "t:10"]], iso=reader_iso)
        b.final("out", 0, [["out", 0, 2, "t:10"]], end=4, hw=4)
        return check_all_txn(b.ops).checkers["duplicate"]

    assert _valid(run(RU))
    assert not run(RC).valid
    assert not run(RU, retried=False).valid
