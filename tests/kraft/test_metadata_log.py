"""The on-disk @metadata log: append, fsync, read, snapshot, trim, recovery of a torn tail."""

from __future__ import annotations

import os

import pytest
from rafka.kraft.metadata_log import MetadataLog
from rafka.kraft.quorum import Command, Guard, OffsetOutOfRange
from rafka.metadata import LeaderChange, Topic


def leader(epoch=1):
    return Command(f"leader-{epoch}", epoch, 0, (LeaderChange(1, epoch),))


def topic(i, epoch=1):
    return Command(f"r{i}", epoch, 0, (Topic(f"t{i}", f"id{i}"),), (Guard.topic_absent(f"t{i}"),))


def fill(log, n, start_ri=1):
    log.apply(leader(), start_ri)
    for i in range(n):
        log.apply(topic(i), start_ri + 1 + i)


def test_append_sync_read_and_recover(tmp_path):
    log = MetadataLog(tmp_path, snapshot_every_records=1000)
    fill(log, 5)
    assert log.read(0, 100) == []  # nothing durable yet
    assert log.sync() == 5 and log.fsyncs == 1
    assert [e.offset for e in log.read(0, 100)] == [0, 1, 2, 3, 4, 5]
    assert [e.offset for e in log.read(4, 1)] == [4]
    # a duplicate request id applies once; a failed guard appends nothing
    assert log.apply(topic(2), 100).result.duplicate
    assert log.apply(Command("x", 1, 0, (Topic("t1", "other"),), (Guard.topic_absent("t1"),)), 101).error
    image = log.sm.image
    log.close()
    again = MetadataLog(tmp_path)
    assert again.sm.image == image
    assert again.sm.last_raft_index == 6  # rejected/duplicate commands leave no frame
    assert again.sm.dedup_state() == log.sm.dedup_state()
    # commands replayed by the engine after a restart are skipped by raft index
    assert again.apply(topic(99), 3).result is None
    assert again.sm.image == image


def test_torn_tail_is_truncated(tmp_path):
    log = MetadataLog(tmp_path)
    fill(log, 4)
    log.sync()
    log.close()
    seg = sorted(tmp_path.glob("*.log"))[-1]
    size = seg.stat().st_size
    with open(seg, "r+b") as fh:  # tear the last frame
        fh.truncate(size - 3)
    again = MetadataLog(tmp_path)
    assert again.sm.image.offset == 3
    assert "t3" not in again.sm.image.topics.by_name
    assert seg.stat().st_size < size - 3
    # and a corrupt byte in the middle ends the log there
    again.apply(topic(3), 50)
    again.apply(topic(4), 51)
    again.sync()
    again.close()
    data = bytearray(seg.read_bytes())
    data[-5] ^= 0xFF
    seg.write_bytes(bytes(data))
    third = MetadataLog(tmp_path)
    assert third.sm.image.offset == 4


def test_snapshot_trim_and_recovery_from_snapshot(tmp_path):
    log = MetadataLog(tmp_path, snapshot_every_records=10)
    fill(log, 12)
    log.sync()
    assert log.maybe_snapshot()
    assert log.latest_snapshot().offset == 12
    fill_more = [log.apply(topic(i), 100 + i) for i in range(12, 25)]
    assert all(a.error is None for a in fill_more)
    log.sync()
    assert log.maybe_snapshot()  # second snapshot: trims what the first one covers
    assert log.log_start == 13
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 10)
    assert [e.offset for e in log.read(13, 2)] == [13, 14]
    assert len(list(tmp_path.glob("*.snap"))) == 2
    image = log.sm.image
    log.close()
    again = MetadataLog(tmp_path)
    assert again.sm.image == image
    assert again.log_start == 13
    assert again.latest_snapshot().offset == 25


def test_install_resets_to_a_newer_snapshot(tmp_path):
    leader_log = MetadataLog(tmp_path / "a")
    fill(leader_log, 8)
    leader_log.sync()
    payload = leader_log.snapshot_payload()
    follower = MetadataLog(tmp_path / "b")
    fill(follower, 2)
    follower.sync()
    assert follower.install(payload)
    assert follower.sm.image == leader_log.sm.image
    assert follower.log_start == 9 and follower.durable_offset == 8
    assert not follower.install(payload)  # already covered
    follower.apply(topic(50), 200)
    follower.sync()
    follower.close()
    again = MetadataLog(tmp_path / "b")
    assert again.sm.image.offset == 9 and "t50" in again.sm.image.topics.by_name
    assert os.listdir(tmp_path / "b")


def test_a_tail_longer_than_the_image_is_snapshotted_before_snapshot_every_records(tmp_path):
    """A restart replays the snapshot and the tail after it: once the tail is SNAPSHOT_TAIL_MIN
    records or more and longer than the image (here: one topic whose leader keeps moving, the
    fence/unfence churn of a kill-all run), a snapshot is due long before the 10,000 records."""
    from rafka.kraft.metadata_log import SNAPSHOT_TAIL_MIN
    from rafka.metadata import Partition, PartitionChange

    log = MetadataLog(tmp_path)  # snapshot_every_records: the default 10,000
    log.apply(leader(), 1)
    log.apply(Command("t", 1, 0, (Topic("t", "tid"), Partition("tid", 0, (1, 2), (1, 2), leader=1))), 2)
    ri = 3
    while log.sm.image.offset < SNAPSHOT_TAIL_MIN - 2:
        log.apply(Command(f"c{ri}", 1, 0, (PartitionChange("tid", 0, leader=1 + ri % 2),)), ri)
        ri += 1
    log.sync()
    assert not log.maybe_snapshot()  # 999 records since the start: not yet
    log.apply(Command(f"c{ri}", 1, 0, (PartitionChange("tid", 0, leader=1 + ri % 2),)), ri)
    log.sync()
    assert log.maybe_snapshot() and log.latest_snapshot().offset == SNAPSHOT_TAIL_MIN - 1
    # 1,500 creates: a tail of 1,500 records, but the image now holds 1,502 (t/0, 1,501
    # topics): not due; two more records make the tail as long as the image
    for i in range(1500):
        log.apply(topic(i), 10_000 + i)
    log.sync()
    assert not log.maybe_snapshot()
    for i in range(2):
        log.apply(Command(f"d{i}", 1, 0, (PartitionChange("tid", 0, leader=1 + i),)), 20_000 + i)
    log.sync()
    assert log.maybe_snapshot() and log.latest_snapshot().offset == log.sm.image.offset
    image = log.sm.image
    log.close()
    assert MetadataLog(tmp_path).sm.image == image
