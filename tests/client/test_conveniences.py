"""The Python client conveniences of issue 15 (``rafka.client.aio.conveniences``): serializers and
deserializers, ``send_and_wait``, ``getmany`` and the admin's consumer-group methods — pure
checks of the no-serializer fast paths, then the real thing on a one-node cluster
(``conftest.bootstrap``).
"""

from __future__ import annotations

import json
import uuid

import pytest
import trio
from rafka.client import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    Producer,
    RecordMetadata,
    TopicPartition,
    errors,
)
from rafka.client.aio.conveniences import (
    ConsumerGroupListing,
    deserializing_take,
    install_serializers,
)
from rafka.client.aio.fetch import CompletedFetch
from rafka.client.types import ConsumerRecord

from .conftest import drain

pytestmark = pytest.mark.timeout(300)


def test_no_serializers_keep_the_class_send_paths() -> None:
    p = AsyncProducer("127.0.0.1:1")
    assert not {"send", "send_threadsafe", "send_nowait", "send_batch", "send_batch_threadsafe"} & set(vars(p))
    assert deserializing_take(CompletedFetch.take, None, None) is CompletedFetch.take
    assert AsyncConsumer(bootstrap_servers="127.0.0.1:1")._take is CompletedFetch.take


def test_serializers_wrap_every_send_path_and_pass_none_through() -> None:
    class Recorder:
        def send_threadsafe(self, *args: object) -> tuple[object, ...]:
            return args

        send_nowait = send_threadsafe

        def send_batch_threadsafe(self, *args: object) -> tuple[object, ...]:
            return args

        async def send(self, *args: object) -> tuple[object, ...]:
            return args

        send_batch = send

    r = Recorder()
    install_serializers(r, str.encode, lambda v: json.dumps(v).encode())  # type: ignore[arg-type]
    assert r.send_threadsafe("t", {"a": 1}, "k") == ("t", b'{"a": 1}', b"k", None, None, None)
    assert r.send_nowait("t", None, None, [("h", b"1")], 2) == ("t", None, None, [("h", b"1")], 2, None)
    assert r.send_batch_threadsafe("t", [1, None], ["a", None]) == ("t", [b"1", None], [b"a", None], None, None, None)
    assert trio.run(r.send, "t", [1], None) == ("t", b"[1]", None, None, None, None)
    assert trio.run(r.send_batch, "t", [2], None) == ("t", [b"2"], None, None, None, None)


def test_deserializing_take_builds_records_with_objects() -> None:
    raw = [ConsumerRecord("t", 0, 5, 1, 0, b"k", b'{"n": 1}', ()), ConsumerRecord("t", 0, 6, 1, 0, None, None, ())]

    def take(cf: object, position: int, n: int) -> tuple[list[ConsumerRecord], int]:
        return raw, 7

    recs, pos = deserializing_take(take, bytes.decode, json.loads)(None, 5, 10)  # type: ignore[arg-type]
    assert pos == 7 and [type(r) for r in recs] == [ConsumerRecord, ConsumerRecord]
    assert recs[0] == ("t", 0, 5, 1, 0, "k", {"n": 1}, ())
    assert recs[1].key is None and recs[1].value is None  # a tombstone stays None


# ---------------------------------------------------------------------- real broker


def test_sync_serializers_round_trip(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    with Producer(bootstrap, key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode()) as p:
        meta = p.send_and_wait(topic, {"n": 0}, key="a")
        assert isinstance(meta, RecordMetadata) and meta.topic == topic and meta.offset >= 0
        p.send(topic, {"n": 1}, key="b")
        p.send(topic, None, key="tomb")  # None is not serialized: a tombstone
        p.send_batch(topic, [{"n": 2}, {"n": 3}], keys=["c", None]).result()
        p.flush()
    with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                  key_deserializer=bytes.decode, value_deserializer=json.loads) as c:
        c.seek_to_beginning()
        got = {(r.key, json.dumps(r.value)) for r in drain(c, 5)}
    assert got == {("a", '{"n": 0}'), ("b", '{"n": 1}'), ("tomb", "null"), ("c", '{"n": 2}'), (None, '{"n": 3}')}


def test_async_send_and_wait_and_getmany(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def main() -> None:
        async with AsyncProducer(bootstrap, value_serializer=str.encode) as p:
            metas = [await p.send_and_wait(topic, f"v{i}", partition=i % 2) for i in range(6)]
            assert [(m.partition, m.offset) for m in metas] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
            with pytest.raises(errors.UnknownTopicOrPartitionError):
                await p.send_and_wait(topic, "x", partition=7)
        async with AsyncConsumer(bootstrap_servers=bootstrap, value_deserializer=bytes.decode) as c:
            c.assign([p0, p1])
            await c.seek_to_beginning()
            only1: list[str] = []
            with trio.fail_after(60):
                while len(only1) < 3:
                    batch = await c.getmany(p1, timeout_ms=500)
                    assert set(batch) <= {p1}
                    only1 += [r.value for r in batch.get(p1, [])]
                assert only1 == ["v1", "v3", "v5"]
                rest = await c.getmany(timeout_ms=5000, max_records=2)
            assert list(rest) == [p0] and [r.value for r in rest[p0]] == ["v0", "v2"]
            assert await c.position(p0) == 2 and await c.position(p1) == 3

    trio.run(main)


def test_admin_consumer_group_methods(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Producer(bootstrap) as p:
        for i in range(4):
            p.send(topic, b"v%d" % i, partition=i % 2)
        p.flush()
    with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False) as c:
        assert len(drain(c, 4)) == 4
        c.commit()
    with Admin(bootstrap) as admin:
        listed = {g.group_id: g for g in admin.list_consumer_groups()}
        assert isinstance(listed[group], ConsumerGroupListing) and listed[group].members == 0
        offsets = admin.list_consumer_group_offsets(group)
        assert offsets == {TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 2}
        assert admin.list_consumer_group_offsets(group, [TopicPartition(topic, 1)]) == {TopicPartition(topic, 1): 2}
        desc = admin.describe_consumer_groups([group])[group]
        assert desc["members"] == [] and {(r["partition"], r["committed"], r["lag"]) for r in desc["partitions"]} \
            == {(0, 2, 0), (1, 2, 0)}
        assert admin.delete_consumer_groups([group]) == {group: None}
        assert group not in {g.group_id for g in admin.list_consumer_groups()}
        assert admin.list_consumer_group_offsets(group) == {}
        missing = admin.delete_consumer_groups(["no-such-group"], raise_on_error=False)
        assert isinstance(missing["no-such-group"], errors.RafkaError)
        with pytest.raises(errors.RafkaError):
            admin.delete_consumer_groups(["no-such-group"])
