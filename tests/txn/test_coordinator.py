"""The transaction coordinator on a real in-process broker, over real TCP with raw requests:
INIT → ADD_PARTITIONS → transactional PRODUCE → END_TXN, with the markers and the
``__transaction_state`` record checked in the logs; fencing by a new incarnation; the timeout
abort (time injected into the coordinator); a decided transaction finished by a new leader epoch;
offsets in a transaction (pending until the COMMIT marker, dropped on ABORT, and after a reload).

Producer ids come from a real ControllerService on the in-memory quorum."""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator
from typing import Any

import trio
from rafka.broker.groups.offsets import OFFSETS_TOPIC, offsets_partition
from rafka.broker.txn import state as S
from rafka.broker.txn.coordinator import TXN_STATE_TOPIC, txn_partition
from rafka.broker.txn.verify import CoordinatorVerifier
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.service import ControllerService
from rafka.log.batch import CONTROL_COMMIT, build_batch, control_type, decode_records, iter_batches
from rafka.metadata.records import Partition, RegisterBroker, UnfenceBroker
from rafka.wire.connection import ConnectionPool
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey

from tests.broker.harness import Broker, running_broker
from tests.groups.test_e2e_inprocess import DirectChannel

T0 = 1_700_000_000_000
TOPICS = {TXN_STATE_TOPIC: 5, OFFSETS_TOPIC: 3, "out": 2}


class Env:
    def __init__(self, b: Broker, conn: Any) -> None:
        self.b = b
        self.conn = conn
        self.api = b.server.dispatch.__self__  # the NodeApi the harness built
        self.now = T0
        self.api.txn.wall_clock_ms = lambda: self.now

    async def req(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        return (await self.conn.request(api_key, body)).body

    async def init(self, tid: str = "tx", timeout_ms: int = 60_000, **kw: Any) -> tuple[int, int]:
        r = await self.req(ApiKey.INIT_PRODUCER_ID, {"transactional_id": tid,
                                                     "transaction_timeout_ms": timeout_ms, **kw})
        assert r["error"] == 0, r
        return r["producer_id"], r["producer_epoch"]

    async def add(self, pid: int, epoch: int, parts: list[int], tid: str = "tx", **kw: Any) -> dict[str, Any]:
        return await self.req(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
            "topics": [{"name": "out", "partitions": parts}], **kw})

    async def produce(self, pid: int, epoch: int, partition: int, seq: int, tid: str = "tx") -> dict[str, Any]:
        batch = build_batch([(None, b"v%d" % seq, [], T0)], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)
        r = await self.req(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 10_000, "transactional_id": tid,
                                            "topics": [{"name": "out", "partitions": [
                                                {"partition": partition, "records": batch}]}]})
        return r["topics"][0]["partitions"][0]

    async def end(self, pid: int, epoch: int, commit: bool, tid: str = "tx") -> dict[str, Any]:
        return await self.req(ApiKey.END_TXN, {"transactional_id": tid, "producer_id": pid,
                                               "producer_epoch": epoch, "commit": commit})

    async def describe(self, tid: str = "tx") -> dict[str, Any]:
        return (await self.req(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]}))["transactions"][0]

    async def wait_state(self, state: str, tid: str = "tx") -> dict[str, Any]:
        with trio.fail_after(10):  # a bound, not a timing assertion
            while (d := await self.describe(tid)).get("state") != state:
                await trio.sleep(0.02)
        return d

    def batches(self, topic: str, partition: int) -> list[tuple[Any, bytes, int]]:
        p = self.b.rm.get_leader(topic, partition)
        buf = p.log.read_bytes(p.log.log_start_offset, 1 << 20)
        return [(h, buf, pos) for pos, h in iter_batches(buf)]

    def markers(self, partition: int) -> list[tuple[int, int, bool]]:
        """(producer id, epoch, commit) of every marker in out/partition below its HW."""
        hw = self.b.rm.get_leader("out", partition).high_watermark
        return [(h.producer_id, h.producer_epoch, control_type(buf, pos) == CONTROL_COMMIT)
                for h, buf, pos in self.batches("out", partition) if h.is_control and h.last_offset < hw]

    async def bump_leader_epoch(self, topic: str, partition: int) -> None:
        """What a leader change back to this broker looks like: a new leader epoch."""
        p = self.b.rm.get_leader(topic, partition)
        rec = Partition(f"id-{topic}", partition, (1,), (1,), 1, p.leader_epoch + 1, p.leader_epoch + 1)
        img = self.b.publisher.image
        await self.b.publisher.publish_records([(img.offset + 1, 1, rec)])


@contextlib.asynccontextmanager
async def txn_env(tmp_path: Any) -> AsyncIterator[Env]:
    q = MemoryQuorumCluster([1])
    svc = ControllerService(1, [(1, "127.0.0.1:1", "127.0.0.1:2")], None, tmp_path / "ctl", None, {},
                            quorum=q.voters[1], rng=random.Random(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        q.elect(1)
        with trio.fail_after(10):
            while not svc.is_active:
                await trio.sleep(0.01)
        async with running_broker(tmp_path, topics=TOPICS) as b, b.connect() as conn:
            env = Env(b, conn)
            env.api.txn.channel = DirectChannel(svc)
            await nursery.start(env.api.txn.run)
            yield env
        nursery.cancel_scope.cancel()


async def test_commit_writes_markers_and_the_state_record(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init()
        assert epoch == 0
        r = await env.add(pid, epoch, [0, 1])
        assert r["error"] == 0 and all(p["error"] == 0 for p in r["topics"][0]["partitions"]), r
        v = await env.add(pid, epoch, [0, 1], verify_only=True)
        assert [p["error"] for p in v["topics"][0]["partitions"]] == [0, 0]
        for part in (0, 1):
            assert (await env.produce(pid, epoch, part, 0))["error"] == 0
        assert (await env.end(pid, epoch, True))["error"] == 0
        # when END_TXN answers, both partitions hold the COMMIT marker below the HW
        assert env.markers(0) == env.markers(1) == [(pid, epoch, True)]
        d = await env.wait_state("CompleteCommit")  # Complete* may land just after the answer
        assert (d["state"], d["producer_id"], d["producer_epoch"]) == ("CompleteCommit", pid, epoch)
        # the durable record is what a new coordinator will load (the last of "tx": read
        # barriers of the describes above append tombstones of the key "" after it)
        rec = [r for _, buf, pos in env.batches(TXN_STATE_TOPIC, txn_partition("tx"))
               for r in decode_records(buf, pos) if S.decode_key(r.key) == "tx"][-1]
        md = S.decode_value(S.decode_key(rec.key), rec.value)
        assert md is not None and md.state is S.TxnState.COMPLETE_COMMIT and md.producer_id == pid
        # a retry of the same END_TXN succeeds, the opposite outcome is refused
        assert (await env.end(pid, epoch, True))["error"] == 0
        assert (await env.end(pid, epoch, False))["error"] == ErrorCode.INVALID_TXN_STATE
        v = await env.add(pid, epoch, [0], verify_only=True)
        assert v["topics"][0]["partitions"][0]["error"] == ErrorCode.INVALID_TXN_STATE
        lt = await env.req(ApiKey.LIST_TRANSACTIONS, {"states": ["CompleteCommit"]})
        assert [t["transactional_id"] for t in lt["transactions"]] == ["tx"]


async def test_end_txn_answers_once_marked_and_the_next_add_waits_for_complete(tmp_path: Any) -> None:
    """END_TXN answers when every marker is acked, without waiting for Complete*; an
    ADD_PARTITIONS for the next transaction meanwhile waits for Complete* (no
    CONCURRENT_TRANSACTIONS), and INIT_PRODUCER_ID does too."""
    async with txn_env(tmp_path) as env:
        coord = env.api.txn
        gate = trio.Event()
        real_write = coord._write

        async def held_complete(st: Any, md: Any) -> None:
            if md.state in (S.TxnState.COMPLETE_COMMIT, S.TxnState.COMPLETE_ABORT):
                await gate.wait()  # the Complete* append is slow (a follower lags)
            await real_write(st, md)

        coord._write = held_complete
        pid, epoch = await env.init()
        assert (await env.add(pid, epoch, [0]))["error"] == 0
        assert (await env.produce(pid, epoch, 0, 0))["error"] == 0
        with trio.fail_after(10):  # a bound, not a timing assertion
            assert (await env.end(pid, epoch, True))["error"] == 0
        assert env.markers(0) == [(pid, epoch, True)]
        assert (await env.describe())["state"] == "PrepareCommit"  # Complete* not landed yet
        added: list[dict[str, Any]] = []
        retried: list[dict[str, Any]] = []
        async with trio.open_nursery() as nursery:
            async def add_next() -> None:
                added.append(await env.add(pid, epoch, [1]))

            async def retry_end() -> None:  # on its own connection
                async with env.b.connect() as c2:
                    retried.append((await c2.request(ApiKey.END_TXN, {
                        "transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
                        "commit": True})).body)

            nursery.start_soon(retry_end)
            nursery.start_soon(add_next)
            await trio.sleep(0.2)
            assert not added  # waiting for Complete*, not refused
            assert not retried  # a retry (it did not write the Prepare*) waits for Complete* too
            gate.set()
        assert added[0]["error"] == 0, added
        assert retried[0]["error"] == 0, retried
        assert (await env.describe())["state"] == "Ongoing"


async def test_a_deposed_coordinator_does_not_answer_the_next_transactions_end_txn(tmp_path: Any) -> None:
    """Txn chaos seed 5: the coordinator of 'w2' was cut off in PrepareCommit of transaction N
    (a/3, a/2, a/0); the new coordinator finished N, and the producer (same id and epoch) ran
    N+1 there (a/3, a/1, a/0, a/2). After the heal its END_TXN(commit) for N+1 reached the
    deposed broker, which did not know it was deposed yet: it took the request for a retry of
    N's and answered success as soon as N's markers were delivered — a/1, only in N+1, never
    got a COMMIT marker (and N+2's abort later hid it). Here this broker plays the deposed
    coordinator: every acks=all append of its own fails (as a deposed leader's do, its
    followers fetch from the new leader), the markers still go out."""
    async with txn_env(tmp_path) as env:
        coord = env.api.txn
        coord.request_timeout_ms = 500
        real_write = coord._write
        deposed = False

        async def write(st: Any, md: Any) -> None:
            if deposed or md.state in (S.TxnState.COMPLETE_COMMIT, S.TxnState.COMPLETE_ABORT):
                raise error_for(ErrorCode.NOT_ENOUGH_REPLICAS, "__transaction_state: in-sync "
                                "replicas [2] of ISR [2, 3, 1] are fewer than min.insync.replicas=2")
            await real_write(st, md)

        coord._write = write
        pid, epoch = await env.init()
        assert (await env.add(pid, epoch, [0]))["error"] == 0
        assert (await env.produce(pid, epoch, 0, 0))["error"] == 0
        with trio.fail_after(10):  # its own Prepare*, its markers: answered before Complete*
            assert (await env.end(pid, epoch, True))["error"] == 0
        assert env.markers(0) == [(pid, epoch, True)]
        deposed = True
        # the END_TXN of the producer's next transaction (begun at the new coordinator)
        with trio.fail_after(10):
            r = await env.end(pid, epoch, True)
        assert r["error"] != 0, "a deposed coordinator answered another transaction's commit"
        assert (await env.describe())["state"] == "PrepareCommit"


async def test_a_completed_outcome_is_confirmed_before_a_retry_is_answered(tmp_path: Any) -> None:
    """END_TXN finding Complete* of the same outcome answers success only after an acks=all
    append: a retry at the real coordinator does, a deposed one (which cannot append) does not
    — it may be the producer's next transaction, begun at the new coordinator."""
    async with txn_env(tmp_path) as env:
        coord = env.api.txn
        pid, epoch = await env.init()
        assert (await env.add(pid, epoch, [0]))["error"] == 0
        assert (await env.produce(pid, epoch, 0, 0))["error"] == 0
        assert (await env.end(pid, epoch, True))["error"] == 0
        await env.wait_state("CompleteCommit")
        assert (await env.end(pid, epoch, True))["error"] == 0  # a retry, here: answered
        real_write = coord._write

        async def deposed_write(st: Any, md: Any) -> None:
            raise error_for(ErrorCode.NOT_ENOUGH_REPLICAS, "__transaction_state: deposed")

        coord._write = deposed_write
        r = await env.end(pid, epoch, True)
        assert r["error"] == ErrorCode.NOT_ENOUGH_REPLICAS, r
        coord._write = real_write
        assert (await env.end(pid, epoch, False))["error"] == ErrorCode.INVALID_TXN_STATE


async def test_new_incarnation_fences_and_aborts_the_open_transaction(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init()
        await env.add(pid, epoch, [0])
        assert (await env.produce(pid, epoch, 0, 0))["error"] == 0
        pid2, epoch2 = await env.init()
        assert (pid2, epoch2) == (pid, epoch + 1)
        # the abort marker carries the bumped epoch: the partition fences the zombie
        assert env.markers(0) == [(pid, epoch + 1, False)]
        assert (await env.describe())["state"] == "CompleteAbort"
        assert (await env.end(pid, epoch, True))["error"] == ErrorCode.PRODUCER_FENCED
        assert (await env.add(pid, epoch, [1]))["error"] == ErrorCode.PRODUCER_FENCED
        assert (await env.add(pid2, epoch2, [1]))["error"] == 0


async def test_timeout_abort_and_kip360_reinit(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init(timeout_ms=1000)
        await env.add(pid, epoch, [1])
        assert (await env.produce(pid, epoch, 1, 0))["error"] == 0
        await env.api.txn.tick()
        assert (await env.describe())["state"] == "Ongoing"  # not yet past its timeout
        env.now += 1001
        await env.api.txn.tick()
        d = await env.wait_state("CompleteAbort")
        assert d["producer_epoch"] == epoch + 1
        assert env.markers(1) == [(pid, epoch + 1, False)]
        assert (await env.end(pid, epoch, True))["error"] == ErrorCode.TRANSACTION_TIMED_OUT
        assert (await env.end(pid, epoch, False))["error"] == 0  # already aborted
        assert await env.init(timeout_ms=1000, producer_id=pid, producer_epoch=epoch) == (pid, epoch + 1)


async def test_statistics_is_a_typed_snapshot(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        s0 = env.api.txn.statistics()
        pid, epoch = await env.init()
        await env.add(pid, epoch, [1])
        assert (await env.describe())["state"] == "Ongoing"
        s = env.api.txn.statistics()
        assert s.state_topic.topic == TXN_STATE_TOPIC and s.state_topic.partitions == 5
        assert txn_partition("tx") in s.state_topic.loaded
        assert s.transactional_ids == s0.transactional_ids + 1
        assert s.pending == 0 and s.completions_running == 0
        assert s.read_barrier.confirmed > s0.read_barrier.confirmed  # DESCRIBE passed one


async def test_a_new_leader_epoch_finishes_a_decided_transaction(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init(tid="ty")
        await env.add(pid, epoch, [0], tid="ty")
        assert (await env.produce(pid, epoch, 0, 0, tid="ty"))["error"] == 0
        # the previous coordinator decided (PrepareCommit is durable) and died before the markers
        n = txn_partition("ty")
        st = env.api.txn.states[n]
        prepared = S.end_txn(st.txns["ty"], pid, epoch, True, env.now)[1]
        p = env.b.rm.get_leader(TXN_STATE_TOPIC, n)
        env.b.rm.append(p, build_batch([(S.encode_key("ty"), S.encode_value(prepared), [], T0)]), -1)
        await env.bump_leader_epoch(TXN_STATE_TOPIC, n)
        await env.wait_state("CompleteCommit", tid="ty")
        assert env.markers(0) == [(pid, epoch, True)]


async def test_a_deposed_coordinators_late_marker_is_fenced(tmp_path: Any) -> None:
    """Txn chaos seed 5, on the wire: after the coordinator moved (leader epoch 1 of the id's
    ``__transaction_state`` partition) and the producer opened its next transaction, a late
    WRITE_TXN_MARKERS of the deposed coordinator (coordinator epoch 0) for the previous one gets
    TRANSACTION_COORDINATOR_FENCED and leaves the open transaction open."""
    async with txn_env(tmp_path) as env:
        n = txn_partition("tx")
        pid, epoch = await env.init()
        await env.bump_leader_epoch(TXN_STATE_TOPIC, n)  # the new coordinator: epoch 1
        with trio.fail_after(10):
            while True:  # the first request after the move (re)loads the partition
                r = await env.add(pid, epoch, [0])
                if r["error"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    break
                await trio.sleep(0.02)
        assert r["error"] == 0, r
        assert (await env.produce(pid, epoch, 0, 0))["error"] == 0
        assert (await env.end(pid, epoch, True))["error"] == 0  # markers of coordinator epoch 1
        assert (await env.add(pid, epoch, [0]))["error"] == 0  # the next transaction
        assert (await env.produce(pid, epoch, 0, 1))["error"] == 0
        late = await env.req(ApiKey.WRITE_TXN_MARKERS, {"timeout_ms": 5000, "markers": [{
            "producer_id": pid, "producer_epoch": epoch, "commit": True, "coordinator_epoch": 0,
            "topics": [{"name": "out", "partitions": [0]}]}]})
        code = late["markers"][0]["topics"][0]["partitions"][0]["error"]
        assert code == ErrorCode.TRANSACTION_COORDINATOR_FENCED, late
        p = env.b.rm.get_leader("out", 0)
        assert pid in p.log.producer_state.open_transactions()  # still open: not committed
        assert env.markers(0) == [(pid, epoch, True)]


async def test_a_late_marker_of_the_same_coordinator_leaves_the_next_transaction_open(
        tmp_path: Any) -> None:
    """Txn chaos on the fresh-clone CI at a8381c5 (an intended abort's record read as
    committed), on the wire: the coordinator did not move, so the coordinator epoch cannot tell
    the request apart. A WRITE_TXN_MARKERS for the producer's first transaction — exactly the
    body the coordinator sent for it, delivered only after the second transaction opened on the
    partition with the same producer id and epoch — is refused (INVALID_TXN_STATE), the second
    transaction stays open, and its abort hides its record."""
    from rafka.broker.txn.markers import marker_body

    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init()
        assert (await env.add(pid, epoch, [0]))["error"] == 0
        assert (await env.produce(pid, epoch, 0, 0))["error"] == 0
        st = env.api.txn.states[txn_partition("tx")]
        first = st.txns["tx"]  # Ongoing: the transaction the late request is for
        assert (await env.end(pid, epoch, True))["error"] == 0
        assert (await env.add(pid, epoch, [0]))["error"] == 0  # the next transaction
        assert st.txns["tx"].txn_seq == first.txn_seq + 1
        assert (await env.produce(pid, epoch, 0, 1))["error"] == 0
        p = env.b.rm.get_leader("out", 0)
        decided = dataclasses.replace(first, state=S.TxnState.PREPARE_COMMIT)
        late = await env.req(ApiKey.WRITE_TXN_MARKERS, marker_body(
            decided, st.leader_epoch, [("out", 0)], 5000, {("out", 0): p.leader_epoch}))
        code = late["markers"][0]["topics"][0]["partitions"][0]["error"]
        assert code == ErrorCode.INVALID_TXN_STATE, late
        assert pid in p.log.producer_state.open_transactions()  # not committed by it
        assert (await env.end(pid, epoch, False))["error"] == 0
        assert env.markers(0) == [(pid, epoch, True), (pid, epoch, False)]
        resp = await env.conn.request(ApiKey.FETCH, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 1, "topics": [{"name": "out", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        part = resp.body["topics"][0]["partitions"][0]
        assert part["aborted_transactions"] == [[pid, 2]]  # the second record (offset 2) hidden


async def _txn_commit_offset(env: Env, pid: int, epoch: int, offset: int) -> dict[str, Any]:
    r = await env.req(ApiKey.ADD_OFFSETS_TO_TXN, {"transactional_id": "tx", "producer_id": pid,
                                                  "producer_epoch": epoch, "group_id": "g"})
    assert r["error"] == 0, r
    return await env.req(ApiKey.TXN_OFFSET_COMMIT, {
        "transactional_id": "tx", "group_id": "g", "producer_id": pid, "producer_epoch": epoch,
        "topics": [{"name": "in", "partitions": [{"partition": 0, "offset": offset}]}]})


async def _fetched(env: Env) -> int:
    r = await env.req(ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": [{"name": "in", "partitions": [0]}]})
    return r["topics"][0]["partitions"][0]["offset"]


async def test_offsets_in_a_transaction(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init()
        r = await _txn_commit_offset(env, pid, epoch, 10)
        assert r["error"] == 0 and r["topics"][0]["partitions"][0]["error"] == 0, r
        assert await _fetched(env) == -1  # pending until the COMMIT marker
        assert (await env.end(pid, epoch, True))["error"] == 0
        assert await _fetched(env) == 10
        # an aborted transaction's offsets never show
        assert (await _txn_commit_offset(env, pid, epoch, 20))["error"] == 0
        assert (await env.end(pid, epoch, False))["error"] == 0
        assert await _fetched(env) == 10
        # pending across a reload: still invisible, then committed by the marker
        assert (await _txn_commit_offset(env, pid, epoch, 30))["error"] == 0
        n = offsets_partition("g", TOPICS[OFFSETS_TOPIC])
        await env.bump_leader_epoch(OFFSETS_TOPIC, n)
        assert await _fetched(env) == 10
        assert (await env.end(pid, epoch, True))["error"] == 0
        assert await _fetched(env) == 30
        # and a reload replays markers the same way
        await env.bump_leader_epoch(OFFSETS_TOPIC, n)
        assert await _fetched(env) == 30


async def test_require_stable_offset_fetch_waits_for_the_transaction(tmp_path: Any) -> None:
    """KIP-447: a read_committed member asking with require_stable gets UNSTABLE_OFFSET_COMMIT
    while a transaction holds offsets of the partition, not the older offset."""
    stable = {"group_id": "g", "topics": [{"name": "in", "partitions": [0]}],
              "require_stable": True}
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init()
        assert (await _txn_commit_offset(env, pid, epoch, 10))["error"] == 0
        r = await env.req(ApiKey.OFFSET_FETCH, stable)
        assert r["topics"][0]["partitions"][0]["error"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
        assert await _fetched(env) == -1  # without require_stable: the (older) committed offset
        assert (await env.end(pid, epoch, True))["error"] == 0
        r = await env.req(ApiKey.OFFSET_FETCH, stable)
        assert r["topics"][0]["partitions"][0] == {**r["topics"][0]["partitions"][0],
                                                   "error": 0, "offset": 10}


async def test_a_late_marker_cannot_commit_the_next_transactions_offsets(tmp_path: Any) -> None:
    """The same late WRITE_TXN_MARKERS, aimed at the group's ``__consumer_offsets`` partition:
    the next transaction's offsets were verified with the coordinator when they opened it there
    (as a PRODUCE's batch is), so the first transaction's late COMMIT is refused and the second
    one's abort drops its offsets (without the verification the late COMMIT applied them: the
    consume-transform-produce worker's position would skip input it never wrote out)."""
    from rafka.broker.txn.markers import marker_body

    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init()
        assert (await _txn_commit_offset(env, pid, epoch, 10))["error"] == 0
        st = env.api.txn.states[txn_partition("tx")]
        first = st.txns["tx"]
        assert (await env.end(pid, epoch, True))["error"] == 0
        assert await _fetched(env) == 10
        r = await _txn_commit_offset(env, pid, epoch, 20)  # the next transaction
        assert r["error"] == 0 and r["topics"][0]["partitions"][0]["error"] == 0, r
        tp = (OFFSETS_TOPIC, offsets_partition("g", len(
            env.b.rm.image.topics.by_name[OFFSETS_TOPIC].partitions)))
        p = env.b.rm.get_leader(*tp)
        assert p.txn_verified[pid].txn_seq == first.txn_seq + 1
        decided = dataclasses.replace(first, state=S.TxnState.PREPARE_COMMIT)
        late = await env.req(ApiKey.WRITE_TXN_MARKERS, marker_body(
            decided, st.leader_epoch, [tp], 5000, {tp: p.leader_epoch}))
        assert late["markers"][0]["topics"][0]["partitions"][0]["error"] == ErrorCode.INVALID_TXN_STATE
        assert await _fetched(env) == 10
        assert (await env.end(pid, epoch, False))["error"] == 0
        assert await _fetched(env) == 10  # the aborted transaction's 20 never shows


async def test_txn_offsets_need_the_coordinators_word(tmp_path: Any) -> None:
    """TXN_OFFSET_COMMIT for a group the transaction never added (no ADD_OFFSETS_TO_TXN) is
    refused by the verification: INVALID_TXN_STATE, nothing pending."""
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init()
        assert (await env.add(pid, epoch, [0]))["error"] == 0  # a transaction, without the group
        await env.req(ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": ["g"]})
        r = {}
        with trio.fail_after(10):
            while True:
                r = await env.req(ApiKey.TXN_OFFSET_COMMIT, {
                    "transactional_id": "tx", "group_id": "g", "producer_id": pid,
                    "producer_epoch": epoch,
                    "topics": [{"name": "in", "partitions": [{"partition": 0, "offset": 5}]}]})
                if r.get("error") not in (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                          ErrorCode.NOT_COORDINATOR):
                    break
                await trio.sleep(0.05)
        assert r.get("error") == ErrorCode.INVALID_TXN_STATE, r
        assert (await env.end(pid, epoch, True))["error"] == 0
        assert await _fetched(env) == -1


async def test_verifier_local_and_unreachable_coordinator(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init()
        await env.add(pid, epoch, [0])
        verifier = env.api.txn_verifier
        assert await verifier.verify("tx", pid, epoch, "out", 0) == (ErrorCode.NONE, 1)
        assert (await verifier.verify("tx", pid, epoch, "out", 1)).code == ErrorCode.INVALID_TXN_STATE
        assert (await verifier.verify("tx", pid, epoch + 1, "out", 0)).code == ErrorCode.INVALID_TXN_STATE
        assert (await env.end(pid, epoch, False))["error"] == 0
        await env.add(pid, epoch, [0])  # the id's second transaction
        assert await verifier.verify("tx", pid, epoch, "out", 0) == (ErrorCode.NONE, 2)
        # the id's coordinator moves to broker 2, which does not answer: retriable, nothing opened
        with trio.socket.socket() as s:
            await s.bind(("127.0.0.1", 0))
            dead_port = s.getsockname()[1]
        n = txn_partition("tx")
        img = env.b.publisher.image
        await env.b.publisher.publish_records([
            (img.offset + 1, 1, RegisterBroker(2, "b2", "127.0.0.1", dead_port)),
            (img.offset + 2, 1, UnfenceBroker(2)),
            (img.offset + 3, 1, Partition(f"id-{TXN_STATE_TOPIC}", n, (2,), (2,), 2, 5, 5)),
        ])
        assert not env.api.txn.leads("tx")
        assert (await env.end(pid, epoch, True))["error"] == ErrorCode.NOT_COORDINATOR
        async with trio.open_nursery() as nursery:
            remote = CoordinatorVerifier(env.api.txn, ConnectionPool(nursery), timeout_s=2.0)
            assert (await remote.verify("tx", pid, epoch, "out", 0)).code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            nursery.cancel_scope.cancel()


async def test_bad_requests_get_named_errors(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        r = await env.req(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "tx", "transaction_timeout_ms": 0})
        assert r["error"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await env.add(5, 0, [0]))["error"] == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert (await env.describe("nope"))["error"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        pid, epoch = await env.init()
        r = await env.add(pid, epoch, [0, 7])
        assert r["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert (await env.describe())["state"] == "Empty"  # nothing was added
        assert (await env.end(pid, epoch, True))["error"] == ErrorCode.INVALID_TXN_STATE
        lt = await env.req(ApiKey.LIST_TRANSACTIONS, {"states": ["Bogus"]})
        assert lt["error"] == ErrorCode.INVALID_REQUEST
        # the broker is still up and serving
        assert await env.init() == (pid, epoch + 1)
