"""LeaderState with injected time: HW, ISR shrink/expand, AlterPartition, acks=all, fencing."""

from __future__ import annotations

import pytest
from rafka.broker.replication.state import (
    AlterPartitionRequest,
    HighWatermarkAdvanced,
    IsrChanged,
    LeaderState,
    StaleLeaderStateError,
    validate_leader_epoch,
)
from rafka.wire.errors import ErrorCode

TP = ("t", 0)
LAG = 10_000


def leader(isr: tuple[int, ...] = (1, 2, 3), leo: int = 0, hw: int = 0, min_isr: int = 2,
           now: int = 0) -> LeaderState:
    return LeaderState(TP, leader_id=1, leader_epoch=5, partition_epoch=10, replicas=(1, 2, 3),
                       isr=isr, log_end_offset=leo, high_watermark=hw, min_insync_replicas=min_isr,
                       replica_lag_time_max_ms=LAG, now_ms=now)


def requests(effects: list) -> list[AlterPartitionRequest]:
    return [e for e in effects if isinstance(e, AlterPartitionRequest)]


def commit(s: LeaderState, req: AlterPartitionRequest, now: int) -> list:
    body = {"error": 0, "leader": 1, "leader_epoch": req.leader_epoch,
            "partition_epoch": req.partition_epoch + 1, "isr": list(req.new_isr)}
    return s.on_alter_partition_response(body, now)


def test_hw_is_min_leo_over_isr_and_never_decreases() -> None:
    s = leader()
    assert s.on_append(10) == []  # followers' LEOs unknown: HW waits
    assert s.on_follower_fetch(2, 6, 1) == []
    assert s.on_follower_fetch(3, 4, 1) == [HighWatermarkAdvanced(0, 4)]
    assert s.on_follower_fetch(3, 8, 2) == [HighWatermarkAdvanced(4, 6)]
    assert s.high_watermark == 6
    # a follower that comes back lower (it lost an unflushed tail) does not move the HW back
    assert s.on_follower_fetch(2, 3, 3) == []
    assert s.high_watermark == 6
    assert s.high_watermark <= s.log_end_offset


def test_low_watermark_is_the_smallest_log_start_of_the_isr() -> None:
    """DeleteRecords waits for this: the leader's log start and every ISR follower's, as its
    fetches report them; unknown while an ISR follower has not reported; followers outside
    the ISR do not count."""
    s = leader(isr=(1, 2), leo=50)
    assert s.low_watermark(20) == -1  # follower 2 has not reported its log start yet
    s.on_follower_fetch(2, 50, 1, log_start_offset=0)
    assert s.low_watermark(20) == 0
    s.on_follower_fetch(2, 50, 2)  # a fetch without a log start keeps the last one known
    assert s.low_watermark(20) == 0
    s.on_follower_fetch(2, 50, 3, log_start_offset=20)
    s.on_follower_fetch(3, 10, 3, log_start_offset=0)  # 3 is not in the ISR
    assert s.low_watermark(20) == 20
    assert s.low_watermark(30) == 20 and leader(isr=(1,), leo=50).low_watermark(30) == 30


def test_single_replica_isr_hw_follows_appends() -> None:
    s = leader(isr=(1,), min_isr=1)
    assert s.on_append(3) == [HighWatermarkAdvanced(0, 3)]


def test_fetch_beyond_leo_is_refused() -> None:
    s = leader(leo=5)
    with pytest.raises(ValueError):
        s.on_follower_fetch(2, 6, 0)
    with pytest.raises(ValueError):
        s.on_follower_fetch(9, 0, 0)


def test_isr_shrinks_after_lag_time_and_hw_moves_only_when_committed() -> None:
    s = leader(leo=0)
    s.on_append(10)
    s.on_follower_fetch(2, 10, 1_000)
    s.on_follower_fetch(3, 2, 1_000)  # 3 is behind and then stops fetching
    assert s.high_watermark == 2
    assert s.maybe_shrink_isr(LAG) == []  # 3 was caught up "now" at leadership start (t=0)
    [req] = requests(s.maybe_shrink_isr(LAG + 1))
    assert req.new_isr == (1, 2) and req.reason == "shrink" and req.partition_epoch == 10
    # until the controller commits, 3 is still electable: the HW must still wait for it
    assert s.maximal_isr == (1, 2, 3)
    assert s.on_follower_fetch(2, 10, LAG + 2) == []
    assert s.high_watermark == 2
    assert s.maybe_shrink_isr(LAG + 3) == []  # one change in flight at most
    eff = commit(s, req, LAG + 4)
    assert IsrChanged((1, 2, 3), (1, 2), 11, False) in eff
    assert HighWatermarkAdvanced(2, 10) in eff
    assert s.isr == (1, 2) and s.partition_epoch == 11 and s.pending is None


def test_caught_up_rule_uses_leo_at_previous_fetch() -> None:
    s = leader()
    s.on_append(10)
    s.on_follower_fetch(2, 10, 1_000)  # caught up at 1000
    s.on_append(20)
    s.on_follower_fetch(3, 10, 1_000)
    s.on_follower_fetch(2, 15, 9_000)  # behind LEO 20, but >= LEO (10) at its previous fetch
    assert s.followers[2].last_caught_up_ms == 1_000
    s.on_follower_fetch(2, 20, 12_000)  # caught up now
    assert s.followers[2].last_caught_up_ms == 12_000
    # a follower fetching all the time but never reaching the LEO it saw falls out
    s.on_follower_fetch(3, 12, 5_000)  # < 20, the leader's LEO at its previous fetch
    s.on_append(40)
    s.on_follower_fetch(3, 18, 9_500)  # < 20 again
    assert s.followers[3].last_caught_up_ms == 0  # since leadership started
    s.on_append(50)
    s.on_follower_fetch(3, 45, 9_800)  # >= 40 (LEO at previous fetch): caught up as of 9500
    assert s.followers[3].last_caught_up_ms == 9_500
    s.on_follower_fetch(2, 50, 9_900)
    assert s.maybe_shrink_isr(9_500 + LAG) == []
    [req] = requests(s.maybe_shrink_isr(9_501 + LAG))
    assert req.new_isr == (1, 2)


def test_follower_at_leo_is_never_shrunk() -> None:
    s = leader(leo=4)
    s.on_follower_fetch(2, 4, 0)
    s.on_follower_fetch(3, 4, 0)
    assert s.maybe_shrink_isr(10 * LAG) == []  # no new data: they are not behind


def test_expand_after_catch_up_with_maximal_isr_while_pending() -> None:
    s = leader(isr=(1, 2), leo=10, hw=0)
    s.on_follower_fetch(2, 10, 100)
    assert s.high_watermark == 10
    s.on_append(20)
    assert requests(s.on_follower_fetch(3, 5, 200)) == []  # below the HW (10): not yet
    eff = s.on_follower_fetch(3, 12, 300)
    [req] = requests(eff)
    assert req.new_isr == (1, 2, 3) and req.reason == "expand"
    # pending expansion: 3 counts for the HW already (maximal ISR)
    assert s.maximal_isr == (1, 2, 3)
    s.on_follower_fetch(2, 20, 400)
    assert s.high_watermark == 12  # held by 3, though the committed ISR is (1, 2)
    eff = commit(s, req, 500)
    assert IsrChanged((1, 2), (1, 2, 3), 11, False) in eff
    assert s.isr == (1, 2, 3)


def test_expand_requires_current_epoch_start_and_eligibility() -> None:
    s = LeaderState(TP, leader_id=1, leader_epoch=5, partition_epoch=10, replicas=(1, 2, 3),
                    isr=(1,), log_end_offset=50, high_watermark=30, min_insync_replicas=1)
    assert s.leader_epoch_start_offset == 50
    assert requests(s.on_follower_fetch(2, 40, 1)) == []  # >= HW but below the epoch start
    assert requests(s.on_follower_fetch(2, 50, 2, isr_eligible=False)) == []  # fenced broker
    assert requests(s.on_follower_fetch(2, 50, 3))[0].new_isr == (1, 2)


def test_retriable_alter_partition_error_resends_after_backoff() -> None:
    s = leader(isr=(1, 2), leo=0)
    [req] = requests(s.on_follower_fetch(3, 0, 0))
    assert s.on_alter_partition_error(ErrorCode.NOT_CONTROLLER, 10) == []
    assert s.maybe_shrink_isr(10 + s.alter_partition_retry_ms - 1) == []
    [again] = requests(s.maybe_shrink_isr(10 + s.alter_partition_retry_ms))
    assert again.new_isr == req.new_isr and again.partition_epoch == req.partition_epoch
    assert again.attempt == 1


def test_rejected_change_waits_for_metadata_keeping_the_maximal_isr() -> None:
    s = leader(isr=(1, 2), leo=0)
    [req] = requests(s.on_follower_fetch(3, 0, 0))
    # the answer was lost, the retry is refused as stale: did the first attempt commit?
    s.on_alter_partition_error(ErrorCode.STALE_PARTITION_EPOCH, 10)
    assert s.maybe_shrink_isr(100_000) == []  # no resend, no new proposal
    assert s.maximal_isr == (1, 2, 3)
    # the metadata says: yes, it did
    eff = s.on_metadata(1, 5, 11, (1, 2, 3), (1, 2, 3))
    assert IsrChanged((1, 2), (1, 2, 3), 11, False) in eff
    assert s.pending is None


def test_metadata_with_newer_partition_epoch_resolves_pending_either_way() -> None:
    s = leader(leo=0)
    s.on_append(5)
    s.on_follower_fetch(2, 5, 0)
    [req] = requests(s.maybe_shrink_isr(LAG + 1))
    assert req.new_isr == (1, 2)
    # the controller fenced broker 2 meanwhile (another change, partition epoch 11)
    eff = s.on_metadata(1, 5, 11, (1, 2, 3), (1, 3))
    assert s.pending is None and s.isr == (1, 3)
    assert IsrChanged((1, 2, 3), (1, 3), 11, False) in eff
    # the late success answer for the old request changes nothing
    assert s.on_alter_partition_response({"error": 0, "leader_epoch": 5, "partition_epoch": 11,
                                          "isr": [1, 2]}, 1) == []
    assert s.isr == (1, 3)


def test_metadata_for_new_leader_epoch_needs_new_state() -> None:
    s = leader()
    with pytest.raises(StaleLeaderStateError):
        s.on_metadata(1, 6, 11, (1, 2, 3), (1, 2, 3))
    with pytest.raises(StaleLeaderStateError):
        s.on_metadata(2, 5, 11, (1, 2, 3), (1, 2, 3))


def test_acks_all_completes_when_hw_passes_last_offset() -> None:
    s = leader(isr=(1, 2, 3), min_isr=2)
    assert s.check_produce(-1) == ErrorCode.NONE
    s.on_append(3)  # offsets 0..2
    assert s.produce_outcome(2) is None
    s.on_follower_fetch(2, 3, 1)
    assert s.produce_outcome(2) is None  # 3 has not got it
    s.on_follower_fetch(3, 2, 1)
    assert s.produce_outcome(1) == ErrorCode.NONE and s.produce_outcome(2) is None
    s.on_follower_fetch(3, 3, 2)
    assert s.produce_outcome(2) == ErrorCode.NONE


def test_not_enough_replicas_before_append() -> None:
    s = leader(isr=(1,), min_isr=2)
    assert s.check_produce(-1) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert s.check_produce(1) == ErrorCode.NONE  # acks=1 does not care


def test_not_enough_replicas_after_append_when_isr_shrinks() -> None:
    s = leader(isr=(1, 2), min_isr=2)
    assert s.check_produce(-1) == ErrorCode.NONE
    s.on_append(1)
    assert s.produce_outcome(0) is None
    [req] = requests(s.maybe_shrink_isr(LAG + 1))
    assert s.produce_outcome(0) is None  # shrink not committed yet
    eff = commit(s, req, LAG + 2)
    assert IsrChanged((1, 2), (1,), 11, True) in eff
    # the HW moved (ISR is just the leader) but the ISR is below min: the produce fails
    assert s.high_watermark == 1
    assert s.produce_outcome(0) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_leader_epoch_fencing() -> None:
    assert validate_leader_epoch(4, 5) == ErrorCode.FENCED_LEADER_EPOCH
    assert validate_leader_epoch(6, 5) == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert validate_leader_epoch(5, 5) == ErrorCode.NONE
    assert validate_leader_epoch(None, 5) == ErrorCode.NONE
    assert validate_leader_epoch(-1, 5) == ErrorCode.NONE


def test_constructor_invariants() -> None:
    with pytest.raises(ValueError):
        LeaderState(TP, leader_id=4, leader_epoch=1, partition_epoch=1, replicas=(1, 2),
                    isr=(1,), log_end_offset=0, high_watermark=0)
    with pytest.raises(ValueError):
        LeaderState(TP, leader_id=1, leader_epoch=1, partition_epoch=1, replicas=(1, 2),
                    isr=(2,), log_end_offset=0, high_watermark=0)
    s = LeaderState(TP, leader_id=1, leader_epoch=1, partition_epoch=1, replicas=(1, 2),
                    isr=(1, 2), log_end_offset=3, high_watermark=7)
    assert s.high_watermark == 3  # clamped: HW <= LEO


def test_acks_all_refused_when_isr_members_stopped_fetching() -> None:
    """A shrink that cannot commit (no controller) must not let acks=all append: followers
    silent for longer than the lag limit do not count towards min.insync.replicas."""
    s = leader(now=0)
    assert s.check_produce(-1, now_ms=LAG) == ErrorCode.NONE  # leadership start counts as contact
    s.on_follower_fetch(2, 0, LAG // 2)
    assert s.check_produce(-1, now_ms=LAG + 1) == ErrorCode.NONE  # 1 and 2 are fetching
    assert s.fetching_isr(LAG + 1) == (1, 2)
    assert s.check_produce(-1, now_ms=LAG // 2 + LAG + 1) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert s.check_produce(1, now_ms=10 * LAG) == ErrorCode.NONE  # acks=1 does not care
    s.on_follower_fetch(3, 0, 10 * LAG)
    s.on_follower_fetch(2, 0, 10 * LAG)
    assert s.check_produce(-1, now_ms=10 * LAG) == ErrorCode.NONE
