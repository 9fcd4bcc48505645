"""A restarted broker does not act on historical leaderships while replaying ``@metadata``
(docs/chaos-results.md #1, the variant), on real processes.

Topic ``replay`` is created (leader X, epoch 0); more than one metadata fetch batch (2000
records) of config changes follows; X is killed, so the controller moves the leadership to
another node in a later epoch. When X comes back, it used to publish the first batch on its own
(in which it still leads epoch 0) and briefly led that epoch again. Now its first image is the
caught-up one: after the restart it never makes the partition leader or follower in an epoch
older than the one current when it came back. Nothing asserts wall-clock times.
"""

from __future__ import annotations

import json
from typing import Any

from rafka.wire.protocol import ApiKey

from tests.integration.test_replication import (
    FAST,
    addr,
    call,
    create_topic,
    eventually,
    partition_md,
    restart,
    sigkill,
    wait_isr,
    wait_leader,
)

FETCH_BATCH = 2000  # MetadataListener's max_records
FILLER_TOPICS = 6
KEYS = ("retention.ms", "delete.retention.ms", "file.delete.delay.ms", "min.compaction.lag.ms",
        "segment.ms")


async def _fill_metadata_log(c: Any, records: int) -> None:
    """At least ``records`` ConfigRecords, FILLER_TOPICS x len(KEYS) per ALTER_CONFIGS."""
    names = [f"fill-{i}" for i in range(FILLER_TOPICS)]

    async def created() -> bool:
        body = await call(addr(c, 1), ApiKey.CREATE_TOPICS, {
            "topics": [{"name": n, "num_partitions": 1, "replication_factor": 1, "configs": {}}
                       for n in names], "timeout_ms": 30_000})
        return all(t["error"] in (0, 36) for t in body["topics"])  # 36: TOPIC_ALREADY_EXISTS

    await eventually(created, "filler topics")
    per_request = FILLER_TOPICS * len(KEYS)
    for round_ in range(records // per_request + 1):
        configs = {k: str(10_000_000 + round_) for k in KEYS}
        body_in = {"topics": [{"name": n, "configs": configs} for n in names]}

        async def altered(body_in: dict[str, Any] = body_in) -> bool:
            body = await call(addr(c, 1), ApiKey.ALTER_CONFIGS, body_in)
            return body.get("error", 0) == 0 and all(t["error"] == 0 for t in body["topics"])

        await eventually(altered, f"config round {round_}")


async def test_restarted_broker_never_leads_a_historical_epoch(cluster_factory: Any) -> None:
    c = cluster_factory(3, broker_config=FAST)
    topic = "replay"
    await create_topic(c, topic)
    md = await wait_isr(c, topic, 3)
    x = md["leader"]
    assert md["leader_epoch"] == 0
    await _fill_metadata_log(c, FETCH_BATCH + 200)
    others = [n for n in (1, 2, 3) if n != x]
    await sigkill(c, x)
    await wait_leader(c, topic, set(others), via=others)
    # the current registration while x is away (x's leadership has moved: a newer epoch)
    current = (await partition_md(c, topic, others))["leader_epoch"]
    assert current > 0
    await restart(c)
    await wait_isr(c, topic, 3)

    def after_restart(event: str) -> list[dict[str, Any]]:
        path = c.data_dir / f"node-{x}" / "events.jsonl"
        lines = [json.loads(ln) for ln in path.read_text().splitlines()]
        last_start = max(i for i, e in enumerate(lines) if e["event"] == "start")
        return [e for e in lines[last_start:] if e["event"] == event and e.get("tp") == f"{topic}/0"]

    roles = after_restart("partition")
    assert roles, "the restarted broker never took a role for the partition"
    stale = [e for e in roles if e["leader_epoch"] < current]
    assert not stale, f"node {x} acted on historical registrations after its restart: {stale}"
    assert all(e["leader"] != x for e in roles), roles  # it was the leader only in the past
