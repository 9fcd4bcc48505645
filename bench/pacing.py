"""Sending at a fixed rate, and the send → acknowledged latency of every record so sent.

``paced(rate, seconds)`` yields the record numbers ``0 .. rate*seconds-1``, each at its due time
(``i / rate`` after the first), sleeping at most 1 ms at a time so that it is not late by much.
``send_latencies_ms(producer, topic, rate, seconds, value, keys, **send_kw)`` sends one
warm-up record (not measured), then one record per number with ``producer.send(topic,
value=value, key=keys[i % len(keys)], **send_kw)``, waits for all of them, and returns each
one's latency in milliseconds, measured from just before its ``send`` to its future's callback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["paced", "send_latencies_ms"]


def paced(rate: int, seconds: float) -> Iterator[int]:
    t_start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = t_start + i / rate
        while (now := time.perf_counter()) < due:
            time.sleep(min(0.001, due - now))
        yield i


def send_latencies_ms(producer: Any, topic: str, rate: int, seconds: float, value: bytes,
                      keys: Sequence[bytes], **send_kw: Any) -> list[float]:
    lat: list[float] = []
    producer.send(topic, value=value, key=keys[0], **send_kw).result(timeout=30)
    futs = []
    for i in paced(rate, seconds):
        sent = time.perf_counter()
        f = producer.send(topic, value=value, key=keys[i % len(keys)], **send_kw)
        f.add_done_callback(lambda _f, s=sent: lat.append((time.perf_counter() - s) * 1000))
        futs.append(f)
    producer.flush()
    for f in futs:
        f.result(timeout=30)
    return lat
