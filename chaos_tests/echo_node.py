"""A tiny TCP line server used as a stand-in "node" to test backends and the proxy.

Theory of operation
-------------------
``serve`` runs a real trio TCP server.  Each received line is answered with one line:
``TIME`` → the process's wall clock (``time.time()``, so libfaketime skew is visible), ``ID``
→ the node id, anything else → the line itself (echo).  ``probe HOST:PORT`` connects, sends a
random line and exits 0 if it comes back within ``--timeout`` seconds, else 1; it is what the
backend tests run *inside* a node's network context to check node-to-node connectivity.

    python -m rafka.chaos_tests.echo_node serve --host 10.77.0.11 --port 7000 --node-id 1
    python -m rafka.chaos_tests.echo_node probe 10.77.0.12:7000 --timeout 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import trio

__all__ = ["serve", "probe", "main", "MAX_LINE_BYTES"]

MAX_LINE_BYTES = 65536


async def _handle(stream: trio.SocketStream, node_id: int) -> None:
    buf = b""
    try:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            buf += data
            if len(buf) > MAX_LINE_BYTES and b"\n" not in buf:
                return
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line == b"TIME":
                    reply = repr(time.time()).encode()
                elif line == b"ID":
                    reply = str(node_id).encode()
                else:
                    reply = line
                await stream.send_all(reply + b"\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def serve(host: str, port: int, node_id: int) -> None:
    listeners = await trio.open_tcp_listeners(port, host=host)
    print(f"echo node {node_id} listening on {host}:{port}", flush=True)
    await trio.serve_listeners(lambda s: _handle(s, node_id), listeners)


async def probe(host: str, port: int, timeout_s: float) -> bool:
    token = f"probe-{os.getpid()}-{time.monotonic_ns()}".encode()
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            return False
        async with stream:
            await stream.send_all(token + b"\n")
            got = b""
            while b"\n" not in got:
                data = await stream.receive_some(4096)
                if not data:
                    return False
                got += data
            return got.split(b"\n", 1)[0] == token
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="echo_node")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--node-id", type=int, default=0)
    p = sub.add_parser("probe")
    p.add_argument("address")
    p.add_argument("--timeout", type=float, default=1.0)
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        trio.run(serve, args.host, args.port, args.node_id)
        return 0
    host, _, port = args.address.rpartition(":")
    return 0 if trio.run(probe, host, int(port), args.timeout) else 1


if __name__ == "__main__":
    sys.exit(main())
