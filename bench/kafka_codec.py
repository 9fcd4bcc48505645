"""Cost of the Kafka listener's codec per request, in-process (no sockets, no broker).

``.venv/bin/python bench/kafka_codec.py [RECORDS] [VALUE_BYTES]`` (default 100 records of 200
bytes): times, per request of one partition carrying one batch of RECORDS records,
(1) the Produce path: kio reads the request, ``accept_produce`` checks the batch (header,
CRC, codec) and tags it for storage, under each compression; (2) the Fetch path: ``to_kafka``
of a stored Kafka batch (magic patched back) and of a native batch (converted, in C when the
codec is built), then kio writes the response; (3) for comparison, the native msgpack
listener's ``decode_request`` of the same records as a rafka batch. Prints microseconds per
request and per record. docs/kafka-compat.md quotes its output (and the figures of the
per-record conversion it replaced: ``kafka_to_native`` / ``native_to_kafka`` in Python).
"""

from __future__ import annotations

import sys
import timeit

from rafka.broker.kafka import codec
from rafka.broker.kafka import records as kr
from rafka.broker.kafka.apis import SERVED
from rafka.log import batch as nb
from rafka.wire.protocol import ApiKey, Request, decode_request, encode_request


def main(n: int = 100, size: int = 200) -> None:
    rows = [kr.KafkaRow(i, i, b"key-%06d" % i, bytes([i % 251]) * size, [("h", b"v")])
            for i in range(n)]
    supported = {k: (lo, hi) for k, (lo, hi, _) in SERVED.items()}
    print(f"{n} records of {size} bytes per request, one partition; microseconds")
    print(f"{'path':36} {'per request':>12} {'per record':>11}")

    def report(name: str, fn, reps: int = 200) -> None:
        best = min(timeit.repeat(fn, number=reps, repeat=5)) / reps * 1e6
        print(f"{name:36} {best:12.1f} {best / n:11.2f}")

    for name, comp in (("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)):
        batch = kr.encode_batch(rows, first_timestamp=1_700_000_000_000, compression=comp,
                                producer_id=1, producer_epoch=0, base_sequence=0)
        req = codec.build(codec.request_schema(0, 9), {
            "transactional_id": None, "acks": -1, "timeout": 5000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]})
        payload = codec.encode_request(req, 1)[4:]

        def produce(payload: bytes = payload) -> None:
            r = codec.decode_request(payload, supported)
            kr.accept_produce(r.body.topic_data[0].partition_data[0].records)

        report(f"produce in ({name}): read + check", produce)
    native = nb.build_batch([(r.key, r.value, r.headers, 1_700_000_000_000 + i)
                             for i, r in enumerate(rows)])
    stored_kafka = bytes(kr.accept_produce(kr.encode_batch(rows, first_timestamp=1_700_000_000_000)))

    def fetch(stored: bytes) -> None:
        records = kr.to_kafka(stored)
        entity = codec.build(codec.response_schema(1, 12), {
            "throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
                {"topic": "t", "partitions": [{
                    "partition_index": 0, "error_code": 0, "high_watermark": n,
                    "last_stable_offset": n, "log_start_offset": 0,
                    "aborted_transactions": None, "preferred_read_replica": -1,
                    "records": records}]}]})
        codec.encode_response(1, 12, 1, entity)

    report("fetch out, Kafka batch: patch + write", lambda: fetch(stored_kafka))
    report("fetch out, native batch: convert + write", lambda: fetch(native))
    frame = encode_request(Request(int(ApiKey.PRODUCE), 1, {
        "acks": -1, "timeout_ms": 5000,
        "topics": [{"name": "t", "partitions": [{"partition": 0, "records": native}]}]}))
    report("native produce in: decode_request", lambda: decode_request(frame[4:]))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
