"""A paused active controller must not leave the partitions leaderless — on 3 real voter
processes (real TCP, real disks), with the brokers played by the test.

The stale-coordinator sighting (docs/chaos-results.md): node 3, active controller AND a broker,
was SIGSTOPped; node 2 took over; brokers 1 and 2 were still timing out their heartbeats at
node 3 when node 2's activation grace (one session) ended, so node 2 fenced all three. One at
a time, the fences shrank every ISR to {3}; brokers 1 and 2 were unfenced at their next
heartbeat, but the only in-sync replica was the paused broker, so every partition stayed
leaderless until node 3 resumed (the test's 60 s bound expired first). The quorum itself kept
committing all along.

Here: brokers 100, 101, 102 register and heartbeat; the active controller is SIGSTOPped and
every broker falls silent until the new controller has fenced them all; then 100 and 101
heartbeat again (102 "lived on" the paused node and stays silent). Every partition must get a
leader among 100 and 101 while the old controller is still stopped. The only time bound is a
hang guard; before ``kraft.controller.fence_brokers`` this failed every time (the ISR {102}).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from rafka.metadata.records import record_from_dict
from rafka.metadata.snapshot import records_to_image
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from tests.kraft.cluster_util import VoterCluster

pytestmark = pytest.mark.timeout(600)

HANG_GUARD_S = 30
BROKERS = (100, 101, 102)  # registered in this order: the old code fenced 102 last


class Brokers:
    """The brokers' heartbeats, each to whichever voter is the active controller; a broker
    whose ``silent`` flag is set sends nothing (it is still waiting at the paused one)."""

    def __init__(self, c: VoterCluster) -> None:
        self.c = c
        self.epochs: dict[int, int] = {}
        self.silent: set[int] = set()
        self.target: int | None = None

    async def beat(self, bid: int) -> dict[str, Any] | None:
        body = {"broker_id": bid, "broker_epoch": self.epochs[bid], "metadata_offset": 10**9,
                "want_fence": False, "want_shutdown": False}
        for i in ([self.target] if self.target in self.c.procs else []) + list(self.c.procs):
            if bid in self.silent:  # also mid-way: no attempt after the pause began
                return None
            r = await self.c.try_request(i, ApiKey.BROKER_HEARTBEAT, body, 1)
            if r is not None and r.get("error") == 0:
                self.target = i
                return r
        return None

    async def run(self) -> None:
        while True:
            for bid in self.epochs:
                await self.beat(bid)
            await trio.sleep(0.1)


async def active_controller(c: VoterCluster, candidates: list[int]) -> int:
    """Like ``VoterCluster.active_controller``, with a longer answer time: while a voter is
    stopped, the active one's DESCRIBE_QUORUM waits 1 s for it before answering."""
    with trio.fail_after(HANG_GUARD_S):
        while True:
            for i in candidates:
                r = await c.try_request(i, ApiKey.DESCRIBE_QUORUM, {}, 3)
                if r is not None and r.get("error") == 0:
                    return i
            await trio.sleep(0.05)


async def image_at(c: VoterCluster, voter: int) -> Any:
    log = await c.fetch_all(voter)
    assert log["snapshot"] is None  # a short log: never compacted here
    return records_to_image([record_from_dict(e[2]) for e in log["entries"]], log["entries"][-1][0], 0)


def fenced(image: Any) -> list[bool]:
    return [image.cluster.brokers[b].fenced for b in BROKERS]


async def pause_controller_rounds(tmp: Path, rounds: int) -> None:
    c = VoterCluster(tmp)
    c.start_all()
    stopped: int | None = None
    try:
        for i in c.ids:
            await c.wait_rpc(i)
        brokers = Brokers(c)
        for bid in BROKERS:  # (the first leader of a fresh quorum may still change)
            with trio.fail_after(HANG_GUARD_S):
                while (r := await c.try_request(await c.active_controller(timeout_s=HANG_GUARD_S),
                                                ApiKey.BROKER_REGISTRATION,
                                                {"broker_id": bid, "incarnation_id": f"b{bid}",
                                                 "host": "h", "port": 1})) is None or r["error"] != 0:
                    await trio.sleep(0.1)
            brokers.epochs[bid] = r["broker_epoch"]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(brokers.run)
            body = {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 3}], "timeout_ms": 5000}
            with trio.fail_after(HANG_GUARD_S):
                while (r := await c.try_request(await c.active_controller(timeout_s=HANG_GUARD_S),
                                                ApiKey.CREATE_TOPICS, body, 5)) is None \
                        or r["topics"][0]["error"] not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                    await trio.sleep(0.1)
            for _ in range(rounds):
                old = await c.active_controller(timeout_s=HANG_GUARD_S)
                brokers.silent = set(BROKERS)
                c.procs[old].send_signal(signal.SIGSTOP)
                stopped = old
                new = await active_controller(c, [i for i in c.ids if i != old])
                with trio.fail_after(HANG_GUARD_S):  # its grace ends: everyone silent is fenced
                    while not all(fenced(await image_at(c, new))):
                        await trio.sleep(0.2)
                brokers.silent = {102}
                with trio.fail_after(HANG_GUARD_S):
                    while True:
                        img = await image_at(c, new)
                        leaders = [p.leader for p in img.topics.by_name["t"].partitions.values()]
                        if all(ld in (100, 101) for ld in leaders):
                            break
                        await trio.sleep(0.2)
                c.procs[old].send_signal(signal.SIGCONT)
                stopped = None
                brokers.silent = set()
                with trio.fail_after(HANG_GUARD_S):  # back to full strength for the next round
                    while any(fenced(await image_at(c, new))):
                        await trio.sleep(0.2)
            nursery.cancel_scope.cancel()
    finally:
        if stopped is not None:
            c.procs[stopped].send_signal(signal.SIGCONT)
        c.stop_all()


async def test_live_brokers_lead_again_while_the_paused_controller_stays_stopped(tmp_path: Path) -> None:
    await pause_controller_rounds(tmp_path, rounds=1)


@pytest.mark.slow
async def test_live_brokers_lead_again_after_many_controller_pauses(tmp_path: Path) -> None:
    await pause_controller_rounds(tmp_path, rounds=8)
