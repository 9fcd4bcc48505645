"""The leader's replica state machine for one partition — pure: no I/O, no clock, no trio.

Theory of operation
-------------------
``LeaderState`` lives as long as one leader epoch on the leader broker. Every input is an
event with the time passed in (``now_ms``); every output is a list of *effects* the caller
carries out (wake waiters, send an AlterPartition request). Like etcd-raft's ``raft`` struct it
is a mutable object, but deterministic: the same events at the same times give the same state
and effects, so tests drive it with plain integers for time.

Events and what they do:

* ``on_follower_fetch(replica, fetch_offset, now_ms)`` — a follower fetched at ``fetch_offset``
  (its log end offset) and the leader found no divergence. Records the follower's LEO, updates
  its *last caught-up time* by Kafka's rule (caught up now if ``fetch_offset`` ≥ the leader's
  LEO; caught up as of its previous fetch if ``fetch_offset`` ≥ the leader's LEO at that
  previous fetch), may propose an ISR expansion, and recomputes the high watermark.
  The fetch also carries the follower's log start offset, which ``low_watermark`` reads.
* ``on_append(new_leo)`` — the leader appended; the HW may move (a one-replica ISR).
* ``maybe_shrink_isr(now_ms)`` — periodic (every ``replica_lag_time_max_ms / 2``): propose to drop
  ISR followers not caught up within ``replica_lag_time_max_ms``. Also re-sends a pending
  AlterPartition whose last attempt failed retriably.
* ``on_alter_partition_response(body, now_ms)`` / ``on_metadata(reg)`` — the controller's
  answer and the metadata image; only these change the committed ISR.

High watermark: ``HW = min(LEO of every replica in the maximal ISR)`` (the leader counts with its
own LEO), never decreasing, ``HW ≤ LEO`` asserted. A follower whose LEO is unknown in this epoch
(it has not fetched from us yet) holds the HW where it is.

The *maximal* ISR. The ISR that elections use is the controller's; the leader only proposes
changes (AlterPartition, guarded by the partition epoch, at most one in flight). From the moment
a change is sent until the leader learns its fate, the leader cannot know whether the
controller has committed it, so it computes the HW over ``committed ∪ proposed``:

* expansion pending: the newcomer may already be electable, so the HW must not pass its LEO
  (records acknowledged above it could be lost if it became leader);
* shrink pending: the leaving replica is still electable until the shrink commits, so the HW
  must wait for it too — it is the committed set, a superset of the proposal.

A larger set only makes the HW smaller, so this is always safe; a shrink frees the HW only once
committed. The pending proposal is dropped only when its fate is known: a success answer, or a
metadata image whose partition epoch is newer than the one the proposal was guarded by (whatever
happened, the image now says what the controller committed). A retriable failure (no controller,
network) keeps it and re-sends it after ``alter_partition_retry_ms``; a rejection (stale
partition epoch, fenced leader epoch) keeps it until the metadata that explains the rejection
arrives — a rejection after a lost success answer looks the same, so reverting to the old,
smaller ISR early could let the HW run past a replica the controller already counts as in sync.
Only a refusal of this very request (``INVALID_REQUEST``, ``INVALID_REPLICA_ASSIGNMENT``,
``BROKER_FENCED``, ``INELIGIBLE_REPLICA``: the newcomer is fenced or shutting down) drops the proposal at once; that relies on the
controller checking the leader and partition epochs before anything else.

``acks=all``: a produce is refused up front (``NOT_ENOUGH_REPLICAS``, nothing appended) when the
committed ISR is smaller than ``min_insync_replicas`` — or when fewer than that many ISR members
have fetched within ``replica_lag_time_max_ms`` (``fetching_isr``). The second rule covers a
shrink that cannot commit (no controller quorum, e.g. the two dead followers were two of three
voters): Kafka would append and then time out, leaving records nobody acknowledged in the
leader's log; refusing up front is always safe, and a live follower fetches at least every
``replica.fetch.wait.max.ms``. Once appended with last offset ``L``, it
completes when ``HW > L`` — every maximal-ISR member has it — with ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``
instead when the committed ISR is below the minimum by then, and fails with that error as soon
as the committed ISR drops below the minimum before ``HW`` passes ``L``.

ISR expansion (Kafka's ``isFollowerInSync``): a replica outside the ISR rejoins when its LEO is
at least the HW and at least the offset where this leader epoch started (it has truncated
against, and fetched from, this leader), and the caller deems it eligible (not fenced nor
shutting down in the metadata image, KIP-841).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rafka.wire.errors import ErrorCode

__all__ = [
    "FollowerProgress",
    "PendingIsrChange",
    "HighWatermarkAdvanced",
    "IsrChanged",
    "AlterPartitionRequest",
    "Effect",
    "LeaderState",
    "StaleLeaderStateError",
    "validate_leader_epoch",
]

UNKNOWN_OFFSET = -1
# AlterPartition errors after which the leader waits for metadata instead of re-sending.
_WAIT_FOR_METADATA = frozenset({
    ErrorCode.STALE_PARTITION_EPOCH,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.STALE_BROKER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
})
# Definitive refusals of this very request (the controller checks the leader and partition
# epochs first, so an earlier attempt that committed would have shown as STALE_PARTITION_EPOCH):
# drop the proposal and fall back to the committed ISR.
_REJECTED = frozenset({
    ErrorCode.INVALID_REQUEST,
    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    ErrorCode.BROKER_FENCED,
    ErrorCode.INELIGIBLE_REPLICA,  # the newcomer is fenced or in controlled shutdown (KIP-841)
})


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    """Wake delayed produces and fetches of this partition."""

    old: int
    new: int


@dataclass(frozen=True, slots=True)
class IsrChanged:
    """The committed ISR changed; ``under_min_isr`` fails waiting ``acks=all`` produces."""

    old_isr: tuple[int, ...]
    new_isr: tuple[int, ...]
    partition_epoch: int
    under_min_isr: bool


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """Send this to the active controller, then report back exactly once:
    ``on_alter_partition_response(body, now)`` or ``on_alter_partition_error(code, now)``."""

    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    reason: str  # "expand" | "shrink"
    attempt: int = 0

    def to_body(self, broker_id: int, broker_epoch: int) -> dict[str, Any]:
        return {
            "broker_id": broker_id,
            "broker_epoch": broker_epoch,
            "topic": self.topic,
            "partition": self.partition,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "new_isr": list(self.new_isr),
        }


Effect = HighWatermarkAdvanced | IsrChanged | AlterPartitionRequest


class StaleLeaderStateError(Exception):
    """Metadata for another leader or leader epoch: build a new state (or become follower)."""


# --------------------------------------------------------------------------- state


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows about one follower in this leader epoch."""

    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_OFFSET
    broker_epoch: int = -1
    log_start_offset: int = UNKNOWN_OFFSET  # the follower's, as its fetches report it

    def is_caught_up(self, leader_leo: int, now_ms: int, lag_max_ms: int) -> bool:
        return self.log_end_offset == leader_leo or now_ms - self.last_caught_up_ms <= lag_max_ms


@dataclass(slots=True)
class PendingIsrChange:
    request: AlterPartitionRequest
    sent_ms: int
    retry_at_ms: int | None = None  # set after a retriable failure
    waiting_for_metadata: bool = False


def validate_leader_epoch(current_leader_epoch: int | None, leader_epoch: int) -> ErrorCode:
    """Kafka's fencing: an older epoch is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH
    (we have not seen it yet), absent (-1/None) is not checked."""
    if current_leader_epoch is None or current_leader_epoch < 0:
        return ErrorCode.NONE
    if current_leader_epoch < leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if current_leader_epoch > leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


@dataclass(slots=True)
class LeaderState:
    """Leader-side replica state of one partition for one leader epoch (see module docstring)."""

    partition: tuple[str, int]
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_end_offset: int
    high_watermark: int
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    leader_epoch_start_offset: int = -1  # default: log_end_offset at creation
    now_ms: int = 0  # the time this leadership started (followers in the ISR count as caught up)
    alter_partition_retry_ms: int = 500
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    pending: PendingIsrChange | None = None

    def __post_init__(self) -> None:
        self.replicas = tuple(self.replicas)
        self.isr = tuple(self.isr)
        if self.leader_epoch_start_offset < 0:
            self.leader_epoch_start_offset = self.log_end_offset
        if self.leader_id not in self.replicas:
            raise ValueError(f"leader {self.leader_id} is not a replica of {self.replicas}")
        if self.leader_id not in self.isr:
            raise ValueError(f"leader {self.leader_id} is not in the ISR {self.isr}")
        if self.min_insync_replicas < 1:
            raise ValueError("min_insync_replicas must be >= 1")
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        for r in self.replicas:
            if r != self.leader_id and r not in self.followers:
                # As Kafka's resetReplicaState: ISR members start caught up "now", others never.
                self.followers[r] = FollowerProgress(
                    r, last_caught_up_ms=self.now_ms if r in self.isr else 0)
        self._check()

    # -- queries ----------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self.partition[0]

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus any replica a pending expansion adds (module docstring)."""
        if self.pending is None:
            return self.isr
        extra = tuple(r for r in self.pending.request.new_isr if r not in self.isr)
        return self.isr + extra

    @property
    def under_min_isr(self) -> bool:
        return len(self.isr) < self.min_insync_replicas

    def fetching_isr(self, now_ms: int) -> tuple[int, ...]:
        """ISR members heard from within ``replica_lag_time_max_ms`` (the leader always; a
        follower by its last fetch, or the start of this leadership if it has not fetched yet)."""
        return tuple(r for r in self.isr if r == self.leader_id
                     or now_ms - max(self.followers[r].last_fetch_ms, self.now_ms)
                     <= self.replica_lag_time_max_ms)

    def check_produce(self, acks: int, now_ms: int | None = None) -> ErrorCode:
        """Before appending: ``NOT_ENOUGH_REPLICAS`` for ``acks=all`` under min ISR — the
        committed ISR, or (given ``now_ms``) the members of it still fetching."""
        if acks != -1:
            return ErrorCode.NONE
        if self.under_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        if now_ms is not None and len(self.fetching_isr(now_ms)) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def produce_outcome(self, last_offset: int) -> ErrorCode | None:
        """For an appended ``acks=all`` produce ending at ``last_offset``: None while waiting."""
        if last_offset < self.high_watermark:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if self.under_min_isr else ErrorCode.NONE
        if self.under_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return None

    def follower_high_watermark(self, follower_leo: int) -> int:
        """The HW a follower may adopt: never above what it holds."""
        return min(self.high_watermark, follower_leo)

    def statistics(self) -> dict[str, Any]:
        return {
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "isr": list(self.isr),
            "maximal_isr": list(self.maximal_isr),
            "log_end_offset": self.log_end_offset,
            "high_watermark": self.high_watermark,
            "followers": {r: p.log_end_offset for r, p in self.followers.items()},
            "follower_log_starts": {r: p.log_start_offset for r, p in self.followers.items()},
            "pending": None if self.pending is None else list(self.pending.request.new_isr),
        }

    # -- events -----------------------------------------------------------------------------

    def on_append(self, new_log_end_offset: int) -> list[Effect]:
        assert new_log_end_offset >= self.log_end_offset, (new_log_end_offset, self.log_end_offset)
        self.log_end_offset = new_log_end_offset
        return self._maybe_advance_hw()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int, *,
                          broker_epoch: int = -1, isr_eligible: bool = True,
                          log_start_offset: int = UNKNOWN_OFFSET) -> list[Effect]:
        """A consistent (non-diverging) fetch by ``replica_id`` at ``fetch_offset``, with the
        follower's own log start offset when it reports one (for ``low_watermark``)."""
        p = self.followers.get(replica_id)
        if p is None:
            raise ValueError(f"broker {replica_id} is not a follower of {self.partition}")
        if log_start_offset >= 0:
            p.log_start_offset = log_start_offset
        if not 0 <= fetch_offset <= self.log_end_offset:
            raise ValueError(f"fetch offset {fetch_offset} outside [0, {self.log_end_offset}]")
        if fetch_offset >= self.log_end_offset:
            p.last_caught_up_ms = max(p.last_caught_up_ms, now_ms)
        elif fetch_offset >= p.last_fetch_leader_leo >= 0:
            p.last_caught_up_ms = max(p.last_caught_up_ms, p.last_fetch_ms)
        p.last_fetch_leader_leo = self.log_end_offset
        p.last_fetch_ms = now_ms
        p.log_end_offset = fetch_offset
        if broker_epoch >= 0:
            p.broker_epoch = broker_epoch
        effects: list[Effect] = []
        if isr_eligible:
            effects += self.maybe_expand_isr(replica_id, now_ms)
        effects += self._maybe_advance_hw()
        self._check()
        return effects

    def low_watermark(self, leader_log_start: int) -> int:
        """Kafka's low watermark as far as the ISR goes: the smallest log start offset of the
        leader (``leader_log_start``) and every ISR follower; ``UNKNOWN_OFFSET`` while an ISR
        follower has not reported its log start in this epoch. What DeleteRecords waits for
        (``broker/handlers/delete_records.py``)."""
        low = leader_log_start
        for r in self.isr:
            if r == self.leader_id:
                continue
            f = self.followers.get(r)
            start = UNKNOWN_OFFSET if f is None else f.log_start_offset
            if start < 0:
                return UNKNOWN_OFFSET
            low = min(low, start)
        return low

    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> list[Effect]:
        """Propose adding ``replica_id`` when it is in sync (caller checked eligibility)."""
        p = self.followers.get(replica_id)
        if p is None or replica_id in self.isr or self.pending is not None:
            return []
        if p.log_end_offset < max(self.high_watermark, self.leader_epoch_start_offset):
            return []
        new_isr = tuple(r for r in self.replicas if r in self.isr or r == replica_id)
        return [self._propose(new_isr, "expand", now_ms)]

    def maybe_shrink_isr(self, now_ms: int) -> list[Effect]:
        """Periodic: propose dropping lagging followers; re-send a pending change when due."""
        if self.pending is not None:
            return self._maybe_resend(now_ms)
        out = [r for r in self.isr if r != self.leader_id
               and not self.followers[r].is_caught_up(self.log_end_offset, now_ms,
                                                      self.replica_lag_time_max_ms)]
        if not out:
            return []
        new_isr = tuple(r for r in self.isr if r not in out)
        return [self._propose(new_isr, "shrink", now_ms)]

    def on_alter_partition_response(self, body: Mapping[str, Any], now_ms: int) -> list[Effect]:
        """The controller's answer to the pending request (``{error, leader_epoch,
        partition_epoch, isr}``)."""
        code = ErrorCode(body.get("error", 0) or 0)
        if code != ErrorCode.NONE:
            return self.on_alter_partition_error(code, now_ms)
        if self.pending is None:
            return []
        if int(body.get("leader_epoch", -1)) != self.leader_epoch:
            # Not ours any more: a newer leader epoch is on its way in the metadata.
            self.pending.waiting_for_metadata = True
            return []
        return self._apply_committed(tuple(body["isr"]), int(body["partition_epoch"]))

    def on_alter_partition_error(self, code: ErrorCode, now_ms: int) -> list[Effect]:
        """The request failed: retriable → re-send later; stale → wait for metadata; refused
        outright (e.g. a fenced replica in the new ISR) → back to the committed ISR."""
        if self.pending is None:
            return []
        if code in _WAIT_FOR_METADATA:
            self.pending.waiting_for_metadata = True
        elif code in _REJECTED:
            self.pending = None
        else:
            self.pending.retry_at_ms = now_ms + self.alter_partition_retry_ms
        return []

    def on_metadata(self, leader: int, leader_epoch: int, partition_epoch: int,
                    replicas: Iterable[int], isr: Iterable[int]) -> list[Effect]:
        """A metadata image for this partition (same leader and leader epoch)."""
        if leader != self.leader_id or leader_epoch != self.leader_epoch:
            raise StaleLeaderStateError(
                f"{self.partition}: leader {leader} epoch {leader_epoch} replaces "
                f"{self.leader_id} epoch {self.leader_epoch}")
        replicas = tuple(replicas)
        if replicas != self.replicas:
            # KRaft bumps the leader epoch when replicas change; accept it anyway.
            self.replicas = replicas
            for r in replicas:
                if r != self.leader_id and r not in self.followers:
                    self.followers[r] = FollowerProgress(r)
            for r in list(self.followers):
                if r not in replicas:
                    del self.followers[r]
        return self._apply_committed(tuple(isr), partition_epoch)

    def on_metadata_registration(self, reg: Any) -> list[Effect]:
        """``on_metadata`` from a ``metadata.image.PartitionRegistration``."""
        return self.on_metadata(reg.leader, reg.leader_epoch, reg.partition_epoch,
                                reg.replicas, reg.isr)

    # -- internals --------------------------------------------------------------------------

    def _propose(self, new_isr: tuple[int, ...], reason: str, now_ms: int) -> AlterPartitionRequest:
        assert self.pending is None
        assert self.leader_id in new_isr and set(new_isr) <= set(self.replicas), new_isr
        req = AlterPartitionRequest(self.topic, self.partition[1], self.leader_epoch,
                                    self.partition_epoch, new_isr, reason)
        self.pending = PendingIsrChange(req, now_ms)
        return req

    def _maybe_resend(self, now_ms: int) -> list[Effect]:
        p = self.pending
        assert p is not None
        if p.waiting_for_metadata or p.retry_at_ms is None or now_ms < p.retry_at_ms:
            return []
        req = p.request
        req = AlterPartitionRequest(req.topic, req.partition, req.leader_epoch,
                                    req.partition_epoch, req.new_isr, req.reason, req.attempt + 1)
        self.pending = PendingIsrChange(req, now_ms)
        return [req]

    def _apply_committed(self, isr: tuple[int, ...], partition_epoch: int) -> list[Effect]:
        effects: list[Effect] = []
        if self.pending is not None and partition_epoch > self.pending.request.partition_epoch:
            self.pending = None
        if partition_epoch > self.partition_epoch:
            old = self.isr
            if self.leader_id not in isr:
                raise StaleLeaderStateError(f"{self.partition}: leader {self.leader_id} "
                                            f"not in the committed ISR {isr}")
            self.isr = isr
            self.partition_epoch = partition_epoch
            if old != isr:
                effects.append(IsrChanged(old, isr, partition_epoch, self.under_min_isr))
        effects += self._maybe_advance_hw()
        self._check()
        return effects

    def _maybe_advance_hw(self) -> list[Effect]:
        new = self.log_end_offset
        for r in self.maximal_isr:
            if r != self.leader_id:
                new = min(new, self.followers[r].log_end_offset)
        if new > self.high_watermark:
            old, self.high_watermark = self.high_watermark, new
            return [HighWatermarkAdvanced(old, new)]
        return []

    def _check(self) -> None:
        assert 0 <= self.high_watermark <= self.log_end_offset, self.statistics()
        assert set(self.isr) <= set(self.replicas), (self.isr, self.replicas)
        assert set(self.maximal_isr) <= set(self.replicas), (self.maximal_isr, self.replicas)
        assert self.leader_id in self.isr
