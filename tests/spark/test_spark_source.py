"""The ``rafka`` Spark source and sink against a real cluster and a real Spark (local[2]).

One SparkSession and one cluster serve the whole module (see conftest.py); each test uses its
own topics and checkpoint directories.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import wait_for
from tests.spark.helpers import (
    Feeder,
    consume_all,
    create_topic,
    produce,
    stream_options,
)

pytestmark = pytest.mark.spark


def _reader(spark: Any, opts: dict[str, str], stream: bool = False) -> Any:
    r = (spark.readStream if stream else spark.read).format("rafka")
    for k, v in opts.items():
        r = r.option(k, v)
    return r


def _values(rows: Any) -> list[bytes]:
    return sorted(bytes(r.value) for r in rows)


# --------------------------------------------------------------------------- batch


def test_batch_read_exact_range_with_headers(spark: Any, bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 100, headers=True)   # 50 records per partition
    before_ms = int(time.time() * 1000)
    opts = {"bootstrap.servers": bootstrap, "subscribe": topic_name, "includeHeaders": "true",
            "startingOffsets": json.dumps({topic_name: {"0": 10, "1": -2}}),
            "endingOffsets": json.dumps({topic_name: {"0": 30, "1": -1}})}
    df = _reader(spark, opts).load()
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert df.schema["partition"].dataType.simpleString() == "int"
    assert df.schema["offset"].dataType.simpleString() == "bigint"
    rows = df.collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(10, 30)] + [(1, o) for o in range(0, 50)]
    for r in rows:
        i = int(bytes(r.value)[1:])
        assert i % 2 == r.partition and r.offset == i // 2      # round-robin order
        assert bytes(r.key) == b"k%d" % i and r.topic == topic_name
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("i", str(i).encode()),
                                                                ("h2", b"x")]
        assert r.timestampType == 0
        assert abs(r.timestamp.timestamp() * 1000 - before_ms) < 120_000


def test_batch_min_partitions_splits_ranges(spark: Any, bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 200)
    # startingTimestamp=0: the first record of each partition (LIST_OFFSETS by time)
    df = _reader(spark, {"bootstrap.servers": bootstrap, "subscribe": topic_name,
                         "startingTimestamp": "0", "minPartitions": "6"}).load()
    assert df.rdd.getNumPartitions() >= 6
    offsets = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert offsets == [(p, o) for p in range(2) for o in range(100)]


# --------------------------------------------------------------------------- streaming


def _parquet_values(spark: Any, path: Path) -> list[bytes]:
    if not (path / "_spark_metadata").exists():
        return []
    return _values(spark.read.schema("value binary").parquet(str(path)).collect())


def test_stream_stop_restart_exactly_once(spark: Any, bootstrap: str, topic_name: str,
                                          tmp_path: Path) -> None:
    """A topic being produced to → parquet with a checkpoint; stopped and restarted while the
    producer keeps going: every record lands exactly once."""
    create_topic(bootstrap, topic_name, 2)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    feeder = Feeder(bootstrap, topic_name, rate_per_s=500).start()

    def start() -> Any:
        df = _reader(spark, stream_options(bootstrap, topic_name,
                                           maxOffsetsPerTrigger="400"), stream=True).load()
        return (df.writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(ckpt)).trigger(processingTime="300 milliseconds")
                .start())

    state: dict[str, Any] = {"q": start()}
    crashes: list[str] = []

    def running_and(pred: Any) -> Any:
        def check() -> Any:
            q = state["q"]
            if not q.isActive:
                # Crashed (on a loaded machine: a Python worker that did not connect back in
                # time): restart from the checkpoint, as a deployment would. Exactly-once
                # must hold across that too.
                crashes.append(str(q.exception())[:300])
                assert len(crashes) <= 3, crashes
                state["q"] = start()
            return pred()
        return check

    def rows_read() -> int:
        return sum(p["numInputRows"] for p in state["q"].recentProgress)

    def end_offset_total() -> int:
        prog = state["q"].lastProgress
        if not prog or not prog["sources"][0].get("endOffset"):
            return -1
        end = prog["sources"][0]["endOffset"]
        end = json.loads(end) if isinstance(end, str) else end
        return sum(end.get(topic_name, {}).values())

    try:
        wait_for(running_and(lambda: rows_read() >= 300), 120, "first batches", interval_s=0.5)
        state["q"].stop()
        time.sleep(1.0)                       # the producer keeps going while the query is down
        state["q"] = start()
        wait_for(running_and(lambda: rows_read() >= 300), 120, "batches after the restart",
                 interval_s=0.5)
    finally:
        sent = feeder.stop()
    try:
        wait_for(running_and(lambda: end_offset_total() >= sent), 120,
                 f"the query to reach all {sent} records", interval_s=0.5)
        state["q"].processAllAvailable()
    finally:
        state["q"].stop()
    got = _parquet_values(spark, out)
    expected = sorted(b"v%d" % i for i in range(sent))
    dupes = len(got) - len(set(got))
    missing = sorted(set(expected) - set(got))[:10]
    assert dupes == 0, f"{dupes} duplicated records"
    assert not missing, f"missing records, e.g. {missing}"
    assert got == expected


def test_max_offsets_per_trigger_and_available_now(spark: Any, bootstrap: str,
                                                   topic_name: str, tmp_path: Path) -> None:
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 1000)
    df = _reader(spark, stream_options(bootstrap, topic_name, maxOffsetsPerTrigger="300"),
                 stream=True).load()
    q = (df.writeStream.format("json").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert q.awaitTermination(120), "Trigger.AvailableNow did not stop at the end"
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [300, 300, 300, 100], sizes
    got = spark.read.json(str(tmp_path / "out")).count()
    assert got == 1000


def test_min_offsets_per_trigger_waits_for_max_trigger_delay(spark: Any, bootstrap: str,
                                                             topic_name: str,
                                                             tmp_path: Path) -> None:
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 100)
    df = _reader(spark, stream_options(bootstrap, topic_name, minOffsetsPerTrigger="1000",
                                       maxTriggerDelay="4s"), stream=True).load()
    t0 = time.monotonic()
    q = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: any(p["numInputRows"] for p in q.recentProgress), 60,
                 "a batch once maxTriggerDelay passed")
        waited = time.monotonic() - t0
        sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    finally:
        q.stop()
    assert sizes == [100]                # 100 < minOffsetsPerTrigger: one batch after the delay
    assert waited >= 4, waited


# --------------------------------------------------------------------------- data loss


def _stream_once(spark: Any, opts: dict[str, str], tmp_path: Path) -> Any:
    df = _reader(spark, opts, stream=True).load()
    q = (df.writeStream.format("json").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
    except Exception:   # a failed query raises here; the tests look at q.exception()
        pass
    assert not q.isActive, "Trigger.AvailableNow query still running"
    return q


def test_fail_on_data_loss_deleted_topic(spark: Any, bootstrap: str, topic_name: str,
                                         tmp_path: Path) -> None:
    from rafka.client import Admin

    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 20)
    strict = stream_options(bootstrap, topic_name)
    q = _stream_once(spark, strict, tmp_path)
    assert q.exception() is None
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.delete_topic(topic_name)
    q = _stream_once(spark, strict, tmp_path)       # failOnDataLoss defaults to true
    exc = q.exception()
    assert exc is not None, "the query should fail on data loss"
    msg = str(exc)
    assert topic_name in msg and "partition 0" in msg and "failOnDataLoss" in msg, msg
    # same checkpoint, failOnDataLoss=false: the loss is logged and the query goes on
    q = _stream_once(spark, dict(strict, failOnDataLoss="false"), tmp_path)
    assert q.exception() is None


def test_fail_on_data_loss_retention(spark: Any, bootstrap: str, topic_name: str,
                                     tmp_path: Path) -> None:
    """Offsets deleted by retention before they were read: named in the error; skipped when
    failOnDataLoss=false."""
    # helpers.produce sends 32 KiB batches and a batch must fit in a segment. retention.bytes=1
    # keeps only the active segment: the first 10 records survive until the log rolls.
    create_topic(bootstrap, topic_name, 1, config={"segment.bytes": "131072",
                                                   "retention.bytes": "1"})
    produce(bootstrap, topic_name, 10, partitions=1)
    strict = stream_options(bootstrap, topic_name)
    q = _stream_once(spark, strict, tmp_path)          # reads 0..9, checkpoint at 10
    assert q.exception() is None
    produce(bootstrap, topic_name, 30_000, partitions=1, start=10)  # several segments

    def log_start() -> int:
        from rafka.client import Admin, TopicPartition

        with Admin(bootstrap_servers=bootstrap) as admin:
            tp = TopicPartition(topic_name, 0)
            return admin.list_offsets({tp: -2})[tp][0]

    wait_for(lambda: log_start() > 10, 60, "retention to delete old segments")
    q = _stream_once(spark, strict, tmp_path)
    exc = q.exception()
    assert exc is not None
    msg = str(exc)
    assert topic_name in msg and "partition 0" in msg and "[10, " in msg, msg

    lenient = dict(strict, failOnDataLoss="false")
    q = _stream_once(spark, lenient, tmp_path)
    assert q.exception() is None
    rows = spark.read.json(str(tmp_path / "out")).select("offset").collect()
    offsets = sorted(r.offset for r in rows)
    assert offsets[:10] == list(range(10))                 # the first run
    assert offsets[10] > 10                                 # the lost ones were skipped...
    assert offsets[10:] == list(range(offsets[10], 30_010))  # ...and the rest read once


# --------------------------------------------------------------------------- sink


def test_sink_round_trip_batch_and_stream(spark: Any, bootstrap: str, topic_name: str,
                                          tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    out = topic_name + "-out"
    create_topic(bootstrap, topic_name, 2)
    create_topic(bootstrap, out, 2)
    rows = [(f"k{i}", f"value {i}", i % 2, [("n", str(i).encode())]) for i in range(50)]
    df = spark.createDataFrame(rows, "key string, value string, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("rafka").mode("append").option("bootstrap.servers", bootstrap) \
        .option("topic", topic_name).save()
    got = consume_all(bootstrap, topic_name, 2, 50)
    assert sorted((r.partition, r.key, r.value, [tuple(h) for h in r.headers])
                  for r in got) == sorted(
        (i % 2, b"k%d" % i, b"value %d" % i, [("n", str(i).encode())]) for i in range(50))

    # stream: topic -> upper-cased values -> another topic (with a topic column)
    src = _reader(spark, stream_options(bootstrap, topic_name), stream=True).load()
    mapped = src.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"),
                        F.lit(out).alias("topic"))
    q = (mapped.writeStream.format("rafka").option("bootstrap.servers", bootstrap)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
         .start())
    assert q.awaitTermination(120)
    assert q.exception() is None
    got = consume_all(bootstrap, out, 2, 50)
    assert len(got) >= 50                                  # at-least-once
    assert {r.value for r in got} == {b"VALUE %d" % i for i in range(50)}


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("opts, word", [
    ({"subscribe": "t", "bogusOption": "1"}, "bogusoption"),
    ({"subscribe": "t", "assign": '{"t": [0]}'}, "exactly one"),
    ({}, "exactly one"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "-3"}, "maxOffsetsPerTrigger"),
    ({"subscribe": "t", "startingOffsets": "{bad json"}, "startingOffsets"),
])
def test_option_errors_at_load(spark: Any, bootstrap: str, opts: dict[str, str],
                               word: str) -> None:
    with pytest.raises(Exception) as info:
        _reader(spark, {"bootstrap.servers": bootstrap, **opts}).load()
    assert word.lower() in str(info.value).lower(), str(info.value)[:2000]


def test_option_errors_stream_vs_batch(spark: Any, bootstrap: str, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="endingOffsets"):
        df = _reader(spark, {"bootstrap.servers": bootstrap, "subscribe": "t",
                             "endingOffsets": "latest"}, stream=True).load()
        df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start() \
            .awaitTermination(30)
    with pytest.raises(Exception, match="maxOffsetsPerTrigger"):
        _reader(spark, {"bootstrap.servers": bootstrap, "subscribe": "t",
                        "maxOffsetsPerTrigger": "5"}).load().collect()
    df = spark.createDataFrame([("x",)], "notvalue string")
    with pytest.raises(Exception, match="value"):
        df.write.format("rafka").mode("append").option("bootstrap.servers", bootstrap) \
            .option("topic", "t").save()
