"""Issue 28: the high watermark never counts a follower position the leader has not verified.

A docker chaos run reported an ``acks=all`` offset truncated on a replica that, by its own
metadata view, was in the ISR. Two questions: can the leader count a diverging follower in
the high watermark (a real loss of an acknowledged write if the leader then dies), or was the
report a false positive of the checker? These tests answer the first, deterministically:

* ``test_broker_*``: the real FETCH handler of an in-process broker (real logs on disk, real
  TCP), driven with the follower fetches that matter after a leader change where the new
  leader's log ends below the follower's (the follower holds the old leader's unreplicated
  suffix): diverging, without ``last_fetched_epoch``, past the leader's end, with the previous
  leader epoch (in flight from before the change). None may move the high watermark; the
  consistent fetch must (so the test can see it move). Before the fix, a fetch without
  ``last_fetched_epoch`` was trusted and a past-the-end one clamped to the log end and
  counted: both moved the HW over records the follower does not hold.
* ``test_every_interleaving_*``: every interleaving, up to a depth, of leader appends, follower
  fetches (each kind above, sent at one moment and delivered at a later one), the follower
  handling the answers (truncate on a diverging epoch, else copy what was served), and ISR
  changes committing. The decisions are the real ones (``verify_follower_fetch``,
  ``LeaderState``, ``truncation_offset``); after every step: every member of the leader's
  maximal ISR holds exactly the leader's records below the HW.

The chaos report itself was the checker judging ISR membership by the truncating node's own,
stale, metadata: see docs/chaos-results.md ("Issue 28") and chaos_tests/node_events.py.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
from rafka.broker.replication.epochs import (
    EpochEndOffset,
    EpochTable,
    truncation_offset,
    verify_follower_fetch,
)
from rafka.broker.replication.state import (
    AlterPartitionRequest,
    LeaderState,
    validate_leader_epoch,
)
from rafka.metadata.records import Partition, RegisterBroker, Topic, UnfenceBroker
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from tests.broker.harness import batch, next_offsets, part, produce_body, running_broker

# --------------------------------------------------------------------------- the real broker

TID = "id-t"


def follower_fetch(offset: int, last_epoch: int | None, current_epoch: int | None) -> dict[str, Any]:
    pd: dict[str, Any] = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
    if last_epoch is not None:
        pd["last_fetched_epoch"] = last_epoch
    if current_epoch is not None:
        pd["current_leader_epoch"] = current_epoch
    return {"replica_id": 2, "broker_epoch": -1, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": 1 << 20, "topics": [{"name": "t", "partitions": [pd]}]}


async def test_broker_counts_only_verified_follower_positions(tmp_path: Any) -> None:
    async with running_broker(tmp_path) as b, b.connect() as conn:
        o = next_offsets(5)
        await b.publisher.publish_records([
            (o[0], 1, RegisterBroker(2, "inc-2", "127.0.0.1", 1)), (o[1], 1, UnfenceBroker(2)),
            (o[2], 1, Topic("t", TID)),
            # epoch 0: broker 1 leads alone (broker 2 was cut off) and appends 5 records
            (o[3], 1, Partition(TID, 0, (1, 2), (1,), 1, 0, 0)),
        ])
        r = (await conn.request(ApiKey.PRODUCE, produce_body("t", batch(*[b"e0"] * 5), acks=1))).body
        assert part(r)["error"] == 0
        p = b.rm.get("t", 0)
        assert p.high_watermark == 5
        # Leader change: broker 1 leads again in epoch 1 with broker 2 in the ISR. Broker 2
        # holds 7 records of epoch 0 — two that broker 1 never had (another leader's suffix).
        await b.publisher.publish_records([(o[4], 1, Partition(TID, 0, (1, 2), (1, 2), 1, 1, 1))])
        r = (await conn.request(ApiKey.PRODUCE, produce_body("t", batch(b"e1a", b"e1b", b"e1c"),
                                                             acks=1))).body
        assert part(r)["error"] == 0 and part(r)["base_offset"] == 5
        assert p.log.log_end_offset == 8 and p.high_watermark == 5  # held by broker 2 (unknown)

        async def fetch(offset: int, last: int | None, cur: int | None) -> dict[str, Any]:
            return part((await conn.request(ApiKey.FETCH, follower_fetch(offset, last, cur))).body)

        # the follower's real claim: 7 records, the last of epoch 0 — epoch 0 ends at 5 here
        e = await fetch(7, 0, 1)
        assert e["diverging_epoch"] == {"epoch": 0, "end_offset": 5} and e["records_len"] == 0
        assert p.high_watermark == 5
        # the same log without last_fetched_epoch: nothing proves its 7 records are ours
        e = await fetch(7, None, 1)
        assert p.high_watermark == 5, "an unverified position moved the high watermark"
        assert e["error"] == ErrorCode.INVALID_REQUEST and e["records_len"] == 0
        assert "last fetched epoch" in e["message"]
        # past the leader's end, without an epoch (before the fix: clamped to 8 and counted)
        e = await fetch(9, None, 1)
        assert p.high_watermark == 5, "a past-the-end position moved the high watermark"
        assert e["error"] == ErrorCode.INVALID_REQUEST and e["records_len"] == 0
        # past the leader's end with the leader's own epoch: diverging too
        e = await fetch(9, 1, 1)
        assert e["diverging_epoch"] == {"epoch": 1, "end_offset": 8}
        assert p.high_watermark == 5
        # a fetch built in epoch 0 (in flight across the leader change) is fenced
        e = await fetch(7, 0, 0)
        assert e["error"] == ErrorCode.FENCED_LEADER_EPOCH and p.high_watermark == 5
        # after truncating to 5 (KIP-279) the follower is consistent: counted, then caught up
        e = await fetch(5, 0, 1)
        assert e["error"] == 0 and e["diverging_epoch"] is None and e["records_len"] > 0
        assert p.high_watermark == 5
        e = await fetch(8, 1, 1)
        assert e["error"] == 0 and e["diverging_epoch"] is None
        assert p.high_watermark == 8  # the check can see the HW move


async def test_broker_counts_an_empty_follower_at_the_log_start(tmp_path: Any) -> None:
    """No ``last_fetched_epoch`` is fine for an empty follower log at our log start (a new
    replica, or one that started over there): nothing below it to disagree about."""
    async with running_broker(tmp_path) as b, b.connect() as conn:
        o = next_offsets(2)
        await b.publisher.publish_records([
            (o[0], 1, Topic("t", TID)), (o[1], 1, Partition(TID, 0, (1, 2), (1, 2), 1, 0, 0))])
        e = part((await conn.request(ApiKey.FETCH, follower_fetch(0, None, 0))).body)
        assert e["error"] == 0 and e["diverging_epoch"] is None
        assert b.rm.get("t", 0).leader_state.followers[2].log_end_offset == 0


# --------------------------------------------------------------------------- pure decisions


def test_verify_follower_fetch_table() -> None:
    leader = EpochTable(((0, 0), (1, 5)), 8)  # epoch 0: [0, 5), epoch 1: [5, 8)
    v = verify_follower_fetch
    assert v(leader, 0, 8, 7, 0).diverging == EpochEndOffset(0, 5)
    assert v(leader, 0, 8, 5, 0).position == 5
    assert v(leader, 0, 8, 8, 1).position == 8
    assert v(leader, 0, 8, 9, 1).diverging == EpochEndOffset(1, 8)
    assert v(leader, 0, 8, 6, 2).diverging == EpochEndOffset(1, 8)  # an epoch we never had
    assert v(leader, 0, 8, 0, None).position == 0
    for offset in (3, 8, 9):  # no epoch above the log start: refused, whatever the offset
        verdict = v(leader, 0, 8, offset, None)
        assert verdict.refused and verdict.position is None and verdict.diverging is None
    assert v(leader, 4, 8, 4, None).position == 4  # started over at our log start
    assert v(leader, 4, 8, 2, None) == v(leader, 4, 8, 2, 0)  # below the start: the read says
    assert v(leader, 4, 8, 2, 0).position is None
    assert v(EpochTable(), 0, 0, 3, 0).diverging is not None  # we hold nothing of epoch 0


# One partition, replicas 1 (the new leader), 2 and 3. Logs are lists of (epoch, value).
# Before the model starts, broker 3 led epoch 0 and wrote "x", "y" that only broker 2 copied;
# broker 1 was elected in epoch 1 with its log ending below theirs.
BASE = [(0, f"b{i}") for i in range(3)]


def epochs_of(log: list[tuple[int, str]], assigned: tuple[int, int] | None = None) -> EpochTable:
    t = EpochTable()
    for off, (epoch, _v) in enumerate(log):
        t = t.appended(epoch, off, off + 1)
    if assigned is not None and (t.latest_epoch or -1) < assigned[0]:
        t = EpochTable(t.entries + (assigned,), len(log))
    return t


@dataclass(frozen=True)
class Request:
    """A follower fetch as sent: its log at that moment, and what it named."""

    sender: int
    offset: int
    last_epoch: int | None
    current_epoch: int


@dataclass
class Model:
    leader_log: list[tuple[int, str]]
    logs: dict[int, list[tuple[int, str]]]
    state: LeaderState
    inflight: list[Request] = field(default_factory=list)
    answers: list[tuple[int, int, Any]] = field(default_factory=list)  # (follower, offset, answer)
    trace: list[str] = field(default_factory=list)
    appended: int = 0

    LEADER_EPOCH = 1

    @classmethod
    def start(cls, isr: tuple[int, ...]) -> Model:
        leader_log = list(BASE)
        logs = {2: BASE + [(0, "x"), (0, "y")], 3: BASE + [(0, "x"), (0, "y")]}
        st = LeaderState(partition=("t", 0), leader_id=1, leader_epoch=cls.LEADER_EPOCH,
                         partition_epoch=1, replicas=(1, 2, 3), isr=isr,
                         log_end_offset=len(leader_log), high_watermark=len(BASE),
                         min_insync_replicas=1, replica_lag_time_max_ms=10**9)
        m = cls(leader_log, logs, st)
        # an in-flight fetch from epoch 0 (to the old leader's successor it is stale)
        m.inflight.append(Request(2, 5, 0, 0))
        return m

    def clone(self) -> Model:
        return copy.deepcopy(self)

    # -- moves -------------------------------------------------------------------------------

    def moves(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        if self.appended < 2:
            out.append(("append", None))
        for f in (2, 3):
            if len([r for r in self.inflight if r.sender == f]) < 2:
                for kind in ("normal", "no-epoch", "past-end"):
                    out.append(("send", (f, kind)))
        out += [("deliver", i) for i in range(len(self.inflight))]
        out += [("handle", i) for i in range(len(self.answers))]
        if self.state.pending is not None:
            out.append(("commit", None))
        return out

    def apply(self, move: tuple[str, Any]) -> None:
        kind, arg = move
        self.trace.append(f"{kind} {arg}")
        if kind == "append":
            self.appended += 1
            self.leader_log.append((self.LEADER_EPOCH, f"n{self.appended}"))
            self.state.on_append(len(self.leader_log))
        elif kind == "send":
            f, how = arg
            log = self.logs[f]
            last = epochs_of(log).latest_epoch
            if how == "no-epoch":
                last = None
            offset = len(log) + (3 if how == "past-end" else 0)
            self.inflight.append(Request(f, offset, last, self.LEADER_EPOCH))
        elif kind == "deliver":
            self._deliver(self.inflight.pop(arg))
        elif kind == "handle":
            self._handle(*self.answers.pop(arg))
        elif kind == "commit":
            req: AlterPartitionRequest = self.state.pending.request  # type: ignore[union-attr]
            self.state.on_alter_partition_response(
                {"error": 0, "leader_epoch": req.leader_epoch,
                 "partition_epoch": req.partition_epoch + 1, "isr": list(req.new_isr)}, 0)

    def _deliver(self, r: Request) -> None:
        """The leader's FETCH handling, step for step as broker/handlers/data.py does it."""
        if validate_leader_epoch(r.current_epoch, self.LEADER_EPOCH):
            self.answers.append((r.sender, r.offset, ("error", None)))
            return
        table = epochs_of(self.leader_log, (self.LEADER_EPOCH, len(BASE)))
        verdict = verify_follower_fetch(table, 0, len(self.leader_log), r.offset, r.last_epoch)
        if verdict.refused is not None:
            self.answers.append((r.sender, r.offset, ("error", verdict.refused)))
            return
        if verdict.diverging is not None:
            self.answers.append((r.sender, r.offset, ("diverging", verdict.diverging)))
            return
        if verdict.position is not None:
            self.state.on_follower_fetch(r.sender, min(verdict.position,
                                                       self.state.log_end_offset), 0)
        if r.offset < len(self.leader_log):
            self.answers.append((r.sender, r.offset,
                                 ("records", list(self.leader_log[r.offset:]))))

    def _handle(self, f: int, offset: int, answer: tuple[str, Any]) -> None:
        """The follower (broker/replication/fetcher.py): only the answer to a fetch at its
        current log end is applied (a stale one is dropped)."""
        log = self.logs[f]
        if offset != len(log):
            return
        kind, payload = answer
        if kind == "diverging":
            t = truncation_offset(epochs_of(log), len(log), payload)
            del log[t.offset:]
        elif kind == "records":
            log.extend(payload)

    # -- the invariant -----------------------------------------------------------------------

    def check(self) -> None:
        hw = self.state.high_watermark
        for r in self.state.maximal_isr:
            if r == 1:
                continue
            held = self.logs[r][:hw]
            assert held == self.leader_log[:hw], (
                f"HW {hw} counts broker {r}, whose log {self.logs[r]} differs from the "
                f"leader's {self.leader_log} below it; moves: {self.trace}")


def explore(isr: tuple[int, ...], depth: int) -> int:
    """Depth-first over every interleaving up to ``depth`` moves; returns the states seen."""
    seen = 0
    stack = [(Model.start(isr), 0)]
    while stack:
        m, d = stack.pop()
        m.check()
        seen += 1
        if d == depth:
            continue
        for mv in m.moves():
            n = m.clone()
            n.apply(mv)
            stack.append((n, d + 1))
    return seen


@pytest.mark.parametrize("isr", [(1, 2), (1, 2, 3), (1,)], ids=lambda i: "isr-" + "".join(map(str, i)))
def test_every_interleaving_keeps_the_hw_on_verified_copies(isr: tuple[int, ...]) -> None:
    """ISR (1, 2): the diverging follower is an ISR member. (1, 2, 3): both hold the old
    suffix. (1,): both must rejoin through the expansion rule."""
    assert explore(isr, depth=5) > 1000


def test_the_model_sees_a_wrong_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The invariant check is not vacuous: trusting a fetch without an epoch (the rule before
    the fix) breaks it along some interleaving."""
    import rafka.broker.replication.epochs as ep

    def trusting(epochs: Any, start: int, end: int, offset: int, last: int | None) -> Any:
        if last is None:
            return ep.FollowerFetchVerdict(position=min(offset, end))
        return ep.verify_follower_fetch(epochs, start, end, offset, last)

    monkeypatch.setattr(sys.modules[__name__], "verify_follower_fetch", trusting)
    with pytest.raises(AssertionError, match="differs from the leader"):
        explore((1, 2), depth=4)
