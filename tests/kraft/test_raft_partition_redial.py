"""A Raft connect whose SYN is dropped is abandoned and dialled again (kraft/syncobj_engine.py,
``_abandon_unanswered_connects``), so the quorum elects soon after a packet-dropping partition
heals — 3 real voter processes, real TCP on loopback, a real iptables partition.

Found while chasing chaos seed 9 (docs/chaos-results.md; not that stall's cause).
pysyncobj 0.3.17 never times out a connect that gets no answer, and does not re-dial while it
is CONNECTING, so a link whose SYN was dropped waited for the kernel's SYN retransmits (here
1, 2, 3, 4, 5, 7, 11, 19, 35, 67 s after the connect) or its ETIMEDOUT (~133 s). Measured
before the fix with this file's partition of all three voters: one SYN-SENT socket per link
for the whole partition, and after a 40 s partition no leader for 30 s after the heal.

The default test checks the mechanism (during a partition longer than two connection timeouts
each link's dialer dials more than once) and that a leader is elected and every link re-made
after the heal; the slow one runs a 40 s partition and prints the figures. Both need root and
iptables (skipped otherwise); the rules match only this test's Raft ports and are removed in
``finally``. The only time bound is a hang guard. A third test (no root) checks that the
pysyncobj field the fix reads still exists.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection

from tests.kraft.cluster_util import VoterCluster

pytestmark = pytest.mark.timeout(600)

HANG_GUARD_S = 60  # after the heal; before the fix a 40 s partition left no leader for 30 s


def _iptables_usable() -> bool:
    if os.geteuid() != 0 or shutil.which("iptables") is None or shutil.which("ss") is None:
        return False
    return subprocess.run(["iptables", "-S", "INPUT"], capture_output=True).returncode == 0


needs_iptables = pytest.mark.skipif(not _iptables_usable(), reason="needs root, iptables and ss")


@contextmanager
def dropped(ports: list[int]) -> Iterator[None]:
    """Drop every loopback TCP packet to or from ``ports`` (both ends of each Raft link) while
    the block runs; the rules are removed however it ends."""
    rules = [["INPUT", "-i", "lo", "-p", "tcp", flag, str(p), "-j", "DROP"]
             for p in ports for flag in ("--dport", "--sport")]
    added: list[list[str]] = []
    try:
        for rule in rules:
            subprocess.run(["iptables", "-I", *rule], check=True)
            added.append(rule)
        yield
    finally:
        for rule in added:
            subprocess.run(["iptables", "-D", *rule], check=False)


def _sockets(state: str, ports: list[int]) -> set[tuple[str, int, int]]:
    """(local address, peer port, owning pid) of this machine's TCP sockets in ``state`` whose
    peer is one of ``ports``."""
    out = subprocess.run(["ss", "-Htnp", "state", state], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        m = re.search(r"(\S+:\d+)\s+\S+:(\d+)\s+users:\(\(\"[^\"]*\",pid=(\d+)", line)
        if m and int(m.group(2)) in ports:
            found.add((m.group(1), int(m.group(2)), int(m.group(3))))
    return found


async def partition_and_heal(tmp: Path, partition_s: float) -> dict[str, float]:
    c = VoterCluster(tmp)
    ports = [int(c.raft[i].rsplit(":", 1)[1]) for i in c.ids]
    c.start_all()
    try:
        for i in c.ids:
            await c.wait_rpc(i)
        await c.active_controller(timeout_s=30)
        # each link is one connection, dialled by the voter with the greater address
        links = {(a, b) for a in c.ids for b in c.ids if c.raft[a] > c.raft[b]}
        syn_sent: set[tuple[str, int, int]] = set()
        with dropped(ports):
            start = time.monotonic()
            while time.monotonic() - start < partition_s:
                syn_sent |= _sockets("syn-sent", ports)
                await trio.sleep(0.1)
        healed = time.monotonic()
        pid_of = {p.pid: i for i, p in c.procs.items()}
        want = {(a, int(c.raft[b].rsplit(":", 1)[1])) for a, b in links}
        with trio.fail_after(HANG_GUARD_S):
            leader = await c.active_controller(timeout_s=HANG_GUARD_S)
            leader_s = time.monotonic() - healed
            while not want <= {(pid_of.get(pid), port) for _l, port, pid in _sockets("established", ports)}:
                await trio.sleep(0.05)
            links_s = time.monotonic() - healed
        dials = {f"{a}->{b}": sum(1 for _l, port, pid in syn_sent
                                  if pid_of.get(pid) == a and port == int(c.raft[b].rsplit(":", 1)[1]))
                 for a, b in sorted(links)}
        print(f"partition {partition_s:.0f} s: connects per link {dials}; leader {leader} "
              f"{leader_s:.2f} s after the heal, all {len(links)} links {links_s:.2f} s after it")
        return {"dials_min": min(dials.values()), "leader_s": leader_s, "links_s": links_s}
    finally:
        c.stop_all()


def test_pysyncobj_still_has_the_fields_the_redial_reads() -> None:
    """The engine's tick callback reads pysyncobj's private connect clock and skips a
    connection without it; an upgrade that renames it would turn the re-dial off silently."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    conn = TcpConnection(createPoller("auto"), timeout=2.0)
    try:
        assert conn.connect("127.0.0.1", listener.getsockname()[1])
        assert conn.state == CONNECTION_STATE.CONNECTING
        assert isinstance(conn._TcpConnection__lastReadTime, float)
    finally:
        conn.disconnect()
        listener.close()


@needs_iptables
async def test_an_unanswered_raft_connect_is_dialled_again_and_the_quorum_heals(tmp_path: Path) -> None:
    # 7 s > 3 connection timeouts (2 s): without the re-dial each link keeps its first
    # SYN-SENT socket (the kernel retransmits its SYN at 1, 2, 3, ... s), so one per link
    out = await partition_and_heal(tmp_path, partition_s=7.0)
    assert out["dials_min"] >= 2, out


@pytest.mark.slow
@needs_iptables
async def test_a_long_partition_heals_without_waiting_for_syn_backoff(tmp_path: Path) -> None:
    out = await partition_and_heal(tmp_path, partition_s=40.0)
    assert out["dials_min"] >= 5, out
