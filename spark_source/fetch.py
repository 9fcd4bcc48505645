"""Read one offset range of one partition into Arrow record batches (runs on executors).

Theory of operation
-------------------
``read_range`` fetches ``[start, end)`` from the partition leader and yields one
``pyarrow.RecordBatch`` per fetch response, with exactly the columns and Arrow types of the
declared Spark schema (``SCHEMA`` / ``arrow_schema``). The next fetch is sent before the current
response is decoded, so the broker reads while we decode.

Records are not decoded one by one into objects: a response is read by the consumer's own
``CompletedFetch.take_columns`` (``rafka.client.aio.fetch``), so the same CRC checks, offset
rules, transaction filter and named ``CorruptRecordError`` apply, and with the C codec
(``log/_codec.c``) each record batch is decoded straight into column buffers that
``ColumnBatch.to_arrow`` wraps without copying; ``_spark_batch`` then only renames and casts
columns to the Spark schema (timestamps ms → µs, the type int8 → int32) and cuts the batch at
``end``. A fetch returns whole batches, which may start before ``start`` (``take_columns``
drops those records) and end after ``end`` (cut here). Offsets may have gaps (compaction): the
position always advances to the last whole batch's ``last_offset + 1``, and the range is done
once the position reaches ``end``.

Transactions: control batches (markers) are never turned into rows, and with ``read_committed``
(the cluster's ``isolation_level`` 1) the batches of aborted transactions are dropped using the
response's ``aborted_transactions`` — per batch, from the header, by the consumer's own rule
(``rafka.client.txn_filter``, inside ``CompletedFetch``). The position still moves past both, so a range may end on a marker.

Data loss: when the broker answers OFFSET_OUT_OF_RANGE because retention deleted the start of
the range, or the partition is gone, ``on_loss(topic, partition, lost_from, lost_to, why)`` is
called; it raises (``failOnDataLoss=true``) or logs a warning, and the read continues from the
log start offset (or stops, if the partition is gone).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

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
from rafka.client.aio.fetch import CompletedFetch
from rafka.client.columnar import ColumnBatch
from rafka.client.types import TopicPartition
from rafka.log.batch import HEADER_SIZE, parse_header
from rafka.wire.errors import ErrorCode, RafkaError

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


_US = pa.timestamp("us", tz="UTC")


def _spark_batch(cb: ColumnBatch, end: int, schema: pa.Schema, include_headers: bool
                 ) -> pa.RecordBatch | None:
    """``cb``'s records below ``end`` with the source's columns (``arrow_schema``)."""
    rb = cb.to_arrow()  # offset, timestamp[ms], timestamp_type int8, key, value, headers
    offsets = np.asarray(rb.column(0))
    if len(offsets) and offsets[-1] >= end:
        rb = rb.slice(0, int(np.searchsorted(offsets, end, side="left")))
    n = len(rb)
    if not n:
        return None
    arrays = [
        rb.column(3),
        rb.column(4),
        pa.repeat(pa.scalar(cb.topic, pa.string()), n),
        pa.repeat(pa.scalar(cb.partition, pa.int32()), n),
        rb.column(0),
        rb.column(1).cast(_US),
        rb.column(2).cast(pa.int32()),
    ]
    if include_headers:
        arrays.append(rb.column(5))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


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
        cf = CompletedFetch(TopicPartition(*tp), memoryview(raw),
                            aborted=entry.get("aborted_transactions") or None)
        if cf.end_offset < 0:  # no whole batch
            if len(raw):  # one batch larger than max_bytes: ask for more
                if len(raw) >= HEADER_SIZE:
                    parse_header(raw, 0)  # unless its header is corrupt: CorruptBatchError
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
        next_position = cf.end_offset
        if next_position <= position:   # a broker bug; never loop on it
            raise RuntimeError(f"fetch of {tp[0]}-{tp[1]} at offset {position} returned only "
                               f"batches before it (last offset {next_position - 1})")
        if next_position < end:  # pipeline: the broker reads while we decode
            inflight = (*cluster.send_fetch(tp, next_position, max_bytes), next_position)
        cb, _ = cf.take_columns(position, 1 << 62)  # markers, aborted data: stepped over
        position = max(position, next_position)
        out = _spark_batch(cb, end, schema, include_headers)
        if out is not None:
            yield out


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
