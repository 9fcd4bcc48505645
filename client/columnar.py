"""Columnar consumer records: ``ColumnBatch`` (what ``poll_batch`` returns per partition).

Theory of operation
-------------------
A fetched record batch is one msgpack array of ``(offset_delta, timestamp_delta, key, value,
headers)`` rows. A ``ColumnBatch`` is a list of *parts*, each one run of one or more batches'
records, in log order, of two kinds:

* ``Decoded`` — with the C codec (``rafka.log.speedups``), ``rafka.client.aio.fetch`` decodes a
  whole batch with ``_codec.decode_columns``: offsets and timestamps as int64 buffers, keys and
  values as Arrow-style binary columns (int32 offsets + one data buffer + a validity bitmap),
  headers ``None`` when no record has any. No Python object per record; a part is a
  ``[i, j)`` window on one decoded batch.
* ``_Lists`` — the pure-Python path: ``add_rows`` turns a run of unpacked rows into lists with
  one ``zip(*rows)`` (C level), offsets as a ``range`` when the batch has no compaction gap,
  timestamps one repeated value when the records share it.

``offsets``, ``timestamps``, ``timestamp_types``, ``keys``, ``values``, ``headers`` are plain
lists, built on first access (the parts are merged into one ``_Lists`` part then) — that is the
per-record cost the buffers avoid, paid only by callers who want Python objects.

``to_arrow()`` gives a ``pyarrow.RecordBatch`` (columns ``offset`` int64, ``timestamp``
timestamp[ms, UTC], ``timestamp_type`` int8, ``key`` / ``value`` binary, ``headers``
list<struct<key string, value binary>>; schema metadata ``topic`` and ``partition``). A
``Decoded`` part becomes Arrow arrays over the very same buffers (``pa.Array.from_buffers``,
zero-copy); several parts are joined with ``pa.concat_arrays`` (one C-level copy). pyarrow is
optional (the ``spark`` extra): it is imported on the first call, and ``PyArrowMissingError``
says how to install it.

The columns hold exactly what ``poll()`` would return as ``ConsumerRecord``\\ s for the same
records (``records()`` rebuilds those, for tests and for mixed code).
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

from rafka.client.types import ConsumerRecord, TopicPartition

__all__ = ["ColumnBatch", "Decoded", "PyArrowMissingError"]

_new = tuple.__new__


class PyArrowMissingError(ImportError):
    """``ColumnBatch.to_arrow()`` needs pyarrow: ``pip install 'rafka[spark]'`` (or ``pyarrow``)."""


class Decoded:
    """One record batch decoded by ``_codec.decode_columns`` (see the module docstring):
    ``offsets`` / ``timestamps`` int64 memoryviews (absolute values), ``timestamp_type``,
    keys and values as (validity bitmap or ``None``, int32 offsets, data) bytes, ``headers``
    (``None``: no record has headers, else one tuple per record)."""

    __slots__ = ("offsets", "timestamps", "timestamp_type", "key_cols", "value_cols", "headers",
                 "_raw")

    def __init__(self, cols: tuple[Any, ...], timestamp_type: int) -> None:
        self._raw = cols
        self.offsets = memoryview(cols[0]).cast("q")
        self.timestamps = memoryview(cols[1]).cast("q")
        self.timestamp_type = timestamp_type
        self.key_cols = cols[2:5]
        self.value_cols = cols[5:8]
        self.headers: list[Any] | None = cols[8]

    def __len__(self) -> int:
        return len(self.offsets)

    def binary_list(self, which: int, i: int, j: int) -> list[bytes | None]:
        """Keys (0) or values (1) of records ``[i, j)`` as Python objects."""
        valid, offs, data = self.key_cols if which == 0 else self.value_cols
        ov = memoryview(offs).cast("i")
        out = [data[a:b] for a, b in zip(ov[i:j], ov[i + 1:j + 1], strict=True)]
        if valid is not None:
            for k in range(i, j):
                if not valid[k >> 3] >> (k & 7) & 1:
                    out[k - i] = None
        return out

    def rows(self, i: int, j: int) -> tuple[tuple[Any, ...], ...]:
        """Records ``[i, j)`` as wire rows with *absolute* offsets and timestamps (the
        record-by-record path reading a batch the columnar path decoded)."""
        hs = self.headers[i:j] if self.headers is not None else repeat((), j - i)
        return tuple(zip(self.offsets[i:j], self.timestamps[i:j], self.binary_list(0, i, j),
                         self.binary_list(1, i, j), hs, strict=False))


class _Lists:
    """A part as Python lists (the pure path, or merged parts)."""

    __slots__ = ("offsets", "timestamps", "timestamp_types", "keys", "values", "headers")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []  # ms
        self.timestamp_types: list[int] = []  # 0 CreateTime, 1 LogAppendTime
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[tuple[tuple[str, bytes], ...]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add_window(self, d: Decoded, i: int, j: int) -> None:
        self.offsets.extend(d.offsets[i:j])
        self.timestamps.extend(d.timestamps[i:j])
        self.timestamp_types.extend(repeat(d.timestamp_type, j - i))
        self.keys.extend(d.binary_list(0, i, j))
        self.values.extend(d.binary_list(1, i, j))
        self.headers.extend(d.headers[i:j] if d.headers is not None else repeat((), j - i))


class ColumnBatch:
    """Records of one partition as columns (parallel lists, log order)."""

    __slots__ = ("topic", "partition", "_parts", "_n")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._parts: list[_Lists | tuple[Decoded, int, int]] = []
        self._n = 0

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        span = f" offsets {self._first()}..{self._last()}" if self._n else ""
        return f"<ColumnBatch {self.topic}-{self.partition} {len(self)} records{span}>"

    def _first(self) -> int:
        p = self._parts[0]
        return p.offsets[0] if isinstance(p, _Lists) else p[0].offsets[p[1]]

    def _last(self) -> int:
        p = self._parts[-1]
        return p.offsets[-1] if isinstance(p, _Lists) else p[0].offsets[p[2] - 1]

    # ------------------------------------------------------------------ building

    def add_decoded(self, d: Decoded, i: int, j: int) -> None:
        """Append records ``[i, j)`` of a C-decoded batch (no per-record work)."""
        if j > i:
            self._parts.append((d, i, j))
            self._n += j - i

    def add_rows(self, rows: tuple[tuple[Any, ...], ...], base_offset: int, first_timestamp: int,
                 log_append_time: int | None) -> None:
        """Append a run of one batch's rows (see the module docstring). ``log_append_time``:
        the batch's ``max_timestamp`` when its timestamps are LogAppendTime, else ``None``.
        Raises ``ValueError`` / ``TypeError`` on a malformed row."""
        ods, tds, ks, vs, hs = zip(*rows, strict=True)
        n = len(ods)
        last = self._parts[-1] if self._parts else None
        if not isinstance(last, _Lists):
            last = _Lists()
            self._parts.append(last)
        first = ods[0]
        if ods[-1] - first == n - 1:  # no compaction gap
            last.offsets.extend(range(base_offset + first, base_offset + first + n))
        else:
            last.offsets.extend(map(base_offset.__add__, ods))
        if log_append_time is not None:
            last.timestamps.extend(repeat(log_append_time, n))
            last.timestamp_types.extend(repeat(1, n))
        else:
            td = tds[0]
            if tds.count(td) == n:
                last.timestamps.extend(repeat(first_timestamp + td, n))
            else:
                last.timestamps.extend(map(first_timestamp.__add__, tds))
            last.timestamp_types.extend(repeat(0, n))
        last.keys.extend(ks)
        last.values.extend(vs)
        last.headers.extend(hs)
        self._n += n

    def add_records(self, recs: list[ConsumerRecord]) -> None:
        """Append records of this partition (a batch ``take`` decoded, read here after)."""
        if not recs:
            return
        last = self._parts[-1] if self._parts else None
        if not isinstance(last, _Lists):
            last = _Lists()
            self._parts.append(last)
        _, _, offsets, stamps, types, keys, values, headers = zip(*recs, strict=True)
        for name, col in zip(_Lists.__slots__, (offsets, stamps, types, keys, values, headers),
                             strict=True):
            getattr(last, name).extend(col)
        self._n += len(recs)

    def extend(self, other: ColumnBatch) -> None:
        """Append another batch's columns (same partition, later offsets)."""
        for p in other._parts:
            if isinstance(p, _Lists):  # a copy: ``add_rows`` appends to our last ``_Lists``
                mine = _Lists()
                for name in _Lists.__slots__:
                    getattr(mine, name).extend(getattr(p, name))
                p = mine
            self._parts.append(p)
        self._n += other._n

    # ------------------------------------------------------------------ Python objects

    def _lists(self) -> _Lists:
        """Every part merged into one ``_Lists`` (built once, on the first list access)."""
        parts = self._parts
        if len(parts) == 1 and isinstance(parts[0], _Lists):
            return parts[0]
        out = _Lists()
        for p in parts:
            if isinstance(p, _Lists):
                for name in _Lists.__slots__:
                    getattr(out, name).extend(getattr(p, name))
            else:
                out.add_window(*p)
        self._parts = [out]
        return out

    @property
    def offsets(self) -> list[int]:
        return self._lists().offsets

    @property
    def timestamps(self) -> list[int]:
        """Milliseconds since the epoch."""
        return self._lists().timestamps

    @property
    def timestamp_types(self) -> list[int]:
        """0 CreateTime, 1 LogAppendTime."""
        return self._lists().timestamp_types

    @property
    def keys(self) -> list[bytes | None]:
        return self._lists().keys

    @property
    def values(self) -> list[bytes | None]:
        return self._lists().values

    @property
    def headers(self) -> list[tuple[tuple[str, bytes], ...]]:
        return self._lists().headers

    def records(self) -> list[ConsumerRecord]:
        """The same records as ``ConsumerRecord``\\ s (what ``poll()`` returns)."""
        t, p = self.topic, self.partition
        c = self._lists()
        return [_new(ConsumerRecord, (t, p, o, ts, tt, k, v, h)) for o, ts, tt, k, v, h in zip(
            c.offsets, c.timestamps, c.timestamp_types, c.keys, c.values, c.headers, strict=True)]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as lists (the decoded buffers are memoryviews, which do not pickle)."""
        return _rebuild, (self.topic, self.partition, self._lists())

    # ------------------------------------------------------------------ Arrow

    def to_arrow(self) -> Any:
        """A ``pyarrow.RecordBatch`` of these records (see the module docstring)."""
        try:
            import pyarrow as pa
        except ImportError as exc:
            raise PyArrowMissingError(
                "ColumnBatch.to_arrow() needs pyarrow: pip install 'rafka[spark]' (or pyarrow)"
            ) from exc
        header_type = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
        ts_type = pa.timestamp("ms", tz="UTC")
        schema = pa.schema([
            pa.field("offset", pa.int64()),
            pa.field("timestamp", ts_type),
            pa.field("timestamp_type", pa.int8()),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("headers", header_type),
        ], metadata={"topic": self.topic, "partition": str(self.partition)})
        chunks = [_arrow_part(pa, p, header_type, ts_type) for p in self._parts] or [
            _arrow_part(pa, _Lists(), header_type, ts_type)]
        if len(chunks) == 1:
            arrays = chunks[0]
        else:
            arrays = [pa.concat_arrays([c[k] for c in chunks]) for k in range(6)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _rebuild(topic: str, partition: int, lists: _Lists) -> ColumnBatch:
    out = ColumnBatch(topic, partition)
    out._parts = [lists]
    out._n = len(lists)
    return out


def _arrow_part(pa: Any, part: _Lists | tuple[Decoded, int, int], header_type: Any,
                ts_type: Any) -> list[Any]:
    """The six Arrow arrays of one part (zero-copy for a ``Decoded`` window)."""
    if isinstance(part, _Lists):
        n = len(part)
        if part.headers.count(()) == n:
            headers = _no_headers(pa, n, header_type)
        else:
            headers = pa.array(part.headers, header_type)
        return [
            pa.array(part.offsets, pa.int64()),
            pa.array(part.timestamps, pa.int64()).cast(ts_type),
            pa.array(part.timestamp_types, pa.int8()),
            pa.array(part.keys, pa.binary()),
            pa.array(part.values, pa.binary()),
            headers,
        ]
    d, i, j = part
    n = j - i
    raw = d._raw

    def binary(valid: bytes | None, offs: bytes, data: bytes) -> Any:
        return pa.Array.from_buffers(pa.binary(), n, [
            None if valid is None else pa.py_buffer(valid), pa.py_buffer(offs), pa.py_buffer(data)],
            offset=i)

    if d.headers is None:
        headers = _no_headers(pa, n, header_type)
    else:
        headers = pa.array(d.headers[i:j], header_type)
    return [
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(raw[0])], offset=i),
        pa.Array.from_buffers(ts_type, n, [None, pa.py_buffer(raw[1])], offset=i),
        pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(bytes((d.timestamp_type,)) * n)]),
        binary(*d.key_cols),
        binary(*d.value_cols),
        headers,
    ]


def _no_headers(pa: Any, n: int, header_type: Any) -> Any:
    """A list column of ``n`` empty header lists: n + 1 zero offsets from one zeroed buffer
    (built from a Python iterator, these offsets were ~0.14 µs a record of a Spark read)."""
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(bytes(4 * (n + 1)))])
    return pa.ListArray.from_arrays(offsets, pa.array([], header_type.value_type))

