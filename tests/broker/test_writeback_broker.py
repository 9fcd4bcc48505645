"""The leader starts the writeback of a large append before its group-commit fsync
(``ReplicaManager.appended`` → ``PartitionLog.start_writeback``, log/writeback.py), and only
under flush policy ``batch``: an in-process broker on loopback, real PRODUCE requests."""

from __future__ import annotations

import pytest
from rafka.log import writeback
from rafka.log.batch import build_batch
from rafka.metadata.image import TopicPartition
from rafka.wire.protocol import ApiKey

from .harness import part, produce_body, running_broker

pytestmark = pytest.mark.skipif(not writeback.AVAILABLE, reason="no sync_file_range here")

BIG = build_batch([(b"k", b"v" * 990, [], 1000 + i) for i in range(100)])  # ~100 KB
SMALL = build_batch([(b"k", b"v", [], 1000)])


@pytest.mark.parametrize("policy, started", [("batch", 1), ("none", 0)])
async def test_large_leader_appends_start_writeback_under_batch_only(tmp_path, policy, started):  # type: ignore[no-untyped-def]
    async with running_broker(tmp_path, topics={"t": 1}, **{"log.flush.policy": policy}) as b, \
            b.connect() as conn:
        small = (await conn.request(ApiKey.PRODUCE, produce_body("t", SMALL, acks=1))).body
        big = (await conn.request(ApiKey.PRODUCE, produce_body("t", BIG, acks=1))).body
        assert part(small)["error"] == 0 and part(big)["error"] == 0
        log = b.rm.partitions[TopicPartition("t", 0)].log
        assert log.statistics()["writebacks"] == started
        if policy == "batch":  # acknowledged under batch: fsynced, as before
            assert log.recovery_point == log.log_end_offset == 101
