"""Markers of concurrent transactions share WRITE_TXN_MARKERS requests (broker/txn/markers.py).

A real in-process broker and coordinator (``txn_env``): three producers each open a transaction
on out/0 and out/1 and end it at the same time. The first marker request is held until the
other two transactions' markers are queued behind it; they must then leave together in *one*
request, and every partition must end up with exactly one marker per producer, of the right kind
(two commits and an abort)."""

from __future__ import annotations

from typing import Any

import trio
from rafka.broker.txn.markers import MarkerWriter

from tests.txn.test_coordinator import txn_env


async def test_concurrent_transactions_share_one_marker_request(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        ids = {}
        for tid in ("tx0", "tx1", "tx2"):
            pid, epoch = await env.init(tid)
            assert (await env.add(pid, epoch, [0, 1], tid=tid))["error"] == 0
            for part in (0, 1):
                assert (await env.produce(pid, epoch, part, 0, tid=tid))["error"] == 0
            ids[tid] = (pid, epoch)
        writer: MarkerWriter = env.api.txn.markers
        real = writer.local
        assert real is not None
        bodies: list[dict[str, Any]] = []
        release = trio.Event()

        async def held_first(body: dict[str, Any]) -> dict[str, Any]:
            bodies.append(body)
            if len(bodies) == 1:
                await release.wait()
            return await real(body)

        writer.local = held_first
        answers: dict[str, dict[str, Any]] = {}

        async def end(tid: str, commit: bool) -> None:
            answers[tid] = await env.end(*ids[tid], commit, tid=tid)

        with trio.fail_after(20):  # a bound, not a timing assertion
            async with trio.open_nursery() as nursery:
                for tid, commit in (("tx0", True), ("tx1", True), ("tx2", False)):
                    nursery.start_soon(end, tid, commit)
                while not (bodies and len(writer._channels[env.b.rm.broker_id].queue) == 2):
                    await trio.sleep(0.005)
                release.set()
        assert all(a["error"] == 0 for a in answers.values()), answers
        assert len(bodies) == 2 and len(bodies[0]["markers"]) == 1
        first = bodies[0]["markers"][0]["producer_id"]
        assert sorted(m["producer_id"] for m in bodies[1]["markers"]) == sorted(
            pid for pid, _ in ids.values() if pid != first)
        assert writer.statistics()["requests"] == 2 and writer.statistics()["entries"] == 3
        want = sorted([(*ids["tx0"], True), (*ids["tx1"], True), (*ids["tx2"], False)])
        assert sorted(env.markers(0)) == sorted(env.markers(1)) == want


async def test_a_failed_batched_request_is_retried_for_each_transaction(tmp_path: Any) -> None:
    async with txn_env(tmp_path) as env:
        ids = {}
        for tid in ("ta", "tb"):
            pid, epoch = await env.init(tid)
            assert (await env.add(pid, epoch, [0], tid=tid))["error"] == 0
            assert (await env.produce(pid, epoch, 0, 0, tid=tid))["error"] == 0
            ids[tid] = (pid, epoch)
        writer: MarkerWriter = env.api.txn.markers
        real = writer.local
        assert real is not None
        calls: list[int] = []

        async def fails_once(body: dict[str, Any]) -> dict[str, Any]:
            calls.append(len(body["markers"]))
            if len(calls) == 1:
                raise OSError("connection reset")  # the whole request is lost
            return await real(body)

        writer.local = fails_once
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for tid in ids:
                    nursery.start_soon(env.end, *ids[tid], True, tid)
        assert len(calls) >= 2
        assert sorted(env.markers(0)) == sorted((pid, epoch, True) for pid, epoch in ids.values())
