"""The quorum liveness watchdog (kraft/raft_watchdog.py) and a Raft listener that cannot bind.

The pure part is fed samples by hand. The bind test is real: one pysyncobj voter whose Raft
port is held as the *source port* of a connected socket (what an outgoing connection does when
the kernel picks a port in its ephemeral range), as in issue 27. Before the fix the voter only
showed ``listener_bound: False`` in a log line about leaders and said nothing else; now it
logs an ERROR naming the port and the error, exposes ``raft_listener_bound = False``, and, as
pysyncobj retries the bind every second, leads as soon as the port frees.
"""

from __future__ import annotations

import logging
import random
import socket
import struct

import pytest
import trio
from rafka.kraft.raft_watchdog import RaftSample, RaftWatchdog
from rafka.kraft.syncobj_engine import SyncObjQuorum

pytestmark = pytest.mark.timeout(60)
INF = float("inf")  # the pure tests sample sparsely: no gap means "this process was paused"


def _sample(commit: int, last: int, *, leader: bool = True, connected: int = 2, bound: bool = True) -> RaftSample:
    return RaftSample(leader_known=leader, commit_index=commit, last_index=last, listener_bound=bound,
                      bind_error="" if bound else "OSError: Address already in use",
                      listen_address="127.0.0.1:1", peers={"a": "connected", "b": "connecting"},
                      raft_connected=connected, voters=3)


def test_idle_is_not_a_stall_and_a_stuck_commit_is() -> None:
    w = RaftWatchdog(stall_after_s=5, log_every_s=10, max_sample_gap_s=INF)
    assert w.observe(_sample(7, 7), 0.0) == []
    assert w.observe(_sample(7, 7), 60.0) == [] and w.state.seconds_since_commit == 0  # idle
    w.observe(_sample(7, 9), 61.0)  # two entries wait (appended after the idle sample at 60)
    assert w.observe(_sample(7, 9), 64.5) == [] and not w.state.stalled
    lines = w.observe(_sample(7, 9), 65.5)
    assert w.state.stalled and w.state.seconds_since_commit == pytest.approx(5.5)
    assert [lvl for lvl, _ in lines] == [logging.WARNING] and "a quorum is connected" in lines[0][1]
    assert w.observe(_sample(7, 9), 70.0) == []  # rate-limited
    assert w.observe(_sample(8, 9), 71.0) == [] and w.state.seconds_since_commit == 0  # progress
    assert w.state.peers == {"a": "connected", "b": "connecting"}


@pytest.mark.parametrize("leader", [False, True])  # a lonely follower keeps naming its leader
def test_no_quorum_is_logged_but_not_a_stall(leader: bool) -> None:
    w = RaftWatchdog(stall_after_s=5, max_sample_gap_s=INF)
    w.observe(_sample(3, 3, leader=leader, connected=0), 0.0)
    lines = w.observe(_sample(3, 3, leader=leader, connected=0), 6.0)
    assert not w.state.stalled and [lvl for lvl, _ in lines] == [logging.WARNING]
    assert "Raft waits: no quorum" in lines[0][1]
    lines = w.observe(_sample(3, 3, leader=False, connected=1), 17.0)
    assert w.state.stalled and lines[0][0] == logging.WARNING


def test_our_own_pause_is_not_counted() -> None:
    w = RaftWatchdog(stall_after_s=5, max_sample_gap_s=3)
    w.observe(_sample(7, 7), 0.0)
    w.observe(_sample(7, 7), 0.5)
    assert w.observe(_sample(7, 9), 10.5) == [] and w.state.seconds_since_commit == 0  # SIGSTOPped 10 s
    for t in (12.0, 14.0, 16.0):
        w.observe(_sample(7, 9), t)
    assert w.state.stalled  # but a stall after the resume still counts


def test_unbound_listener_is_an_error_after_the_grace() -> None:
    w = RaftWatchdog(bind_grace_s=2, log_every_s=10, max_sample_gap_s=INF)
    assert w.observe(_sample(0, 0, bound=False), 0.0) == []
    errors = [m for lvl, m in w.observe(_sample(0, 0, bound=False), 2.5) if lvl == logging.ERROR]
    assert len(errors) == 1 and "127.0.0.1:1 not bound" in errors[0] and "Address already in use" in errors[0]
    assert w.state.listener_bound is False
    w.observe(_sample(0, 0), 3.0)
    assert w.state.listener_bound is True


def _hold_as_source_port() -> tuple[int, list[socket.socket]]:
    """A port below the ephemeral range, held as the source port of a connected socket."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    for _ in range(100):
        port = random.randrange(12000, 22000)
        client = socket.socket()  # no SO_REUSEADDR: as an ordinary outgoing connection
        try:
            client.bind(("127.0.0.1", port))
        except OSError:
            client.close()
            continue
        client.connect(server.getsockname())
        accepted, _ = server.accept()
        return port, [client, accepted, server]
    raise RuntimeError("no free port")


async def test_a_voter_whose_raft_port_is_taken_says_so_and_binds_once_it_frees(tmp_path, caplog) -> None:
    caplog.set_level(logging.ERROR, logger="rafka.kraft.engine")
    port, held = _hold_as_source_port()
    try:
        async with trio.open_nursery() as nursery:
            q = SyncObjQuorum(1, [(1, ("127.0.0.1", port))], tmp_path, None)
            await nursery.start(q.run)
            await trio.sleep(3.0)
            assert q.statistics()["raft_listener_bound"] is False
            assert q.leader_id() is None
            assert any(f"127.0.0.1:{port} not bound" in r.getMessage() for r in caplog.records), caplog.text
            held[0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            for s in held:  # reset, not closed: no TIME_WAIT keeping the port (that lasts 60 s)
                s.close()
            held = []
            with trio.fail_after(10):
                while q.leader_id() != 1:
                    await trio.sleep(0.1)
            await trio.sleep(0.6)
            assert q.statistics()["raft_listener_bound"] is True
            nursery.cancel_scope.cancel()
    finally:
        for s in held:
            s.close()
