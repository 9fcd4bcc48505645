"""read_committed vs read_uncommitted, and the transaction admin/CLI, against one real broker.

The transactions are driven over the wire protocol itself (``txn_wire.py``), so this tests the
consumer side independently of the transactional producer. One partition ends up holding:

    p0 | a1 a2 (aborted) | ABORT | b1 (committed) | COMMIT | p1 | c1 (left open)

so read_committed stops at c1 (the last stable offset) and shows p0 b1 p1, read_uncommitted
shows every data record and no marker; then the operator abort (CLI) ends c's transaction and
read_committed reaches the high watermark without ever showing c1.
"""

from __future__ import annotations

import json
import time

import pytest
from rafka.client.sync import Admin, Consumer
from rafka.client.types import ConsumerRecord, TopicPartition

from .conftest import rafka
from .txn_wire import write_txn_log

pytestmark = pytest.mark.timeout(300)


def _read_all(bootstrap: str, topic: str, level: str, until: int) -> tuple[list[ConsumerRecord], int, int]:
    """Poll from earliest until the position reaches ``until``; → (records, position, end_offset)."""
    tp = TopicPartition(topic, 0)
    got: list[ConsumerRecord] = []
    with Consumer(bootstrap_servers=bootstrap, isolation_level=level, auto_offset_reset="earliest") as c:
        c.assign([tp])
        deadline = time.monotonic() + 60
        while c.position(tp) < until and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                got.extend(recs)
        for recs in c.poll(timeout_ms=300).values():  # nothing more may come
            got.extend(recs)
        return got, c.position(tp), c.end_offsets([tp])[tp]


def test_read_committed_vs_uncommitted_and_operator_abort(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    tag = topic[2:]
    write_txn_log(bootstrap, topic, tag)
    tp = TopicPartition(topic, 0)
    with Admin(bootstrap) as admin:
        hw = admin.list_offsets({tp: -1})[tp][0]
        lso = admin.list_offsets({tp: -1}, isolation_level=1)[tp][0]
        producers = admin.describe_producers(topic, 0)
        listed = {t.transactional_id: t for t in admin.list_transactions()}
        desc = admin.describe_transactions([f"{tag}-c"])[f"{tag}-c"]
    # offsets: p0 0 | a1 a2 1-2 | ABORT 3 | b1 4 | COMMIT 5 | p1 6 | c1 7  → HW 8, LSO 7
    assert (hw, lso) == (8, 7)
    open_txns = [p for p in producers if p.txn_first_offset >= 0]
    assert [p.txn_first_offset for p in open_txns] == [7]
    assert listed[f"{tag}-c"].state == "Ongoing" and listed[f"{tag}-b"].state == "CompleteCommit"
    assert desc.state == "Ongoing" and desc.partitions == [tp] and desc.producer_id == open_txns[0].producer_id

    ru, ru_pos, ru_end = _read_all(bootstrap, topic, "read_uncommitted", 8)
    assert [r.value for r in ru] == [b"p0", b"a1", b"a2", b"b1", b"p1", b"c1"]  # no marker is a record
    assert (ru_pos, ru_end) == (8, 8)
    rc, rc_pos, rc_end = _read_all(bootstrap, topic, "read_committed", 7)
    assert [(r.offset, r.value) for r in rc] == [(0, b"p0"), (4, b"b1"), (6, b"p1")]
    assert (rc_pos, rc_end) == (7, 7)  # stops at the open transaction, past both markers

    out = rafka("transactions", "describe", f"{tag}-c", "--json", "--bootstrap", bootstrap)
    assert out.returncode == 0, out.stderr.decode()
    d = json.loads(out.stdout)
    assert (d["state"], d["partitions"], d["producer_id"]) == (
        "Ongoing", [{"topic": topic, "partition": 0}], open_txns[0].producer_id)
    assert d["age_ms"] >= 0
    out = rafka("transactions", "list", "--bootstrap", bootstrap)
    assert out.returncode == 0 and any(line.split()[:2] == [f"{tag}-c", "Ongoing"]
                                       for line in out.stdout.decode().splitlines())
    out = rafka("transactions", "describe", "nosuch-id", "--bootstrap", bootstrap)
    assert out.returncode == 1 and out.stderr.decode().startswith("error: TRANSACTIONAL_ID_NOT_FOUND")
    out = rafka("transactions", "producers", "--topic", topic, "--partition", "0", "--json",
                "--bootstrap", bootstrap)
    assert out.returncode == 0, out.stderr.decode()
    assert [p["txn_first_offset"] for p in json.loads(out.stdout) if p["txn_first_offset"] >= 0] == [7]
    out = rafka("transactions", "abort", "--topic", topic, "--partition", "0", "--bootstrap", bootstrap)
    assert out.returncode == 0, out.stderr.decode()
    assert f"aborted the transaction of producer {open_txns[0].producer_id}" in out.stdout.decode()

    rc, rc_pos, rc_end = _read_all(bootstrap, topic, "read_committed", 9)
    assert [r.value for r in rc] == [b"p0", b"b1", b"p1"]  # c1 never shows
    assert (rc_pos, rc_end) == (9, 9)  # the operator's ABORT marker at 8 is passed too
    out = rafka("transactions", "abort", "--topic", topic, "--partition", "0", "--bootstrap", bootstrap)
    assert out.returncode == 0 and "no open transaction" in out.stdout.decode()
