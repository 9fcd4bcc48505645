"""A restarted broker starts its catch-up from its on-disk image checkpoint (issue 27).

broker/image_checkpoint.py: the image a broker had is kept in ``DATA_DIR/@metadata-image.ckpt``;
after a restart ``MetadataListener`` folds only the records after it. The first image must be
the same as after a fold from offset 0 (and so must what the replica manager is told), and a
checkpoint that is damaged or another cluster's must be ignored: fold from 0 as before. The
controller side is ``tests/broker/test_metadata_catchup.py``'s scripted fake channel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from rafka.broker.image_checkpoint import CHECKPOINT_NAME, MAGIC, ImageCheckpoint
from rafka.broker.metadata_listener import MetadataListener, MetadataPublisher, fold_records
from rafka.metadata.image import MetadataImage
from rafka.metadata.records import Partition, Topic

from tests.broker.test_metadata_catchup import (
    MAX_RECORDS,
    TP,
    FakeChannel,
    Recorder,
    Voter,
    history,
)

CLUSTER = "cluster-a"


class AskedChannel(FakeChannel):
    """The fake controller, also recording every ``from_offset`` asked for."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.asked: list[int] = []

    async def request_any_from(self, api_key: int, body: dict[str, Any], **kw: Any) -> Any:
        self.asked.append(body["from_offset"])
        return await super().request_any_from(api_key, body, **kw)


def _log() -> list[tuple[int, int, Any]]:
    """history() plus a topic broker 1 does not hold, so the image has more than t/0."""
    log = history(300, final_leader=1)
    n = len(log)
    log += [(n, 1, Topic("u", "tid-u")), (n + 1, 1, Partition("tid-u", 0, (2, 3), (2, 3), leader=2))]
    return log


async def _catch_up(channel: FakeChannel, checkpoint: ImageCheckpoint | None
                    ) -> tuple[MetadataListener, Recorder]:
    pub = MetadataPublisher(1)
    rec = Recorder()
    pub.subscribe(rec)
    listener = MetadataListener(pub, channel, max_records=MAX_RECORDS, checkpoint=checkpoint)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            await listener.caught_up_event.wait()
        nursery.cancel_scope.cancel()
    return listener, rec


def _checkpoint_at(tmp_path: Path, log: list[tuple[int, int, Any]], offset: int,
                   cluster_id: str = CLUSTER) -> ImageCheckpoint:
    """A checkpoint file of the image folded up to ``offset`` (what a broker had saved)."""
    image, _ = fold_records(MetadataImage.EMPTY, [e for e in log if e[0] <= offset], 1)
    ImageCheckpoint(tmp_path / CHECKPOINT_NAME, cluster_id).save(image)
    return ImageCheckpoint(tmp_path / CHECKPOINT_NAME, CLUSTER)


async def test_restart_from_the_checkpoint_gives_the_image_of_a_fold_from_zero(tmp_path: Path) -> None:
    log = _log()
    last = log[-1][0]
    # a broker without a checkpoint: folds everything from offset 0
    ch0 = AskedChannel(log, {1: Voter(last, leader_id=1)})
    full, rec0 = await _catch_up(ch0, None)
    assert ch0.asked[0] == 0 and full.catchup_folded == len(log)
    # a broker restarted with a checkpoint at offset 250: asks from 251, folds only the tail
    mid = 250
    ch1 = AskedChannel(log, {1: Voter(last, leader_id=1)})
    warm, rec1 = await _catch_up(ch1, _checkpoint_at(tmp_path, log, mid))
    assert ch1.asked[0] == mid + 1
    assert warm.checkpoint_offset == mid and warm.catchup_folded == last - mid
    assert len(ch1.asked) < len(ch0.asked)
    # the same first image, published once, and the same news for the replica manager
    assert len(rec0.seen) == len(rec1.seen) == 1
    (img0, changes0), (img1, changes1) = rec0.seen[0], rec1.seen[0]
    assert img1 == img0 and img1.offset == last
    assert changes1.leaders == changes0.leaders == {TP: img0.topics.by_name["t"].partitions[0]}
    assert changes1.followers == changes0.followers and changes1.deletes == changes0.deletes


async def test_the_checkpoint_is_kept_as_the_image_moves_on(tmp_path: Path) -> None:
    log = _log()
    last = log[-1][0]
    cp = ImageCheckpoint(tmp_path / CHECKPOINT_NAME, CLUSTER, every_records=100, min_interval_s=0)
    pub = MetadataPublisher(1)
    listener = MetadataListener(pub, AskedChannel(log, {1: Voter(last, leader_id=1)}),
                                max_records=MAX_RECORDS, checkpoint=cp)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            while cp.saves == 0:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert cp.saved_offset == last
    loaded = ImageCheckpoint(tmp_path / CHECKPOINT_NAME, CLUSTER).load()
    assert loaded == pub.image


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "bit":
        data[len(data) // 2] ^= 0x40
    elif how == "short":
        del data[len(data) - 10:]
    elif how == "magic":
        data[:len(MAGIC)] = b"X" * len(MAGIC)
    elif how == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))


async def test_a_damaged_checkpoint_falls_back_to_the_fold_from_zero(tmp_path: Path) -> None:
    log = _log()
    last = log[-1][0]
    ch0 = AskedChannel(log, {1: Voter(last, leader_id=1)})
    _, rec0 = await _catch_up(ch0, None)
    for how in ("bit", "short", "magic", "empty", "cluster"):
        d = tmp_path / how
        d.mkdir()
        cp = _checkpoint_at(d, log, 250, cluster_id="cluster-b" if how == "cluster" else CLUSTER)
        if how != "cluster":
            _damage(cp.path, how)
        assert cp.load() is None, how
        ch = AskedChannel(log, {1: Voter(last, leader_id=1)})
        listener, rec = await _catch_up(ch, cp)
        assert ch.asked[0] == 0 and listener.checkpoint_offset is None, how
        assert listener.catchup_folded == len(log), how
        assert len(rec.seen) == 1 and rec.seen[0][0] == rec0.seen[0][0], how


async def test_a_checkpoint_older_than_the_controllers_log_start_takes_its_snapshot(tmp_path: Path) -> None:
    """The controller trimmed its log past the checkpoint: it answers with its snapshot, which
    replaces the checkpoint's image, and the first image is still the fold-from-zero one."""
    from rafka.metadata.snapshot import image_to_records

    log = _log()
    last = log[-1][0]
    _, rec0 = await _catch_up(AskedChannel(log, {1: Voter(last, leader_id=1)}), None)
    snap_at = 280
    snap_image, _ = fold_records(MetadataImage.EMPTY, [e for e in log if e[0] <= snap_at], 1)
    ch = AskedChannel(log, {1: Voter(last, leader_id=1)}, log_start=snap_at + 1,
                      snapshot=(snap_at, snap_image.epoch, image_to_records(snap_image)))
    listener, rec = await _catch_up(ch, _checkpoint_at(tmp_path, log, 100))
    assert ch.asked[:2] == [101, snap_at + 1]
    assert len(rec.seen) == 1 and rec.seen[0][0] == rec0.seen[0][0]
    assert rec.seen[0][1].leaders == rec0.seen[0][1].leaders


async def test_a_checkpoint_ahead_of_the_committed_log_is_dropped(tmp_path: Path) -> None:
    """A checkpoint past the active controller's committed offset is not this log's history
    (a quorum started afresh under the same cluster id): fold from 0, and save anew."""
    long_log = _log()
    short = history(40, final_leader=2)  # another history, 45 records
    cp = _checkpoint_at(tmp_path, long_log, 250)
    cp.every_records = 10
    cp.min_interval_s = 0
    _, rec0 = await _catch_up(AskedChannel(short, {1: Voter(short[-1][0], leader_id=1)}), None)
    ch = AskedChannel(short, {1: Voter(short[-1][0], leader_id=1)})
    pub = MetadataPublisher(1)
    rec = Recorder()
    pub.subscribe(rec)
    listener = MetadataListener(pub, ch, max_records=MAX_RECORDS, checkpoint=cp)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            await listener.caught_up_event.wait()
            while cp.saves == 0:  # once caught up, this log's image replaces the checkpoint
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert ch.asked[0] == 251 and 0 in ch.asked  # tried after the checkpoint, then from 0
    assert listener.checkpoint_offset is None and listener.catchup_folded == len(short)
    assert len(rec.seen) == 1 and rec.seen[0][0] == rec0.seen[0][0]
    assert rec.seen[0][1].followers == rec0.seen[0][1].followers
    assert cp.saved_offset == short[-1][0]
    assert ImageCheckpoint(cp.path, CLUSTER).load() == rec0.seen[0][0]
