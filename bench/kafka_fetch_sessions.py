"""What KIP-227 fetch sessions save a consumer polling idle partitions, against a real broker.

``.venv/bin/python bench/kafka_fetch_sessions.py [PARTITIONS] [FETCHES]`` (default 200
partitions, 300 fetches): starts a one-node ``rafka cluster up``, creates a topic of
PARTITIONS partitions holding one record each, and sends Fetch v12 requests for all of them
at their end (nothing new: ``max_wait`` 0) over one connection — first sessionless (session
id 0, epoch −1: the whole partition list out, every partition answered), then in one session
(an initial fetch, then incremental fetches naming no partition, answered with none). Prints
request and response bytes per fetch and the median round trip of each; docs/kafka-compat.md
quotes its output.
"""

from __future__ import annotations

import json
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rafka.broker.kafka import codec
from rafka.client import Admin, Producer

from rafka.cluster import free_port_block

RAFKA = str(Path(sys.executable).with_name("rafka"))


class Conn:
    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr, timeout=30)
        self.cid = 0

    def fetch(self, session_id: int, epoch: int, parts: list[int], topic: str,
              offset: int) -> tuple[int, int, float, Any]:
        self.cid += 1
        req = codec.build(codec.request_schema(1, 12), {
            "cluster_id": None, "replica_id": -1, "max_wait": 0, "min_bytes": 0,
            "max_bytes": 1 << 24, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch, "rack_id": "",
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20} for p in parts]}] if parts else [],
            "forgotten_topics_data": []})
        frame = codec.encode_request(req, self.cid)
        t0 = time.perf_counter()
        self.sock.sendall(frame)
        head = self._recv(4)
        body = self._recv(struct.unpack(">i", head)[0])
        dt = time.perf_counter() - t0
        _, resp = codec.decode_response(body, 1, 12)
        return len(frame), 4 + len(body), dt, resp

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf


def main(n: int = 200, fetches: int = 300) -> None:
    with tempfile.TemporaryDirectory(prefix="rafka-bench-fs-") as tmp:
        data = Path(tmp) / "cluster"
        port = free_port_block(1)
        subprocess.run([RAFKA, "cluster", "up", "--nodes", "1", "--data-dir", str(data),
                        "--port", str(port), "--detach"], check=True, capture_output=True)
        try:
            info = json.loads((data / "cluster.json").read_text())["nodes"][0]
            host, kport = info["kafka"].split(":")
            bootstrap = f"127.0.0.1:{port}"
            with Admin(bootstrap_servers=bootstrap) as a:
                a.create_topic("fsb", partitions=n, replication_factor=1)
            with Producer(bootstrap_servers=bootstrap, acks="all") as p:
                for i in range(n):
                    p.send("fsb", value=b"x", partition=i)
                p.flush()
            conn = Conn((host, int(kport)))
            parts = list(range(n))
            for _ in range(50):  # leaders known everywhere
                _, _, _, r = conn.fetch(0, -1, parts, "fsb", 1)
                if all(int(p.error_code) == 0 for t in r.responses for p in t.partitions):
                    break
                time.sleep(0.2)
            rows = []
            sizes = [conn.fetch(0, -1, parts, "fsb", 1) for _ in range(fetches)]
            rows.append(("sessionless (id 0, epoch -1)", sizes))
            _, _, _, first = conn.fetch(0, 0, parts, "fsb", 1)
            sid = first.session_id
            assert sid != 0, "no session granted"
            inc = [conn.fetch(sid, e, [], "fsb", 1) for e in range(1, fetches + 1)]
            assert all(not r.responses for *_, r in inc)
            rows.append(("incremental session", inc))
            print(f"{n} idle partitions, {fetches} fetches each, Fetch v12, one connection")
            print(f"{'mode':30} {'request B':>10} {'response B':>11} {'median RTT us':>14}")
            for name, got in rows:
                print(f"{name:30} {statistics.median(g[0] for g in got):10.0f} "
                      f"{statistics.median(g[1] for g in got):11.0f} "
                      f"{statistics.median(g[2] for g in got) * 1e6:14.0f}")
        finally:
            subprocess.run([RAFKA, "cluster", "down", "--data-dir", str(data)],
                           check=False, capture_output=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
