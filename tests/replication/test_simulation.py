"""A seeded, in-memory cluster: one partition on three brokers, a controller, and a scheduler
that interleaves produces, follower fetches, clock ticks, AlterPartition round trips (answers
may be lost), delayed metadata, crashes and restarts.

Invariants checked after every step (safety):
* every record acknowledged with ``acks=all`` is, at its offset, in the log of every member of
  the controller's ISR — so whichever ISR member is elected next has it;
* ISR ⊆ replicas, HW ≤ LEO (asserted inside ``LeaderState``), the HW of one leadership never
  goes down.
Then a liveness phase restarts everyone and delivers everything; all logs must become identical
and contain every acknowledged record. A failure prints its seed (``pytest -k 'seed-17'``).

Logs are lists of ``(epoch, value)``; the follower protocol is the real one (``find_divergence``
→ ``truncation_offset`` → truncate, else copy records and report the fetch offset).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from rafka.broker.replication.epochs import EpochTable, find_divergence, truncation_offset
from rafka.broker.replication.state import (
    AlterPartitionRequest,
    LeaderState,
)
from rafka.wire.errors import ErrorCode

TP = ("t", 0)
REPLICAS = (1, 2, 3)
LAG_MS = 1_000


def table(log: list[tuple[int, str]]) -> EpochTable:
    t = EpochTable()
    for off, (epoch, _) in enumerate(log):
        t = t.appended(epoch, off, off + 1)
    return t


@dataclass
class Broker:
    id: int
    log: list[tuple[int, str]] = field(default_factory=list)
    alive: bool = True
    hw: int = 0
    assigned_epoch: tuple[int, int] | None = None  # (epoch, offset) assigned on election

    def epochs(self) -> EpochTable:
        t = table(self.log)
        if self.assigned_epoch and (t.latest_epoch or -1) < self.assigned_epoch[0]:
            e, o = self.assigned_epoch
            if o <= len(self.log):
                t = EpochTable(tuple(x for x in t.entries if x[1] < o) + ((e, o),), len(self.log))
        return t


class Cluster:
    def __init__(self, seed: int, min_isr: int = 2) -> None:
        self.rng = random.Random(seed)
        self.now = 0
        self.min_isr = min_isr
        self.brokers = {b: Broker(b) for b in REPLICAS}
        self.leader = 1
        self.leader_epoch = 1
        self.partition_epoch = 1
        self.isr: tuple[int, ...] = REPLICAS
        self.state: LeaderState | None = None
        self.inflight: list[tuple[AlterPartitionRequest, bool]] = []  # (request, answer lost?)
        self.pending: list[tuple[int, str, int]] = []  # (last offset, value, leader epoch)
        self.acked: dict[int, str] = {}
        self.next_value = 0
        self.trace: list[str] = []
        self._elect(1)

    # -- controller ----------------------------------------------------------------------------

    def _elect(self, leader: int) -> None:
        self.leader = leader
        self.pending.clear()  # NOT_LEADER_OR_FOLLOWER: never acknowledged
        self.inflight.clear()
        if leader < 0:
            self.state = None
            return
        b = self.brokers[leader]
        b.assigned_epoch = (self.leader_epoch, len(b.log))
        self.state = LeaderState(TP, leader_id=leader, leader_epoch=self.leader_epoch,
                                 partition_epoch=self.partition_epoch, replicas=REPLICAS,
                                 isr=self.isr, log_end_offset=len(b.log),
                                 high_watermark=min(b.hw, len(b.log)),
                                 min_insync_replicas=self.min_isr,
                                 replica_lag_time_max_ms=LAG_MS, now_ms=self.now)
        self.last_hw = self.state.high_watermark
        self.trace.append(f"elect {leader} epoch {self.leader_epoch} isr {self.isr}")

    def crash(self, b: int) -> None:
        self.brokers[b].alive = False
        self.trace.append(f"crash {b}")
        new_isr = tuple(r for r in self.isr if r != b) or self.isr
        if new_isr != self.isr:
            self.isr = new_isr
            self.partition_epoch += 1
        if b == self.leader:
            candidates = [r for r in self.isr if self.brokers[r].alive]
            self.leader_epoch += 1
            self._elect(candidates[0] if candidates else -1)

    def restart(self, b: int) -> None:
        self.brokers[b].alive = True
        self.trace.append(f"restart {b}")
        if self.leader < 0 and b in self.isr:
            self.leader_epoch += 1
            self._elect(b)

    def controller_handle(self, req: AlterPartitionRequest) -> dict:
        if req.leader_epoch != self.leader_epoch:
            return {"error": int(ErrorCode.FENCED_LEADER_EPOCH)}
        if req.partition_epoch != self.partition_epoch:
            return {"error": int(ErrorCode.STALE_PARTITION_EPOCH)}
        if any(not self.brokers[r].alive for r in req.new_isr):
            return {"error": int(ErrorCode.INVALID_REQUEST)}  # ineligible replica
        self.isr = req.new_isr
        self.partition_epoch += 1
        self.trace.append(f"controller: isr {self.isr} pe {self.partition_epoch}")
        return {"error": 0, "leader": self.leader, "leader_epoch": self.leader_epoch,
                "partition_epoch": self.partition_epoch, "isr": list(self.isr)}

    # -- leader --------------------------------------------------------------------------------

    def _effects(self, effects: list) -> None:
        for e in effects:
            if isinstance(e, AlterPartitionRequest):
                self.inflight.append((e, self.rng.random() < 0.2))
        assert self.state is not None
        assert self.state.high_watermark >= self.last_hw
        self.last_hw = self.state.high_watermark
        self.brokers[self.leader].hw = self.state.high_watermark
        still = []
        for last, value, epoch in self.pending:
            out = self.state.produce_outcome(last)
            if out is None:
                still.append((last, value, epoch))
            elif out == ErrorCode.NONE:
                self.acked[last] = value
                self.trace.append(f"ack {last}={value}")
        self.pending = still

    def produce(self) -> None:
        st = self.state
        if st is None or not self.brokers[self.leader].alive:
            return
        if st.check_produce(-1) != ErrorCode.NONE:
            return
        b = self.brokers[self.leader]
        value = f"v{self.next_value}"
        self.next_value += 1
        b.log.append((st.leader_epoch, value))
        self.pending.append((len(b.log) - 1, value, st.leader_epoch))
        self._effects(st.on_append(len(b.log)))

    def fetch(self, f: int) -> None:
        st, fb = self.state, self.brokers[f]
        if st is None or f == self.leader or not fb.alive or not self.brokers[self.leader].alive:
            return
        lb = self.brokers[self.leader]
        div = find_divergence(lb.epochs(), len(lb.log), len(fb.log), fb.epochs().latest_epoch)
        if div is not None:
            t = truncation_offset(fb.epochs(), len(fb.log), div)
            if t.offset < len(fb.log):
                self.trace.append(f"truncate {f} {len(fb.log)}->{t.offset}")
            del fb.log[t.offset:]
            if fb.assigned_epoch and fb.assigned_epoch[1] >= t.offset:
                fb.assigned_epoch = None
            fb.hw = min(fb.hw, t.offset)
            return
        off = len(fb.log)
        self._effects(st.on_follower_fetch(f, off, self.now, isr_eligible=fb.alive))
        n = self.rng.randrange(0, 4)
        fb.log.extend(lb.log[off:off + n])
        fb.hw = max(fb.hw, min(st.high_watermark, len(fb.log)))

    def tick(self) -> None:
        self.now += self.rng.randrange(1, 600)
        if self.state is not None and self.brokers[self.leader].alive:
            self._effects(self.state.maybe_shrink_isr(self.now))

    def deliver_alter_partition(self) -> None:
        if not self.inflight or self.state is None:
            return
        req, lost = self.inflight.pop(0)
        answer = self.controller_handle(req)
        if lost:
            self._effects(self.state.on_alter_partition_error(ErrorCode.NETWORK_EXCEPTION, self.now))
        elif answer["error"]:
            self._effects(self.state.on_alter_partition_error(ErrorCode(answer["error"]), self.now))
        else:
            self._effects(self.state.on_alter_partition_response(answer, self.now))

    def deliver_metadata(self) -> None:
        if self.state is not None and self.leader_epoch == self.state.leader_epoch:
            self._effects(self.state.on_metadata(self.leader, self.leader_epoch,
                                                 self.partition_epoch, REPLICAS, self.isr))

    # -- invariants ----------------------------------------------------------------------------

    def check(self) -> None:
        assert set(self.isr) <= set(REPLICAS)
        for off, value in self.acked.items():
            for b in self.isr:
                log = self.brokers[b].log
                assert off < len(log) and log[off][1] == value, (
                    f"acked {off}={value} missing on ISR member {b}: {log}\n" + "\n".join(self.trace[-30:]))

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.25:
            self.produce()
        elif r < 0.60:
            self.fetch(self.rng.choice(REPLICAS))
        elif r < 0.72:
            self.tick()
        elif r < 0.82:
            self.deliver_alter_partition()
        elif r < 0.90:
            self.deliver_metadata()
        elif r < 0.95:
            alive = [b for b in REPLICAS if self.brokers[b].alive]
            if len(alive) > 1:
                self.crash(self.rng.choice(alive))
        else:
            dead = [b for b in REPLICAS if not self.brokers[b].alive]
            if dead:
                self.restart(self.rng.choice(dead))
        self.check()

    def heal(self) -> None:
        for b in REPLICAS:
            if not self.brokers[b].alive:
                self.restart(b)
        for _ in range(200):
            for f in REPLICAS:
                self.fetch(f)
            self.deliver_metadata()
            while self.inflight:
                self.deliver_alter_partition()
            self.now += 100
            if self.state is not None:
                self._effects(self.state.maybe_shrink_isr(self.now))
            self.check()
            if self.converged():
                return

    def converged(self) -> bool:
        logs = [self.brokers[b].log for b in REPLICAS]
        return (self.state is not None and set(self.state.isr) == set(REPLICAS)
                and all(x == logs[0] for x in logs) and not self.pending
                and self.state.high_watermark == len(logs[0]))


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(150)])
def test_acked_records_survive_leader_changes_and_replicas_converge(seed: int) -> None:
    c = Cluster(seed)
    for _ in range(400):
        c.step()
    c.heal()
    assert c.converged(), (seed, c.state and c.state.statistics(),
                           {b: c.brokers[b].log for b in REPLICAS})
    leader_log = c.brokers[c.leader].log
    for off, value in c.acked.items():
        assert leader_log[off][1] == value
    # and the healed cluster acknowledges new acks=all writes
    before = len(c.acked)
    c.produce()
    c.heal()
    assert len(c.acked) == before + 1 and c.converged(), seed
