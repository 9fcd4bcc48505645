"""Read one offset range of one partition into Arrow record batches (runs on executors).

Theory of operation
-------------------
``read_range`` fetches ``[start, end)`` from the partition leader and yields one
``pyarrow.RecordBatch`` per fetch response, with exactly the columns and Arrow types of the
declared Spark schema (``SCHEMA`` / ``arrow_schema``). The next fetch is sent before the current
response is decoded, so the broker reads while we decode.

Records are not decoded one by one into objects: each batch's records section is unpacked in one
``msgpack.unpackb`` (``log.batch.decode_raw_records``), transposed with ``zip``, and its offsets
and timestamps are computed with numpy from the batch header. Only the first and last batch of a
range may need trimming (a fetch returns whole batches, which may start before ``start`` and end
after ``end``). Offsets may have gaps (compaction): the position always advances to the batch's
``last_offset + 1``, and the range is done once the position reaches ``end``.

Transactions: control batches (markers) are never turned into rows, and with ``read_committed``
(the cluster's ``isolation_level`` 1) the batches of aborted transactions are dropped using the
response's ``aborted_transactions`` — per batch, from the header, by the consumer's own rule
(``rafka.client.txn_filter``). The position still moves past both, so a range may end on a marker.

Data loss: when the broker answers OFFSET_OUT_OF_RANGE because retention deleted the start of
the range, or the partition is gone, ``on_loss(topic, partition, lost_from, lost_to, why)`` is
called; it raises (``failOnDataLoss=true``) or logs a warning, and the read continues from the
log start offset (or stops, if the partition is gone).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator
from itertools import chain

import lz4.frame
import msgpack
import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from rafka.broker.errors import ErrorCode, RafkaError
from rafka.client.txn_filter import TXN_BITS, TxnBatchFilter
from rafka.log.batch import (
    HEADER_SIZE,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    CorruptBatchError,
    crc_ok,
    iter_batches,
)

from .offsets import OffsetRange
from .wire import Cluster, PartitionGone

__all__ = ["SCHEMA", "HEADERS_FIELD", "source_schema", "arrow_schema", "read_range",
           "DataLossError", "LossHandler", "loss_handler"]

log = logging.getLogger("spark_source")

HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)
SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])

LossHandler = Callable[[str, int, int, int, str], None]


class DataLossError(RuntimeError):
    """Records a query needs are gone (retention, deleted topic) and failOnDataLoss is true."""


def source_schema(include_headers: bool) -> StructType:
    return StructType(SCHEMA.fields + [HEADERS_FIELD]) if include_headers else SCHEMA


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct(
            [pa.field("key", pa.string()), pa.field("value", pa.binary())]))))
    return pa.schema(fields)


def loss_handler(fail: bool) -> LossHandler:
    def on_loss(topic: str, partition: int, lost_from: int, lost_to: int, why: str) -> None:
        what = (f"data loss in topic {topic!r} partition {partition}: offsets "
                f"[{lost_from}, {lost_to}) are no longer available ({why})")
        if fail:
            raise DataLossError(
                what + ". Set the source option failOnDataLoss to false to skip lost records "
                "with a warning instead of failing the query.")
        log.warning("%s; skipping them (failOnDataLoss=false)", what)
    return on_loss


class _Columns:
    """Column chunks of the record batch being built (one chunk per record batch)."""

    __slots__ = ("keys", "values", "offsets", "ts_us", "ts_types", "headers", "with_headers",
                 "rows", "null_keys")

    def __init__(self, with_headers: bool) -> None:
        self.keys: list[tuple] = []
        self.values: list[tuple] = []
        self.offsets: list[np.ndarray] = []
        self.ts_us: list[np.ndarray] = []
        self.ts_types: list[np.ndarray] = []
        self.headers: list[tuple] = []
        self.with_headers = with_headers
        self.rows = 0
        self.null_keys = True

    def __len__(self) -> int:
        return self.rows

    def to_batch(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        n = self.rows
        keys = (pa.nulls(n, pa.binary()) if self.null_keys
                else pa.array(list(chain.from_iterable(self.keys)), pa.binary()))
        arrays = [
            keys,
            pa.array(list(chain.from_iterable(self.values)), pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(np.concatenate(self.offsets), pa.int64()),
            pa.array(np.concatenate(self.ts_us), pa.timestamp("us", tz="UTC")),
            pa.array(np.concatenate(self.ts_types), pa.int32()),
        ]
        if self.with_headers:
            hs = [[tuple(x) for x in h] if h else [] for h in chain.from_iterable(self.headers)]
            arrays.append(pa.array(hs, schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _unpack(buf: memoryview, pos: int, header: BatchHeader) -> tuple:
    """The records of one batch as a tuple of ``(od, td, key, value, headers)`` tuples."""
    if not crc_ok(buf, pos):
        raise CorruptBatchError(f"CRC mismatch in batch at offset {header.base_offset}")
    section = buf[pos + HEADER_SIZE:pos + header.size]
    if header.compression == "lz4":
        section = lz4.frame.decompress(section)
    recs = msgpack.unpackb(section, raw=False, use_list=False)
    if not isinstance(recs, tuple) or len(recs) != header.record_count:
        raise CorruptBatchError(f"batch at offset {header.base_offset}: record count mismatch")
    return recs


def _add_batch(cols: _Columns, buf: memoryview, pos: int, header: BatchHeader, start: int,
               end: int) -> None:
    recs = _unpack(buf, pos, header)
    if not recs:
        return
    ods, tds, ks, vs, hs = zip(*recs, strict=True)
    n_all = len(ods)
    base = header.base_offset
    if n_all == header.last_offset_delta + 1:          # no compaction gap: offsets contiguous
        offsets = np.arange(base, base + n_all, dtype=np.int64)
    else:
        offsets = np.fromiter(ods, dtype=np.int64, count=n_all) + base
    lo, hi = 0, n_all
    if offsets[0] < start:
        lo = int(np.searchsorted(offsets, start, side="left"))
    if offsets[-1] >= end:
        hi = int(np.searchsorted(offsets, end, side="left"))
    if lo >= hi:
        return
    n = hi - lo
    if header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME or \
            header.first_timestamp == header.max_timestamp:
        ts = np.full(n, header.max_timestamp * 1000, dtype=np.int64)
    else:
        ts = (np.fromiter(tds[lo:hi], dtype=np.int64, count=n) + header.first_timestamp) * 1000
    if lo or hi != n_all:
        ks, vs, hs = ks[lo:hi], vs[lo:hi], hs[lo:hi]
    cols.offsets.append(offsets[lo:hi])
    cols.ts_us.append(ts)
    cols.ts_types.append(np.full(n, header.timestamp_type, dtype=np.int32))
    cols.keys.append(ks)
    cols.values.append(vs)
    if cols.null_keys and ks.count(None) != n:
        cols.null_keys = False
    if cols.with_headers:
        cols.headers.append(hs)
    cols.rows += n


def read_range(cluster: Cluster, rng: OffsetRange, *, include_headers: bool,
               on_loss: LossHandler, fetch_max_bytes: int = 8 << 20,
               stall_timeout_s: float = 30.0) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches; see the module docstring."""
    tp = (rng.topic, rng.partition)
    schema = arrow_schema(include_headers)
    position, end = rng.start, rng.end
    max_bytes = fetch_max_bytes
    stalled_since: float | None = None
    inflight = None  # (conn, cid, offset) of the fetch already sent
    while position < end:
        try:
            if inflight is None or inflight[2] != position:
                inflight = (*cluster.send_fetch(tp, position, max_bytes), position)
            conn, cid, _ = inflight
            inflight = None
            entry, raw = cluster.receive_fetch(conn, cid)
        except PartitionGone:
            on_loss(rng.topic, rng.partition, position, end, "the topic or partition was deleted")
            return
        except RafkaError as exc:
            if exc.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.BROKER_NOT_AVAILABLE):
                cluster.leaders.pop(tp, None)
                stalled_since = _stall(stalled_since, stall_timeout_s, exc)
                continue
            raise
        err = int(entry.get("error", 0) or 0)
        if err:
            if err == ErrorCode.OFFSET_OUT_OF_RANGE:
                position = _out_of_range(cluster, rng, position, on_loss)
                continue
            if err == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                cluster.leaders.pop(tp, None)
                try:
                    cluster.leader_address(tp)
                except PartitionGone:
                    on_loss(rng.topic, rng.partition, position, end,
                            "the topic or partition was deleted")
                    return
            cluster.leaders.pop(tp, None)
            stalled_since = _stall(stalled_since, stall_timeout_s,
                                   RuntimeError(f"fetch {tp}: error {ErrorCode(err).name}"))
            continue
        batches = list(iter_batches(raw))
        if not batches:
            if len(raw):  # one batch larger than max_bytes: ask for more
                max_bytes = max(max_bytes * 2, len(raw) * 2)
                continue
            hw = int(entry.get("high_watermark", -1))
            if cluster.isolation_level and entry.get("last_stable_offset") is not None:
                hw = int(entry["last_stable_offset"])  # read_committed: served up to the LSO
            if hw >= end:    # nothing left in [position, end): compacted away
                return
            stalled_since = _stall(stalled_since, stall_timeout_s, RuntimeError(
                f"{tp[0]}-{tp[1]}: high watermark {hw} is below the end of the range {end}"))
            inflight = (*cluster.send_fetch(tp, position, max_bytes, max_wait_ms=200), position)
            continue
        stalled_since = None
        next_position = batches[-1][1].last_offset + 1
        if next_position <= position:   # a broker bug; never loop on it
            raise RuntimeError(f"fetch of {tp[0]}-{tp[1]} at offset {position} returned only "
                               f"batches before it (last offset {next_position - 1})")
        if next_position < end:  # pipeline: the broker reads while we decode
            inflight = (*cluster.send_fetch(tp, next_position, max_bytes), next_position)
        cols = _Columns(include_headers)
        txn = TxnBatchFilter(entry.get("aborted_transactions"))
        gc_was_on = gc.isenabled()
        gc.disable()    # millions of short-lived acyclic tuples: no point scanning them
        try:
            for pos, header in batches:
                if header.attributes & TXN_BITS and txn.skip(raw, pos, header):
                    continue    # a marker, or a batch of an aborted transaction
                if header.last_offset >= position and header.base_offset < end:
                    _add_batch(cols, raw, pos, header, position, end)
        finally:
            if gc_was_on:
                gc.enable()
        position = max(position, next_position)
        if len(cols):
            yield cols.to_batch(rng.topic, rng.partition, schema)


def _stall(since: float | None, timeout_s: float, exc: BaseException) -> float:
    now = time.monotonic()
    if since is None:
        return now
    if now - since > timeout_s:
        raise TimeoutError(f"no progress for {timeout_s:.0f} s: {exc}") from exc
    time.sleep(0.1)
    return since


def _out_of_range(cluster: Cluster, rng: OffsetRange, position: int,
                  on_loss: LossHandler) -> int:
    """OFFSET_OUT_OF_RANGE at ``position``: report the loss, return where to go on."""
    tp = (rng.topic, rng.partition)
    bounds = cluster.list_offsets({tp: -2})
    if tp not in bounds:
        on_loss(rng.topic, rng.partition, position, rng.end, "the topic or partition was deleted")
        return rng.end
    log_start = bounds[tp]
    if position < log_start:
        on_loss(rng.topic, rng.partition, position, min(log_start, rng.end),
                f"deleted by retention; the log now starts at offset {log_start}")
        return min(log_start, rng.end)
    latest = cluster.list_offsets({tp: -1}).get(tp, -1)
    if position <= latest:  # a transient answer (leadership moved): fetch again
        time.sleep(0.1)
        return position
    on_loss(rng.topic, rng.partition, position, rng.end,
            f"the log now ends at offset {latest} (truncated or recreated)")
    return rng.end
