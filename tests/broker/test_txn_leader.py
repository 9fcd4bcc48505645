"""The partition leader's side of transactions on a real in-process broker (loopback):
transactional PRODUCE with verification, WRITE_TXN_MARKERS, read_committed FETCH,
LIST_OFFSETS with isolation, DESCRIBE_PRODUCERS (docs/transactions.md, "Partition leader").

The coordinator's verifier is replaced by ``FakeVerifier``: it is the seam to another broker's
transaction coordinator, not a cheap part."""

from __future__ import annotations

from typing import Any

import trio
from rafka.broker.txn.state import Verdict
from rafka.log.batch import build_batch, build_control_batch, iter_batches
from rafka.wire.connection import Connection
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from tests.broker.harness import (
    Broker,
    batch,
    fetch_body,
    list_offsets_body,
    part,
    produce_body,
    running_broker,
)

PID, EPOCH, TID = 42, 3, "tx-1"


class FakeVerifier:
    """Answers ``answer`` (and, for an Ongoing transaction, its number ``txn_seq``); with
    ``gate`` set it waits for the gate first (a slow coordinator)."""

    def __init__(self, answer: ErrorCode = ErrorCode.NONE, txn_seq: int = -1) -> None:
        self.answer = answer
        self.txn_seq = txn_seq
        self.calls: list[tuple[str, int, int, str, int]] = []
        self.gate: trio.Event | None = None
        self.entered = trio.Event()

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     topic: str, partition: int) -> Verdict:
        self.calls.append((transactional_id, producer_id, producer_epoch, topic, partition))
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        return Verdict(self.answer, self.txn_seq if self.answer == ErrorCode.NONE else -1)


def install(b: Broker, verifier: FakeVerifier) -> FakeVerifier:
    b.server.dispatch.__self__.txn_verifier = verifier  # the NodeApi the server dispatches to
    return verifier


def txn_batch(seq: int, *values: bytes, pid: int = PID, epoch: int = EPOCH) -> bytes:
    return build_batch([(None, v, [], 1000) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=True)


def txn_produce(topic: str, records: bytes, tid: str | None = TID) -> dict[str, Any]:
    return {**produce_body(topic, records), "transactional_id": tid}


def marker_body(topic: str, commit: bool, pid: int = PID, epoch: int = EPOCH,
                partition: int = 0, txn_seq: int | None = None,
                leader_epoch: int | None = None) -> dict[str, Any]:
    """As a coordinator sends it; ``txn_seq`` / ``leader_epoch`` None: left out (an operator's
    abort carries neither)."""
    t: dict[str, Any] = {"name": topic, "partitions": [partition]}
    if leader_epoch is not None:
        t["leader_epochs"] = [leader_epoch]
    m: dict[str, Any] = {"producer_id": pid, "producer_epoch": epoch, "commit": commit,
                         "coordinator_epoch": 0, "topics": [t]}
    if txn_seq is not None:
        m["txn_seq"] = txn_seq
    return {"markers": [m], "timeout_ms": 10_000}


async def write_marker(conn: Connection, topic: str, commit: bool, **kw: Any) -> dict[str, Any]:
    resp = (await conn.request(ApiKey.WRITE_TXN_MARKERS, marker_body(topic, commit, **kw))).body
    return resp["markers"][0]["topics"][0]["partitions"][0]


async def latest(conn: Connection, isolation: int = 0) -> int:
    body = {**list_offsets_body("t", -1), "isolation_level": isolation}
    return part((await conn.request(ApiKey.LIST_OFFSETS, body)).body)["offset"]


async def fetch(conn: Connection, offset: int, isolation: int, **kw: int
                ) -> tuple[dict[str, Any], list[Any]]:
    resp = await conn.request(ApiKey.FETCH, {**fetch_body("t", offset, **kw),
                                             "isolation_level": isolation})
    return part(resp.body), [h for _pos, h in iter_batches(bytes(resp.raw))]


async def produce_ok(conn: Connection, body: dict[str, Any]) -> dict[str, Any]:
    p = part((await conn.request(ApiKey.PRODUCE, body)).body)
    assert p["error"] == 0, p
    return p


async def test_open_transaction_holds_the_lso_and_its_commit_releases_it(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        v = install(b, FakeVerifier())
        heard: list[tuple[str, int, int, bool, int]] = []
        b.rm.marker_listeners.append(lambda *a: heard.append(a))
        await produce_ok(conn, produce_body("t", batch(b"a")))                    # 0
        assert (await produce_ok(conn, txn_produce("t", txn_batch(0, b"t1", b"t2"))))["base_offset"] == 1
        await produce_ok(conn, produce_body("t", batch(b"b")))                    # 3
        assert v.calls == [(TID, PID, EPOCH, "t", 0)]
        assert (await latest(conn, 0), await latest(conn, 1)) == (4, 1)
        p, headers = await fetch(conn, 0, 1)
        assert [h.base_offset for h in headers] == [0]  # nothing at or past the LSO
        assert (p["high_watermark"], p["last_stable_offset"], p["aborted_transactions"]) == (4, 1, [])
        p, headers = await fetch(conn, 0, 0)  # read_uncommitted: everything below the HW
        assert [h.base_offset for h in headers] == [0, 1, 3]
        assert p["last_stable_offset"] == 1 and p["aborted_transactions"] is None
        # a read_committed fetch at the LSO has nothing yet
        p, headers = await fetch(conn, 1, 1)
        assert headers == [] and p["error"] == 0
        assert await write_marker(conn, "t", True) == {"partition": 0, "error": 0, "message": None}
        assert heard == [("t", 0, PID, True, 4)]
        assert (await latest(conn, 0), await latest(conn, 1)) == (5, 5)
        p, headers = await fetch(conn, 1, 1)
        assert [h.base_offset for h in headers] == [1, 3, 4] and headers[-1].is_control
        assert p["last_stable_offset"] == 5 and p["aborted_transactions"] == []


async def test_aborted_transaction_is_named_to_read_committed_fetches(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        install(b, FakeVerifier())
        heard: list[tuple[str, int, int, bool, int]] = []
        b.rm.marker_listeners.append(lambda *a: heard.append(a))
        await produce_ok(conn, txn_produce("t", txn_batch(0, b"x")))               # 0
        await produce_ok(conn, produce_body("t", batch(b"plain")))                 # 1
        assert await latest(conn, 1) == 0
        assert (await write_marker(conn, "t", False))["error"] == 0               # 2
        assert heard == [("t", 0, PID, False, 2)]
        p, headers = await fetch(conn, 0, 1)
        assert [h.base_offset for h in headers] == [0, 1, 2]
        assert p["aborted_transactions"] == [[PID, 0]] and p["last_stable_offset"] == 3
        # from past the aborted range: nothing to name
        p, _ = await fetch(conn, 3, 1)
        assert p["aborted_transactions"] == []


async def test_parked_read_committed_fetch_wakes_when_the_marker_lands(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        install(b, FakeVerifier())
        await produce_ok(conn, txn_produce("t", txn_batch(0, b"x")))
        result: dict[str, Any] = {}

        async def poll() -> None:
            async with b.connect() as other:
                result["p"] = await fetch(other, 0, 1, max_wait_ms=600_000)

        with trio.fail_after(60):  # hang guard: without a wake-up this waits 10 minutes
            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll)
                await trio.sleep(0.05)
                assert "p" not in result  # the open transaction holds it back
                assert (await write_marker(conn, "t", True))["error"] == 0
        p, headers = result["p"]
        assert p["error"] == 0 and [h.base_offset for h in headers][:1] == [0]


async def test_verification_decides_whether_a_transaction_may_open(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        v = install(b, FakeVerifier(ErrorCode.INVALID_TXN_STATE))
        r = part((await conn.request(ApiKey.PRODUCE, txn_produce("t", txn_batch(0, b"x")))).body)
        assert r["error"] == ErrorCode.INVALID_TXN_STATE
        assert await latest(conn) == 0  # nothing appended
        v.answer = ErrorCode.COORDINATOR_NOT_AVAILABLE  # the coordinator could not be asked
        r = part((await conn.request(ApiKey.PRODUCE, txn_produce("t", txn_batch(0, b"x")))).body)
        assert r["error"] == ErrorCode.COORDINATOR_NOT_AVAILABLE and await latest(conn) == 0
        v.answer = ErrorCode.NONE
        await produce_ok(conn, txn_produce("t", txn_batch(0, b"x")))
        await produce_ok(conn, txn_produce("t", txn_batch(1, b"y")))  # open: no question
        assert len(v.calls) == 3
        # a non-transactional batch of the same producer inside its transaction: a named error
        idem = build_batch([(None, b"z", [], 1000)], producer_id=PID, producer_epoch=EPOCH,
                           base_sequence=2)
        r = part((await conn.request(ApiKey.PRODUCE, produce_body("t", idem))).body)
        assert r["error"] == ErrorCode.INVALID_TXN_STATE
        assert (await write_marker(conn, "t", True))["error"] == 0
        # a late batch of the ended transaction: the marker removed the verification, so it
        # is asked again — and the coordinator knows the transaction is over
        v.answer = ErrorCode.INVALID_TXN_STATE
        r = part((await conn.request(ApiKey.PRODUCE, txn_produce("t", txn_batch(2, b"late")))).body)
        assert r["error"] == ErrorCode.INVALID_TXN_STATE and len(v.calls) == 4
        assert await latest(conn, 1) == await latest(conn, 0) == 3  # no hanging transaction


async def test_a_marker_during_verification_voids_it(tmp_path):
    """KIP-890: a verification answered after the producer's marker landed must not open a
    transaction (the late batch would hang the LSO forever)."""
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        v = install(b, FakeVerifier(ErrorCode.NONE))
        v.gate = trio.Event()
        result: dict[str, Any] = {}

        async def late_produce() -> None:
            async with b.connect() as other:
                body = txn_produce("t", txn_batch(0, b"late"))
                result["p"] = part((await other.request(ApiKey.PRODUCE, body)).body)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(late_produce)
                await v.entered.wait()
                assert (await write_marker(conn, "t", False))["error"] == 0  # offset 0
                v.gate.set()
        assert result["p"]["error"] == ErrorCode.INVALID_TXN_STATE
        assert await latest(conn, 0) == await latest(conn, 1) == 1  # only the marker


async def test_a_transaction_closed_while_another_partition_verifies_is_not_reopened(tmp_path):
    """The append loop checks again: a partition whose transaction was open when the request
    arrived, but whose marker landed while another partition of the request was being verified,
    would otherwise open a transaction without any verification."""
    async with running_broker(tmp_path, topics={"t": 2}) as b, b.connect() as conn:
        v = install(b, FakeVerifier(ErrorCode.NONE))
        await produce_ok(conn, {**produce_body("t", txn_batch(0, b"p1"), partition=1),
                                "transactional_id": TID})
        v.gate, v.entered = trio.Event(), trio.Event()
        result: dict[str, Any] = {}

        async def both() -> None:
            body = {"acks": -1, "timeout_ms": 10_000, "transactional_id": TID, "topics": [
                {"name": "t", "partitions": [{"partition": 0, "records": txn_batch(0, b"p0")},
                                             {"partition": 1, "records": txn_batch(1, b"p1")}]}]}
            async with b.connect() as other:
                result["parts"] = (await other.request(ApiKey.PRODUCE, body)).body["topics"][0]["partitions"]

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(both)
                await v.entered.wait()
                assert v.calls[-1][3:] == ("t", 0)  # only the partition without an open txn
                resp = (await conn.request(ApiKey.WRITE_TXN_MARKERS,
                                           marker_body("t", True, partition=1))).body
                assert resp["markers"][0]["topics"][0]["partitions"][0]["error"] == 0
                v.gate.set()
        assert [p["error"] for p in result["parts"]] == [0, ErrorCode.INVALID_TXN_STATE]


async def test_client_control_batches_and_anonymous_transactional_batches_are_refused(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        v = install(b, FakeVerifier())
        forged = build_control_batch(PID, EPOCH, True, 0, 1000)
        for tid in (None, TID):
            body = txn_produce("t", batch(b"ok") + forged, tid=tid)
            r = part((await conn.request(ApiKey.PRODUCE, body)).body)
            assert r["error"] == ErrorCode.INVALID_RECORD, r
        r = part((await conn.request(ApiKey.PRODUCE, txn_produce("t", txn_batch(0, b"x"), None))).body)
        assert r["error"] == ErrorCode.INVALID_REQUEST, r
        assert await latest(conn) == 0 and v.calls == []
        await produce_ok(conn, produce_body("t", batch(b"plain")))  # the broker serves on


async def test_marker_for_a_missing_partition_and_bad_isolation(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        heard: list[Any] = []
        b.rm.marker_listeners.append(lambda *a: heard.append(a))
        assert (await write_marker(conn, "gone", True))["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert heard == []
        # a marker older than the producer's epoch is refused (the zombie's coordinator)
        assert (await write_marker(conn, "t", False, epoch=EPOCH))["error"] == 0
        assert (await write_marker(conn, "t", True, epoch=EPOCH - 1))["error"] == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        assert len(heard) == 1
        resp = (await conn.request(ApiKey.FETCH, {**fetch_body("t", 0), "isolation_level": 7})).body
        assert resp["error"] == ErrorCode.INVALID_REQUEST
        resp = (await conn.request(ApiKey.LIST_OFFSETS,
                                   {**list_offsets_body("t", -1), "isolation_level": 2})).body
        assert resp["error"] == ErrorCode.INVALID_REQUEST


async def test_describe_producers_shows_the_open_transaction(tmp_path):
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        install(b, FakeVerifier())
        await produce_ok(conn, produce_body("t", batch(b"a")))
        await produce_ok(conn, txn_produce("t", txn_batch(0, b"x", b"y")))

        async def producers() -> list[dict[str, Any]]:
            body = {"topics": [{"name": "t", "partitions": [0]}]}
            resp = (await conn.request(ApiKey.DESCRIBE_PRODUCERS, body)).body
            return part(resp)["producers"]

        assert await producers() == [{"producer_id": PID, "producer_epoch": EPOCH,
                                      "last_sequence": 1, "last_timestamp": 1000,
                                      "txn_first_offset": 1}]
        await write_marker(conn, "t", True)
        assert (await producers())[0]["txn_first_offset"] == -1
        body = {"topics": [{"name": "t", "partitions": [5]}]}
        resp = (await conn.request(ApiKey.DESCRIBE_PRODUCERS, body)).body
        assert part(resp)["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_late_marker_of_an_ended_transaction_cannot_close_the_next_one(tmp_path):
    """A WRITE_TXN_MARKERS that arrives after its transaction ended — the coordinator's attempt
    timed out, it retried on a new connection and moved on, and the first request, stuck in a
    partitioned link or a paused leader, is delivered later — must not close the producer's
    *next* transaction here. Same producer id and epoch, so only the transaction's number tells
    them apart: the verification of the next transaction's opening recorded it (txn chaos,
    fresh-clone CI at a8381c5: an intended abort's record read as committed)."""
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        v = install(b, FakeVerifier(txn_seq=7))
        await produce_ok(conn, txn_produce("t", txn_batch(0, b"first")))            # 0
        assert (await write_marker(conn, "t", True, txn_seq=7))["error"] == 0        # 1
        v.txn_seq = 8  # the producer's next transaction
        await produce_ok(conn, txn_produce("t", txn_batch(1, b"second")))           # 2
        late = await write_marker(conn, "t", True, txn_seq=7)  # the first one's, delivered late
        assert late["error"] == ErrorCode.INVALID_TXN_STATE, late
        assert await latest(conn, 1) == 2  # the second transaction still holds the LSO
        assert (await write_marker(conn, "t", False, txn_seq=8))["error"] == 0       # 3
        p, headers = await fetch(conn, 0, 1)
        assert [h.base_offset for h in headers] == [0, 1, 2, 3]
        assert p["aborted_transactions"] == [[PID, 2]]  # "second" is hidden from read_committed


async def test_a_marker_for_another_leader_epoch_is_refused(tmp_path):
    """The coordinator stamps each partition of a marker with the leader epoch it addressed;
    a leader in another epoch refuses it (its verification guards were cleared with the role
    change, so only the epoch shows the request predates the transactions open now)."""
    async with running_broker(tmp_path, topics={"t": 1}) as b, b.connect() as conn:
        install(b, FakeVerifier())
        await produce_ok(conn, txn_produce("t", txn_batch(0, b"x")))
        epoch = b.rm.get_leader("t", 0).leader_epoch
        other = await write_marker(conn, "t", True, leader_epoch=epoch + 1)
        assert other["error"] == ErrorCode.UNKNOWN_LEADER_EPOCH, other
        assert await latest(conn, 1) == 0
        assert (await write_marker(conn, "t", True, leader_epoch=epoch))["error"] == 0
        assert await latest(conn, 1) == 2
