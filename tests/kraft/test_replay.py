"""A restarted voter replays its Raft journal without decoding what it already holds (issue 27).

pysyncobj re-applies every journal entry after its last dump once a leader has committed in
its term — between the election and the controller's activation. The metadata log already
holds them all (it is fsynced before a decision is reported), so each is skipped; decoding
each just to skip it was up to a second of CPU per voter after a kill-all (thousands of
entries, three voters on two cores). A real single-voter quorum on loopback, restarted over
the same directory; ``Command.from_bytes`` is counted during the second start.
"""

from __future__ import annotations

import pytest
import trio
from rafka.kraft.quorum import Command
from rafka.kraft.syncobj_engine import SyncObjQuorum
from rafka.metadata import LeaderChange, Topic

from tests.kraft.handticked import free_ports

pytestmark = pytest.mark.timeout(60)

_N = 40


async def _leading(q: SyncObjQuorum) -> None:
    with trio.fail_after(15):
        while not (q.leader_id() == 1 and q.is_ready()):
            await trio.sleep(0.02)


async def test_restart_replays_the_journal_without_decoding_held_commands(tmp_path, monkeypatch) -> None:
    voters = [(1, ("127.0.0.1", free_ports(1)[0]))]
    async with trio.open_nursery() as nursery:
        q = SyncObjQuorum(1, voters, tmp_path, None)
        await nursery.start(q.run)
        await _leading(q)
        await q.propose(Command("activate", q.epoch(), 0, (LeaderChange(1, q.epoch()),)))
        for k in range(_N):
            await q.propose(Command(f"replay-{k}", q.epoch(), 0, (Topic(f"t{k}", f"id-{k}"),)))
        applied = q._node.raftLastApplied
        nursery.cancel_scope.cancel()
    assert applied >= _N

    decoded: list[bytes] = []
    real = Command.from_bytes.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Command], data: bytes) -> Command:
        decoded.append(data)
        return real(cls, data)

    monkeypatch.setattr(Command, "from_bytes", classmethod(counting))
    async with trio.open_nursery() as nursery:
        q = SyncObjQuorum(1, voters, tmp_path, None)
        await nursery.start(q.run)
        await _leading(q)
        with trio.fail_after(15):
            while q._node.raftLastApplied < applied:
                await trio.sleep(0.02)
        assert set(q.image().topics.by_name) >= {f"t{k}" for k in range(_N)}
        assert decoded == []  # every replayed entry was skipped by its Raft index alone
        await q.propose(Command("activate-2", q.epoch(), 0, (LeaderChange(1, q.epoch()),)))
        assert len(decoded) == 1  # a new command is decoded and applied as before
        nursery.cancel_scope.cancel()
