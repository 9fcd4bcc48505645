"""Reference points measured in the same run as rafka: the machine's raw limit and a peer.

* ``raw_socket_to_file_mb_s``: a plain Python TCP client ``sendall``s 1 MiB chunks to a plain
  Python server on loopback that ``os.write``s every chunk to a file — the ceiling for rafka's
  large-batch produce path (socket → segment file), without any protocol or fsync.
* ``confluent_produce_cpu_us``: client CPU per ``produce()`` call of confluent-kafka (librdkafka),
  the same records queued toward a port nobody listens on — librdkafka queues without a broker,
  so the per-call cost is timed alone (issue 13's yardstick for ``send()``'s client CPU).
  confluent-kafka is a bench-only peer (the ``bench`` extra), never a dependency of rafka.
* ``nats_publish`` / ``nats_consume``: NATS JetStream (Debian ``nats-server``, file store, one
  replica) driven by its Python client ``nats-py``, same payloads. JetStream fsyncs its file
  store only every 2 minutes by default, so compare it with rafka's figures *and* flush policy.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["raw_socket_to_file_mb_s", "nats_available", "nats_rates", "free_port",
           "confluent_produce_cpu_us"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def confluent_produce_cpu_us(values: list[bytes], keys: list[bytes], n: int) -> float | None:
    """CPU µs per confluent-kafka ``produce()`` of ``n`` records (``values[i % len]``,
    ``keys[i % len]``) — every thread of this process, as rafka's client CPU figure counts
    them; None when confluent-kafka is not installed."""
    try:
        from confluent_kafka import Producer
    except ImportError:
        return None
    p = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "linger.ms": 5,
                  "queue.buffering.max.messages": n + 1000, "partitioner": "murmur2_random",
                  "log_level": 0})
    produce, nv, nk = p.produce, len(values), len(keys)
    try:
        c0 = time.process_time()
        for i in range(n):
            produce("t", values[i % nv], keys[i % nk])
        return (time.process_time() - c0) / n * 1e6
    finally:
        p.purge(in_queue=True)
        p.flush(1)


def raw_socket_to_file_mb_s(total_mb: int = 512, chunk: int = 1 << 20) -> float:
    """MB/s of a Python socket → file copy on loopback (page cache, no fsync)."""
    tmp = tempfile.mkdtemp(prefix="rafka-raw-")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    done = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        fd = os.open(os.path.join(tmp, "out.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        buf = bytearray(chunk)
        view = memoryview(buf)
        try:
            while True:
                n = conn.recv_into(buf)
                if not n:
                    break
                os.write(fd, view[:n])
        finally:
            os.close(fd)
            conn.close()
            done.set()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    payload = os.urandom(chunk)
    cli = socket.create_connection(("127.0.0.1", port))
    t0 = time.perf_counter()
    for _ in range(total_mb * (1 << 20) // chunk):
        cli.sendall(payload)
    cli.close()
    done.wait(60)
    dt = time.perf_counter() - t0
    srv.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return total_mb * (1 << 20) / dt / 1e6


def nats_available() -> str | None:
    return shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server") else None
    )


def ensure_nats() -> str | None:
    """Install Debian's nats-server if missing (root only); its path or None."""
    path = nats_available()
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "nats-server"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        path = nats_available()
    return path


async def _nats_run(port: int, n: int, value: bytes, window: int) -> tuple[float, float]:
    import nats  # nats-py

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream()
    await js.add_stream(name="bench", subjects=["bench"], storage="file")
    t0 = time.perf_counter()
    for i in range(0, n, window):
        await asyncio.gather(*(js.publish("bench", value) for _ in range(min(window, n - i))))
    pub = n / (time.perf_counter() - t0)
    # ordered push consumer (no acks), as in notes/performance.md
    got = 0
    all_in = asyncio.Event()

    async def on_msg(_msg: object) -> None:
        nonlocal got
        got += 1
        if got >= n:
            all_in.set()

    t0 = time.perf_counter()
    sub = await js.subscribe("bench", cb=on_msg, ordered_consumer=True)
    await asyncio.wait_for(all_in.wait(), 120)
    await sub.unsubscribe()
    cons = n / (time.perf_counter() - t0)
    await nc.close()
    return pub, cons


def nats_rates(n: int = 100_000, value_bytes: int = 200, window: int = 1000) -> tuple[float, float] | None:
    """(publish msg/s, consume msg/s) of JetStream file store R1 via nats-py; None if unavailable."""
    exe = ensure_nats()
    if exe is None:
        return None
    try:
        import nats  # noqa: F401
    except ImportError:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="rafka-nats-"))
    port = free_port()
    proc = subprocess.Popen([exe, "-js", "-sd", str(tmp), "-p", str(port), "-a", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        return asyncio.run(_nats_run(port, n, b"x" * value_bytes, window))
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
