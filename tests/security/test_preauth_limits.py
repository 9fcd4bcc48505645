"""What a peer that never logs in can cost a real node (issue 24, items 1 and 2).

* main listener: connections that each declare a ~100 MiB frame and then trickle or stall
  must not make the node allocate the declared size, and ``connections.max.idle.ms`` closes
  them; an authorized client is served throughout and nothing it was acknowledged is lost;
* Raft port: a peer streaming zeros under a 2 GiB length prefix is dropped before any large
  buffer exists (the cluster secret is checked on a small first frame, kraft/raft_guard.py).

``RAFKA_PREAUTH_CONNS`` lowers the connection count (to try the test against code without the
bound without exhausting the machine's memory).
"""

from __future__ import annotations

import os
import socket
import struct
import time

import trio
from rafka.client.aio import AsyncAdmin

from rafka.cluster import RAFT_PORT_OFFSET
from tests.security.test_fuzz import node_pid, rss_kb
from tests.security.test_secured_broker import create_topic, end_offset, produce, running_node

MiB = 1024 * 1024
MAX_GROWTH_KB = 32 * 1024
IDLE_MS = 3000


def _hostport(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except BlockingIOError:
        return False


async def test_declared_frames_cost_nothing_and_idle_connections_are_closed(tmp_path) -> None:
    conns = int(os.environ.get("RAFKA_PREAUTH_CONNS", "50"))
    tables = f'[broker]\n"connections.max.idle.ms" = {IDLE_MS}\n'
    with running_node(tmp_path, tables=tables) as (plain, _secure, _files, tmp), trio.fail_after(120):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "pa")
        await produce(plain, "pa", b"before")
        pid = node_pid(tmp / "node.toml")
        before = rss_kb(pid)
        socks = []
        for _ in range(conns):  # each: a ~100 MiB prefix and 100 KiB of it, then nothing
            s = socket.create_connection(_hostport(plain))
            s.sendall(struct.pack(">I", 100 * MiB - 1) + bytes(100 * 1024))
            socks.append(s)
        try:
            acked = 0
            started = time.monotonic()
            for i in range(20):  # an authorized client keeps being served meanwhile
                await produce(plain, "pa", b"during %d" % i)
                acked += 1
            await trio.sleep(0.5)
            grown = rss_kb(pid) - before
            assert grown < MAX_GROWTH_KB, f"RSS grew {grown} KiB with {conns} declared 100 MiB frames"
            # closed by the idle deadline: none of them completed a frame
            await trio.sleep(max(0.0, started + 2 * IDLE_MS / 1000 + 1 - time.monotonic()))
            for s in socks:
                s.setblocking(False)
            open_ = sum(not _closed_by_peer(s) for s in socks)
            assert open_ == 0, f"{open_} of {conns} stalled connections still open after the idle timeout"
        finally:
            for s in socks:
                s.close()
        await produce(plain, "pa", b"after")
        assert await end_offset(plain, "pa") == 2 + acked  # nothing acknowledged was lost


async def test_the_raft_port_drops_an_unauthenticated_stream_before_buffering_it(tmp_path) -> None:
    top = 'cluster_secret = "s3cret-for-the-raft-port"'
    with running_node(tmp_path, top=top) as (plain, _secure, _files, tmp), trio.fail_after(120):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "rp")
        pid = node_pid(tmp / "node.toml")
        before = rss_kb(pid)
        host, port = _hostport(plain)

        def stream(total: int, deadline_s: float) -> tuple[int, int]:
            """Send up to ``total`` bytes under 2 GiB prefixes, reconnecting when dropped;
            (bytes the node accepted, connections it dropped)."""
            sent = dropped = 0
            chunk = bytes(256 * 1024)
            end = time.monotonic() + deadline_s
            while sent < total and time.monotonic() < end:
                with socket.create_connection((host, port + RAFT_PORT_OFFSET)) as s:
                    s.settimeout(2.0)
                    try:
                        s.sendall(struct.pack("i", 2**31 - 1))
                        while sent < total and time.monotonic() < end:
                            s.sendall(chunk)
                            sent += len(chunk)
                    except (BrokenPipeError, ConnectionResetError, TimeoutError):
                        dropped += 1
            return sent, dropped

        sent, dropped = await trio.to_thread.run_sync(stream, 256 * MiB, 20.0)
        await produce(plain, "rp", b"still serving")
        grown = rss_kb(pid) - before
        assert grown < MAX_GROWTH_KB, f"RSS grew {grown} KiB after {sent} bytes to the Raft port"
        assert dropped >= 1, f"the Raft port kept an unauthenticated peer streaming {sent} bytes"
        # each connection is dropped after its first small read: far less than a frame's worth
        assert sent / dropped < 16 * MiB, f"{sent} bytes over {dropped} connections"


async def test_describe_quorum_proves_the_secret_only_to_a_caller_that_proved_it_first(tmp_path) -> None:
    """Item 3: no HMAC of the secret over a nonce the caller picked, for a caller without it."""
    from rafka.kraft.membership import caller_proof, secret_proof
    from rafka.wire.connection import connect
    from rafka.wire.protocol import ApiKey

    secret = "s3cret-for-the-oracle-test"
    with running_node(tmp_path, top=f'cluster_secret = "{secret}"') as (plain, *_), trio.fail_after(60):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "q")
        async with connect(*_hostport(plain)) as conn:
            async def ask(**body: object) -> dict:
                return dict((await conn.request(ApiKey.DESCRIBE_QUORUM, {"local_only": True, **body})).body)

            first = await ask(nonce="chosen-by-an-attacker")
            assert "secret_proof" not in first and isinstance(first["challenge"], str)
            wrong = await ask(nonce="chosen-by-an-attacker", challenge=first["challenge"],
                              caller_proof="0" * 64)
            assert wrong["secret_proof"] == ""
            right = await ask(nonce="n1", challenge=(c := (await ask(nonce="n1"))["challenge"]),
                              caller_proof=caller_proof(secret, c, "n1"))
            assert right["secret_proof"] == secret_proof(secret, f"n1:{c}")
