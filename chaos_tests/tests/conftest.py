"""Shared fixtures: a real echo-server process and free ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from rafka.chaos_tests.backends.base import wait_port

REPO = Path(__file__).resolve().parents[2]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def echo_argv() -> tuple[str, ...]:
    return ("{python}", "-m", "rafka.chaos_tests.echo_node", "serve", "--host", "{host}",
            "--port", "{client_port}", "--node-id", "{node_id}")


@pytest.fixture
async def echo_server():
    """A real echo server process on 127.0.0.1; yields its (host, port)."""
    port = free_port()
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rafka.chaos_tests.echo_node", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        await wait_port("127.0.0.1", port, 10)
        yield "127.0.0.1", port
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        with trio.CancelScope(shield=True):
            await proc.wait()
