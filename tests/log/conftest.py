"""Shared helpers for the log/ tests: a settable clock, batch builders, log openers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from rafka.log.batch import build_batch
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog

T0 = 1_700_000_000_000


class Clock:
    """Injectable millisecond clock."""

    def __init__(self, t: int = T0) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t

    def advance(self, ms: int) -> None:
        self.t += ms


def make_batch(n: int = 1, *, key: bytes | None = b"k", value: bytes | None = b"v" * 20,
               ts: int = T0, **kw) -> bytes:
    return build_batch([(key, value, [], ts + i) for i in range(n)], **kw)


def keyed_batch(pairs: list[tuple[bytes | None, bytes | None]], ts: int = T0, **kw) -> bytes:
    return build_batch([(k, v, [], ts + i) for i, (k, v) in enumerate(pairs)], **kw)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_log(tmp_path: Path, clock: Clock) -> Callable[..., PartitionLog]:
    """open_log(**{"segment.bytes": "1000"}) -> PartitionLog in tmp_path/p (closed at teardown)."""
    opened: list[PartitionLog] = []

    def _open(config: dict[str, str] | None = None, *, name: str = "p") -> PartitionLog:
        log = PartitionLog.open(tmp_path / name, LogConfig.from_dict(config or {}), now_ms=clock)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        if not log._closed:
            log.close()
