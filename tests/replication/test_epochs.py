"""KIP-101/279 arithmetic: the leader's divergence check and the follower's truncation point."""

from __future__ import annotations

import random

import pytest
from rafka.broker.replication.epochs import (
    EpochEndOffset,
    EpochTable,
    Truncation,
    find_divergence,
    leader_end_offset_for,
    resolve_truncation,
    truncation_offset,
)


def log_of(*epochs_per_offset: int) -> EpochTable:
    """A log given as the epoch of each record: log_of(0, 0, 1) has offsets 0..2."""
    t = EpochTable()
    for off, e in enumerate(epochs_per_offset):
        t = t.appended(e, off, off + 1)
    return t


def test_end_offset_for_matches_kip_279() -> None:
    t = EpochTable(((1, 0), (2, 4), (4, 6)), 9)
    assert t.end_offset_for(4) == (4, 9)
    assert t.end_offset_for(2) == (2, 6)
    assert t.end_offset_for(3) == (2, 6)  # largest epoch <= 3 is 2, which ends where 4 starts
    assert t.end_offset_for(1) == (1, 4)
    assert t.end_offset_for(0) == (0, 0)  # older than anything known: up to the first entry
    assert t.end_offset_for(5) == (-1, -1)
    # the leader-side wrapper answers a newer epoch with its latest epoch and log end
    assert leader_end_offset_for(t, 9, 5) == EpochEndOffset(4, 9)
    assert leader_end_offset_for(EpochTable((), 3), 3, 2) == EpochEndOffset(-1, 3)


def test_consistent_follower_has_no_divergence() -> None:
    leader = log_of(0, 0, 1, 1, 2)
    assert find_divergence(leader, 5, 3, 1) is None  # follower has 0,0,1
    assert find_divergence(leader, 5, 4, 1) is None
    assert find_divergence(leader, 5, 5, 2) is None
    assert find_divergence(leader, 5, 0, None) is None  # empty follower


def test_old_leader_tail_is_truncated_to_divergence_not_to_hw() -> None:
    # Epoch 1: A leads and writes offsets 0..5; B replicated 0..2 and the HW is 2.
    # A dies; B becomes leader in epoch 2 and writes offsets 3..4. A comes back.
    old_leader = log_of(1, 1, 1, 1, 1, 1)
    new_leader = log_of(1, 1, 1, 2, 2)
    hw = 2
    div = find_divergence(new_leader, 5, 6, 1)
    assert div == EpochEndOffset(1, 3)
    t = truncation_offset(old_leader, 6, div)
    assert t == Truncation(3, True)
    assert t.offset != hw  # offset 2 is kept: it is in both logs, acknowledged or not
    assert resolve_truncation(old_leader, new_leader) == 3


def test_follower_ahead_in_the_leaders_epoch_without_new_appends() -> None:
    # The new leader has not appended in its own epoch yet: it answers with its latest epoch.
    old_leader = log_of(1, 1, 1, 1)
    new_leader = log_of(1, 1)
    assert find_divergence(new_leader, 2, 4, 1) == EpochEndOffset(1, 2)
    assert resolve_truncation(old_leader, new_leader) == 2


def test_follower_epoch_unknown_to_leader_kip_101_hole() -> None:
    # The case KIP-279 fixes. B: [0:e0, 1:e1, 2:e1]  A (leader): [0:e0, 1:e0, 2:e2]
    # KIP-101 would answer "epoch 1 ends at 2" (start of A's epoch 2) and B would keep its
    # divergent offset 1. KIP-279 answers (0, 2); B's epoch 0 ends at 1 -> truncate to 1.
    b = log_of(0, 1, 1)
    a = log_of(0, 0, 2)
    div = find_divergence(a, 3, 3, 1)
    assert div == EpochEndOffset(0, 2)
    assert truncation_offset(b, 3, div) == Truncation(1, True)
    assert resolve_truncation(b, a) == 1


def test_two_step_truncation_when_epochs_are_skipped() -> None:
    # Follower: epoch 1 at 0..4, epoch 3 at 5..7.  Leader: epoch 1 at 0..3, 2 at 4..5, 4 at 6..8.
    follower = EpochTable(((1, 0), (3, 5)), 8)
    leader = EpochTable(((1, 0), (2, 4), (4, 6)), 9)
    div1 = find_divergence(leader, 9, 8, 3)
    assert div1 == EpochEndOffset(2, 6)
    step1 = truncation_offset(follower, 8, div1)
    assert step1 == Truncation(5, False)  # we never had epoch 2: cut to the end of epoch 1, ask again
    follower = follower.truncated(step1.offset)
    div2 = find_divergence(leader, 9, 5, follower.latest_epoch)
    assert div2 == EpochEndOffset(1, 4)
    step2 = truncation_offset(follower, 5, div2)
    assert step2 == Truncation(4, True)
    follower = follower.truncated(4)
    assert find_divergence(leader, 9, 4, follower.latest_epoch) is None
    assert resolve_truncation(EpochTable(((1, 0), (3, 5)), 8), leader) == 4


def test_empty_epoch_assigned_at_election_is_dropped() -> None:
    # A was elected in epoch 3 at offset 2 and never appended; B leads epoch 4 and appended.
    a = EpochTable(((1, 0), (3, 2)), 2)
    b = EpochTable(((1, 0), (4, 2)), 5)
    assert resolve_truncation(a, b) == 2


def test_answer_without_end_offset_is_refused() -> None:
    with pytest.raises(ValueError):
        truncation_offset(log_of(0, 0), 2, EpochEndOffset(-1, -1))


def random_history(rng: random.Random, n_logs: int, steps: int) -> list[list[int]]:
    """Logs shaped by a Raft-like history: each epoch a leader appends; others copy a prefix."""
    logs: list[list[int]] = [[] for _ in range(n_logs)]
    for epoch in range(1, steps + 1):
        leader = rng.randrange(n_logs)
        # the new leader's log is authoritative; some replicas adopt a prefix of it
        for _ in range(rng.randrange(0, 4)):
            logs[leader].append(epoch)
        for i in range(n_logs):
            if i != leader and rng.random() < 0.5:
                keep = rng.randrange(len(logs[leader]) + 1)
                logs[i] = list(logs[leader][:keep])
    return logs


def table(epochs: list[int]) -> EpochTable:
    return log_of(*epochs)


@pytest.mark.parametrize("seed", range(200))
def test_resolve_truncation_keeps_exactly_the_common_prefix(seed: int) -> None:
    rng = random.Random(seed)
    logs = random_history(rng, 3, 6)
    for f in range(3):
        for ldr in range(3):
            # (a follower's last epoch may be newer than the leader's: leader_end_offset_for)
            follower, leader = logs[f], logs[ldr]
            kept = resolve_truncation(table(follower), table(leader))
            common = 0
            while common < min(len(follower), len(leader)) and follower[common] == leader[common]:
                common += 1
            assert kept == common, (seed, follower, leader)
