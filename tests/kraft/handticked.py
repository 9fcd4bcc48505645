"""pysyncobj voters in this process on loopback, ticked by hand from one thread.

``autoTick=False`` and ``doTick``: a voter that is not ticked behaves as one under SIGSTOP (its
socket fills with its peers' messages), so a test decides exactly who runs and when. Used by
test_prevote.py and test_chunked_append.py; ``make_nodes`` is their fixture (conftest.py).
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pysyncobj import SyncObj, SyncObjConf

CONF = dict(autoTick=False, raftMinTimeout=0.15, raftMaxTimeout=0.6, appendEntriesPeriod=0.03,
            leaderFallbackTimeout=0.6, connectionTimeout=5.0, connectionRetryTime=0.3,
            appendEntriesUseBatch=False, dynamicMembershipChange=False)


def free_ports(n: int) -> list[int]:
    """n free ports below the kernel's ephemeral range (no outgoing socket can take them)."""
    for _ in range(200):
        base = random.randrange(12000, 22000)
        try:
            for p in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return list(range(base, base + n))
    raise RuntimeError("no free ports")


@contextmanager
def node_maker() -> Iterator[Callable[..., list[Any]]]:
    """``make(cls, **conf)``: three voters of ``cls`` with ``CONF`` updated by ``conf``; all
    destroyed on exit."""
    made: list[SyncObj] = []

    def make(cls: type[SyncObj], **conf: Any) -> list[Any]:
        addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
        for a in addrs:
            made.append(cls(a, [b for b in addrs if b != a], SyncObjConf(**{**CONF, **conf})))
        return made

    try:
        yield make
    finally:
        for n in made:
            n.destroy()


def tick(nodes: list[SyncObj], seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for n in nodes:
            n.doTick(0.002)


def wait_leader(nodes: list[SyncObj]) -> tuple[SyncObj, int]:
    """Tick until exactly one node leads and every node names it (bounded)."""
    end = time.monotonic() + 15
    while time.monotonic() < end:
        tick(nodes, 0.1)
        leaders = [n for n in nodes if n._isLeader()]
        if len(leaders) == 1 and all(n._getLeader() == leaders[0].selfNode for n in nodes):
            return leaders[0], leaders[0].raftCurrentTerm
    raise AssertionError("no stable leader within 15 s")
