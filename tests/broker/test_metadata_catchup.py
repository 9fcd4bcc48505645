"""A restarting broker does not act on historical metadata (docs/chaos-results.md #1, variant).

``MetadataListener`` replays the ``@metadata`` log from offset 0 after a restart. It must fold the
whole history up to the active controller's committed offset before publishing anything: the
replica manager must never see an intermediate image in which this broker leads an epoch that
ended long ago. A fake controller channel serves a scripted log and says which voter answered.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from rafka.broker.metadata_listener import MetadataListener, MetadataPublisher
from rafka.metadata.delta import LocalChanges
from rafka.metadata.image import MetadataImage, TopicPartition
from rafka.metadata.records import LeaderChange, Partition, PartitionChange, RegisterBroker, Topic
from rafka.metadata.snapshot import image_to_records, records_to_image
from rafka.wire.errors import ErrorCode

TID = "tid-0"
TP = TopicPartition("t", 0)
MAX_RECORDS = 50


def history(changes: int, final_leader: int = 2) -> list[tuple[int, int, Any]]:
    """Registrations, then the leader of t/0 moving 1 → 2 → 3 → 1 … ending at final_leader."""
    recs: list[Any] = [LeaderChange(1, 1)]
    recs += [RegisterBroker(b, f"inc{b}", "127.0.0.1", 9000 + b, fenced=False) for b in (1, 2, 3)]
    recs += [Topic("t", TID), Partition(TID, 0, (1, 2, 3), (1, 2, 3), leader=1)]
    leaders = [(i % 3) + 1 for i in range(1, changes + 1)]  # 2, 3, 1, 2, … (each a new epoch)
    leaders[-1] = final_leader
    if leaders[-2] == final_leader:
        leaders[-2] = ({1, 2, 3} - {final_leader, leaders[-3]}).pop()
    recs += [PartitionChange(TID, 0, leader=ld) for ld in leaders]
    return [(o, 1, r) for o, r in enumerate(recs)]


class Voter:
    def __init__(self, committed: int, leader_id: int, up: bool = True) -> None:
        self.committed = committed
        self.leader_id = leader_id  # what it reports (-1: no leader known)
        self.up = up


class FakeChannel:
    """``request_any_from``/``note_leader`` over one shared committed log; each voter serves up to
    its own committed offset. The voter answering is the noted leader if up, else ``default`` if
    up, else the first one up."""

    def __init__(self, log: list[tuple[int, int, Any]], voters: dict[int, Voter],
                 snapshot: tuple[int, int, list[Any]] | None = None, log_start: int = 0,
                 default: int | None = None) -> None:
        self.log = log
        self.default = default
        self.voters = voters
        self.snapshot = snapshot
        self.log_start = log_start
        self.preferred: int | None = None
        self.noted: list[int] = []
        self.answered: list[int] = []

    def note_leader(self, voter_id: int) -> None:
        self.noted.append(voter_id)
        self.preferred = voter_id

    async def request_any_from(self, api_key: int, body: dict[str, Any], *,
                               attempt_timeout_s: float | None = None) -> tuple[int | None, dict[str, Any]]:
        await trio.sleep(0.001)
        if self.preferred is not None and self.voters[self.preferred].up:
            vid = self.preferred
        elif self.default is not None and self.voters[self.default].up:
            vid = self.default
        else:
            vid = next(v for v, s in sorted(self.voters.items()) if s.up)
        self.answered.append(vid)
        v = self.voters[vid]
        start = body["from_offset"]
        out: dict[str, Any] = {"error": 0, "leader_id": v.leader_id, "committed_offset": v.committed,
                               "log_start_offset": self.log_start, "entries": [], "snapshot": None}
        if start < self.log_start:
            assert self.snapshot is not None
            off, epoch, recs = self.snapshot
            out["snapshot"] = {"offset": off, "epoch": epoch, "records": [r.to_dict() for r in recs]}
            return vid, out
        if start > v.committed and body["max_wait_ms"] > 0:
            await trio.sleep(body["max_wait_ms"] / 1000)
        out["entries"] = [[o, e, r.to_dict()] for o, e, r in self.log
                          if start <= o <= v.committed][: body["max_records"]]
        return vid, out

    async def request_any(self, api_key: int, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return (await self.request_any_from(api_key, body, **kw))[1]


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[MetadataImage, LocalChanges]] = []

    async def __call__(self, image: MetadataImage, changes: LocalChanges) -> None:
        self.seen.append((image, changes))


def _setup(channel: FakeChannel, broker_id: int = 1) -> tuple[MetadataListener, Recorder]:
    pub = MetadataPublisher(broker_id)
    rec = Recorder()
    pub.subscribe(rec)
    return MetadataListener(pub, channel, max_records=MAX_RECORDS), rec


def _leader_epochs(rec: Recorder, broker_id: int) -> list[int]:
    return [reg.leader_epoch for _img, ch in rec.seen for tp, reg in ch.leaders.items() if tp == TP]


@pytest.mark.parametrize("final_leader", [2, 1])
async def test_first_publish_is_the_final_registration(final_leader: int) -> None:
    log = history(300, final_leader)
    last = log[-1][0]
    ch = FakeChannel(log, {1: Voter(last, leader_id=1)})
    listener, rec = _setup(ch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            await listener.caught_up_event.wait()
        nursery.cancel_scope.cancel()
    assert listener.fetches > len(log) // MAX_RECORDS  # it took many batches
    assert len(rec.seen) == 1  # one image, published once
    image, changes = rec.seen[0]
    assert image.offset == last
    final = image.topics.by_name["t"].partitions[0]
    assert final.leader == final_leader and final.leader_epoch == 300
    if final_leader == 1:
        assert changes.leaders == {TP: final} and not changes.followers
    else:
        assert changes.followers == {TP: final} and not changes.leaders
    # never told it led an intermediate epoch
    assert _leader_epochs(rec, 1) == ([300] if final_leader == 1 else [])
    assert listener.publisher.image is image


async def test_after_catch_up_each_batch_is_published() -> None:
    log = history(10)
    ch = FakeChannel(log, {1: Voter(log[-1][0], leader_id=1)})
    listener, rec = _setup(ch)
    more = [(len(log) + i, 2, PartitionChange(TID, 0, leader=(i % 3) + 1)) for i in range(3)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            await listener.caught_up_event.wait()
            assert len(rec.seen) == 1
            ch.log += more
            ch.voters[1].committed = more[-1][0]
            await listener.publisher.wait_for_offset(more[-1][0])
        nursery.cancel_scope.cancel()
    assert len(rec.seen) >= 2 and rec.seen[-1][0].offset == more[-1][0]


async def test_stale_committed_offset_from_a_follower_does_not_end_catch_up() -> None:
    log = history(300)
    last = log[-1][0]
    # voter 3 just restarted: its local log ends at 100 and it knows no leader yet; the leader
    # (voter 1, committed = last) is not reachable at first
    ch = FakeChannel(log, {1: Voter(last, leader_id=1, up=False), 3: Voter(100, leader_id=-1)},
                     default=3)
    listener, rec = _setup(ch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            while listener.fetches < 20:
                await trio.sleep(0.01)
            # folded everything voter 3 has, many times asked: still nothing published
            assert not listener.caught_up and rec.seen == []
            assert listener.publisher.image is MetadataImage.EMPTY
            assert listener.catchup_target is None
            # voter 3 learns the leader; the listener goes there and catches up with ITS offset
            ch.voters[3].leader_id = 1
            ch.voters[1].up = True
            await listener.caught_up_event.wait()
        nursery.cancel_scope.cancel()
    assert 1 in ch.noted
    assert listener.catchup_target == last
    assert len(rec.seen) == 1 and rec.seen[0][0].offset == last
    assert rec.seen[0][0].topics.by_name["t"].partitions[0].leader_epoch == 300


async def test_a_follower_naming_the_leader_is_not_taken_for_the_leader() -> None:
    """Voter 3 answers with leader_id 1 (correct hint) and a stale committed offset: the answer
    is a follower's (responder 3 != leader 1), so its offset is not the target."""
    log = history(300)
    last = log[-1][0]
    ch = FakeChannel(log, {1: Voter(last, leader_id=1, up=False), 3: Voter(60, leader_id=1)},
                     default=3)
    listener, rec = _setup(ch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            while listener.fetches < 10:
                await trio.sleep(0.01)
            assert not listener.caught_up and rec.seen == []
            ch.voters[1].up = True
            await listener.caught_up_event.wait()
        nursery.cancel_scope.cancel()
    assert set(ch.answered[:10]) == {3}
    assert len(rec.seen) == 1 and rec.seen[0][0].offset == last


async def test_no_leader_ever_means_never_caught_up(autojump_clock: Any) -> None:
    log = history(30)
    ch = FakeChannel(log, {2: Voter(log[-1][0], leader_id=-1), 3: Voter(log[-1][0], leader_id=-1)})
    listener, rec = _setup(ch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        await trio.sleep(60)
        nursery.cancel_scope.cancel()
    assert listener.fetches > 100 and not listener.caught_up and rec.seen == []


async def test_snapshot_during_catch_up() -> None:
    """The voter's log starts after a snapshot: the snapshot and the entries after it are folded
    into one image; the changes are computed against the image before the catch-up."""
    log = history(300)
    last = log[-1][0]
    snap_at = 200
    snap_image = MetadataImage.EMPTY
    from rafka.metadata.delta import MetadataDelta

    d = MetadataDelta(snap_image)
    for o, e, r in log[: snap_at + 1]:
        d.replay(r, o, e)
    snap_image = d.apply()
    snap = (snap_at, 1, image_to_records(snap_image))
    assert records_to_image(snap[2], snap_at, 1) == snap_image
    ch = FakeChannel(log, {1: Voter(last, leader_id=1)}, snapshot=snap, log_start=snap_at + 1)
    pub = MetadataPublisher(1)
    # the broker already knew of a topic that is gone now (and a local partition of it)
    before = MetadataDelta(MetadataImage.EMPTY)
    for o, r in enumerate([Topic("gone", "tid-gone"), Partition("tid-gone", 0, (1, 2), (1, 2), leader=1)]):
        before.replay(r, o, 0)
    pub.image = before.apply()
    rec = Recorder()
    pub.subscribe(rec)
    listener = MetadataListener(pub, ch, max_records=MAX_RECORDS)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            await listener.caught_up_event.wait()
        nursery.cancel_scope.cancel()
    assert len(rec.seen) == 1
    image, changes = rec.seen[0]
    assert image.offset == last
    final = image.topics.by_name["t"].partitions[0]
    assert final.leader == 2 and final.leader_epoch == 300
    assert changes.followers == {TP: final} and not changes.leaders
    assert changes.deletes == {TopicPartition("gone", 0)}


async def test_errors_before_a_leader_keep_the_broker_not_caught_up() -> None:
    """Voters that answer with an error (a controller still starting) are retried."""

    class Starting(FakeChannel):
        starting = True

        async def request_any_from(self, api_key, body, **kw):  # type: ignore[override]
            if self.starting:
                await trio.sleep(0.01)
                return 1, {"error": int(ErrorCode.BROKER_NOT_AVAILABLE), "message": "starting"}
            return await super().request_any_from(api_key, body, **kw)

    log = history(20)
    ch = Starting(log, {1: Voter(log[-1][0], leader_id=1)})
    listener, rec = _setup(ch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.run)
        with trio.fail_after(10):
            while listener.errors < 3:
                await trio.sleep(0.01)
            assert rec.seen == []
            ch.starting = False
            await listener.caught_up_event.wait()
        nursery.cancel_scope.cancel()
    assert len(rec.seen) == 1 and rec.seen[0][0].offset == log[-1][0]
