"""A partition leader's verifications of concurrent transactions share one request
(``broker/txn/verify.py`` through ``broker/txn/channel.py``; the coordinator's
``verify_batch``).

A real in-process broker and coordinator (``txn_env``) over real TCP: a verifier that treats
that broker as a *remote* coordinator asks about four transactions at once while its first
request is held; the other three must leave together in one request with a ``transactions``
list, and each must get the answer its own request would have had."""

from __future__ import annotations

from typing import Any

import trio
from rafka.broker.errors import ErrorCode
from rafka.broker.protocol import ApiKey
from rafka.broker.txn.coordinator import txn_partition
from rafka.broker.txn.verify import CoordinatorVerifier
from rafka.client.connection import ConnectionPool

from tests.txn.test_coordinator import txn_env


class _Remote:
    """The coordinator as a leader that does not coordinate these ids sees it: asked over TCP."""

    def __init__(self, coordinator: Any) -> None:
        self.rm = coordinator.rm

    def leads(self, transactional_id: str) -> bool:
        return False


async def test_concurrent_verifications_share_one_request_and_get_their_own_answers(
        tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        # four ids of one __transaction_state partition: their questions share that channel
        same = [f"t{i}" for i in range(100) if txn_partition(f"t{i}") == txn_partition("t0")][:4]
        ids = {}
        for tid in same:
            pid, epoch = await env.init(tid)
            assert (await env.add(pid, epoch, [0], tid=tid))["error"] == 0
            ids[tid] = (pid, epoch)
        async with trio.open_nursery() as nursery:
            verifier = CoordinatorVerifier(_Remote(env.api.txn), ConnectionPool(nursery),  # type: ignore[arg-type]
                                           timeout_s=10.0)
            real = verifier._request
            bodies: list[dict[str, Any]] = []
            release = trio.Event()

            async def held_first(dest: int, body: dict[str, Any]) -> dict[str, Any] | None:
                bodies.append(body)
                if len(bodies) == 1:
                    await release.wait()
                return await real(dest, body)

            verifier._request = held_first  # type: ignore[method-assign]
            a, b, c, d = same
            questions = [(a, *ids[a], 0), (b, *ids[b], 0),
                         (c, *ids[c], 1),  # not in c's transaction
                         (d, ids[d][0], ids[d][1] + 1, 0)]  # a wrong epoch
            answers: dict[str, ErrorCode] = {}

            async def ask(tid: str, pid: int, epoch: int, part: int) -> None:
                answers[tid] = await verifier.verify(tid, pid, epoch, "out", part)

            with trio.fail_after(20):  # a bound, not a timing assertion
                async with trio.open_nursery() as asks:
                    for q in questions:
                        asks.start_soon(ask, *q)
                    while not (bodies and verifier.channels.queued(txn_partition(a)) == 3):
                        await trio.sleep(0.005)
                    release.set()
            nursery.cancel_scope.cancel()
    assert answers == {a: ErrorCode.NONE, b: ErrorCode.NONE,
                       c: ErrorCode.INVALID_TXN_STATE, d: ErrorCode.INVALID_TXN_STATE}
    assert len(bodies) == 2
    assert "transactions" not in bodies[0]  # a lone question: the plain request
    assert bodies[1]["transactional_id"] == "" and bodies[1]["verify_only"]
    assert sorted(e["transactional_id"] for e in bodies[1]["transactions"]) == sorted(
        tid for tid in ids if tid != bodies[0]["transactional_id"])
    assert verifier.channels.statistics() == {"requests": 2, "entries": 4}


async def test_a_batch_with_a_bad_entry_answers_it_alone_and_the_broker_stays_up(
        tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        pid, epoch = await env.init("tx0")
        assert (await env.add(pid, epoch, [0], tid="tx0"))["error"] == 0
        entry = {"transactional_id": "tx0", "producer_id": pid, "producer_epoch": epoch,
                 "topics": [{"name": "out", "partitions": [0]}]}
        r = await env.req(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "transactional_id": "", "producer_id": -1, "producer_epoch": -1, "topics": [],
            "verify_only": True, "transactions": [entry, {**entry, "transactional_id": ""}]})
        assert r["error"] == 0
        good, bad = r["transactions"]
        assert good["error"] == 0 and good["topics"][0]["partitions"][0]["error"] == 0
        assert bad["error"] == ErrorCode.INVALID_REQUEST
        r = await env.req(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "transactional_id": "", "producer_id": -1, "producer_epoch": -1, "topics": [],
            "verify_only": True, "transactions": [entry] * 1001})
        assert r["error"] == ErrorCode.INVALID_REQUEST
        assert (await env.describe("tx0"))["state"] == "Ongoing"  # nothing changed, still serving
