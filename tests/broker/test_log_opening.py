"""A restarted broker publishes its first image before it opens the logs the image names
(issue 27; broker/replica_manager.py, "Opening logs without holding the image back").

An in-process broker (real ReplicaManager, MetadataPublisher, PartitionLogs on disk, a real
server on loopback) holds 40 single-partition topics with a record each; it stops, the clean
shutdown markers are removed (every log recovers, as after ``kill -9``), and a new broker on the
same directory gets all 40 in one first image. The assertions are on state right after
``publish`` returned — no await in between, so the opener task cannot have run: the image is
current, no log is open, and a queued partition answers the retriable NOT_LEADER_OR_FOLLOWER;
once the queue drains every record is there and a produce lands after it. Before the change, ``publish`` returned only after all 40 logs were open.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from rafka.broker.replica_manager import partition_dir_name
from rafka.log.partition_log import CLEAN_SHUTDOWN_FILE
from rafka.metadata.records import Partition, RemoveTopic, Topic
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

from .harness import BROKER_ID, Broker, batch, part, produce_body, running_broker

TOPICS = 40


def _names() -> list[str]:
    return [f"t{i:02d}" for i in range(TOPICS)]


def _entries(b: Broker, recs: list[object]) -> list[tuple[int, int, object]]:
    """``recs`` at the offsets after ``b``'s image (the harness's shared counter is left alone:
    other tests publish at fixed offsets)."""
    return [(b.publisher.image.offset + 1 + i, 1, r) for i, r in enumerate(recs)]


def _first_image(b: Broker) -> list[tuple[int, int, object]]:
    recs: list[object] = []
    for name in _names():
        recs += [Topic(name, f"id-{name}"), Partition(f"id-{name}", 0, (BROKER_ID,), (BROKER_ID,), BROKER_ID, 0, 0)]
    return _entries(b, recs)


async def _fill(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b, b.connect() as conn:
        await b.publisher.publish_records(_first_image(b))  # type: ignore[arg-type]
        for name in _names():
            r = part((await conn.request(ApiKey.PRODUCE, produce_body(name, batch(name.encode())))).body)
            assert (r["error"], r["base_offset"]) == (0, 0)
    for name in _names():  # unclean: every open is a recovery
        (tmp_path / "data" / partition_dir_name(name, 0) / CLEAN_SHUTDOWN_FILE).unlink()


@pytest.mark.parametrize("in_thread", [False, True], ids=["trio-thread", "worker-thread"])
async def test_first_image_is_current_before_its_logs_open_and_nothing_is_lost(
        tmp_path: Path, in_thread: bool) -> None:
    await _fill(tmp_path)
    async with running_broker(tmp_path) as b, b.connect() as conn:
        b.rm.open_logs_in_thread = in_thread
        entries = _first_image(b)
        await b.publisher.publish_records(entries)  # type: ignore[arg-type]
        # no await since: the opener has not run
        assert b.publisher.image.offset == entries[-1][0]
        assert not b.rm.partitions
        assert len(b.rm.logs_to_open) == TOPICS
        with pytest.raises(RafkaError) as err:
            b.rm.get_leader("t39", 0)
        assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "opening" in err.value.message

        await b.rm.wait_logs_open()
        assert sorted(tp.topic for tp in b.rm.partitions) == _names()
        assert b.rm.logs_opened_queued == TOPICS
        for name in _names():
            p = b.rm.get_leader(name, 0)
            assert (p.log.log_end_offset, p.high_watermark) == (1, 1)
        r = part((await conn.request(ApiKey.PRODUCE, produce_body("t39", batch(b"after")))).body)
        assert (r["error"], r["base_offset"]) == (0, 1)


@pytest.mark.parametrize("in_thread", [False, True], ids=["trio-thread", "worker-thread"])
async def test_a_topic_deleted_while_its_log_waits_is_never_opened(tmp_path: Path, in_thread: bool) -> None:
    await _fill(tmp_path)
    async with running_broker(tmp_path) as b:
        b.rm.open_logs_in_thread = in_thread
        await b.publisher.publish_records(_first_image(b))  # type: ignore[arg-type]
        assert "t39" in {tp.topic for tp in b.rm.logs_to_open}
        # deleted, and t38 deleted and created again, before the opener got to them
        await b.publisher.publish_records(_entries(b, [  # type: ignore[arg-type]
            RemoveTopic("id-t39"), RemoveTopic("id-t38"), Topic("t38", "id-t38-new"),
            Partition("id-t38-new", 0, (BROKER_ID,), (BROKER_ID,), BROKER_ID, 0, 0),
        ]))
        assert not (tmp_path / "data" / partition_dir_name("t39", 0)).exists()
        await b.rm.wait_logs_open()
        assert {tp.topic for tp in b.rm.partitions} == set(_names()) - {"t39"}
        assert b.rm.get_leader("t38", 0).log.log_end_offset == 0  # the new topic: empty
        assert b.rm.get_leader("t37", 0).log.log_end_offset == 1


async def test_a_topic_deleted_while_a_worker_thread_recovers_its_log(tmp_path: Path) -> None:
    """The worker-thread variant: the delete lands while the log is being recovered; the
    opener closes it and removes the directory once the thread is done, and a topic created
    again under the same name meanwhile gets a new, empty log."""
    await _fill(tmp_path)
    async with running_broker(tmp_path) as b:
        b.rm.open_logs_in_thread = True
        await b.publisher.publish_records(_first_image(b))  # type: ignore[arg-type]
        while b.rm.log_opening is None:
            await trio.sleep(0)
        tp = b.rm.log_opening
        tid = f"id-{tp.topic}"
        await b.publisher.publish_records(_entries(b, [  # type: ignore[arg-type]
            RemoveTopic(tid), Topic(tp.topic, tid + "-new"),
            Partition(tid + "-new", 0, (BROKER_ID,), (BROKER_ID,), BROKER_ID, 0, 0),
        ]))
        with pytest.raises(RafkaError) as err:
            b.rm.get_leader(tp.topic, 0)
        assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await b.rm.wait_logs_open()
        assert len(b.rm.partitions) == TOPICS
        assert b.rm.get_leader(tp.topic, 0).log.log_end_offset == 0  # the old records are gone
