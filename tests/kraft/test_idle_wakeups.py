"""An idle controller quorum does not wake its trio thread to poll (issue 26).

Three ``SyncObjQuorum`` voters in one trio process on loopback (real pysyncobj, real TCP, a
cluster secret). A ``trio.abc.Instrument`` counts the task steps of the quorum's own tasks.
Leadership used to be polled every 50 ms (``_leadership_poll_loop``: ~20 steps a second per
voter whether anything changed or not); now the tick thread wakes trio only when (leader,
term, is-leader) changes. The assertions are on counts: the steps taken over an idle window,
and the leadership events each survivor receives after the leader goes away.

The tick threads (kraft/tick_wait.py): over the same window each voter's pysyncobj poller counts
its sleeps. Steady voters sleep until their next heartbeat or election deadline, so a follower
wakes about once per leader heartbeat (100 ms) and none sleeps the 50 ms tick period; with
``raft.tick.until.deadline=false`` every sleep is a period one (the second test).
"""

from __future__ import annotations

import socket
from collections import Counter
from pathlib import Path

import pytest
import trio
from rafka.kraft.syncobj_engine import SyncObjQuorum

pytestmark = pytest.mark.timeout(90)

SECRET = "idle-test-secret"
IDLE_WINDOW_S = 2.0


class StepCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] += 1

    def quorum_steps(self) -> int:
        return sum(n for name, n in self.steps.items() if "SyncObjQuorum" in name)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


async def _settled(quorums: list[SyncObjQuorum], old: int | None = None) -> int:
    """Wait until every voter's trio side has seen the same leader (not ``old``); its id."""
    with trio.fail_after(30):
        while True:
            seen = {q._last_event[0] if q._last_event else None for q in quorums}
            if len(seen) == 1 and None not in seen and old not in seen:
                return seen.pop()  # type: ignore[return-value]
            await trio.sleep(0.1)


def _polls(q: SyncObjQuorum) -> tuple[int, int]:
    st = q.statistics()
    return int(st["raft_tick_polls_until_deadline"]), int(st["raft_tick_polls_period"])


async def test_fixed_ticks_when_switched_off(tmp_path: Path) -> None:
    """``raft.tick.until.deadline=false``: the tick thread sleeps ``raft.tick.ms`` every time,
    as pysyncobj does on its own (the A/B arm of bench/ab_idle_timing.py)."""
    ports = _free_ports(3)
    voters = [(i + 1, ("127.0.0.1", p)) for i, p in enumerate(ports)]
    settings = {"raft.tick.until.deadline": "false"}
    async with trio.open_nursery() as nursery:
        quorums = [SyncObjQuorum(vid, voters, tmp_path / f"v{vid}", SECRET, settings) for vid, _ in voters]
        for q in quorums:
            await nursery.start(q.run)
        await _settled(quorums)
        polls0 = [_polls(q) for q in quorums]
        await trio.sleep(1.0)
        for p0, q in zip(polls0, quorums, strict=True):
            steady, period = (b - a for a, b in zip(p0, _polls(q), strict=True))
            assert steady == 0 and period >= 10, (q.node_id, steady, period)
        nursery.cancel_scope.cancel()


async def test_idle_voters_take_no_polling_steps_and_still_see_a_new_leader(tmp_path: Path) -> None:
    ports = _free_ports(3)
    voters = [(i + 1, ("127.0.0.1", p)) for i, p in enumerate(ports)]
    counter = StepCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        async with trio.open_nursery() as nursery:
            quorums = [SyncObjQuorum(vid, voters, tmp_path / f"v{vid}", SECRET) for vid, _ in voters]
            scopes = []
            for q in quorums:
                scope = trio.CancelScope()
                scopes.append(scope)

                async def run(q: SyncObjQuorum = q, scope: trio.CancelScope = scope,
                              *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                    with scope:
                        await q.run(task_status=task_status)
                await nursery.start(run)
            leader = await _settled(quorums)
            await trio.sleep(0.6)  # the election's last wake-ups are past

            # an idle window: the only periodic quorum task left is the 0.5 s stall watch
            # (kraft/raft_watchdog.py), ~4 steps per voter in 2 s. The 50 ms leadership poll
            # alone took ~40 per voter.
            before = counter.quorum_steps()
            polls0 = [_polls(q) for q in quorums]
            await trio.sleep(IDLE_WINDOW_S)
            idle_steps = counter.quorum_steps() - before
            polls = [tuple(b - a for a, b in zip(p0, _polls(q), strict=True))
                     for p0, q in zip(polls0, quorums, strict=True)]
            assert idle_steps <= 3 * 8, dict(counter.steps)
            # tick threads: 2 s of 100 ms heartbeats is ~20 steady sleeps per voter (a leader
            # also wakes for its followers' answers); fixed 50 ms ticks would be >= 40 period
            # sleeps each. A few period sleeps are allowed: a deadline that is due right now
            assert all(period <= 4 for _steady, period in polls), polls
            assert all(steady >= 5 for steady, _period in polls), polls
            followers = [p for q, p in zip(quorums, polls, strict=True) if q.node_id != leader]
            assert all(sum(p) <= 30 for p in followers), polls

            # the leader goes away: both survivors' trio sides learn the new leader without a
            # poll — one through its own state change, the other (if it stayed a follower)
            # through the tick callback's check
            survivors = [q for q in quorums if q.node_id != leader]
            changed = [q.leader_changed() for q in survivors]
            events = [q.leadership_events() for q in survivors]
            for ch in events:
                while True:  # drain what the start-up left
                    try:
                        ch.receive_nowait()
                    except trio.WouldBlock:
                        break
            scopes[leader - 1].cancel()
            new_leader = await _settled(survivors, old=leader)
            assert new_leader != leader
            assert all(ev.is_set() for ev in changed)
            for q, ch in zip(survivors, events, strict=True):
                got = []
                while True:
                    try:
                        got.append(ch.receive_nowait())
                    except trio.WouldBlock:
                        break
                assert got and got[-1].leader_id == new_leader, (q.node_id, got)
                assert got[-1].is_self == (q.node_id == new_leader)
            nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(counter)
