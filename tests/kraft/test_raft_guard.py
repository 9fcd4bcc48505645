"""kraft/raft_guard.py on a real pysyncobj node in this process (ticked by hand): an
unauthenticated peer is dropped for a large prefix, for silence past the deadline, and past
the count of unidentified connections (issue 24)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from pysyncobj import SyncObj, SyncObjConf
from rafka.kraft import raft_guard
from rafka.kraft.raft_guard import GuardedTransport

from rafka.cluster import free_port_block


@pytest.fixture
def node(monkeypatch) -> Iterator[tuple[SyncObj, int]]:
    monkeypatch.setattr(raft_guard, "PRE_AUTH_DEADLINE_S", 0.5)
    monkeypatch.setattr(raft_guard, "MAX_PRE_AUTH_CONNECTIONS", 3)
    port = free_port_block(1)
    conf = SyncObjConf(password="guard-test", autoTick=False, dynamicMembershipChange=False)
    obj = SyncObj(f"127.0.0.1:{port}", [], conf, transportClass=GuardedTransport)
    for _ in range(20):
        obj.doTick(0.01)
    yield obj, port
    obj.destroy()


def _closed(obj: SyncObj, s: socket.socket, within_s: float) -> bool:
    end = time.monotonic() + within_s
    s.setblocking(False)
    while time.monotonic() < end:
        obj.doTick(0.02)
        try:
            if s.recv(4096) == b"":
                return True
        except BlockingIOError:
            continue
        except OSError:
            return True
    return False


def test_a_large_prefix_is_dropped_at_once(node) -> None:
    obj, port = node
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(struct.pack("i", 2**31 - 1) + bytes(1024))
    assert _closed(obj, s, 0.3)


def test_a_silent_peer_is_dropped_at_the_deadline(node) -> None:
    obj, port = node
    s = socket.create_connection(("127.0.0.1", port))
    assert not _closed(obj, s, 0.2)
    assert _closed(obj, s, 1.5)


def test_unidentified_connections_are_capped(node) -> None:
    obj, port = node
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    for _ in range(10):
        obj.doTick(0.01)
    extra = socket.create_connection(("127.0.0.1", port))
    assert _closed(obj, extra, 0.3)
    assert not _closed(obj, socks[0], 0.1)
    for s in socks:
        s.close()
