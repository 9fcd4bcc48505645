"""Controller quorum membership on 3 voter processes (real TCP, real disks): a removal and the
voter registry survive a restart of the voters from a compacted Raft log (snapshot), and a
removed voter that lost its disk joins and is added back as a new incarnation; its old disk,
put back, is refused."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import trio
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from tests.kraft.cluster_util import VoterCluster, live_broker

pytestmark = pytest.mark.timeout(180)


def create(name: str) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000}


async def voters(c: VoterCluster, leader: int) -> dict[int, str | None]:
    """voter id -> directory id, as the active controller describes the quorum"""
    q = await c.request(leader, ApiKey.DESCRIBE_QUORUM, {})
    assert q["error"] == 0, q
    return {v["id"]: v["directory_id"] for v in q["voters"]}


async def until(fn: Any, timeout_s: float = 30) -> Any:
    with trio.fail_after(timeout_s):
        while not (out := await fn()):
            await trio.sleep(0.1)
        return out


async def test_removal_and_registry_survive_a_restart_from_a_snapshot(tmp_path: Any) -> None:
    c = VoterCluster(tmp_path, settings={"raft.compaction.min.entries": 2, "raft.compaction.min.time.s": 1})
    c.start_all()
    try:
        leader = await c.active_controller()

        async def all_registered() -> dict[int, str | None] | None:
            vs = await voters(c, leader)
            return vs if set(vs) == {1, 2, 3} and all(vs.values()) else None
        dirs = await until(all_registered)
        victim = next(i for i in (3, 2, 1) if i != leader)
        rest = [i for i in c.ids if i != victim]

        r = await c.request(leader, ApiKey.REMOVE_RAFT_VOTER, {"voter_id": victim})
        assert r["error"] == 0 and sorted(v["id"] for v in r["voters"]) == rest, r
        c.kill(victim)
        old_disk = tmp_path / "old-disk"
        shutil.copytree(tmp_path / f"node-{victim}", old_disk)
        async with live_broker(c):
            for k in range(4):  # writes with 2 voters, and enough entries to compact the Raft log
                r = await c.request(leader, ApiKey.CREATE_TOPICS, create(f"t{k}"))
                assert r["topics"][0]["error"] == 0, r

            async def compacted() -> bool:
                return all((tmp_path / f"node-{i}" / "raft.dump").exists() for i in rest)
            await until(compacted)

        # restart both remaining voters: their config still lists 3 voters; the snapshot and
        # the log say 2, and the registry (with their directory ids) comes back with them
        for i in rest:
            c.kill(i)
        for i in rest:
            c.start(i)
        leader = await c.active_controller(rest)
        assert await voters(c, leader) == {i: dirs[i] for i in rest}

        # the removed voter lost its disk: it starts, joins, is added back, registers anew
        shutil.rmtree(tmp_path / f"node-{victim}")
        c.start(victim)
        await c.wait_rpc(victim)
        r = await c.request(leader, ApiKey.ADD_RAFT_VOTER, {"voter_id": victim, "address": c.raft[victim]})
        if r["error"] == ErrorCode.NOT_CONTROLLER:  # the joiner's term made the leader step down
            leader = await c.active_controller(c.ids)
            r = await c.request(leader, ApiKey.ADD_RAFT_VOTER, {"voter_id": victim, "address": c.raft[victim]})
        assert r["error"] == 0, r

        async def back() -> dict[int, str | None] | None:
            ld = await c.active_controller(c.ids)
            vs = await voters(c, ld)
            return vs if set(vs) == {1, 2, 3} and vs[victim] not in (None, dirs[victim]) else None
        await until(back)
        await c.wait_converged(c.ids)

        # the old disk put back under the replaced voter: refused before it starts Raft
        c.kill(victim)
        shutil.rmtree(tmp_path / f"node-{victim}")
        shutil.copytree(old_disk, tmp_path / f"node-{victim}")
        p = c.start(victim)
        assert p.wait(timeout=60) != 0
        c.procs.pop(victim)
        # the startup check's words (the registration refusal, once caught up, says "another
        # incarnation"): it stopped before it could vote
        assert "StaleIncarnationError" in c.log_text(victim) and "old disk" in c.log_text(victim)
    finally:
        c.stop_all()
