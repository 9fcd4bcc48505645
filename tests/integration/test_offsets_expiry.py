"""Committed offsets of an empty group expire (``offsets.retention``, KIP-211) — on a real node.

One node with ``offsets.retention.ms=1500`` and a 200 ms check interval: group ``gone`` commits
and its only member leaves; group ``stay`` commits and keeps its member. ``gone``'s offsets are
tombstoned by the coordinator (the admin API stops listing them) while ``stay``'s, older than the
retention by then, remain because the group has a member. The unit test
(tests/groups/test_offsets.py) covers the rules one by one with an injected clock.
"""

from __future__ import annotations

import pytest
from rafka.client.sync import Admin, Consumer, Producer
from rafka.client.types import TopicPartition

from .conftest import wait_until
from .test_metrics import scrape

pytestmark = pytest.mark.timeout(120)

TP = TopicPartition("exp", 0)


def _consume_and_commit(bs: str, group: str) -> Consumer:
    c = Consumer("exp", bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                 enable_auto_commit=False, session_timeout_ms=10_000)
    for n, _ in enumerate(c, 1):
        if n == 3:
            break
    c.commit()
    assert c.committed(TP) == 3
    return c


def test_an_empty_groups_offsets_expire_and_a_live_groups_stay(cluster_factory) -> None:
    cluster = cluster_factory(1, broker_config={"offsets.retention.ms": 1500,
                                                "offsets.retention.check.interval.ms": 200})
    bs = cluster.bootstrap
    with Admin(bs) as admin:
        admin.create_topic("exp", 1, 1)
        with Producer(bs, acks=-1) as p:
            for i in range(5):
                p.send("exp", f"v{i}".encode())
            p.flush()
        _consume_and_commit(bs, "gone").close()  # the member leaves: the group is empty
        stay = _consume_and_commit(bs, "stay")
        try:
            assert admin.list_consumer_group_offsets("gone") == {TP: 3}
            wait_until(lambda: admin.list_consumer_group_offsets("gone") == {}, "gone's offsets expire",
                       timeout_s=60)
            # by now "stay"'s commit is older than the retention too: its member keeps it
            assert admin.list_consumer_group_offsets("stay") == {TP: 3}
            assert scrape(cluster).get("rafka_consumer_group_offsets_expired_total") == 1
        finally:
            stay.close()
        wait_until(lambda: admin.list_consumer_group_offsets("stay") == {}, "stay's offsets expire once it is empty",
                   timeout_s=60)
