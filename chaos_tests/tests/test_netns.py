"""NetnsBackend with real echo-server processes in network namespaces (root only)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio
from rafka.chaos_tests.backends.base import ClusterSpec, NodeSpec, faketime_available
from rafka.chaos_tests.backends.netns import (
    NS_PREFIX,
    NetnsBackend,
    cleanup_stale,
    list_namespaces,
    netns_supported,
)
from rafka.chaos_tests.tests.conftest import REPO, echo_argv

_reason = netns_supported()
pytestmark = [pytest.mark.root, pytest.mark.timeout(90),
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

PORT = 7000


def _spec(tmp_path, n=2) -> ClusterSpec:
    env = (("PYTHONPATH", str(REPO)),)
    return ClusterSpec(tuple(NodeSpec(i, echo_argv(), client_port=PORT, raft_port=None,
                                      env=env) for i in range(1, n + 1)), tmp_path)


async def _probe(b, src, dst, timeout_s=1.0) -> bool:
    host, port = b.peer_address(src, dst)
    r = await b.run(src, [sys.executable, "-m", "rafka.chaos_tests.echo_node", "probe",
                          f"{host}:{port}", "--timeout", str(timeout_s)], timeout_s=20)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


def _ours() -> list[str]:
    return [ns for ns in list_namespaces() if ns.startswith("rafka-")]


async def test_two_nodes_talk_cut_heal_and_cleanup(tmp_path):
    async with NetnsBackend(_spec(tmp_path)) as b:
        assert set(_ours()) == {f"{NS_PREFIX}1", f"{NS_PREFIX}2"}
        await b.start_node(1)
        await b.start_node(2)
        assert b.node_address(1) == ("10.77.0.11", PORT)
        assert await _probe(b, 1, 2) and await _probe(b, 2, 1)
        await b.cut(1, 2)
        assert not await _probe(b, 1, 2)
        assert not await _probe(b, 2, 1)
        assert await _probe(b, 0, 1) and await _probe(b, 0, 2)  # harness still reaches both
        await b.heal_all()
        assert await _probe(b, 1, 2) and await _probe(b, 2, 1)
        await b.cut(0, 2, reject=True)  # fast reject from the harness side
        assert not await _probe(b, 0, 2)
        await b.heal_all()
        await b.pause_node(2)
        assert not await _probe(b, 1, 2)
        await b.resume_node(2)
        assert await _probe(b, 1, 2)
        await b.kill_node(1)
        assert not await _probe(b, 2, 1)
        await b.start_node(1)
        assert await _probe(b, 2, 1)
        # no leak: a namespace cannot reach anything outside the test subnet
        r = await b.run(1, ["ip", "route", "get", "192.0.2.1"])
        assert r.returncode != 0
    assert _ours() == []
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert "rafka-br0" not in links and "rk-v" not in links
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    assert "10.77." not in routes


async def test_teardown_runs_when_the_body_fails(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        async with NetnsBackend(_spec(tmp_path, 1)) as b:
            await b.start_node(1)
            pid = b._procs[1].pid
            raise RuntimeError("boom")
    assert _ours() == []
    with pytest.raises(ProcessLookupError):
        import os
        os.kill(pid, 0)


def _hold_lock_or_skip():
    from rafka.chaos_tests.backends.base import BackendError
    from rafka.chaos_tests.backends.netns import _lock

    try:
        return _lock(5.0)
    except BackendError:
        pytest.skip("a live netns chaos run holds the lock; not touching its namespaces")


def test_cleanup_stale_removes_leftovers():
    from rafka.chaos_tests.backends.netns import _cleanup_stale_locked

    fh = _hold_lock_or_skip()  # a concurrent campaign's namespaces must survive this test
    try:
        subprocess.run(["ip", "netns", "add", f"{NS_PREFIX}stale"], check=True)
        subprocess.run(["ip", "link", "add", "rk-v99", "type", "veth", "peer", "name",
                        "rk-p99"], check=True)
        removed = _cleanup_stale_locked()
    finally:
        fh.close()
    assert f"{NS_PREFIX}stale" in removed["namespaces"] and "rk-v99" in removed["links"]
    assert _ours() == []


def test_cleanup_stale_refuses_while_a_run_holds_the_lock():
    from rafka.chaos_tests.backends.base import BackendError

    fh = _hold_lock_or_skip()
    try:
        subprocess.run(["ip", "netns", "add", f"{NS_PREFIX}live"], check=True)
        with pytest.raises(BackendError, match="holds"):
            cleanup_stale(lock_timeout_s=0.3)
        assert f"{NS_PREFIX}live" in _ours()
    finally:
        subprocess.run(["ip", "netns", "del", f"{NS_PREFIX}live"], check=False)
        fh.close()


@pytest.mark.skipif(not faketime_available(), reason="libfaketime missing")
async def test_clock_skew_in_namespace(tmp_path):
    import time

    async with NetnsBackend(_spec(tmp_path, 1)) as b:
        await b.start_node(1)

        async def node_time() -> float:
            s = await trio.open_tcp_stream(*b.node_address(1))
            async with s:
                await s.send_all(b"TIME\n")
                buf = b""
                with trio.fail_after(5):
                    while b"\n" not in buf:
                        buf += await s.receive_some(100)
                return float(buf.split(b"\n")[0])

        await b.skew_clock(1, -7200)
        assert abs(await node_time() - time.time() + 7200) < 30
        await b.skew_clock(1, 0)
        assert abs(await node_time() - time.time()) < 30
