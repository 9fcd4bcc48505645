"""A topic's own ``flush.messages`` / ``flush.ms`` against the node's ``log.flush.policy``
(``broker/flush_rule.py``): the rule itself, then an in-process broker answering real PRODUCE
requests, whose logs say whether an acknowledged record was fsynced (``recovery_point``)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from rafka.broker.flush_rule import NEVER, FlushRule, flush_rule
from rafka.metadata.image import TopicPartition
from rafka.metadata.records import ConfigRecord, Partition, Topic
from rafka.wire.protocol import ApiKey

from .harness import BROKER_ID, Broker, batch, next_offsets, part, produce_body, running_broker

NODE = {"log.flush.interval.messages": 10_000, "log.flush.interval.ms": 1000}


@pytest.mark.parametrize("policy, topic, rule", [
    ("batch", {}, FlushRule(True)),
    ("none", {}, FlushRule(False)),
    ("messages", {}, FlushRule(False, every_messages=10_000)),
    ("interval", {}, FlushRule(False, every_ms=1000)),
    # a topic that sets either key overrides the node, as in Kafka
    ("none", {"flush.messages": "1"}, FlushRule(True)),
    ("none", {"flush.ms": "0"}, FlushRule(True)),
    ("batch", {"flush.messages": str(NEVER)}, FlushRule(False)),
    ("batch", {"flush.ms": str(NEVER)}, FlushRule(False)),
    ("batch", {"flush.messages": "500"}, FlushRule(False, every_messages=500)),
    ("none", {"flush.messages": "500", "flush.ms": "200"}, FlushRule(False, 500, 200)),
    ("batch", {"flush.messages": "1", "flush.ms": "200"}, FlushRule(True)),
    # other topic configs leave the node's rule alone
    ("none", {"retention.ms": "1000"}, FlushRule(False)),
])
def test_the_rule_of_a_partition(policy: str, topic: dict[str, str], rule: FlushRule) -> None:
    assert flush_rule(topic, {**NODE, "log.flush.policy": policy}) == rule


async def _topic(b: Broker, name: str, **configs: str) -> TopicPartition:
    tid = f"id-{name}"
    recs: list[Any] = [Topic(name, tid)]
    recs += [ConfigRecord("topic", name, k.replace("_", "."), v) for k, v in configs.items()]
    recs.append(Partition(tid, 0, (BROKER_ID,), (BROKER_ID,), BROKER_ID, 0, 0))
    await b.publisher.publish_records([(off, 1, r) for off, r in zip(next_offsets(len(recs)), recs, strict=True)])
    return TopicPartition(name, 0)


async def _set(b: Broker, topic: str, key: str, value: str | None) -> None:
    [off] = next_offsets(1)
    await b.publisher.publish_records([(off, 1, ConfigRecord("topic", topic, key, value))])


async def _produce(b: Broker, topic: str, n: int = 1, acks: int = 1) -> None:
    async with b.connect() as conn:
        for _ in range(n):
            resp = await conn.request(ApiKey.PRODUCE, produce_body(topic, batch(b"v"), acks=acks))
            assert part(resp.body)["error"] == 0


async def _until_flushed(b: Broker, tp: TopicPartition) -> None:
    log = b.rm.partitions[tp].log
    with trio.fail_after(10):
        while log.recovery_point < log.log_end_offset:
            await trio.sleep(0.005)


async def test_a_topic_opts_out_of_the_fsync_wait_on_a_batch_node(tmp_path: Any) -> None:
    async with running_broker(tmp_path, **{"log.flush.policy": "batch"}) as b:
        safe = await _topic(b, "safe")
        fast = await _topic(b, "fast", flush_messages=str(NEVER))
        await _produce(b, "safe", 3)
        await _produce(b, "fast", 3)
        await trio.testing.wait_all_tasks_blocked()
        s, f = b.rm.partitions[safe], b.rm.partitions[fast]
        assert s.log.recovery_point == s.log.log_end_offset == 3  # fsynced before each answer
        assert f.log.log_end_offset == 3 and f.log.recovery_point == 0  # never fsynced
        assert f.high_watermark == 3  # and acknowledged all the same


async def test_a_topic_opts_in_on_a_none_node(tmp_path: Any) -> None:
    async with running_broker(tmp_path, **{"log.flush.policy": "none"}) as b:
        safe = await _topic(b, "safe", flush_messages="1")
        other = await _topic(b, "other")
        for _ in range(3):
            await _produce(b, "safe")
            s = b.rm.partitions[safe]
            assert s.log.recovery_point == s.log.log_end_offset  # on disk when answered
        await _produce(b, "other", 3)
        await trio.testing.wait_all_tasks_blocked()
        assert b.rm.partitions[other].log.recovery_point == 0


async def test_a_config_change_switches_the_rule_and_the_high_watermark_stays(tmp_path: Any) -> None:
    async with running_broker(tmp_path, **{"log.flush.policy": "batch"}) as b:
        tp = await _topic(b, "t")
        p = b.rm.partitions[tp]
        await _produce(b, "t", 2)
        assert p.log.recovery_point == 2
        await _set(b, "t", "flush.messages", str(NEVER))
        assert p.flush_rule == FlushRule(False)
        await _produce(b, "t", 2)
        await trio.testing.wait_all_tasks_blocked()
        assert (p.log.recovery_point, p.log.log_end_offset, p.high_watermark) == (2, 4, 4)
        # back to fsync before acknowledging: the unflushed tail is fsynced by the group commit,
        # and what was exposed meanwhile stays exposed (the HW never moves back)
        await _set(b, "t", "flush.messages", "1")
        assert p.flush_rule == FlushRule(True) and p.high_watermark == 4
        await _until_flushed(b, tp)
        await _produce(b, "t")
        assert p.log.recovery_point == p.log.log_end_offset == p.high_watermark == 5
        # the key removed: the node's policy again
        await _set(b, "t", "flush.messages", str(NEVER))
        await _set(b, "t", "flush.messages", None)
        assert p.flush_rule == FlushRule(True)


async def test_every_messages_fsyncs_once_that_many_records_are_unflushed(tmp_path: Any) -> None:
    async with running_broker(tmp_path, **{"log.flush.policy": "none"}) as b:
        tp = await _topic(b, "t", flush_messages="3")
        rounds = b.rm.flush_rounds
        await _produce(b, "t", 2)
        await trio.testing.wait_all_tasks_blocked()
        assert b.rm.flush_rounds == rounds and b.rm.partitions[tp].log.recovery_point == 0
        await _produce(b, "t")
        await _until_flushed(b, tp)
        assert b.rm.flush_rounds == rounds + 1


async def test_every_ms_fsyncs_without_another_append_and_then_rests(tmp_path: Any) -> None:
    async with running_broker(tmp_path, **{"log.flush.policy": "none"}) as b:
        tp = await _topic(b, "t", flush_ms="20")
        await _produce(b, "t", 2)
        await _until_flushed(b, tp)
        rounds = b.rm.flush_rounds
        await trio.sleep(0.2)  # ten periods with nothing new: no more rounds
        assert b.rm.flush_rounds == rounds
        await _produce(b, "t")
        await _until_flushed(b, tp)
        assert b.rm.flush_rounds == rounds + 1


async def test_a_follower_syncs_before_reporting_only_under_fsync_acks(tmp_path: Any) -> None:
    """What the fetcher asks (``ReplicaManager._follower_needs_sync``): the replication side
    of the same rule (tests/replication/test_fetcher.py has the fetcher honour it)."""
    async with running_broker(tmp_path, **{"log.flush.policy": "none"}) as b:
        await _topic(b, "safe", flush_messages="1")
        await _topic(b, "fast")
        assert b.rm._follower_needs_sync(("safe", 0)) is True
        assert b.rm._follower_needs_sync(("fast", 0)) is False
        assert b.rm._follower_needs_sync(("gone", 0)) is False
        await _set(b, "fast", "flush.ms", "0")
        assert b.rm._follower_needs_sync(("fast", 0)) is True
