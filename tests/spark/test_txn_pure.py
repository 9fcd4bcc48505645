"""Spark source and transactions, without Spark or a broker: the isolation option, and
``read_range`` over hand-built logs with transactional and control batches.

``LogServer`` answers ``read_range``'s two calls (``send_fetch`` / ``receive_fetch``) from an
in-memory log the way a partition leader does: whole batches from the one holding the fetch
offset, at most ``batches_per_fetch`` of them, below the last stable offset in read_committed,
with the ``aborted_transactions`` of the served range (``PartitionLog.collect_aborted``'s rule).
"""

from __future__ import annotations

from typing import Any

import pytest
from rafka.client.errors import CorruptRecordError
from rafka.log.batch import CorruptBatchError, build_batch, build_control_batch, iter_batches, stamp
from rafka.spark_source.fetch import read_range
from rafka.spark_source.offsets import OffsetRange
from rafka.spark_source.options import OptionError, parse_source_options

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


@pytest.mark.parametrize("opts, level", [
    ({}, 1),                                                # read_committed by default
    ({"isolation.level": "read_uncommitted"}, 0),
    ({"kafka.isolation.level": "READ_UNCOMMITTED"}, 0),     # Spark's Kafka spelling, any case
    ({"Isolation.Level": "read_committed"}, 1),
    ({"isolation.level": "read_committed", "kafka.isolation.level": "read_committed"}, 1),
])
def test_isolation_option(opts: dict[str, str], level: int) -> None:
    assert parse_source_options({**BASE, **opts}).isolation_level == level


@pytest.mark.parametrize("opts, words", [
    ({"isolation.level": "serializable"}, ["isolation.level", "read_committed"]),
    ({"kafka.isolation.level": ""}, ["kafka.isolation.level"]),
    ({"isolation.level": "read_committed", "kafka.isolation.level": "read_uncommitted"}, ["contradict"]),
])
def test_bad_isolation_option(opts: dict[str, str], words: list[str]) -> None:
    with pytest.raises(OptionError) as err:
        parse_source_options({**BASE, **opts})
    assert all(w in str(err.value) for w in words)


# --------------------------------------------------------------------------- read_range


def _log(*items: tuple[Any, ...]) -> tuple[bytes, list[tuple[int, int, int]]]:
    """``("data", pid, n)`` (transactional when pid ≥ 0) / ``("commit"|"abort", pid)`` → (bytes,
    aborted index ``[(pid, first_offset, marker_offset)]``), offsets from 0."""
    out = bytearray()
    open_at: dict[int, int] = {}
    index: list[tuple[int, int, int]] = []
    off = 0
    for kind, pid, *rest in items:
        if kind == "data":
            n = rest[0]
            b = bytearray(build_batch([(None, f"v{off + i}".encode(), [], 1000) for i in range(n)],
                                      base_offset=off, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                      base_sequence=0 if pid >= 0 else -1, transactional=pid >= 0))
            if pid >= 0:
                open_at.setdefault(pid, off)
            off += n
        else:
            b = bytearray(build_control_batch(pid, 0, kind == "commit", 1, 1000))
            stamp(b, 0, off, 0)
            first = open_at.pop(pid)
            if kind == "abort":
                index.append((pid, first, off))
            off += 1
        out += b
    return bytes(out), index


class LogServer:
    """The partition leader of one in-memory log (see the module docstring)."""

    def __init__(self, raw: bytes, index: list[tuple[int, int, int]], lso: int, *,
                 isolation_level: int, batches_per_fetch: int = 2) -> None:
        self.raw, self.index, self.lso = raw, index, lso
        self.isolation_level = isolation_level
        self.batches = list(iter_batches(raw))
        self.hw = self.batches[-1][1].last_offset + 1
        self.per_fetch = batches_per_fetch
        self.leaders: dict[Any, int] = {}
        self.fetches: list[int] = []

    def send_fetch(self, tp: Any, offset: int, max_bytes: int, max_wait_ms: int = 0) -> tuple[Any, int]:
        self.fetches.append(offset)
        return self, offset

    def receive_fetch(self, conn: Any, offset: int) -> tuple[dict[str, Any], memoryview]:
        limit = self.lso if self.isolation_level else self.hw
        served = [(pos, h) for pos, h in self.batches if h.last_offset >= offset and h.base_offset < limit]
        served = served[:self.per_fetch]
        entry: dict[str, Any] = {"error": 0, "high_watermark": self.hw}
        if not served:
            return entry, memoryview(b"")
        start, end = served[0][0], served[-1][0] + served[-1][1].size
        if self.isolation_level:
            upper = served[-1][1].last_offset + 1
            entry["last_stable_offset"] = self.lso
            entry["aborted_transactions"] = [[pid, first] for pid, first, last in self.index
                                             if last >= offset and first < upper]
        return entry, memoryview(self.raw[start:end])


def _read(server: LogServer, start: int, end: int) -> list[bytes]:
    def no_loss(*args: Any) -> None:
        raise AssertionError(f"unexpected data loss {args}")

    rows: list[bytes] = []
    for batch in read_range(server, OffsetRange("t", 0, start, end), include_headers=False,  # type: ignore[arg-type]
                            on_loss=no_loss):
        assert batch.column("offset").to_pylist() == [int(v[1:]) for v in batch.column("value").to_pylist()]
        rows.extend(batch.column("value").to_pylist())
    return rows


LOG = (("data", 1, 2),    # 0-1   pid 1, aborted
       ("data", -1, 1),   # 2     non-transactional
       ("data", 2, 2),    # 3-4   pid 2, committed
       ("abort", 1),      # 5
       ("data", 1, 1),    # 6     pid 1 again, committed
       ("commit", 2),     # 7
       ("commit", 1))     # 8


@pytest.mark.parametrize("per_fetch", [1, 2, 10])
def test_read_committed_range_drops_aborted_and_markers(per_fetch: int) -> None:
    raw, index = _log(*LOG)
    server = LogServer(raw, index, lso=9, isolation_level=1, batches_per_fetch=per_fetch)
    assert _read(server, 0, 9) == [b"v2", b"v3", b"v4", b"v6"]
    assert _read(server, 1, 8) == [b"v2", b"v3", b"v4", b"v6"]  # starts inside the aborted batch


def test_read_uncommitted_range_shows_aborted_but_never_markers() -> None:
    raw, index = _log(*LOG)
    server = LogServer(raw, index, lso=9, isolation_level=0)
    assert _read(server, 0, 9) == [b"v0", b"v1", b"v2", b"v3", b"v4", b"v6"]


def test_range_ending_on_a_marker_completes() -> None:
    """A range [7, 9) holds only markers: no rows, and the read ends (no stall)."""
    raw, index = _log(*LOG)
    server = LogServer(raw, index, lso=9, isolation_level=1, batches_per_fetch=1)
    assert _read(server, 7, 9) == []
    assert server.fetches == [7, 8]


def test_corrupt_batches_raise_named_errors_and_never_loop() -> None:
    """A mangled first header (no whole batch can be read) raises ``CorruptBatchError`` instead
    of asking for ever more bytes; a CRC mismatch raises the consumer's ``CorruptRecordError``
    naming the offsets."""
    raw, index = _log(("data", -1, 3), ("data", -1, 2))
    for mangle, error, match in ((16, CorruptBatchError, "magic"),  # the magic byte
                                 (len(raw) - 1, CorruptRecordError, r"\[3, 4\]")):  # 2nd batch's CRC
        server = LogServer(raw, index, 5, isolation_level=0, batches_per_fetch=10)
        bad = bytearray(raw)
        bad[mangle] ^= 0xFF
        server.raw = bytes(bad)  # served as stored; the batch positions are the good log's
        with pytest.raises(error, match=match):
            _read(server, 0, 5)
