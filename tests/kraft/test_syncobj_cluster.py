"""The pysyncobj engine with 3 voters in separate processes on loopback (real TCP)."""

from __future__ import annotations

import time

import pytest
import trio
from rafka.kraft.quorum import Command
from rafka.metadata import Topic
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from tests.kraft.cluster_util import RAW_PROPOSE, VoterCluster, live_broker, setup_broker

pytestmark = pytest.mark.timeout(120)


def create(name: str) -> dict:
    return {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000}


async def test_commit_dedup_failover_restart(tmp_path):
    c = VoterCluster(tmp_path)
    c.start_all()
    try:
        leader = await c.active_controller()
        async with live_broker(c):  # heartbeats: never fenced mid-test
            for k in range(5):
                r = await c.request(leader, ApiKey.CREATE_TOPICS, create(f"t{k}"))
                assert r["topics"][0]["error"] == 0, r
            # a follower redirects to the leader's rpc address — once it has heard from the
            # leader: two voters commit, the third may not have its first append yet (its hint
            # is then empty, which is right), so ask until it names one
            follower = next(i for i in c.ids if i != leader)
            with trio.fail_after(20):
                while True:
                    r = await c.request(follower, ApiKey.CREATE_TOPICS, create("x"))
                    assert r["error"] == ErrorCode.NOT_CONTROLLER
                    if r["leader_host"] is not None:
                        break
                    await trio.sleep(0.05)
            assert (r["leader_host"], r["leader_port"]) == c.rpc[leader]

            # the same request id proposed twice applies once
            epoch = (await c.request(leader, ApiKey.DESCRIBE_QUORUM, {}))["epoch"]
            cmd = Command("dup-1", epoch, 0, (Topic("dup", "dup-id"),)).to_bytes()
            a = await c.request(leader, RAW_PROPOSE, {"cmd": cmd})
            b = await c.request(leader, RAW_PROPOSE, {"cmd": cmd})
            assert a["error"] == 0 and not a["duplicate"], a
            assert b["error"] == 0 and b["duplicate"] and b["base_offset"] == a["base_offset"], b

            end = await c.wait_converged(c.ids)
            logs = [await c.fetch_all(i) for i in c.ids]
            assert logs[0]["entries"] and all(lg["entries"] == logs[0]["entries"] for lg in logs)
            assert sum(1 for e in logs[0]["entries"] if e[2].get("name") == "dup") == 1
            q = await c.request(leader, ApiKey.DESCRIBE_QUORUM, {})
            assert {v["id"]: v["lag"] for v in q["voters"]} == {1: 0, 2: 0, 3: 0}

            # kill -9 the leader: a new one is elected and proposing works again
            t0 = time.monotonic()
            c.kill(leader)
            new_leader = await c.active_controller([i for i in c.ids if i != leader])
            r = await c.request(new_leader, ApiKey.CREATE_TOPICS, create("after-failover"))
            print(f"failover: new active controller after {time.monotonic() - t0:.2f}s")
            assert r["topics"][0]["error"] == 0, r

            # the old leader restarts from its journal and metadata log and catches up
            c.start(leader)
            await c.wait_rpc(leader)
            end2 = await c.wait_converged(c.ids)
            assert end2 > end
            logs = [await c.fetch_all(i) for i in c.ids]
            assert all(lg["entries"] == logs[0]["entries"] for lg in logs)
            assert [e[0] for e in logs[0]["entries"]] == list(range(end2 + 1))
    finally:
        c.stop_all()


async def test_restarted_voter_catches_up_from_snapshot(tmp_path):
    settings = {"raft.compaction.min.entries": 20, "metadata.snapshot.records": 10}
    c = VoterCluster(tmp_path, settings=settings)
    c.start_all()
    try:
        leader = await c.active_controller()
        async with live_broker(c):  # heartbeats: never fenced mid-test
            await c.wait_converged(c.ids)
            lagger = next(i for i in c.ids if i != leader)
            c.kill(lagger)
            for k in range(60):
                r = await c.request(leader, ApiKey.CREATE_TOPICS, create(f"s{k}"))
                assert r["topics"][0]["error"] == 0, r
            await trio.sleep(1.5)  # let pysyncobj compact its log (it does so on its tick)
            c.start(lagger)
            await c.wait_rpc(lagger)
            end = await c.wait_converged(c.ids, timeout_s=30)
            a = await c.fetch_all(leader)
            b = await c.fetch_all(lagger)
            assert a["committed"] == b["committed"] == end
            # the lagger's log was reset to the leader's image: its history starts at a snapshot
            assert b["snapshot"] is not None
            names = {e[2].get("name") for e in a["entries"]} | {
                r.get("name") for r in (a["snapshot"] or {"records": []})["records"]}
            names_b = {e[2].get("name") for e in b["entries"]} | {r.get("name") for r in b["snapshot"]["records"]}
            assert {f"s{k}" for k in range(60)} <= names_b
            assert {f"s{k}" for k in range(60)} <= names
            assert "installed a snapshot" in c.log_text(lagger)
    finally:
        c.stop_all()


async def test_secrets(tmp_path):
    # a multi-voter quorum without a secret refuses to start, with a clear message
    c = VoterCluster(tmp_path / "nosecret", secret=None)
    (tmp_path / "nosecret").mkdir()
    p = c.start(1)
    assert p.wait(timeout=30) != 0
    assert "without a cluster secret" in c.log_text(1)
    c.procs.clear()

    # a voter with the wrong secret cannot join: the other two progress, it stays empty
    (tmp_path / "wrong").mkdir()
    c = VoterCluster(tmp_path / "wrong", secrets={3: "not-the-secret"})
    c.start_all()
    try:
        leader = await c.active_controller([1, 2])
        await setup_broker(c, leader)
        r = await c.request(leader, ApiKey.CREATE_TOPICS, create("w"))
        assert r["topics"][0]["error"] == 0
        await c.wait_converged([1, 2])
        await trio.sleep(1)
        r = await c.request(3, ApiKey.DESCRIBE_QUORUM, {"local_only": True})
        assert r["voters"][0]["metadata_offset"] == -1
        q = await c.request(leader, ApiKey.DESCRIBE_QUORUM, {})
        lag3 = next(v for v in q["voters"] if v["id"] == 3)
        assert lag3["metadata_offset"] == -1 and lag3["lag"] > 0
    finally:
        c.stop_all()
