"""Real multi-process controller quorums on loopback for the kraft tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from rafka.wire.connection import connect
from rafka.wire.errors import RafkaError
from rafka.wire.protocol import ApiKey

ROOT = Path(__file__).resolve().parents[2]
RAW_PROPOSE = 99


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class VoterCluster:
    def __init__(self, tmp: Path, n: int = 3, secret: str | None = "s3cret",
                 settings: dict[str, Any] | None = None, secrets: dict[int, str] | None = None):
        ports = free_ports(2 * n)
        self.ids = list(range(1, n + 1))
        self.raft = {i: f"127.0.0.1:{ports[2 * (i - 1)]}" for i in self.ids}
        self.rpc = {i: ("127.0.0.1", ports[2 * (i - 1) + 1]) for i in self.ids}
        self.tmp = tmp
        self.secret = secret
        self.secrets = secrets or {}
        self.settings = settings or {}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def voters_arg(self) -> str:
        return ",".join(f"{i}={self.raft[i]}/{self.rpc[i][0]}:{self.rpc[i][1]}" for i in self.ids)

    def start(self, i: int) -> subprocess.Popen[bytes]:
        secret = self.secrets.get(i, self.secret) or ""
        log = open(self.tmp / f"voter-{i}.log", "ab")
        p = subprocess.Popen(
            [sys.executable, "-m", "tests.kraft.voter_proc", "--id", str(i), "--voters",
             self.voters_arg(), "--data-dir", str(self.tmp / f"node-{i}"), "--secret", secret,
             "--settings", json.dumps(self.settings)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.procs[i] = p
        return p

    def start_all(self) -> None:
        for i in self.ids:
            self.start(i)

    def kill(self, i: int) -> None:
        p = self.procs.pop(i)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop_all(self) -> None:
        for i in list(self.procs):
            self.kill(i)

    def log_text(self, i: int) -> str:
        return (self.tmp / f"voter-{i}.log").read_text(errors="replace")

    async def request(self, i: int, api_key: int, body: dict[str, Any], timeout_s: float = 5) -> dict[str, Any]:
        with trio.fail_after(timeout_s):
            async with connect(*self.rpc[i]) as conn:
                resp = await conn.request(api_key, body)
                return resp.body

    async def try_request(self, i: int, api_key: int, body: dict[str, Any], timeout_s: float = 2) -> dict[str, Any] | None:
        try:
            return await self.request(i, api_key, body, timeout_s)
        except (OSError, RafkaError, trio.TooSlowError, trio.BrokenResourceError):
            return None

    async def wait_rpc(self, i: int, timeout_s: float = 20) -> None:
        with trio.fail_after(timeout_s):
            while await self.try_request(i, ApiKey.DESCRIBE_QUORUM, {"local_only": True}) is None:
                await trio.sleep(0.05)

    async def active_controller(self, candidates: list[int] | None = None, timeout_s: float = 20) -> int:
        """The voter that answers DESCRIBE_QUORUM as active controller."""
        with trio.fail_after(timeout_s):
            while True:
                for i in candidates or list(self.procs):
                    r = await self.try_request(i, ApiKey.DESCRIBE_QUORUM, {}, 1)
                    if r is not None and r.get("error") == 0:
                        return i
                await trio.sleep(0.02)

    async def fetch_all(self, i: int, from_offset: int = 0) -> dict[str, Any]:
        out: list[Any] = []
        snapshot = None
        while True:
            r = await self.request(i, ApiKey.METADATA_FETCH,
                                   {"from_offset": from_offset, "max_records": 1000, "max_wait_ms": 0})
            assert r["error"] == 0, r
            if r["snapshot"] is not None:
                snapshot = r["snapshot"]
                from_offset = snapshot["offset"] + 1
                continue
            out += r["entries"]
            if not r["entries"]:
                return {"entries": out, "snapshot": snapshot, "committed": r["committed_offset"]}
            from_offset = r["entries"][-1][0] + 1

    async def wait_converged(self, ids: list[int], timeout_s: float = 20) -> int:
        with trio.fail_after(timeout_s):
            while True:
                offs = []
                for i in ids:
                    r = await self.try_request(i, ApiKey.DESCRIBE_QUORUM, {"local_only": True})
                    offs.append(None if r is None else r["voters"][0]["metadata_offset"])
                if None not in offs and len(set(offs)) == 1 and offs[0] >= 0:
                    return offs[0]  # type: ignore[return-value]
                await trio.sleep(0.05)


async def setup_broker(c: VoterCluster, leader: int, broker_id: int = 100) -> int:
    r = await c.request(leader, ApiKey.BROKER_REGISTRATION,
                        {"broker_id": broker_id, "incarnation_id": f"b{broker_id}", "host": "h", "port": 1})
    assert r["error"] == 0, r
    epoch = r["broker_epoch"]
    r = await c.request(leader, ApiKey.BROKER_HEARTBEAT,
                        {"broker_id": broker_id, "broker_epoch": epoch, "metadata_offset": 10**9,
                         "want_fence": False, "want_shutdown": False})
    assert r["error"] == 0 and not r["is_fenced"], r
    return epoch


@asynccontextmanager
async def live_broker(c: VoterCluster, broker_id: int = 100, interval_s: float = 0.1) -> AsyncIterator[int]:
    """Register a broker and keep it heartbeating to whichever voter is the active controller
    (across failovers) while the block runs; yields its broker epoch.

    A broker that registers and then goes quiet is fenced after ``broker.session.timeout.ms``
    — a write the test did not ask for, at a time that depends on the machine's load, and
    after which no broker is live (CREATE_TOPICS fails with INVALID_REPLICATION_FACTOR). Tests
    that are not about fencing keep their broker alive with this instead."""
    epoch = await setup_broker(c, await c.active_controller(), broker_id)
    body = {"broker_id": broker_id, "broker_epoch": epoch, "metadata_offset": 10**9,
            "want_fence": False, "want_shutdown": False}

    async def beat() -> None:
        target: int | None = None
        while True:
            for i in ([target] if target in c.procs else []) + [i for i in c.procs if i != target]:
                r = await c.try_request(i, ApiKey.BROKER_HEARTBEAT, body, 1)
                if r is not None and r.get("error") == 0:
                    target = i
                    break
            await trio.sleep(interval_s)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(beat)
        yield epoch
        nursery.cancel_scope.cancel()


def monotonic() -> float:
    return time.monotonic()
