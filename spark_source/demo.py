"""Demo: click events flow into rafka and Spark counts them per page per 10-second window.

Theory of operation
-------------------
Given a running cluster (``--bootstrap``, default ``$RAFKA_BOOTSTRAP`` or 127.0.0.1:9092; or
``--start-cluster`` to start a throwaway 1-node one with ``rafka cluster up --detach``), the demo

1. creates the topic ``clicks`` (3 partitions) if it is missing;
2. starts a streaming query first: ``readStream.format("rafka")`` → JSON ``value`` parsed into
   ``page``, ``user``, ``ts`` → a 10-second event-time window per page (10 s watermark) →
   counts printed on the console every few seconds (``update`` mode);
3. runs a background producer thread sending JSON click events
   ``{"page": ..., "user": ..., "ts": ...}`` at ``--rate`` per second;
4. stops everything after ``--seconds`` (default 60) and prints how many events were sent.

Run: ``python -m rafka.spark_source.demo [--seconds 60] [--bootstrap HOST:PORT] [--start-cluster]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from rafka.spark_source.env import spark_env

__all__ = ["main", "run_demo"]

TOPIC = "clicks"
PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]
ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _throwaway_cluster() -> Iterator[str]:
    data = Path(tempfile.mkdtemp(prefix="rafka-demo-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = [sys.executable, "-m", "rafka.cli"]
    up = subprocess.run([*cli, "cluster", "up", "--nodes", "1", "--data-dir", str(data),
                         "--port", str(port), "--detach"], capture_output=True, text=True,
                        timeout=120)
    if up.returncode != 0:
        shutil.rmtree(data, ignore_errors=True)
        raise SystemExit(f"rafka cluster up failed:\n{up.stdout}{up.stderr}")
    print(f"started a 1-node cluster at 127.0.0.1:{port} (data in {data})", flush=True)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([*cli, "cluster", "down", "--data-dir", str(data)],
                       capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)


def _ensure_topic(bootstrap: str) -> None:
    from rafka.client import Admin

    with Admin(bootstrap_servers=bootstrap) as admin:
        if TOPIC in admin.list_topics():
            return
        try:
            admin.create_topic(TOPIC, partitions=3, replication_factor=1)
            print(f"created topic {TOPIC!r}", flush=True)
        except Exception as exc:  # created meanwhile by someone else
            if "exist" not in str(exc).lower():
                raise


class _ClickProducer(threading.Thread):
    def __init__(self, bootstrap: str, rate_per_s: float, seconds: float) -> None:
        super().__init__(name="click-producer", daemon=True)
        self.bootstrap, self.rate, self.seconds = bootstrap, rate_per_s, seconds
        self.sent = 0
        self.error: BaseException | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        from rafka.client import Producer

        rng = random.Random()
        try:
            with Producer(bootstrap_servers=self.bootstrap, linger_ms=20) as p:
                end = time.monotonic() + self.seconds
                while not self.stop_event.is_set() and time.monotonic() < end:
                    page = rng.choices(PAGES, weights=[8, 3, 5, 2, 1, 2])[0]
                    user = f"user-{rng.randrange(100)}"
                    event = {"page": page, "user": user, "ts": time.time()}
                    p.send(TOPIC, key=user.encode(), value=json.dumps(event).encode())
                    self.sent += 1
                    time.sleep(1 / self.rate)
                p.flush()
        except BaseException as exc:
            self.error = exc


def run_demo(bootstrap: str, seconds: float, rate_per_s: float, starting: str) -> int:
    spark_env(ROOT)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from rafka.spark_source import RafkaDataSource

    _ensure_topic(bootstrap)
    spark = (SparkSession.builder.master("local[2]").appName("rafka-clicks-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RafkaDataSource)
    checkpoint = tempfile.mkdtemp(prefix="rafka-demo-ckpt-")
    producer = _ClickProducer(bootstrap, rate_per_s, seconds)
    try:
        clicks = (spark.readStream.format("rafka")
                  .option("bootstrap.servers", bootstrap)
                  .option("subscribe", TOPIC)
                  .option("startingOffsets", starting)
                  .load())
        events = (clicks
                  .select(F.from_json(F.col("value").cast("string"),
                                      "page string, user string, ts double").alias("e"))
                  .select("e.page", "e.user", F.col("e.ts").cast("timestamp").alias("event_time")))
        per_page = (events.withWatermark("event_time", "10 seconds")
                    .groupBy(F.window("event_time", "10 seconds"), "page")
                    .agg(F.count("*").alias("events"), F.approx_count_distinct("user")
                         .alias("users"))
                    .select(F.col("window.start").alias("window_start"), "page", "events",
                            "users"))
        query = (per_page.writeStream.outputMode("update").format("console")
                 .option("truncate", "false").option("numRows", "50")
                 .option("checkpointLocation", checkpoint)
                 .trigger(processingTime="5 seconds").start())
        producer.start()
        print(f"producing ~{rate_per_s:.0f} clicks/s to {TOPIC!r} for {seconds:.0f} s; "
              "counts per page per 10-second window follow", flush=True)
        producer.join(seconds + 30)
        query.processAllAvailable()
        query.stop()
        if producer.error is not None:
            raise producer.error
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        print(f"done: {producer.sent} click events produced and counted", flush=True)
        return 0
    finally:
        producer.stop_event.set()
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rafka.spark_source.demo", description=__doc__.split(
        "\n")[0])
    ap.add_argument("--bootstrap", default=os.environ.get("RAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to run (default 60)")
    ap.add_argument("--rate", type=float, default=50.0, help="click events per second")
    ap.add_argument("--starting-offsets", default="latest", choices=["earliest", "latest"])
    ap.add_argument("--start-cluster", action="store_true",
                    help="start a throwaway 1-node cluster (rafka cluster up --detach) and "
                         "stop it at the end, instead of using --bootstrap")
    args = ap.parse_args(argv)
    if args.start_cluster:
        with _throwaway_cluster() as bootstrap:
            return run_demo(bootstrap, args.seconds, args.rate, args.starting_offsets)
    return run_demo(args.bootstrap, args.seconds, args.rate, args.starting_offsets)


if __name__ == "__main__":
    sys.exit(main())
