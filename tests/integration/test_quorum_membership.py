"""Replacing a controller that lost its disk, on real node processes (issue 15, KIP-853).

Three combined nodes; one controller is killed with SIGKILL and its controller data directory
deleted. Restarting it as it is must be refused (``WipedVoterError``). The procedure —
``rafka quorum remove-voter``, start the node (it joins), ``rafka quorum add-voter`` — brings it
back as a new incarnation (a new directory id) that catches up; topics are created at every
step with two of three voters; then another controller is killed and the quorum still
decides, so the replaced voter counts toward the majority. Bad requests first get named
errors and change nothing. Conditions are awaited under a
hang guard (``eventually``); nothing asserts how long anything took.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
import trio
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from tests.integration.conftest import PROJECT_ROOT, LocalCluster, rafka_cli
from tests.integration.test_cluster import create_topic, eventually, request
from tests.integration.test_quorum import describe

pytestmark = pytest.mark.timeout(240)


def quorum_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``rafka quorum ARGS --bootstrap B`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "rafka.cli", "quorum", *args, "--bootstrap", bootstrap],
                          capture_output=True, text=True, timeout=90, cwd=str(PROJECT_ROOT),
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})


async def topics_on(addr: tuple[str, int]) -> set[str]:
    md = await request(addr, ApiKey.METADATA, {"topics": None})
    return {t["name"] for t in md["topics"] if not t["name"].startswith("__")}


async def voters(bootstrap: str) -> dict[int, dict[str, Any]]:
    return {v["id"]: v for v in (await describe(bootstrap))["voters"]}


async def leader_among(bootstrap: str, ids: set[int]) -> int:
    async def ok() -> int | None:
        q = await describe(bootstrap)
        return q["leader_id"] if q["leader_id"] in ids else None
    return await eventually(ok)


async def create_retried(addr: tuple[str, int], name: str) -> None:
    """CREATE_TOPICS retried until the topic exists (TOPIC_ALREADY_EXISTS on a retry: an
    earlier attempt succeeded, its answer was lost to a controller change)."""
    async def once() -> bool:
        body = await request(addr, ApiKey.CREATE_TOPICS, {
            "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 10_000})
        return body["topics"][0]["error"] in (0, ErrorCode.TOPIC_ALREADY_EXISTS)
    await eventually(once)


async def keep_creating(addr: tuple[str, int], created: list[str], stop: trio.Event) -> None:
    """Creates topics one after another until ``stop``, each retried until it exists."""
    k = 0
    while not stop.is_set():
        await create_retried(addr, f"bg-{k}")
        created.append(f"bg-{k}")
        k += 1
        await trio.sleep(0.2)


async def refused_with_named_errors(boot: str, leader: int) -> None:
    cases = [
        (("remove-voter", "--id", str(leader)), "is the active controller"),
        (("remove-voter", "--id", "9"), "VOTER_NOT_FOUND"),
        (("add-voter", "--id", "1", "--address", "127.0.0.1:1"), "DUPLICATE_VOTER"),
        (("add-voter", "--id", "5", "--address", "no-port"), "HOST:RAFT_PORT"),
    ]
    for args, named in cases:
        out = await trio.to_thread.run_sync(quorum_cli, boot, *args)
        assert out.returncode != 0 and named in out.stderr, (args, out.stderr)


async def test_a_wiped_controller_is_refused_then_replaced_and_counts_again(cluster3: LocalCluster) -> None:
    c = cluster3
    addrs = c.addresses()
    boot = c.bootstrap
    await create_topic(addrs[0], "before")
    before = await voters(boot)
    assert set(before) == {1, 2, 3} and all(v["directory_id"] for v in before.values())
    node = {n["id"]: n for n in c.info()["nodes"]}
    leader = (await describe(boot))["leader_id"]
    await refused_with_named_errors(boot, leader)  # bad requests change nothing
    dirs = {i: v["directory_id"] for i, v in before.items()}
    assert {i: v["directory_id"] for i, v in (await voters(boot)).items()} == dirs

    # kill -9 a voter that is not the active controller, and lose its controller disk
    victim = next(i for i in (3, 2, 1) if i != leader)
    rest = sorted({1, 2, 3} - {victim})
    c.kill(victim)
    shutil.rmtree(f"{node[victim]['data_dir']}/controller")
    await create_topic(addrs[rest[0] - 1], "two-of-three-1")
    background: list[str] = []  # metadata writes all through the procedure, with 2 of 3
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_creating, addrs[rest[0] - 1], background, stop)
        await replace(c, victim, rest, before, node)
        stop.set()
    assert len(background) >= 3, background
    expected = {"before", "two-of-three-1", "two-of-three-2", "after-remove", "after-add", *background}

    async def same_topics() -> bool:
        return await topics_on(addrs[victim - 1]) == await topics_on(addrs[rest[0] - 1]) == expected
    assert await eventually(same_topics)

    # now another controller dies: the replaced voter is part of the majority that decides
    other = rest[0]
    c.kill(other)
    left = sorted({1, 2, 3} - {other})
    left_boot = ",".join(f"{addrs[i - 1][0]}:{addrs[i - 1][1]}" for i in left)
    assert await leader_among(left_boot, set(left)) in left
    await create_retried(addrs[victim - 1], "after-second-kill")
    vs = await voters(left_boot)
    assert vs[victim]["reachable"] and not vs[other]["reachable"]

    async def visible() -> bool:
        return "after-second-kill" in await topics_on(addrs[victim - 1])
    assert await eventually(visible)


async def replace(c: LocalCluster, victim: int, rest: list[int], before: dict[int, dict[str, Any]],
                  node: dict[int, dict[str, Any]]) -> None:
    """The refused restart, then remove-voter / restart / add-voter, until it caught up."""
    addrs = c.addresses()
    boot = c.bootstrap
    rest_boot = ",".join(f"{addrs[i - 1][0]}:{addrs[i - 1][1]}" for i in rest)

    # the guard: restarted as it is, the wiped voter refuses to start
    r = await trio.to_thread.run_sync(lambda: rafka_cli("cluster", "up", "--data-dir", str(c.data_dir), "--detach"))
    c._remember()
    assert r.returncode != 0
    log_text = (c.data_dir / f"node-{victim}" / "stdout.log").read_text()
    assert "WipedVoterError" in log_text and f"remove-voter --id {victim}" in log_text
    assert not os.path.exists(f"{node[victim]['data_dir']}/controller/quorum.id")  # no new identity
    await create_topic(addrs[rest[0] - 1], "two-of-three-2")

    # the procedure: remove-voter, start it (it joins), add-voter
    out = await trio.to_thread.run_sync(quorum_cli, rest_boot, "remove-voter", "--id", str(victim))
    assert out.returncode == 0, out.stderr
    assert set(await voters(rest_boot)) == set(rest)
    await create_topic(addrs[rest[0] - 1], "after-remove")
    r = await trio.to_thread.run_sync(lambda: rafka_cli("cluster", "up", "--data-dir", str(c.data_dir), "--detach"))
    c._remember()
    assert r.returncode == 0, r.stderr
    raft_addr = before[victim]["raft"]
    out = await trio.to_thread.run_sync(quorum_cli, rest_boot, "add-voter", "--id", str(victim), "--address", raft_addr)
    assert out.returncode == 0, out.stderr
    await create_retried(addrs[rest[0] - 1], "after-add")  # the joiner's term: one election

    # the new incarnation caught up: registered under a new directory id, no lag, same topics
    async def caught_up() -> dict[int, dict[str, Any]] | None:
        vs = await voters(boot)
        v = vs.get(victim)
        ok = set(vs) == {1, 2, 3} and v is not None and v["reachable"] and v["lag"] == 0 \
            and v["directory_id"] not in (None, before[victim]["directory_id"])
        return vs if ok else None
    await eventually(caught_up)
