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
    # The futures are not kept: holding 30k of them (and their callbacks) made the cyclic
    # garbage collector of *this* process run full collections every ~0.5 s, each longer as
    # the list grew (10 → 90 ms over 3 s, timed with ``gc.callbacks``), and every one stalled
    # the producer's loop thread — a tail that was the harness's, not the broker's.
    lat: list[float] = []
    failed: list[BaseException] = []
    producer.send(topic, value=value, key=keys[0], **send_kw).result(timeout=30)

    def done(f: Any, sent: float) -> None:
        lat.append((time.perf_counter() - sent) * 1000)
        if (exc := f.exception()) is not None:
            failed.append(exc)

    n = 0
    for i in paced(rate, seconds):
        sent = time.perf_counter()
        producer.send(topic, value=value, key=keys[i % len(keys)], **send_kw) \
            .add_done_callback(lambda f, s=sent: done(f, s))
        n += 1
    producer.flush()
    deadline = time.monotonic() + 30  # callbacks run on the producer's thread, maybe just after
    while len(lat) < n and time.monotonic() < deadline:
        time.sleep(0.001)
    if failed:
        raise failed[0]
    if len(lat) != n:
        raise RuntimeError(f"{n - len(lat)} of {n} sends not completed after flush()")
    return lat
