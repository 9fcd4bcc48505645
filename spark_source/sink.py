"""The ``rafka`` sink: ``df.write.format("rafka")`` and ``df.writeStream.format("rafka")``.

Theory of operation
-------------------
As Spark's Kafka sink: each row becomes one record. Columns: ``value`` (required, binary or
string), and optionally ``key`` (binary or string), ``topic`` (string; rows without one go to the
``topic`` option), ``partition`` (int; otherwise the producer's partitioner decides) and
``headers`` (array of struct<key string, value binary>). Other columns are ignored.

Each Spark task (``write`` on an executor) opens its own ``client.Producer``, sends every row of
its Arrow batches, flushes, checks every send's outcome and reports a ``RafkaCommitMessage``
with the counts to the driver, which logs the totals in ``commit``. Delivery is at-least-once:
a task or batch that fails after some sends succeeded is retried by Spark and sends them again
(rafka records carry no Spark batch id to deduplicate on), exactly like the Kafka sink.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from .options import OptionError, SinkOptions

__all__ = ["RafkaCommitMessage", "RafkaBatchWriter", "RafkaStreamWriter", "check_sink_schema",
           "write_batches"]

log = logging.getLogger("spark_source")

_MAX_PENDING = 10_000   # sends in flight before we wait for the oldest ones


@dataclass
class RafkaCommitMessage(WriterCommitMessage):
    """What one task wrote: rows in total and per topic."""

    rows: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Refuse, naming the column, a schema the sink cannot write."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the rafka sink needs a 'value' column (binary or string); columns: "
                          + ", ".join(fields))
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], BinaryType | StringType):
            raise OptionError(f"column {name!r} must be binary or string, got "
                              f"{fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"column 'topic' must be a string, got {fields['topic'].simpleString()}")
    if "topic" not in fields and not opts.topic:
        raise OptionError("no topic to write to: set the option topic or add a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"],
                                                IntegerType | LongType | ShortType):
        raise OptionError(f"column 'partition' must be an integer, got "
                          f"{fields['partition'].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType.fields[0].dataType, StringType)
              and isinstance(t.elementType.fields[1].dataType, BinaryType | StringType))
        if not ok:
            raise OptionError("column 'headers' must be array<struct<key: string, value: "
                              f"binary>>, got {t.simpleString()}")


def _as_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def write_batches(batches: Iterator[pa.RecordBatch], opts: SinkOptions) -> RafkaCommitMessage:
    """Send every row of ``batches``; raise if any send failed."""
    from rafka.client import Producer  # imported on the executor, where the task runs

    per_topic: Counter[str] = Counter()
    pending: list[Any] = []
    with Producer(bootstrap_servers=opts.bootstrap_servers,
                  acks=opts.acks if opts.acks == "all" else int(opts.acks),
                  linger_ms=opts.linger_ms, compression_type=opts.compression_type,
                  **dict(opts.security)) as producer:
        for batch in batches:
            n = batch.num_rows
            names = batch.schema.names
            values = batch.column("value").to_pylist()
            keys = batch.column("key").to_pylist() if "key" in names else [None] * n
            topics = batch.column("topic").to_pylist() if "topic" in names else [None] * n
            parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
            headers = batch.column("headers").to_pylist() if "headers" in names else [None] * n
            for value, key, topic, part, hdrs in zip(values, keys, topics, parts, headers,
                                                     strict=True):
                topic = topic or opts.topic
                if not topic:
                    raise ValueError("a row has a null topic and the sink has no topic option")
                kw: dict[str, Any] = {"value": _as_bytes(value), "key": _as_bytes(key)}
                if part is not None:
                    kw["partition"] = int(part)
                if hdrs:
                    kw["headers"] = [(h["key"], _as_bytes(h["value"]) or b"") for h in hdrs]
                pending.append(producer.send(topic, **kw))
                per_topic[topic] += 1
                if len(pending) >= _MAX_PENDING:
                    for fut in pending[: _MAX_PENDING // 2]:
                        fut.result()
                    del pending[: _MAX_PENDING // 2]
        producer.flush()
        for fut in pending:
            fut.result()
    return RafkaCommitMessage(rows=sum(per_topic.values()), per_topic=dict(sorted(
        per_topic.items())))


def _log_commit(messages: list[WriterCommitMessage | None], batch: str) -> None:
    total: Counter[str] = Counter()
    for m in messages:
        if isinstance(m, RafkaCommitMessage):
            total.update(m.per_topic)
    log.info("rafka sink %s: wrote %d rows (%s)", batch, sum(total.values()),
             ", ".join(f"{t}: {n}" for t, n in sorted(total.items())) or "nothing")


class RafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RafkaCommitMessage:
        return write_batches(iterator, self.opts)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "batch write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("rafka sink: batch write aborted; rows already sent stay in rafka")


class RafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RafkaCommitMessage:
        return write_batches(iterator, self.opts)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("rafka sink: micro-batch %d aborted; it will be written again "
                    "(at-least-once)", batchId)
