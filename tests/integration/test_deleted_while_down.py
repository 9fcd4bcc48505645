"""A topic deleted while a broker is down, then created again under the same name
(broker/partition_dirs.py; the defect in docs/chaos-results.md "Session 27").

Three real nodes, a topic with a replica on each and five acknowledged records. Node 3 is
killed (``kill -9``), the topic is deleted, node 3 comes back: its first image no longer names
the topic, and the directory it held must go (before the fix it stayed for good — the
quorum-torture test's "7 directories where 6 are allowed"). Then the topic is created again
under the same name: every replica, node 3's included, must hold exactly the new record.
Before the fix node 3 reopened the old directory, and after the follower's truncation to the
leader's epoch it kept the *old* record at offset 0 where the others have the new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rafka.broker.partition_dirs import read_identity
from rafka.client.sync import Admin, Consumer, Producer, TopicPartition

from .conftest import wait_until

TOPIC = "phoenix"


def _segment(c: Any, node: int) -> Path:
    return c.data_dir / f"node-{node}" / f"{TOPIC}-0" / f"{0:020d}.log"


def test_a_topic_deleted_while_a_broker_was_down_leaves_nothing_behind(cluster_factory: Any) -> None:
    c = cluster_factory(3)
    with Admin(bootstrap_servers=c.bootstrap, request_timeout_ms=30_000) as admin:
        admin.create_topics([(TOPIC, 1, 3)])
        with Producer(bootstrap_servers=c.bootstrap, acks="all") as p:
            for i in range(5):
                p.send(TOPIC, value=b"old record %d, longer than the new one" % i).result(timeout=60)
        old_id = read_identity(_segment(c, 3).parent)
        assert old_id is not None

        c.kill(3)
        admin.delete_topics([TOPIC])
        wait_until(lambda: not _segment(c, 1).parent.exists() and not _segment(c, 2).parent.exists(),
                   "the live replicas deleted")
        assert _segment(c, 3).parent.exists()  # node 3 was down: its directory is still there

        c.up()  # node 3 again, same data: its first image has no such topic
        wait_until(lambda: not _segment(c, 3).parent.exists(), "node 3 removed the stray directory")

        def created() -> bool:  # node 3 must be unfenced again to hold a replica
            return admin.create_topics([(TOPIC, 1, 3)], raise_on_error=False)[TOPIC] is None
        wait_until(created, "the topic created again with three replicas")
        with Producer(bootstrap_servers=c.bootstrap, acks="all") as p:
            assert p.send(TOPIC, value=b"new").result(timeout=60).offset == 0

    with Consumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        consumer.subscribe([TOPIC])
        got: list[bytes] = []

        def polled() -> list[bytes]:
            got.extend(r.value for rs in consumer.poll(timeout_ms=500).values() for r in rs)
            return got
        wait_until(polled, "the new record")
        assert consumer.end_offsets([TopicPartition(TOPIC, 0)]) == {TopicPartition(TOPIC, 0): 1}
        assert polled() == [b"new"]
    # every replica holds the same single record (acks=all put it on all three)
    wait_until(lambda: len({_segment(c, n).read_bytes() for n in (1, 2, 3)}) == 1, "identical replicas")
    new_id = read_identity(_segment(c, 3).parent)
    assert new_id is not None and new_id.topic_id != old_id.topic_id
