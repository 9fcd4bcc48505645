"""Helpers of the Spark suite: topics, producing numbered records, reading a topic back."""

from __future__ import annotations

import threading
import time
from typing import Any

from rafka.client import Admin, Consumer, Producer, TopicPartition

__all__ = ["create_topic", "produce", "consume_all", "Feeder", "stream_options"]


def create_topic(bootstrap: str, name: str, partitions: int = 2,
                 config: dict[str, str] | None = None, replication_factor: int = 1) -> None:
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic(name, partitions=partitions, replication_factor=replication_factor,
                           config=config)


def produce(bootstrap: str, topic: str, n: int, *, partitions: int = 2, start: int = 0,
            headers: bool = False, batch_size: int = 32 * 1024) -> list[tuple[int, bytes]]:
    """Send records ``start..start+n-1`` round-robin over partitions; value = b"v<i>".

    ``batch_size`` is explicit because some tests use small ``segment.bytes`` and a batch must
    fit in one segment (the producer's default batch size is 256 KiB)."""
    out = []
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=2,
                  batch_size=batch_size) as p:
        futs = []
        for i in range(start, start + n):
            part = i % partitions
            kw: dict[str, Any] = {"key": b"k%d" % i, "value": b"v%d" % i, "partition": part}
            if headers:
                kw["headers"] = [("i", str(i).encode()), ("h2", b"x")]
            futs.append(p.send(topic, **kw))
            out.append((part, b"v%d" % i))
        p.flush()
        for f in futs:
            f.result(timeout=30)
    return out


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int,
                timeout_s: float = 30) -> list[Any]:
    """Every record of ``topic`` (expects ``expected`` of them), via assign + seek."""
    got: list[Any] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                  enable_auto_commit=False) as c:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(recs)
    return got


class Feeder:
    """A background producer of numbered records (``v<i>``) until ``stop()``."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 2,
                 rate_per_s: float = 400) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.interval = 1 / rate_per_s
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with Producer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=2) as p:
                futs = []
                while not self._stop.is_set():
                    i = self.sent
                    futs.append(p.send(self.topic, key=b"k%d" % i, value=b"v%d" % i,
                                       partition=i % self.partitions))
                    self.sent += 1
                    if self.sent % 50 == 0:
                        time.sleep(50 * self.interval)
                p.flush()
                for f in futs:
                    f.result(timeout=30)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error
        return self.sent


def stream_options(bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "subscribe": topic,
            "startingOffsets": "earliest", **extra}
