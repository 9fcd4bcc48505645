"""``OffsetAndMetadata`` wherever offsets are committed (issue 25): kafka-python /
confluent-kafka code that commits ``{TopicPartition: OffsetAndMetadata(offset, "meta")}``
works unchanged — ``Consumer.commit``, ``Producer.send_offsets_to_transaction`` — and the
metadata string comes back from ``committed(tp, metadata=True)`` and ``rafka group describe``.
Real one-node cluster."""

from __future__ import annotations

import json
import uuid

import pytest
from rafka.client import Consumer, OffsetAndMetadata, Producer, TopicPartition
from rafka.client.types import commit_offsets

from .conftest import rafka


def test_commit_offsets_normalises_ints_and_refuses_junk() -> None:
    tp = TopicPartition("t", 0)
    assert commit_offsets({tp: 5}) == {tp: OffsetAndMetadata(5, "")}
    assert commit_offsets([(tp, OffsetAndMetadata(7, "m", 3))]) == {tp: OffsetAndMetadata(7, "m", 3)}
    with pytest.raises(TypeError, match="an int or an OffsetAndMetadata"):
        commit_offsets({tp: "5"})  # type: ignore[dict-item]


def test_metadata_is_stored_and_returned_by_commit_transaction_and_describe(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False) as c:
        c.commit({tp0: OffsetAndMetadata(0, "checkpoint-a"), tp1: 0})
        assert c.committed(tp0, metadata=True) == OffsetAndMetadata(0, "checkpoint-a")
        assert c.committed(tp1, metadata=True) == OffsetAndMetadata(0, "")
        assert c.committed(tp0) == 0

    with Producer(bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}", linger_ms=1) as p:
        p.init_transactions()
        with p.transaction():
            p.send(topic, b"x", partition=1)
            p.send_offsets_to_transaction({tp1: OffsetAndMetadata(1, "from-txn", leader_epoch=0)}, group)
    with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                  isolation_level="read_committed") as c:
        assert c.committed(tp1, metadata=True) == OffsetAndMetadata(1, "from-txn")

    r = rafka("group", "describe", group, "--json", "--bootstrap", bootstrap)
    assert r.returncode == 0, r.stderr
    rows = {row["partition"]: row for row in json.loads(r.stdout)["partitions"]}
    assert (rows[0]["committed"], rows[0]["metadata"]) == (0, "checkpoint-a")
    assert (rows[1]["committed"], rows[1]["metadata"]) == (1, "from-txn")
    r = rafka("group", "describe", group, "--bootstrap", bootstrap)
    assert "METADATA" in r.stdout.decode() and "checkpoint-a" in r.stdout.decode()
