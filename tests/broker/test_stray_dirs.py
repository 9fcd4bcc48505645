"""Partition directories of topics deleted or moved while the broker was down
(broker/partition_dirs.py; docs/chaos-results.md "Session 27").

An in-process broker (real ReplicaManager and PartitionLogs on disk, a real server on loopback)
writes records to a few topics and stops; a new broker on the same data directory then gets a
first image in which some of those topics were deleted, moved to another broker, or deleted and
created again under the same name. Before the identity file a directory the first image did not
name stayed on disk for good, and a topic created again under the same name reopened the old
directory and served the deleted topic's records at its offsets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rafka.broker import partition_dirs as pd
from rafka.broker.replica_manager import partition_dir_name
from rafka.metadata.image import TopicPartition
from rafka.metadata.records import Partition, RegisterBroker, RemoveTopic, Topic
from rafka.metadata.snapshot import records_to_image
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

from .harness import BROKER_ID, Broker, batch, next_offsets, part, produce_body, running_broker

OTHER = 2


def _topic(name: str, tid: str, replicas: tuple[int, ...] = (BROKER_ID,)) -> list[Any]:
    return [Topic(name, tid), Partition(tid, 0, replicas, replicas, replicas[0], 0, 0)]


def _dir(tmp_path: Path, topic: str) -> Path:
    return tmp_path / "data" / partition_dir_name(topic, 0)


async def _produce(b: Broker, topic: str, *values: bytes) -> None:
    async with b.connect() as conn:
        for v in values:
            r = part((await conn.request(ApiKey.PRODUCE, produce_body(topic, batch(v)))).body)
            assert r["error"] == 0, r


async def _fill(tmp_path: Path, topics: dict[str, str], *, offset: int | None = None) -> None:
    """Each topic (name -> id) with three records on this broker; ``offset``: the metadata
    offset of the image that creates them (default: the harness's next ones)."""
    async with running_broker(tmp_path) as b:
        recs = [r for name, tid in topics.items() for r in _topic(name, tid)]
        offsets = next_offsets(len(recs)) if offset is None else range(offset, offset + len(recs))
        await b.publisher.publish_records(list(zip(offsets, [1] * len(recs), recs, strict=True)))  # type: ignore[arg-type]
        for name in topics:
            await _produce(b, name, b"old-1", b"old-2", b"old-3")
        for name, tid in topics.items():
            assert pd.read_identity(_dir(tmp_path, name)) == pd.DirIdentity(tid, b.publisher.image.offset)


def _stray_events(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "data" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "stray-partition"]


async def test_the_first_image_removes_what_was_deleted_or_moved_and_a_same_name_topic_starts_empty(
        tmp_path: Path) -> None:
    await _fill(tmp_path, {"gone": "id-gone", "moved": "id-moved", "again": "id-again-old",
                           "kept": "id-kept"})
    first = [*_topic("kept", "id-kept"), *_topic("again", "id-again-new"),
             RegisterBroker(OTHER, "inc", "127.0.0.1", 1), *_topic("moved", "id-moved", (OTHER,))]
    async with running_broker(tmp_path, first_image=first) as b:
        await b.rm.wait_logs_open()
        assert not _dir(tmp_path, "gone").exists()  # deleted while the broker was down
        assert not _dir(tmp_path, "moved").exists()  # reassigned away while it was down
        assert b.rm.strays_removed == 3
        # created again under the same name: a new, empty log with the new identity
        again = b.rm.get_leader("again", 0)
        assert again.log.log_end_offset == 0
        assert pd.read_identity(_dir(tmp_path, "again")) == pd.DirIdentity("id-again-new", b.publisher.image.offset)
        await _produce(b, "again", b"new-1")
        assert again.log.log_end_offset == 1
        assert b.rm.get_leader("kept", 0).log.log_end_offset == 3  # its own log, untouched
        assert not b.rm.undecided
    events = {e["tp"]: e["verdict"] for e in _stray_events(tmp_path)}
    assert events == {"gone/0": "stray", "moved/0": "stray", "again/0": "replace"}


async def test_an_image_older_than_the_directories_decides_nothing_until_a_newer_one(tmp_path: Path) -> None:
    """A deposed leader can answer a restarted broker's catch-up with an older committed
    offset: absence from that image proves nothing. The directories are created by an image
    at offset 10_000_000, far above the harness's offsets."""
    created_at = 10_000_000
    await _fill(tmp_path, {"later": "id-later", "x": "id-x-new"}, offset=created_at)
    # the older first image still has an earlier topic "x" (placed here) and not "later"
    async with running_broker(tmp_path, first_image=_topic("x", "id-x-old")) as b:
        await b.rm.wait_logs_open()
        assert _dir(tmp_path, "later").exists() and _dir(tmp_path, "x").exists()
        assert b.rm.undecided == {TopicPartition("later", 0), TopicPartition("x", 0)}
        with pytest.raises(RafkaError) as err:  # WAIT: not opened as the older topic either
            b.rm.get_leader("x", 0)
        assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # the older topic's delete is not the directory's topic: it stays
        await b.publisher.publish_records([(next_offsets(1)[0], 1, RemoveTopic("id-x-old"))])
        assert _dir(tmp_path, "x").exists()
        # the newer image that creates "x" again opens the directory with its records; "later"
        # is absent from an image newer than it: deleted meanwhile, removed now
        recs = _topic("x", "id-x-new")
        await b.publisher.publish_records(
            [(created_at + 100 + i, 1, r) for i, r in enumerate(recs)])  # type: ignore[arg-type]
        await b.rm.wait_logs_open()
        assert b.rm.get_leader("x", 0).log.log_end_offset == 3
        assert not _dir(tmp_path, "later").exists()
        assert not b.rm.undecided


async def test_a_directory_from_before_identity_files_is_adopted_never_removed(tmp_path: Path) -> None:
    await _fill(tmp_path, {"legacy": "id-legacy", "orphan": "id-orphan"})
    for name in ("legacy", "orphan"):
        (_dir(tmp_path, name) / pd.IDENTITY_FILE).unlink()
    async with running_broker(tmp_path, first_image=_topic("legacy", "id-legacy")) as b:
        await b.rm.wait_logs_open()
        assert b.rm.get_leader("legacy", 0).log.log_end_offset == 3
        assert pd.read_identity(_dir(tmp_path, "legacy")) == pd.DirIdentity("id-legacy", b.publisher.image.offset)
        # no identity: its topic cannot be known, so it is left (and logged), not removed
        assert _dir(tmp_path, "orphan").exists() and b.rm.strays_removed == 0


def test_judge_and_names() -> None:
    image = records_to_image([*_topic("t", "id-t"), *_topic("u", "id-u", (OTHER,))], offset=50, epoch=1)
    tp = TopicPartition("t", 0)
    assert pd.judge(pd.DirIdentity("id-t", 10), image, tp, BROKER_ID) is pd.Verdict.OPEN
    assert pd.judge(pd.DirIdentity("id-t", 99), image, tp, BROKER_ID) is pd.Verdict.OPEN  # same topic
    assert pd.judge(pd.DirIdentity("id-old", 10), image, tp, BROKER_ID) is pd.Verdict.REPLACE
    assert pd.judge(pd.DirIdentity("id-new", 99), image, tp, BROKER_ID) is pd.Verdict.WAIT
    assert pd.judge(pd.DirIdentity("id-u", 10), image, TopicPartition("u", 0), BROKER_ID) is pd.Verdict.STRAY
    assert pd.judge(pd.DirIdentity("id-v", 50), image, TopicPartition("v", 0), BROKER_ID) is pd.Verdict.STRAY
    assert pd.judge(pd.DirIdentity("id-v", 51), image, TopicPartition("v", 0), BROKER_ID) is pd.Verdict.KEEP
    assert pd.judge(None, image, tp, BROKER_ID) is pd.Verdict.OPEN
    assert pd.judge(None, image, TopicPartition("v", 0), BROKER_ID) is pd.Verdict.KEEP
    assert pd.parse_dir_name("my-topic-12") == TopicPartition("my-topic", 12)
    for name in ("topic", "-3", "t-", "t-01", "t-x", "high-watermark-checkpoint"):
        assert pd.parse_dir_name(name) is None, name


def test_a_malformed_identity_file_is_no_identity(tmp_path: Path) -> None:
    (tmp_path / pd.IDENTITY_FILE).write_text("version: 7\ntopic_id: a\ncreated_at: 1\n")
    assert pd.read_identity(tmp_path) is None
    (tmp_path / pd.IDENTITY_FILE).write_bytes(b"\xff\xfe")
    assert pd.read_identity(tmp_path) is None
    (tmp_path / pd.IDENTITY_FILE).write_text("version: 0\ntopic_id: a\ncreated_at: 12\n")
    assert pd.read_identity(tmp_path) == pd.DirIdentity("a", 12)


async def test_a_removal_cut_short_leaves_no_partition_directory_and_the_next_start_finishes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node killed part-way through removing a directory (session 28's campaign: a topic
    deleted while the node died) used to leave ``<topic>-<p>`` with some files but no identity,
    which the stray rule must leave alone. The removal renames the directory away first: here
    the tree removal stops after the identity file (as a kill would), and what is left has a
    name no partition has; the next start removes it."""
    await _fill(tmp_path, {"doomed": "id-doomed", "kept": "id-kept"})
    killed: list[Path] = []

    def cut_short(path: Path, ignore_errors: bool = False) -> None:
        (Path(path) / pd.IDENTITY_FILE).unlink()
        killed.append(Path(path))

    both = [*_topic("kept", "id-kept"), *_topic("doomed", "id-doomed")]
    async with running_broker(tmp_path, first_image=both) as b:
        await b.rm.wait_logs_open()
        monkeypatch.setattr(pd.shutil, "rmtree", cut_short)
        await b.publisher.publish_records([(next_offsets(1)[0], 1, RemoveTopic("id-doomed"))])
        monkeypatch.undo()
    assert not _dir(tmp_path, "doomed").exists()  # no partition directory without an identity
    assert len(killed) == 1 and killed[0].exists() and pd.is_leftover(killed[0].name)
    assert (killed[0] / f"{0:020d}.log").exists()  # the old records are still in there
    async with running_broker(tmp_path, first_image=_topic("kept", "id-kept")) as b:
        await b.rm.wait_logs_open()
        assert not killed[0].exists()  # the first image's sweep finished the removal
        assert b.rm.get_leader("kept", 0).log.log_end_offset == 3


def test_leftover_names() -> None:
    assert pd.is_leftover("my-topic-3.0123abcd-delete")
    for name in ("my-topic-3", "my-topic-3-delete", "x.abc-delete", "my-topic-3.abc", "@metadata-image.ckpt"):
        assert not pd.is_leftover(name), name
