"""DockerBackend against a real 3-container cluster of the locally built image.

The container tests are ``slow`` + ``root``: the first run debootstraps and builds the image
(minutes). They use the engine at ``$DOCKER_HOST`` if it answers, else start the private engine
(``deploy/docker-engine.sh``; stopped again at the end) and build the image
(``deploy/build-image.sh``, a no-op when up to date). Skipped with the reason when that is not
possible. The nodes are echo nodes (``chaos_tests/echo_node.py``, installed in the image), then
a real 3-node rafka quorum that must hold one Raft leader and acknowledge acks=all writes.
The config/argv tests at the bottom need no docker and run in the default suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import trio
from rafka.chaos_tests.backends.base import ClusterSpec, NodeSpec
from rafka.chaos_tests.backends.docker import (
    CONTAINER_PYTHON,
    DEFAULT_DOCKER_HOST,
    HOST_IP,
    DockerBackend,
    docker_bin,
    docker_env,
    docker_supported,
    write_rafka_configs,
)
from rafka.chaos_tests.tests.conftest import REPO, echo_argv

PORT = 7000
ENGINE = REPO / "deploy" / "docker-engine.sh"
BUILD = REPO / "deploy" / "build-image.sh"

HANDOFF_PROBE = """
import os, time, trio
async def main():
    slow = 0
    for _ in range(300):
        t = time.perf_counter()
        await trio.to_thread.run_sync(lambda: None)
        slow += time.perf_counter() - t > 0.020
    return slow
print(os.environ.get("LD_PRELOAD"), trio.run(main))
"""


@pytest.fixture(scope="module")
def docker_engine():
    """DOCKER_HOST of a usable engine with the image built, or skip with the reason."""
    started = False
    reason = docker_supported()
    if reason is not None and "no Docker engine" in reason:
        if os.geteuid() != 0:
            pytest.skip(f"{reason}; starting a private engine needs root")
        if shutil.which("dockerd") is None:
            pytest.skip("dockerd missing (apt-get install docker.io docker-compose, or "
                        "make chaos-docker)")
        if os.environ.get("DOCKER_HOST", DEFAULT_DOCKER_HOST) != DEFAULT_DOCKER_HOST:
            pytest.skip(reason)  # the user's own engine is down: not ours to start
        r = subprocess.run(["bash", str(ENGINE), "start"], capture_output=True, text=True,
                           env={**os.environ, "DOCKER_HOST": DEFAULT_DOCKER_HOST}, timeout=120)
        if r.returncode != 0:
            pytest.skip(f"could not start a Docker engine: {r.stderr.strip()[-300:]}")
        started = True
        reason = docker_supported(DEFAULT_DOCKER_HOST)
    try:
        # (re)build unless impossible: a no-op when the image matches the sources
        can_build = os.geteuid() == 0 and shutil.which("debootstrap") is not None
        if reason is not None and "missing (deploy/build-image.sh)" in reason and not can_build:
            pytest.skip(f"{reason}; building it needs root and debootstrap")
        if can_build and (reason is None or "missing (deploy/build-image.sh)" in reason):
            r = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True,
                               env=docker_env(), timeout=1500)
            if r.returncode != 0:
                pytest.skip(f"image build failed: {r.stderr.strip()[-500:]}")
            reason = docker_supported()
        if reason is not None:
            pytest.skip(reason)
        yield docker_env()["DOCKER_HOST"]
    finally:
        if started:
            subprocess.run(["bash", str(ENGINE), "stop"], timeout=120,
                           env={**os.environ, "DOCKER_HOST": DEFAULT_DOCKER_HOST})


def _echo_spec(tmp_path, ids=(1, 2, 3)) -> ClusterSpec:
    return ClusterSpec(tuple(NodeSpec(i, echo_argv(), client_port=PORT, raft_port=None)
                             for i in ids), tmp_path / "run")


async def _probe(b: DockerBackend, src: int, dst: int, timeout_s: float = 1.0) -> bool:
    host, port = b.peer_address(src, dst)
    py = sys.executable if src == 0 else CONTAINER_PYTHON
    r = await b.run(src, [py, "-m", "rafka.chaos_tests.echo_node", "probe", f"{host}:{port}",
                          "--timeout", str(timeout_s)], timeout_s=30)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


async def _ask(host: str, port: int, line: bytes) -> bytes:
    with trio.fail_after(5):
        s = await trio.open_tcp_stream(host, port)
        async with s:
            await s.send_all(line + b"\n")
            got = b""
            while b"\n" not in got:
                got += await s.receive_some(4096)
            return got.split(b"\n", 1)[0]


def _leftovers(docker_host: str) -> str:
    env = {**os.environ, "DOCKER_HOST": docker_host}
    out = []
    for what in (["ps", "-a", "--filter", "name=rafka-n", "-q"],
                 ["network", "ls", "--filter", "name=rafka-chaos", "-q"],
                 ["volume", "ls", "--filter", "name=rafka-chaos", "-q"]):
        out.append(subprocess.run([docker_bin(), *what], capture_output=True, text=True,
                                  env=env).stdout.strip())
    return " ".join(o for o in out if o)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(1200)
async def test_three_containers_faults_and_cleanup(docker_engine, tmp_path):
    t0 = time.monotonic()
    async with DockerBackend(_echo_spec(tmp_path)) as b:
        for n in (1, 2, 3):
            await b.start_node(n, wait_ready_s=30)
        setup_s = time.monotonic() - t0
        assert b.node_address(2) == ("10.78.0.12", PORT)
        assert b.node_host(0) == HOST_IP
        assert await _ask("10.78.0.13", PORT, b"ID") == b"3"
        for src, dst in ((0, 1), (0, 2), (0, 3), (1, 2), (2, 3), (3, 1)):
            assert await _probe(b, src, dst), (src, dst)

        # partition 1 | 2; 3 still sees both; the harness too
        await b.cut(1, 2)
        assert not await _probe(b, 1, 2) and not await _probe(b, 2, 1)
        assert await _probe(b, 3, 1) and await _probe(b, 3, 2) and await _probe(b, 0, 1)
        # a cut outlives a kill + restart of the node (the -net container keeps the rules)
        await b.kill_node(1)
        assert not b.running(1)
        assert not await _probe(b, 0, 1)
        assert await _probe(b, 1, 3)  # run() while node 1 is down: in its -net container
        await b.start_node(1, wait_ready_s=30)
        assert not await _probe(b, 2, 1)
        await b.heal_all()
        assert await _probe(b, 1, 2) and await _probe(b, 2, 1)

        # harness cut with fast reject
        await b.cut(0, 2, reject=True)
        assert not await _probe(b, 0, 2)
        assert await _probe(b, 1, 2)
        await b.heal_all()
        assert await _probe(b, 0, 2)

        # pause / resume (cgroup freezer)
        await b.pause_node(2)
        assert b.statistics()["paused"] == [2]
        assert not await _probe(b, 1, 2)
        await b.resume_node(2)
        assert await _probe(b, 1, 2)
        # kill a paused node, bring it back
        await b.pause_node(3)
        await b.kill_node(3)
        assert not b.running(3)
        await b.start_node(3, wait_ready_s=30)
        assert await _probe(b, 0, 3)

        # live clock skew through the faketime file on the bind mount
        host_now = time.time()
        t_before = float(await _ask("10.78.0.13", PORT, b"TIME"))
        assert abs(t_before - host_now) < 5
        await b.skew_clock(3, 3600)
        t_skewed = float(await _ask("10.78.0.13", PORT, b"TIME"))
        assert 3590 < t_skewed - time.time() < 3610
        await b.skew_clock(3, 0)
        assert abs(float(await _ask("10.78.0.13", PORT, b"TIME")) - time.time()) < 5

        # graceful stop: SIGTERM reaches the node through docker-init, well under the timeout
        t1 = time.monotonic()
        await b.stop_node(1, timeout_s=8)
        assert not b.running(1) and time.monotonic() - t1 < 7
        assert "echo node 1 listening" in b.log_path(1).read_text()
        r = await b.run(2, ["cat", "/proc/1/cmdline"])
        assert b"docker-init" in r.stdout

        # the faketime preload does not stall thread hand-offs (the GIL's monotonic condvar):
        # with libfaketime's pthread_cond_timedwait ~1 in 8 took 20-400 ms and rafka nodes
        # re-elected their controller every second or two
        r = await b.run(2, [CONTAINER_PYTHON, "-c", HANDOFF_PROBE], timeout_s=60)
        assert r.returncode == 0, r.stderr
        assert b"libfaketime.so.1" in r.stdout and int(r.stdout.split()[-1]) <= 15, r.stdout
    assert _leftovers(docker_engine) == ""
    print(f"docker echo cluster: setup {setup_s:.1f}s, total {time.monotonic() - t0:.1f}s")


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(600)
async def test_teardown_runs_when_the_body_fails(docker_engine, tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        async with DockerBackend(_echo_spec(tmp_path, ids=(1, 2))) as b:
            await b.start_node(1, wait_ready_s=30)
            await b.cut(1, 2)
            raise RuntimeError("boom")
    assert _leftovers(docker_engine) == ""


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(600)
async def test_real_rafka_quorum_in_containers(docker_engine, tmp_path):
    spec = write_rafka_configs(tmp_path / "run")
    rafka = str(REPO / ".venv" / "bin" / "rafka")
    async with DockerBackend(spec) as b:
        for n in (1, 2, 3):
            await b.start_node(n, wait_ready_s=60)
        boot = ",".join("{}:{}".format(*b.node_address(n)) for n in (1, 2, 3))

        async def quorum() -> dict:
            r = await b.run(0, [rafka, "quorum", "describe", "--bootstrap", boot, "--json"],
                            timeout_s=60)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)

        with trio.fail_after(60):
            while (q := await quorum()).get("leader_id", -1) < 0:
                await trio.sleep(0.5)
        # a stable controller: the epoch does not move while nothing fails (it churned every
        # second or two when libfaketime starved pysyncobj's tick thread)
        await trio.sleep(5)
        q2 = await quorum()
        assert (q2["leader_id"], q2["epoch"]) == (q["leader_id"], q["epoch"]), (q, q2)
        r = await b.run(0, [rafka, "topic", "create", "t", "-p", "3", "-r", "3",
                            "--bootstrap", boot], timeout_s=60)
        assert r.returncode == 0, r.stderr
        # metadata hands the host addresses it can dial: produce through node 1 only
        t0 = time.monotonic()
        with trio.fail_after(60):
            r = await trio.run_process(
                [rafka, "produce", "t", "--acks", "all", "--bootstrap", boot.split(",")[0]],
                stdin=b"".join(b"%d\n" % i for i in range(500)), capture_stdout=True,
                capture_stderr=True, check=False)
        assert r.returncode == 0 and b"produced 500 records" in r.stdout + r.stderr, r.stderr
        produce_s = time.monotonic() - t0
        r = await b.run(0, [rafka, "consume", "t", "--from-beginning", "--max-messages", "500",
                            "--timeout-ms", "10000", "--bootstrap", boot.split(",")[2]],
                        timeout_s=60)
        assert sorted(map(int, r.stdout.split())) == list(range(500)), r.stderr
    print(f"rafka in containers: 500 acks=all records in {produce_s:.1f}s")


# ------------------------------------------------------------------ no docker needed


def test_rafka_configs_parse_and_argv_is_translated(tmp_path):
    from rafka.broker.config import load_config

    spec = write_rafka_configs(tmp_path, broker={"min.insync.replicas": 2},
                               controller={"broker.session.timeout.ms": 4000})
    cfg = load_config(spec.node(2).config_path)
    assert cfg.listener == ("10.78.0.12", 9092) and cfg.raft_listener == ("10.78.0.12", 19092)
    assert [v.id for v in cfg.voters] == [1, 2, 3]
    assert cfg.voters[2].rpc == ("10.78.0.13", 9092)
    assert str(cfg.data_dir) == "/var/lib/rafka/node-2" and cfg.cluster_secret
    assert cfg.broker["min.insync.replicas"] == 2
    assert cfg.controller["broker.session.timeout.ms"] == 4000
    b = DockerBackend(spec, docker_host="unix:///nonexistent.sock")
    assert b.node_argv(1) == ["/opt/rafka/venv/bin/rafka", "server", "--config",
                              "/etc/rafka/node.toml"]
    e = DockerBackend(_echo_spec(tmp_path), docker_host="unix:///nonexistent.sock")
    assert e.node_argv(2) == [CONTAINER_PYTHON, "-m", "rafka.chaos_tests.echo_node", "serve", "--host",
                              "10.78.0.12", "--port", str(PORT), "--node-id", "2"]
    with pytest.raises(ValueError):
        DockerBackend(ClusterSpec((NodeSpec(4, ("x",)),), tmp_path))


def test_compose_file_matches_the_backend():
    text = (REPO / "deploy" / "docker-compose.yml").read_text()
    for n in (1, 2, 3):
        assert f"container_name: rafka-n{n}\n" in text
        assert f"container_name: rafka-n{n}-net\n" in text
        assert f"ipv4_address: 10.78.0.1{n}\n" in text
        assert f"FAKETIME_TIMESTAMP_FILE: /var/lib/rafka-clock/node-{n}.faketime" in text
    assert "internal: true" in text and "NET_ADMIN" in text and "gateway: 10.78.0.1\n" in text
    # the harness's libfaketime shim (both monotonic-wait fixes), built into the image
    assert "LD_PRELOAD: /usr/local/lib/rafka/faketime_fix.so /usr/lib/" in text
    build = (REPO / "deploy" / "build-image.sh").read_text()
    assert "chaos_tests/backends/faketime_fix.c" in build


def test_no_preload_without_clock_faults(tmp_path):
    import asyncio

    from rafka.chaos_tests.backends.base import BackendError

    b = DockerBackend(_echo_spec(tmp_path), docker_host="unix:///nonexistent.sock")
    b._write_run_dir()
    assert "environment" not in json.loads(b._override_path().read_text())["services"]["n1"]
    b.use_faketime = False
    b._write_run_dir()
    svc = json.loads(b._override_path().read_text())["services"]["n2"]
    assert svc["environment"] == {"LD_PRELOAD": ""}
    with pytest.raises(BackendError, match="use_faketime"):
        asyncio.run(b.skew_clock(2, 5.0))
