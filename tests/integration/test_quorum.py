"""The controller quorum on real node processes (issue 3).

Each test starts real ``rafka`` node processes (``cluster_factory`` / ``rafka server``) and
kills them with SIGKILL. Conditions that become true are awaited under a hang guard
(``eventually``); no test asserts how long anything took.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from rafka.chaos_tests.campaign import toml_dumps
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

from tests.broker.harness import batch, fetch_body, part, produce_body
from tests.integration.conftest import PROJECT_ROOT, free_port_block, rafka_cli
from tests.integration.test_cluster import create_topic, eventually, request

pytestmark = pytest.mark.timeout(240)


# ---------------------------------------------------------------------- helpers


def quorum_describe(bootstrap: str, as_json: bool = True) -> Any:
    """``rafka quorum describe [--json]`` as a user runs it."""
    args = [sys.executable, "-m", "rafka.cli", "quorum", "describe", "--bootstrap", bootstrap]
    r = subprocess.run([*args, "--json"] if as_json else args, capture_output=True, text=True,
                       timeout=60, cwd=str(PROJECT_ROOT), env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if as_json else r.stdout


async def describe(bootstrap: str, as_json: bool = True) -> Any:
    return await trio.to_thread.run_sync(quorum_describe, bootstrap, as_json)


async def metadata(addr: tuple[str, int], topics: list[str] | None = None) -> dict[str, Any]:
    return await request(addr, ApiKey.METADATA, {"topics": topics if topics is not None else []})


def brokers(md: dict[str, Any]) -> dict[int, bool]:
    """broker id -> fenced"""
    return {b["node_id"]: b["fenced"] for b in md["brokers"]}


async def visible_everywhere(addrs: list[tuple[str, int]], topic: str, partitions: int) -> None:
    for addr in addrs:
        async def ok(addr: tuple[str, int] = addr) -> bool:
            t = (await metadata(addr, [topic]))["topics"][0]
            return t["error"] == 0 and len(t["partitions"]) == partitions \
                and all(p["leader"] >= 0 for p in t["partitions"])

        assert await eventually(ok)


def node_log(cluster: Any, node_id: int) -> str:
    return (cluster.data_dir / f"node-{node_id}" / "node.log").read_text(errors="replace")


# ---------------------------------------------------------------------- failover


async def test_killing_the_active_controller_elects_a_new_one(cluster3):
    addrs = cluster3.addresses()
    # a topic created through any node is visible on every broker (node 3: test_cluster.py)
    for i in (0, 1):
        await create_topic(addrs[i], f"via-{i + 1}", partitions=2)
    for i in (0, 1):
        await visible_everywhere(addrs, f"via-{i + 1}", 2)

    before = await describe(cluster3.bootstrap)
    old, epoch = before["leader_id"], before["epoch"]
    assert old in (1, 2, 3) and epoch >= 1
    assert [v["id"] for v in before["voters"]] == [1, 2, 3]
    assert all(v["reachable"] and isinstance(v["lag"], int) and v["lag"] >= 0 for v in before["voters"])
    assert {o["id"] for o in before["observers"]} == {1, 2, 3}

    cluster3.kill(old, signal.SIGKILL)
    survivors = [a for i, a in enumerate(addrs, 1) if i != old]
    bootstrap = ",".join(f"{h}:{p}" for h, p in survivors)

    # the dead node's broker is fenced by the new controller for silence; the survivors are
    # not (waited for first: a replication-factor-1 partition placed on the dead broker while
    # it was still unfenced would never get a leader — under load the fence can come after
    # the create below)
    async def dead_fenced() -> dict[int, bool] | None:
        fenced = brokers(await metadata(survivors[0]))
        return fenced if fenced[old] else None

    fenced = await eventually(dead_fenced)
    assert [b for b, f in fenced.items() if f] == [old], fenced

    # topic creation works again through a surviving node
    async def created() -> bool:
        body = await request(survivors[0], ApiKey.CREATE_TOPICS, {
            "topics": [{"name": "after-failover", "num_partitions": 2, "replication_factor": 1}],
            "timeout_ms": 30_000})
        t = body["topics"][0] if body.get("topics") else {}
        return body.get("error", 0) == 0 and t.get("error") in (0, 36)  # 36: created by a retry

    assert await eventually(created)
    await visible_everywhere(survivors, "after-failover", 2)

    # quorum describe shows the new leader and epoch, and the dead voter honestly
    after = await describe(bootstrap)
    assert after["leader_id"] in {1, 2, 3} - {old}
    assert after["epoch"] > epoch
    dead = next(v for v in after["voters"] if v["id"] == old)
    assert dead["reachable"] is False and dead["metadata_offset"] == -1 and dead["lag"] is None
    live = [v for v in after["voters"] if v["id"] != old]
    assert all(v["reachable"] and v["metadata_offset"] >= 0 for v in live)
    text = await describe(bootstrap, as_json=False)
    assert f"leader {after['leader_id']}" in text and "UNREACHABLE" in text

    # it comes back (cluster up restarts it) and is unfenced
    cluster3.up()

    async def back() -> bool:
        return not any(brokers(await metadata(survivors[0])).values())

    assert await eventually(back)

    async def caught_up() -> bool:
        q = await describe(cluster3.bootstrap)
        return all(v["reachable"] and v["lag"] == 0 for v in q["voters"])

    assert await eventually(caught_up)


async def test_killed_broker_is_fenced_and_its_leaderships_move(cluster3):
    addrs = cluster3.addresses()
    await create_topic(addrs[0], "moves", partitions=3, rf=3)
    await visible_everywhere(addrs, "moves", 3)
    active = (await describe(cluster3.bootstrap))["leader_id"]
    parts = (await metadata(addrs[0], ["moves"]))["topics"][0]["partitions"]
    # a broker that leads something and is not the active controller (no failover here)
    victim = next(p["leader"] for p in parts if p["leader"] != active)
    led = {p["partition"]: p for p in parts if p["leader"] == victim}
    assert led and all(victim in p["isr"] and len(p["isr"]) == 3 for p in led.values())

    cluster3.kill(victim, signal.SIGKILL)
    observer = addrs[active - 1]

    async def moved() -> list[dict[str, Any]] | None:
        md = await metadata(observer, ["moves"])
        if not brokers(md)[victim]:
            return None  # not fenced yet: broker.session.timeout.ms has not passed
        ps = md["topics"][0]["partitions"]
        if any(p["leader"] == victim or victim in p["isr"] for p in ps):
            return None
        return ps

    ps = await eventually(moved)
    for p in ps:
        if p["partition"] in led:  # its leaderships went to another member of the old ISR
            assert p["leader"] in set(led[p["partition"]]["isr"]) - {victim}
        assert p["leader"] >= 0 and p["leader"] != victim
    q = await describe(cluster3.bootstrap)
    assert next(o for o in q["observers"] if o["id"] == victim)["fenced"] is True

    cluster3.up()  # restarts the killed node

    async def unfenced() -> bool:
        return brokers(await metadata(observer))[victim] is False

    assert await eventually(unfenced)


# ---------------------------------------------------------------------- snapshots


async def test_node_started_after_the_log_was_trimmed_catches_up_from_a_snapshot(cluster_factory):
    c = cluster_factory(3, controller_config={
        "metadata.snapshot.records": 20,       # a snapshot every 20 records...
        "raft.compaction.min.entries": 10,     # ...and pysyncobj compacts its own log early
    })
    addrs = c.addresses()
    active = (await describe(c.bootstrap))["leader_id"]
    # the restarted broker fetches metadata from voter 1 first: keep voter 1 alive
    victim = next(i for i in (3, 2) if i != active)
    c.kill(victim, signal.SIGKILL)
    killed_at = time.time()
    survivors = [a for i, a in enumerate(addrs, 1) if i != victim]
    names = [f"snap-{k}" for k in range(15)]  # 15 commands, 4 records each
    for name in names:
        await create_topic(survivors[0], name, partitions=3)
    live_ids = [i for i in (1, 2, 3) if i != victim]

    async def trimmed() -> bool:
        q = await describe(",".join(f"{h}:{p}" for h, p in survivors))
        vs = {v["id"]: v for v in q["voters"]}
        metadata_trimmed = all((vs[i]["log_start_offset"] or 0) > 0 for i in live_ids)
        raft_compacted = all(
            (p := c.data_dir / f"node-{i}" / "controller" / "raft.dump").exists()
            and p.stat().st_mtime > killed_at for i in live_ids)
        return metadata_trimmed and raft_compacted

    assert await eventually(trimmed)

    c.up()  # the whole node comes back: its voter and its broker are behind the log start

    async def caught_up() -> bool:
        md = await metadata(addrs[victim - 1], names)
        return all(t["error"] == 0 for t in md["topics"]) and not brokers(md)[victim]

    assert await eventually(caught_up)
    assert "loading metadata snapshot at offset" in node_log(c, victim)  # the broker (METADATA_FETCH)

    async def voter_installed() -> bool:  # the voter (Raft snapshot): the broker's catch-up
        # comes from any voter and does not wait for it — with a 100 ms heartbeat the leader's
        # snapshot transfer can finish after it
        return "installed a snapshot from the leader" in node_log(c, victim)

    assert await eventually(voter_installed)

    async def voter_in_sync() -> bool:
        q = await describe(c.bootstrap)
        v = next(v for v in q["voters"] if v["id"] == victim)
        return v["reachable"] and v["lag"] == 0 and v["log_start_offset"] > 0

    assert await eventually(voter_in_sync)


# ---------------------------------------------------------------------- bad configurations


def _server(path: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return rafka_cli("server", "--config", str(path), timeout=timeout)


def _node_cfg(tmp: Path, node_id: int, port: int, roles: list[str], n_voters: int = 3,
              **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "node_id": node_id, "roles": roles, "data_dir": str(tmp / f"n{node_id}"),
        "listener": f"127.0.0.1:{port + node_id - 1}", "cluster_id": "quorum-test",
        "cluster_secret": "s3cret",
        "voters": [{"id": i, "raft": f"127.0.0.1:{port + 10000 + i - 1}", "rpc": f"127.0.0.1:{port + i - 1}"}
                   for i in range(1, n_voters + 1)],
        "controller": {"broker.session.timeout.ms": 3000},
    }
    if "controller" in roles:
        cfg["raft_listener"] = f"127.0.0.1:{port + 10000 + node_id - 1}"
    cfg.update(extra)
    return cfg


@pytest.mark.parametrize("mutate, named", [
    (lambda c: c.update(bogus_key=1), "bogus_key: unknown setting"),
    (lambda c: c["controller"].update({"broker.session.timeout.ms": "soon"}),
     "controller.broker.session.timeout.ms: expected an integer"),
    (lambda c: c.pop("node_id"), "node_id: missing (required)"),
    (lambda c: c.pop("cluster_secret"), "cluster_secret: a quorum of 3 voters needs cluster_secret"),
    (lambda c: c.update(node_id=7), "voters: node 7 has the controller role but is not a voter"),
], ids=["unknown-key", "bad-value", "missing-node-id", "missing-secret", "controller-not-a-voter"])
def test_bad_config_is_a_named_error_and_a_nonzero_exit(tmp_path, mutate, named):
    cfg = _node_cfg(tmp_path, 1, free_port_block(3), ["broker", "controller"])
    mutate(cfg)
    path = tmp_path / "node.toml"
    path.write_text(toml_dumps(cfg))
    r = _server(path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert named in r.stderr and "config error" in r.stderr
    assert "Traceback" not in r.stderr


def _disagreeing_node(cluster: Any, tmp: Path, how: str) -> Path:
    """Node 3's own config, changed so that it disagrees with voters 1 and 2."""
    import tomllib

    cfg = tomllib.loads((cluster.data_dir / "node-3" / "node.toml").read_text())
    cfg["data_dir"] = str(tmp / f"impostor-{how}")  # never touch node 3's real data
    if how == "wrong-secret":
        cfg.pop("cluster_secret_file")
        cfg["cluster_secret"] = "not-the-cluster-secret"
    elif how == "other-cluster-id":
        cfg["cluster_id"] = "some-other-cluster"
    elif how == "extra-voter":
        cfg["voters"].append({"id": 4, "raft": "127.0.0.1:9", "rpc": "127.0.0.1:9"})
    path = tmp / f"{how}.toml"
    path.write_text(toml_dumps(cfg))
    return path


async def test_node_disagreeing_with_the_voters_stops_with_a_named_error(cluster3, tmp_path):
    cluster3.kill(3, signal.SIGKILL)  # its ports are free for the impostors
    for how, named in [("wrong-secret", "ClusterSecretMismatchError"),
                       ("other-cluster-id", "ClusterIdMismatchError"),
                       ("extra-voter", "VotersMismatchError")]:
        path = _disagreeing_node(cluster3, tmp_path, how)
        r = await trio.to_thread.run_sync(_server, path)
        assert r.returncode == 2, (how, r.stderr[-2000:])
        assert f"rafka: node 3: {named}:" in r.stderr, (how, r.stderr[-2000:])
        assert "Traceback" not in r.stderr
    # the impostors never joined: the real node 3 comes back and the quorum is whole
    cluster3.up()

    async def whole() -> bool:
        q = await describe(cluster3.bootstrap)
        return all(v["reachable"] and v["lag"] == 0 for v in q["voters"]) \
            and not any(brokers(await metadata(cluster3.addresses()[0])).values())

    assert await eventually(whole)


# ---------------------------------------------------------------------- roles


async def test_controller_only_and_broker_only_nodes(tmp_path):
    port = free_port_block(4)
    cfgs = [_node_cfg(tmp_path, i, port, ["controller"]) for i in (1, 2, 3)]
    cfgs.append(_node_cfg(tmp_path, 4, port, ["broker"]))
    procs = []
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    try:
        for cfg in cfgs:
            path = tmp_path / f"node-{cfg['node_id']}.toml"
            path.write_text(toml_dumps(cfg))
            out = open(tmp_path / f"node-{cfg['node_id']}.out", "wb")
            procs.append(subprocess.Popen([sys.executable, "-m", "rafka.cli", "server", "--config", str(path)],
                                          stdout=out, stderr=subprocess.STDOUT, env=env,
                                          cwd=str(PROJECT_ROOT), start_new_session=True))
        broker = ("127.0.0.1", port + 3)

        async def registered() -> bool:
            md = await metadata(broker)
            return md["controller_id"] in (1, 2, 3) and brokers(md) == {4: False}

        assert await eventually(registered)
        await create_topic(broker, "split", partitions=2)
        await visible_everywhere([broker], "split", 2)
        r = await eventually(lambda: request(broker, ApiKey.PRODUCE, produce_body("split", batch(b"a", b"b"))))
        assert part(r)["error"] == 0
        p = part(await request(broker, ApiKey.FETCH, fetch_body("split", 0)))
        assert p["high_watermark"] == 2 and p["records_len"] > 0
        # a controller-only node serves no data APIs
        try:
            md = await metadata(("127.0.0.1", port))
            assert md.get("error") == ErrorCode.UNKNOWN_API, md
        except RafkaError:  # or the connection is closed on it
            pass
        # quorum describe through the broker-only node finds the active controller
        q = await describe(f"127.0.0.1:{port + 3}")
        assert q["leader_id"] in (1, 2, 3)
        assert [v["id"] for v in q["voters"]] == [1, 2, 3] and all(v["reachable"] for v in q["voters"])
        assert [(o["id"], o["fenced"]) for o in q["observers"]] == [(4, False)]
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.send_signal(signal.SIGKILL)
            pr.wait()
