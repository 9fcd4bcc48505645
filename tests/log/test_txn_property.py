"""Property: any interleaving of producers' transactional batches and markers gives the same
last stable offset and aborted lists from the live log, from a pure model, and from a fresh
recovery (clean, crashed, and with every aborted-transaction index file lost), and again after
truncating the log at any batch boundary (a follower's divergence)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rafka.log.config import LogConfig
from rafka.log.partition_log import CLEAN_SHUTDOWN_FILE, PartitionLog

from .conftest import T0, make_batch
from .test_txn_log import Producers

CFG = LogConfig.from_dict({"segment.bytes": "500"})

ops = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.just("commit"), st.integers(1, 3)),
    st.tuples(st.just("abort"), st.integers(1, 3)),
    st.tuples(st.just("fence"), st.integers(1, 3)),  # abort with a bumped epoch
    st.tuples(st.just("plain"), st.integers(1, 2)),
    st.tuples(st.just("roll"),),
), min_size=1, max_size=40)


class Model:
    def __init__(self) -> None:
        self.open: dict[int, int] = {}
        self.aborted: list[tuple[int, int, int]] = []  # (pid, first, last) in marker order
        self.events: list[tuple[int, int, bool | None]] = []  # (offset, pid, commit?)

    def truncated(self, offset: int) -> Model:
        """The model of the log cut at ``offset`` (a batch boundary)."""
        m = Model()
        for off, pid, commit in self.events:
            if off < offset:
                m.data(pid, off) if commit is None else m.marker(pid, off, commit)
        return m

    def data(self, pid: int, offset: int) -> None:
        self.events.append((offset, pid, None))
        self.open.setdefault(pid, offset)

    def marker(self, pid: int, offset: int, commit: bool) -> None:
        self.events.append((offset, pid, commit))
        first = self.open.pop(pid, None)
        if first is not None and not commit:
            self.aborted.append((pid, first, offset))

    def collect(self, a: int, b: int) -> list[tuple[int, int]]:
        return [(p, f) for p, f, last in self.aborted if last >= a and f < b]


def check(log: PartitionLog, model: Model) -> tuple:
    seen = observe(log)
    assert seen[0] == (min(model.open.values()) if model.open else None)
    assert seen[1] == model.open
    assert seen[2] == {k: model.collect(*k) for k in seen[2]}
    return seen


def observe(log: PartitionLog) -> tuple:
    leo = log.log_end_offset
    return (log.first_unstable_offset(), log.producer_state.open_transactions(),
            {(a, b): log.collect_aborted(a, b)
             for a in range(0, leo + 1, 2) for b in range(a, leo + 2, 3)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.integers(0, 10**6))
def test_live_model_and_recovery_agree(script, cut):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "p"
        log = PartitionLog.open(d, CFG, now_ms=lambda: T0)
        p = Producers(log)
        model = Model()
        for op in script:
            kind = op[0]
            if kind == "send":
                model.data(op[1], p.send(op[1], op[2], value=b"v" * 40))
            elif kind in ("commit", "abort", "fence"):
                epoch = p.epoch.get(op[1], 0) + 1 if kind == "fence" else None
                model.marker(op[1], p.end(op[1], kind == "commit", epoch=epoch),
                             kind == "commit")
            elif kind == "plain":
                log.append(make_batch(op[1], value=b"x" * 40), 0)
            else:
                log.roll()
        live = check(log, model)

        log.close()  # clean reopen
        log = PartitionLog.open(d, CFG, now_ms=lambda: T0)
        assert observe(log) == live
        log.flush()
        log._crash()  # crash: unclean reopen
        log = PartitionLog.open(d, CFG, now_ms=lambda: T0)
        assert observe(log) == live
        log.close()  # lose every index file and the clean-shutdown marker
        for f in d.glob("*.txnindex"):
            f.unlink()
        (d / CLEAN_SHUTDOWN_FILE).unlink()
        log = PartitionLog.open(d, CFG, now_ms=lambda: T0)
        assert observe(log) == live

        bounds = [h.base_offset for _seg, _pos, h in log.iter_headers(0)]
        at = bounds[cut % len(bounds)] if bounds else 0
        log.truncate_to(at)
        cut_model = model.truncated(at)
        cut_view = check(log, cut_model)
        log.flush()
        log._crash()
        log = PartitionLog.open(d, CFG, now_ms=lambda: T0)
        assert observe(log) == cut_view
        log.close()
