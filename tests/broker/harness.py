"""An in-process broker on an ephemeral loopback port, fed metadata records directly.

``running_broker(tmp_path, topics={"t": 1})`` assembles what ``rafka/node.py`` assembles for a
broker — ReplicaManager, MetadataPublisher, NodeApi, Server — minus the controller quorum:
tests publish the same ``@metadata`` records a controller would write (RegisterBroker, Topic,
Partition) through ``MetadataPublisher.publish_records``, the broker's one path for metadata.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import trio
from rafka.broker.config import BROKER_SETTINGS, NodeConfig, parse_config
from rafka.broker.events import EventLog
from rafka.broker.handlers import NodeApi
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.broker.replica_manager import ReplicaManager
from rafka.broker.server import Server, ServerLimits
from rafka.log.batch import build_batch
from rafka.metadata.records import Partition, RegisterBroker, Topic, UnfenceBroker
from rafka.wire.connection import Connection, connect
from rafka.wire.protocol import ApiKey

BROKER_ID = 1
_offsets = itertools.count(100)


def node_config(tmp_path: Path, **broker: Any) -> NodeConfig:
    return parse_config({
        "node_id": BROKER_ID, "roles": ["broker"], "data_dir": str(tmp_path / "data"),
        "listener": "127.0.0.1:0", "voters": [{"id": 9, "raft": "127.0.0.1:1", "rpc": "127.0.0.1:2"}],
        "broker": broker,
    }, "test.toml")


@dataclass
class Broker:
    port: int
    publisher: MetadataPublisher
    rm: ReplicaManager
    server: Server
    config: NodeConfig

    async def add_topic(self, name: str, partitions: int = 1) -> None:
        tid = f"id-{name}"
        recs: list[Any] = [Topic(name, tid)]
        recs += [Partition(tid, p, (BROKER_ID,), (BROKER_ID,), BROKER_ID, 0, 0) for p in range(partitions)]
        await self.publisher.publish_records([(next(_offsets), 1, r) for r in recs])

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[Connection]:
        async with connect("127.0.0.1", self.port) as conn:
            yield conn


@contextlib.asynccontextmanager
async def running_broker(tmp_path: Path, *, topics: dict[str, int] | None = None,
                         limits: ServerLimits | None = None, first_image: list[Any] | None = None,
                         first_entries: list[tuple[int, int, Any]] | None = None,
                         **broker: Any) -> AsyncIterator[Broker]:
    """``first_image``: records published with the registration, in the broker's first image
    (a restarted broker's first image is the whole committed state, topics included);
    ``first_entries``: the same as ``(offset, epoch, record)`` entries at offsets of the
    test's choosing, after the registration's."""
    cfg = node_config(tmp_path, **broker)
    events = EventLog(cfg.data_dir / "events.jsonl", BROKER_ID)
    rm = ReplicaManager(BROKER_ID, cfg.data_dir, dict(cfg.broker), cfg.topic_defaults(), events)
    pub = MetadataPublisher(BROKER_ID)
    pub.subscribe(rm.on_metadata)
    api = NodeApi(cluster_id="test", replica_manager=rm, publisher=pub, channel=None,
                  topic_defaults=cfg.topic_defaults())
    server = Server(api.dispatch, "127.0.0.1", 0, limits or ServerLimits())
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(rm.run)
            port = await nursery.start(server.serve)
            b = Broker(port, pub, rm, server, cfg)
            await pub.publish_records([
                (next(_offsets), 1, RegisterBroker(BROKER_ID, "inc", "127.0.0.1", port)),
                (next(_offsets), 1, UnfenceBroker(BROKER_ID)),
                *((next(_offsets), 1, r) for r in first_image or ()),
                *(first_entries or ()),
            ])
            for name, n in (topics or {}).items():
                await b.add_topic(name, n)
            yield b
            nursery.cancel_scope.cancel()
    finally:
        rm.close()
        events.close()


def next_offsets(n: int) -> list[int]:
    """``n`` increasing metadata offsets after every one this process's brokers have used (a
    test publishing records of its own must not reuse an offset an earlier test took)."""
    return [next(_offsets) for _ in range(n)]


def batch(*values: bytes, key: bytes | None = None) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(key, v, [], now) for v in values])


def produce_body(topic: str, records: bytes, partition: int = 0, acks: int = -1) -> dict[str, Any]:
    return {"acks": acks, "timeout_ms": 10_000,
            "topics": [{"name": topic, "partitions": [{"partition": partition, "records": records}]}]}


def fetch_body(topic: str, offset: int, partition: int = 0, *, max_wait_ms: int = 0,
               min_bytes: int = 1, max_bytes: int = 1 << 20) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "topics": [{"name": topic, "partitions": [
                {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]}


def list_offsets_body(topic: str, timestamp: int, partition: int = 0) -> dict[str, Any]:
    return {"topics": [{"name": topic, "partitions": [{"partition": partition, "timestamp": timestamp}]}]}


def part(body: dict[str, Any]) -> dict[str, Any]:
    """The single partition entry of a produce/fetch/list-offsets response."""
    return body["topics"][0]["partitions"][0]


def raw_request(api_key: int, cid: int, body: Any, version: int = 0) -> bytes:
    payload = msgpack.packb([int(api_key), version, cid, "raw", body], use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


_buffers: dict[int, bytearray] = {}


async def read_response(stream: trio.SocketStream) -> tuple[int, dict[str, Any]] | None:
    """One response frame (cid, body), or None if the peer closed the connection. Bytes
    of later frames stay buffered for the next call on the same stream."""
    buf = _buffers.setdefault(id(stream), bytearray())
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
        data = await stream.receive_some(65536)
        if not data:
            return None
        buf += data
    (n,) = struct.unpack(">I", buf[:4])
    frame = bytes(buf[4:4 + n])
    del buf[:4 + n]
    (hlen,) = struct.unpack(">I", frame[:4])
    cid, body = msgpack.unpackb(frame[4:4 + hlen], raw=False, strict_map_key=False)
    return cid, body


async def read_until_closed(stream: trio.SocketStream) -> bytes:
    out = b""
    while True:
        try:
            data = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return out
        if not data:
            return out
        out += data


__all__ = ["ApiKey", "BROKER_SETTINGS", "Broker", "running_broker", "batch", "produce_body",
           "fetch_body", "list_offsets_body", "part", "raw_request", "read_response",
           "read_until_closed"]
