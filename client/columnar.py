"""Columnar consumer records: ``ColumnBatch`` (what ``poll_batch`` returns per partition).

Theory of operation
-------------------
A fetched record batch is one msgpack array of ``(offset_delta, timestamp_delta, key, value,
headers)`` rows, unpacked in one ``unpackb`` (``rafka.client.aio.fetch``). ``ColumnBatch.add_rows``
turns a run of those rows into columns without a Python object per record: one ``zip(*rows)``
transposes them (C level), offsets are a ``range`` when the batch has no compaction gap (else
``map(base.__add__, deltas)``), timestamps are one repeated value when the batch's records share
it (always with LogAppendTime; usual for ``send_batch``), else ``map(first_ts.__add__,
deltas)``; keys, values and headers are the transposed tuples themselves. The columns are plain
lists, so a ``ColumnBatch`` is cheap to build and needs nothing beyond the standard library.

``to_arrow()`` gives a ``pyarrow.RecordBatch`` (columns ``offset`` int64, ``timestamp``
timestamp[ms, UTC], ``timestamp_type`` int8, ``key`` / ``value`` binary, ``headers``
list<struct<key string, value binary>>; schema metadata ``topic`` and ``partition``). pyarrow
is optional (the ``spark`` extra): it is imported on the first call, and ``PyArrowMissingError``
says how to install it.

The columns hold exactly what ``poll()`` would return as ``ConsumerRecord``\\ s for the same
records (``records()`` rebuilds those, for tests and for mixed code).
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

from rafka.client.types import ConsumerRecord, TopicPartition

__all__ = ["ColumnBatch", "PyArrowMissingError"]

_new = tuple.__new__


class PyArrowMissingError(ImportError):
    """``ColumnBatch.to_arrow()`` needs pyarrow: ``pip install 'rafka[spark]'`` (or ``pyarrow``)."""


class ColumnBatch:
    """Records of one partition as columns (parallel lists, log order)."""

    __slots__ = ("topic", "partition", "offsets", "timestamps", "timestamp_types", "keys",
                 "values", "headers")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offsets: list[int] = []
        self.timestamps: list[int] = []  # ms
        self.timestamp_types: list[int] = []  # 0 CreateTime, 1 LogAppendTime
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[tuple[tuple[str, bytes], ...]] = []

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __len__(self) -> int:
        return len(self.offsets)

    def __repr__(self) -> str:
        span = f" offsets {self.offsets[0]}..{self.offsets[-1]}" if self.offsets else ""
        return f"<ColumnBatch {self.topic}-{self.partition} {len(self)} records{span}>"

    def add_rows(self, rows: tuple[tuple[Any, ...], ...], base_offset: int, first_timestamp: int,
                 log_append_time: int | None) -> None:
        """Append a run of one batch's rows (see the module docstring). ``log_append_time``:
        the batch's ``max_timestamp`` when its timestamps are LogAppendTime, else ``None``.
        Raises ``ValueError`` / ``TypeError`` on a malformed row."""
        ods, tds, ks, vs, hs = zip(*rows, strict=True)
        n = len(ods)
        first = ods[0]
        if ods[-1] - first == n - 1:  # no compaction gap
            self.offsets.extend(range(base_offset + first, base_offset + first + n))
        else:
            self.offsets.extend(map(base_offset.__add__, ods))
        if log_append_time is not None:
            self.timestamps.extend(repeat(log_append_time, n))
            self.timestamp_types.extend(repeat(1, n))
        else:
            td = tds[0]
            if tds.count(td) == n:
                self.timestamps.extend(repeat(first_timestamp + td, n))
            else:
                self.timestamps.extend(map(first_timestamp.__add__, tds))
            self.timestamp_types.extend(repeat(0, n))
        self.keys.extend(ks)
        self.values.extend(vs)
        self.headers.extend(hs)

    def extend(self, other: ColumnBatch) -> None:
        """Append another batch's columns (same partition, later offsets)."""
        self.offsets.extend(other.offsets)
        self.timestamps.extend(other.timestamps)
        self.timestamp_types.extend(other.timestamp_types)
        self.keys.extend(other.keys)
        self.values.extend(other.values)
        self.headers.extend(other.headers)

    def records(self) -> list[ConsumerRecord]:
        """The same records as ``ConsumerRecord``\\ s (what ``poll()`` returns)."""
        t, p = self.topic, self.partition
        return [_new(ConsumerRecord, (t, p, o, ts, tt, k, v, h)) for o, ts, tt, k, v, h in zip(
            self.offsets, self.timestamps, self.timestamp_types, self.keys, self.values,
            self.headers, strict=True)]

    def to_arrow(self) -> Any:
        """A ``pyarrow.RecordBatch`` of these records (see the module docstring)."""
        try:
            import pyarrow as pa
        except ImportError as exc:
            raise PyArrowMissingError(
                "ColumnBatch.to_arrow() needs pyarrow: pip install 'rafka[spark]' (or pyarrow)"
            ) from exc
        n = len(self.offsets)
        header_type = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
        if self.headers.count(()) == n:
            headers = pa.ListArray.from_arrays(pa.array(repeat(0, n + 1), pa.int32(), size=n + 1),
                                               pa.array([], header_type.value_type))
        else:
            headers = pa.array(self.headers, header_type)
        arrays = [
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            pa.array(self.timestamp_types, pa.int8()),
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            headers,
        ]
        schema = pa.schema([
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
            pa.field("timestamp_type", pa.int8()),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("headers", header_type),
        ], metadata={"topic": self.topic, "partition": str(self.partition)})
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
