"""``rafka console`` against a real 3-node ``rafka cluster up`` (issue 15), then in headless Chromium.

Two topics, records produced, a group that consumed part of them and left (``audit``: Empty, with
lag) and a live group member (``billing``, a separate process), and a producer feeding ``clicks``
while the console runs. The console's JSON endpoints must show the topics with leaders, ISR and
high watermarks, the quorum, both groups with their members, assignment and lag, and the
throughput. Then Debian's Chromium (``deploy/install-browser-deps.sh``, run by ``make os-deps``
as root) renders the page: ``--dump-dom`` proves the JavaScript ran (the topic and group names
and the chart are in the DOM), ``--screenshot`` gives a PNG that must not be blank (decoded here
with zlib: the header's colour and the bytes-in chart's blue must be on it). Skipped only when
no chromium is installed. No wall-clock assertion: every wait is "until".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import pytest
from rafka.client.sync import Admin, Consumer, Producer

from .conftest import PROJECT_ROOT, LocalCluster, wait_until

pytestmark = pytest.mark.timeout(420)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HEADER_RGB = (0x17, 0x20, 0x2B)  # the page's header bar
BYTES_IN_RGB = (0x2F, 0x6F, 0xDE)  # the bytes-in line of the throughput chart


def get_json(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=30) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "application/json"
        return json.loads(resp.read())


def start_console(c: LocalCluster, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "rafka.cli", "console", "--port", "0",
                             "--bootstrap", c.bootstrap, "--interval", "0.5"],
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"), cwd=str(PROJECT_ROOT), env=env)

    def url() -> str | None:
        assert proc.poll() is None, log.read_text()
        m = re.search(r"console: (http://127\.0\.0\.1:\d+)/", log.read_text())
        return m.group(1) if m else None

    return proc, wait_until(url, "the console to print its URL")


def png_rows(path: Path, max_rows: int) -> tuple[int, list[bytes]]:
    """Width and the first ``max_rows`` unfiltered rows (RGB or RGBA, 8 bit) of a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(min(height, max_rows)):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3)))
        prev = line
    return width, rows


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking", "--disable-component-update",
                           "--disable-sync", f"--user-data-dir={profile}", "--window-size=1280,900",
                           "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, timeout=180)


def check_json_endpoints(base: str, c: LocalCluster, audit_committed: int) -> None:
    topics = {t["name"]: t for t in get_json(base, "/api/topics")["topics"]}
    assert {"orders", "clicks"} <= set(topics)
    orders = topics["orders"]["partitions"]
    assert [p["partition"] for p in orders] == [0, 1, 2]
    for p in orders:
        assert len(p["replicas"]) == 3 and sorted(p["isr"]) == sorted(p["replicas"])
        assert p["leader"] in p["replicas"] and not p["under_replicated"]
    assert sum(p["high_watermark"] for p in orders) == 60
    assert all(len(p["replicas"]) == 2 for p in topics["clicks"]["partitions"])

    quorum = get_json(base, "/api/quorum")
    assert sorted(v["id"] for v in quorum["voters"]) == [1, 2, 3] and quorum["leader_id"] in (1, 2, 3)
    cluster = wait_until(lambda: (cl := get_json(base, "/api/cluster"))
                         and all(b["metrics"] and b["metrics"]["up"] for b in cl["brokers"]) and cl,
                         "every broker's metrics in /api/cluster")
    assert [b["id"] for b in cluster["brokers"]] == [1, 2, 3]
    assert sum(b["controller"] for b in cluster["brokers"]) == 1
    assert [b["port"] for b in cluster["brokers"]] == [a[1] for a in c.addresses()]
    assert cluster["quorum"]["leader_id"] == quorum["leader_id"]

    def groups_settled() -> dict[str, Any] | None:
        gs = {g["group_id"]: g for g in get_json(base, "/api/groups")["groups"]}
        billing = gs.get("billing")
        if not billing or billing["state"] != "Stable" or billing["lag"] != 0:
            return None
        return gs

    gs = wait_until(groups_settled, "group billing Stable with lag 0", timeout_s=90)
    audit, billing = gs["audit"], gs["billing"]
    assert (audit["state"], audit["member_count"], audit["members"]) == ("Empty", 0, [])
    assert sum(max(p["committed"], 0) for p in audit["partitions"]) == audit_committed
    assert audit["lag"] == 60 - audit_committed > 0
    assert {(p["topic"], p["partition"]) for p in audit["partitions"]} == {("orders", i) for i in range(3)}
    (member,) = billing["members"]
    assert member["assignment"] == [{"topic": "orders", "partitions": [0, 1, 2]}]
    assert {p["member_id"] for p in billing["partitions"]} == {member["member_id"]}
    assert all(p["committed"] == p["high_watermark"] for p in billing["partitions"])

    tp = wait_until(lambda: (t := get_json(base, "/api/throughput"))
                    and any(s["topics"].get("clicks", [0])[0] > 0 for s in t["samples"]) and t,
                    "clicks' bytes-in rate in the throughput history")
    assert len(tp["nodes"]) == 3 and all(n["up"] for n in tp["nodes"])
    assert tp["under_replicated"] == 0 and tp["offline_partitions"] == 0


def test_console_on_a_three_node_cluster(cluster_factory: Any, tmp_path: Path) -> None:
    c: LocalCluster = cluster_factory(3)
    with Admin(c.bootstrap) as admin:
        admin.create_topic("orders", 3, 3)
        admin.create_topic("clicks", 2, 2)
    with Producer(c.bootstrap) as p:
        for i in range(60):
            p.send("orders", b"order-%d" % i, key=str(i).encode())
        p.flush()
    with Consumer("orders", bootstrap_servers=c.bootstrap, group_id="audit", auto_offset_reset="earliest",
                  enable_auto_commit=False) as cons:
        seen = 0
        for _rec in cons:
            seen += 1
            if seen == 25:
                break
        cons.commit()
        audit_committed = sum(cons.committed(tp) or 0 for tp in cons.assignment())

    stop = threading.Event()

    def feed_clicks() -> None:
        with Producer(c.bootstrap, linger_ms=5) as p:
            while not stop.wait(0.05):
                for _ in range(10):
                    p.send("clicks", b"c" * 200)
                p.flush()

    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    billing = subprocess.Popen([sys.executable, str(PROJECT_ROOT / "tests/integration/group_consumer.py"),
                                c.bootstrap, "billing", "orders"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=env)
    feeder = threading.Thread(target=feed_clicks)
    feeder.start()
    console, base = None, ""
    try:
        console, base = start_console(c, tmp_path / "console.log")
        check_json_endpoints(base, c, audit_committed)
        if CHROMIUM is None:
            pytest.skip("chromium is not installed (make os-deps installs it as root): "
                        "JSON endpoints checked, the browser part skipped")

        dom = chromium("--dump-dom", base + "/", profile=tmp_path / "profile-dom")
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert 'data-loaded="1"' in dom.stdout, "the page's JavaScript did not finish a refresh"
        for text in (">orders ", "orders-2", ">clicks ", ">billing<", ">audit<", ">Stable<", ">Empty<",
                     "<polyline", "controller · raft leader"):
            assert text in dom.stdout, text

        shot = tmp_path / "console.png"
        r = chromium(f"--screenshot={shot}", base + "/", profile=tmp_path / "profile-shot")
        assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
        width, rows = png_rows(shot, 360)  # the header and the cluster and throughput cards
        assert width == 1280
        pixels = {row[i:i + 3] for row in rows for i in range(0, len(row), 3)}
        assert len(pixels) > 50, f"a blank screenshot: {len(pixels)} colours"
        assert bytes(HEADER_RGB) in pixels
        assert any(sum(abs(a - b) for a, b in zip(px, BYTES_IN_RGB, strict=True)) < 40 for px in pixels), \
            "no bytes-in line on the throughput chart"
    finally:
        stop.set()
        feeder.join()
        billing.kill()
        billing.wait()
        if console is not None:
            console.terminate()
            console.wait(timeout=30)
