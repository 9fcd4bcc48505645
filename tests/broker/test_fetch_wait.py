"""Parked fetches wait on one event each, registered with every partition they read
(broker/fetch_wait.py): no task per partition, nothing left behind however they end."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from rafka.log.batch import decode_records, iter_batches
from rafka.wire.protocol import ApiKey

from tests.broker.harness import batch, produce_body, running_broker

N = 8


def _tasks() -> int:
    """Every task alive in this trio run (the broker's and the test's)."""
    def walk(t: Any) -> int:
        return 1 + sum(walk(c) for n in t.child_nurseries for c in n.child_tasks)
    return walk(trio.lowlevel.current_root_task())


def _body(partitions: list[int], *, follower: bool, max_wait_ms: int = 600_000) -> dict[str, Any]:
    return {"replica_id": 2 if follower else -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "topics": [{"name": "t", "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                for p in partitions]}]}


def _parked(b: Any, follower: bool) -> list[int]:
    """How many fetches are parked on each partition of ``t``."""
    return [len(b.rm.get("t", p).data_changed if follower else b.rm.get("t", p).hw_changed)
            for p in range(N)]


@pytest.mark.parametrize("follower", [False, True], ids=["consumer", "follower"])
async def test_a_parked_fetch_of_many_partitions_costs_no_task_per_partition(tmp_path, follower):
    """A fetch of one partition and a fetch of eight add the same number of tasks while they
    wait (the old wait spawned one per partition); a produce to any of the eight wakes it; once
    answered, no partition keeps it."""
    async with running_broker(tmp_path, topics={"t": N}) as b:
        answers: dict[str, Any] = {}

        async def fetch(name: str, partitions: list[int], started: list[int]) -> None:
            async with b.connect() as conn:
                started.append(1)
                resp = await conn.request(ApiKey.FETCH, _body(partitions, follower=follower))
                answers[name] = (resp.body, bytes(resp.raw))

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                base = _tasks()
                nursery.start_soon(fetch, "one", [0], [])
                await trio.sleep(0.1)
                one = _tasks() - base
                assert _parked(b, follower) == [1] + [0] * (N - 1)
                nursery.start_soon(fetch, "many", list(range(N)), [])
                await trio.sleep(0.1)
                many = _tasks() - base - one
                assert many == one, (one, many)
                assert _parked(b, follower) == [2] + [1] * (N - 1)
                assert not answers
                async with b.connect() as other:
                    r = await other.request(ApiKey.PRODUCE, produce_body("t", batch(b"x"),
                                                                         partition=5))
                    assert r.body["topics"][0]["partitions"][0]["error"] == 0
                    while "many" not in answers:
                        await trio.sleep(0.01)
                    assert "one" not in answers  # partition 0 did not change
                    assert _parked(b, follower) == [1] + [0] * (N - 1)
                    await other.request(ApiKey.PRODUCE, produce_body("t", batch(b"y"),
                                                                     partition=0))
        assert _parked(b, follower) == [0] * N
        body, raw = answers["many"]
        got = {p["partition"]: p for p in body["topics"][0]["partitions"]}
        assert got[5]["records_len"] == len(raw) > 0
        assert all(got[p]["records_len"] == 0 for p in range(N) if p != 5)
        assert [r.value for pos, _h in iter_batches(raw) for r in decode_records(raw, pos)] == [b"x"]


async def test_a_fetch_that_times_out_or_is_dropped_leaves_no_registration(tmp_path):
    async with running_broker(tmp_path, topics={"t": N}) as b:
        async with b.connect() as conn:
            resp = await conn.request(ApiKey.FETCH, _body(list(range(N)), follower=False,
                                                          max_wait_ms=50))
            assert all(p["records_len"] == 0 for p in resp.body["topics"][0]["partitions"])
        assert _parked(b, False) == [0] * N
        with trio.fail_after(60):
            async with b.connect() as conn:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(conn.request, ApiKey.FETCH,
                                       _body(list(range(N)), follower=False))
                    await trio.sleep(0.1)
                    assert _parked(b, False) == [1] * N
                    nursery.cancel_scope.cancel()
            # the connection is gone: the server cancels the parked fetch
            while _parked(b, False) != [0] * N:
                await trio.sleep(0.01)
