"""The Spark source on a topic with transactions, against a real cluster and a real Spark.

The partition is written over the wire by ``tests/client/txn_wire.py``:
``p0 | a1 a2 (aborted) | ABORT | b1 (committed) | COMMIT | p1 | c1 (open)``. A batch read with
the default isolation (read_committed) ends at the last stable offset and shows p0 b1 p1;
``isolation.level=read_uncommitted`` shows every data record; neither shows a marker.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.client.txn_wire import write_txn_log
from tests.spark.helpers import create_topic

pytestmark = pytest.mark.spark


def test_batch_read_isolation_levels(spark: Any, bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, 1)
    write_txn_log(bootstrap, topic_name, topic_name)
    base = {"bootstrap.servers": bootstrap, "subscribe": topic_name, "startingOffsets": "earliest"}

    def rows(**extra: str) -> list[tuple[int, bytes]]:
        df = spark.read.format("rafka").options(**base, **extra).load()  # type: ignore[attr-defined]
        return sorted((r.offset, bytes(r.value)) for r in df.collect())

    assert rows() == [(0, b"p0"), (4, b"b1"), (6, b"p1")]
    assert rows(**{"kafka.isolation.level": "read_uncommitted"}) == [
        (0, b"p0"), (1, b"a1"), (2, b"a2"), (4, b"b1"), (6, b"p1"), (7, b"c1")]
