"""LinkProxy and LocalBackend against real echo-server processes on loopback."""

from __future__ import annotations

import sys

import pytest
import trio
from rafka.chaos_tests.backends.base import ClusterSpec, NodeSpec, faketime_available
from rafka.chaos_tests.backends.local import LocalBackend
from rafka.chaos_tests.proxy import LinkMode, LinkProxy
from rafka.chaos_tests.tests.conftest import REPO, echo_argv, free_port

pytestmark = pytest.mark.timeout(60)


_pending: dict[int, bytes] = {}  # per stream: bytes received after the last line returned


async def _line(stream: trio.SocketStream, timeout_s: float) -> bytes | None:
    """The next line from ``stream``; lines that arrived together are kept for the next call
    (two echoes in one segment used to lose the second one)."""
    buf = _pending.pop(id(stream), b"")
    with trio.move_on_after(timeout_s):
        while b"\n" not in buf:
            data = await stream.receive_some(4096)
            if not data:
                return None
            buf += data
    if b"\n" not in buf:
        _pending[id(stream)] = buf
        return None
    line, _pending[id(stream)] = buf.split(b"\n", 1)
    return line


async def _start_proxy(nursery, target) -> LinkProxy:
    proxy = LinkProxy("127.0.0.1", 0, *target)
    await nursery.start(proxy.serve)
    return proxy


async def test_proxy_pass_blackhole_heal(echo_server, nursery):
    proxy = await _start_proxy(nursery, echo_server)
    s = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
    await s.send_all(b"hello\n")
    assert await _line(s, 5) == b"hello"
    proxy.set_mode(LinkMode.DROP)
    await s.send_all(b"during-cut\n")
    assert await _line(s, 0.5) is None  # blackholed: nothing comes back
    s2 = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)  # accepted, but silent
    await s2.send_all(b"new-conn\n")
    assert await _line(s2, 0.5) is None
    proxy.set_mode(LinkMode.PASS)  # heal: held bytes are delivered, like TCP retransmits
    assert await _line(s, 5) == b"during-cut"
    assert await _line(s2, 5) == b"new-conn"
    await s.aclose()
    await s2.aclose()


async def test_proxy_reset(echo_server, nursery):
    proxy = await _start_proxy(nursery, echo_server)
    s = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
    await s.send_all(b"x\n")
    assert await _line(s, 5) == b"x"
    proxy.set_mode(LinkMode.RESET)
    with pytest.raises((trio.BrokenResourceError, OSError)):
        with trio.fail_after(5):
            while True:  # a reset connection fails on receive or on send
                data = await s.receive_some(10)
                if not data:
                    raise trio.BrokenResourceError("eof")
    s2 = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
    with trio.fail_after(5):
        try:
            got = await s2.receive_some(10)
        except trio.BrokenResourceError:
            got = b""
    assert got == b""
    assert proxy.statistics()["reset"] >= 2


async def test_proxy_delay_keeps_order_and_adds_latency(echo_server, nursery):
    proxy = await _start_proxy(nursery, echo_server)
    s = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
    proxy.set_mode(LinkMode.DELAY, delay_s=0.2)
    t0 = trio.current_time()
    for i in range(5):
        await s.send_all(f"m{i}\n".encode())
        await trio.sleep(0.01)
    got = []
    for _ in range(5):
        got.append(await _line(s, 10))
    rtt = trio.current_time() - t0
    assert got == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert rtt >= 0.35  # 0.2 s each way at least; no upper bound asserted
    proxy.set_mode(LinkMode.PASS)
    await s.send_all(b"fast\n")
    assert await _line(s, 5) == b"fast"


async def _recording_server(nursery, seen: list[bytes]) -> tuple[str, int]:
    """A server that records each line it receives and answers ``ack:<line>``."""
    async def handle(stream: trio.SocketStream) -> None:
        while (line := await _line(stream, 30)) is not None:
            seen.append(line)
            await stream.send_all(b"ack:" + line + b"\n")

    listeners = await nursery.start(trio.serve_tcp, handle, 0)
    return "127.0.0.1", listeners[0].socket.getsockname()[1]


@pytest.mark.parametrize("mode", [LinkMode.HOLD_FORWARD, LinkMode.HOLD_REPLY])
async def test_proxy_one_way_hold(nursery, mode):
    """hold-forward keeps the dialler's bytes from the target; hold-reply lets them through
    and keeps the answer back; a new connection is held either way; both deliver on heal."""
    seen: list[bytes] = []
    proxy = await _start_proxy(nursery, await _recording_server(nursery, seen))
    s = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
    await s.send_all(b"a\n")
    assert await _line(s, 5) == b"ack:a"
    proxy.set_mode(mode)
    await s.send_all(b"b\n")
    s2 = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
    await s2.send_all(b"c\n")
    assert await _line(s, 0.5) is None and await _line(s2, 0.2) is None
    assert seen == ([b"a"] if mode is LinkMode.HOLD_FORWARD else [b"a", b"b"])
    proxy.set_mode(LinkMode.PASS)
    assert await _line(s, 5) == b"ack:b"
    assert await _line(s2, 5) == b"ack:c"
    assert seen == [b"a", b"b", b"c"]
    await s.aclose()
    await s2.aclose()


def _spec(tmp_path, n=2) -> ClusterSpec:
    env = (("PYTHONPATH", str(REPO)),)
    port = free_port()
    return ClusterSpec(tuple(NodeSpec(i, echo_argv(), client_port=port, raft_port=None,
                                      env=env) for i in range(1, n + 1)), tmp_path)


async def _probe(b, src, dst, timeout_s=1.0) -> bool:
    host, port = b.peer_address(src, dst)
    r = await b.run(src, [sys.executable, "-m", "rafka.chaos_tests.echo_node", "probe",
                          f"{host}:{port}", "--timeout", str(timeout_s)], timeout_s=20)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


async def test_local_backend_cut_heal_kill_pause(tmp_path):
    async with LocalBackend(_spec(tmp_path)) as b:
        for n in (1, 2):
            await b.start_node(n)
        assert await _probe(b, 1, 2) and await _probe(b, 2, 1)
        await b.cut(1, 2)
        assert not await _probe(b, 1, 2)
        assert not await _probe(b, 2, 1)
        assert await _probe(b, 0, 2)  # the harness still reaches node 2
        await b.heal_all()
        assert await _probe(b, 1, 2)
        await b.cut_one_way(1, 2)  # a new connection needs both ways: held either way
        assert not await _probe(b, 1, 2) and not await _probe(b, 2, 1)
        assert await _probe(b, 0, 2)
        assert {p.mode for (x, y, _), p in b._proxies.items() if (x, y) in ((1, 2), (2, 1))} \
            == {LinkMode.HOLD_FORWARD, LinkMode.HOLD_REPLY}
        await b.heal_all()
        assert await _probe(b, 1, 2)
        await b.pause_node(2)
        assert not await _probe(b, 0, 2)
        await b.resume_node(2)
        assert await _probe(b, 0, 2)
        await b.kill_node(2)
        assert not b.running(2) and not await _probe(b, 0, 2)
        await b.start_node(2)
        assert await _probe(b, 1, 2)
        pids = [p.pid for p in b._procs.values()]
    assert all(p.returncode is not None for p in b._procs.values()), pids
    assert "listening" in (tmp_path / "node-1.log").read_text()


@pytest.mark.skipif(not faketime_available(), reason="libfaketime missing (make -C deploy chaos-deps)")
async def test_local_backend_clock_skew(tmp_path):
    async with LocalBackend(_spec(tmp_path, 1)) as b:
        await b.start_node(1)

        async def node_time() -> float:
            s = await trio.open_tcp_stream(*b.node_address(1))
            async with s:
                await s.send_all(b"TIME\n")
                return float(await _line(s, 5))

        import time
        assert abs(await node_time() - time.time()) < 30
        await b.skew_clock(1, 3600)
        assert abs(await node_time() - time.time() - 3600) < 30
        await b.skew_clock(1, 0)
        assert abs(await node_time() - time.time()) < 30


async def test_nemesis_runner_applies_and_heals_schedule(tmp_path):
    from rafka.chaos_tests.history import HistoryWriter, read_history
    from rafka.chaos_tests.nemesis import Fault, NemesisRunner, Schedule, ScheduledFault
    from rafka.chaos_tests.report import fault_windows

    schedule = Schedule(0, (
        ScheduledFault(0.0, 2.0, Fault("partition-isolate-one", (2,))),
        ScheduledFault(2.2, 0.8, Fault("kill", (1,))),
        ScheduledFault(3.2, 0.8, Fault("pause", (2,))),
    ), heal_at_s=4.3)
    async with LocalBackend(_spec(tmp_path)) as b:
        for n in (1, 2):
            await b.start_node(n)
        with HistoryWriter(tmp_path / "h.jsonl") as w:
            runner = NemesisRunner(b, w, [1, 2])
            async with trio.open_nursery() as nursery:
                t0 = trio.current_time()
                nursery.start_soon(runner.run, schedule)
                await trio.sleep(0.3)
                assert not await _probe(b, 1, 2, 0.5)  # partitioned
                await trio.sleep_until(t0 + 2.6)
                assert not b.running(1)  # killed
                await trio.sleep_until(t0 + 3.6)
                assert 2 in b.statistics()["paused"]
        assert await _probe(b, 1, 2) and await _probe(b, 2, 1)  # all healed, 1 restarted
    ops = read_history(tmp_path / "h.jsonl")
    assert all(op.f == "nemesis" for op in ops)
    assert [w[2] for w in fault_windows(ops)] == ["partition-isolate-one", "kill", "pause"]
    assert ops[-1].value["action"] == "heal-all" and ops[-1].type == "ok"


async def test_proxy_pipe_survives_a_reset_side():
    """A side reset mid-read (a node SIGKILLed with unread bytes) ends that connection only.

    trio nurseries raise ExceptionGroups: the pipe must catch them with ``except*``, else the
    error climbs through the proxy's listener nursery and takes the whole harness down
    (seen in a local-backend campaign)."""
    from rafka.chaos_tests.proxy import _Conn

    class Reset:
        async def receive_some(self, max_bytes=None):
            raise trio.BrokenResourceError("socket connection broken: [Errno 104]")

        async def send_all(self, data):
            pass

        async def send_eof(self):
            pass

    proxy = LinkProxy("127.0.0.1", 0, "127.0.0.1", 9)
    conn = _Conn(Reset())  # type: ignore[arg-type]
    with conn.scope:
        await proxy._pipe(conn, Reset(), Reset(), True)  # type: ignore[arg-type]
    assert conn.scope.cancel_called
