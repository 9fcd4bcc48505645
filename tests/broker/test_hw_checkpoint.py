"""The high watermark survives a restart through its checkpoint, never through the log end.

Regression for docs/chaos-results.md #1: a leader that appended records no follower had, then
restarted and led the same epoch again, used to restore its HW from the recovery point (its
whole local log) and served those records to consumers.
"""

from __future__ import annotations

import json
from pathlib import Path

import trio
from rafka.broker.events import EventLog
from rafka.broker.partition import HW_CHECKPOINT_FILE, Partition, read_hw_checkpoint
from rafka.broker.replica_manager import ReplicaManager
from rafka.log.batch import build_batch
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog
from rafka.metadata.image import PartitionRegistration, TopicPartition

REG = PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=3,
                            partition_epoch=5)


def _open(d: Path, events: EventLog | None = None) -> Partition:
    plog = PartitionLog.open(d, LogConfig())
    return Partition("t", 0, plog, 1, events or EventLog(None, 1), fsync_acks=True,
                     min_insync_replicas=1)


def _append(p: Partition, n: int) -> None:
    for i in range(n):
        p.append_as_leader(build_batch([(None, b"v%d" % i, [], 1000)]), acks=1)
    p.on_flushed(p.log.flush())


def _consumer_end(p: Partition) -> int:
    """The offset after the last record a consumer can read from the start."""
    end, off = 0, 0
    while True:
        sl = p.read(off, 1 << 20, consumer=True)
        if sl is None or sl.length == 0:
            return end
        end = off = sl.last_offset + 1


def _leader_with_unreplicated_tail(d: Path) -> Partition:
    p = _open(d)
    p.apply_registration(REG)
    _append(p, 5)
    p.on_follower_fetch(2, 3)  # follower 2 has [0, 3): HW 3
    assert p.high_watermark == 3
    _append(p, 4)  # offsets 5..8: never replicated
    assert (p.high_watermark, p.log.log_end_offset) == (3, 9)
    return p


def test_clean_restart_restores_checkpointed_hw_not_log_end(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    p = _leader_with_unreplicated_tail(d)
    rm = ReplicaManager(1, tmp_path, {}, {}, EventLog(None, 1))
    rm.partitions[TopicPartition("t", 0)] = p
    rm.close()  # clean shutdown: checkpoint + log close
    assert read_hw_checkpoint(d) == 3

    events_path = tmp_path / "events.jsonl"
    ev = EventLog(events_path, 1)
    q = _open(d, ev)
    assert q.log.log_end_offset == 9
    assert q.high_watermark == 3
    q.apply_registration(REG)  # leads the same epoch again
    assert q.is_leader and q.high_watermark == 3
    assert _consumer_end(q) == 3  # the unreplicated records are not served
    # the HW moves on only as the follower fetches
    q.on_follower_fetch(2, 6)
    assert q.high_watermark == 6 and _consumer_end(q) == 6
    ev.close()
    hws = [json.loads(line) for line in events_path.read_text().splitlines()]
    hws = [e for e in hws if e["event"] == "hw"]
    assert hws[0]["hw"] == 3 and hws[0]["tp"] == "t/0"  # the restored HW is reported
    assert [e["hw"] for e in hws] == sorted(e["hw"] for e in hws)
    q.log.close()


def test_unclean_restart_uses_lagging_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    p = _leader_with_unreplicated_tail(d)
    rm = ReplicaManager(1, tmp_path, {}, {}, EventLog(None, 1))
    rm.partitions[TopicPartition("t", 0)] = p
    trio.run(rm.checkpoint_high_watermarks)
    assert read_hw_checkpoint(d) == 3
    p.on_follower_fetch(2, 4)  # the HW moves on after the checkpoint: the checkpoint lags
    assert p.high_watermark == 4 and read_hw_checkpoint(d) == 3
    # crash: no close, no clean-shutdown marker
    q = _open(d)
    assert q.log.log_end_offset == 9
    assert q.high_watermark == 3
    q.apply_registration(REG)
    assert q.high_watermark == 3 and _consumer_end(q) == 3
    q.log.close()
    p.log.close()


def test_no_checkpoint_means_hw_zero_and_checkpoint_clamped_to_log_end(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    p = _open(d)
    p.apply_registration(REG)
    _append(p, 4)
    p.log.close()
    q = _open(d)
    assert q.log.log_end_offset == 4 and q.high_watermark == 0
    q.apply_registration(REG)
    assert q.high_watermark == 0 and _consumer_end(q) == 0
    q.log.close()
    (d / HW_CHECKPOINT_FILE).write_text("100\n")
    r = _open(d)
    assert r.high_watermark == 4
    r.log.close()


def test_single_replica_leader_catches_up_at_once(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    solo = PartitionRegistration(replicas=(1,), isr=(1,), leader=1, leader_epoch=0)
    p = _open(d)
    p.apply_registration(solo)
    _append(p, 3)
    assert p.high_watermark == 3
    p.log.close()  # no checkpoint written
    q = _open(d)
    assert q.high_watermark == 0
    q.apply_registration(solo)
    assert q.high_watermark == 3
    q.log.close()
