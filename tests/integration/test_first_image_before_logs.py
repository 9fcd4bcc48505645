"""A restarted broker's first metadata image is current before its partition logs are open
(issue 27, docs/quorum.md "the first image").

A real node holding 200 single-partition topics, each with an acknowledged record, is killed
(``kill -9``: every log needs recovery) and restarted. Before the change its replica manager
opened every log while the first image waited, so a forwarded CREATE_TOPICS — which waits for
the image to reach its own offset — could run out of time. The order is read from the node's
``events.jsonl``: the ``metadata-image`` line of the first image after the restart must come
before the ``partition`` lines of (almost) all the logs it names, which the replica manager
writes as it opens each one. Then nothing may be lost: every record is still there, and a
produce to the partition opened last succeeds (the client retries the NOT_LEADER_OR_FOLLOWER a
partition answers while its log is opening) at the next offset.
"""

from __future__ import annotations

import json
from typing import Any

from rafka.broker.events import event_files
from rafka.client.sync import Admin, Consumer, Producer, TopicPartition

TOPICS = 200


def _events(c: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for p in event_files(c.data_dir / "node-1" / "events.jsonl")
            for line in p.read_text().splitlines()]


def test_first_image_is_current_before_the_logs_of_a_restart_are_open(cluster_factory: Any) -> None:
    c = cluster_factory(1)
    names = [f"many-{i:03d}" for i in range(TOPICS)]
    with Admin(bootstrap_servers=c.bootstrap, request_timeout_ms=30_000) as admin:
        for start in range(0, TOPICS, 50):
            errors = admin.create_topics([(n, 1, 1) for n in names[start:start + 50]])
            assert not any(errors.values()), errors
    with Producer(bootstrap_servers=c.bootstrap, acks="all") as p:
        futures = [p.send(n, value=n.encode()) for n in names]
        assert [f.result(timeout=60).offset for f in futures] == [0] * TOPICS

    c.kill(1)
    c.up()  # the same node, same data: kill -9 left every log to recover

    # nothing lost: a produce to the partition opened last lands after its record, and every
    # record is there (the client retried while the log was opening)
    last = names[-1]  # the opener goes in partition order
    with Producer(bootstrap_servers=c.bootstrap, acks="all") as p:
        assert p.send(last, value=b"after").result(timeout=60).offset == 1
    with Consumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        tps = [TopicPartition(n, 0) for n in names]
        assert consumer.end_offsets(tps) == {tp: 2 if tp.topic == last else 1 for tp in tps}

    events = _events(c)
    start = max(i for i, e in enumerate(events) if e["event"] == "start")
    after = events[start:]
    first = next(i for i, e in enumerate(after) if e["event"] == "metadata-image")
    assert after[first]["first"] and after[first]["local_changes"] >= TOPICS
    opened_at: dict[str, int] = {}
    for i, e in enumerate(after):
        if e["event"] == "partition" and e["tp"].startswith("many-"):
            opened_at.setdefault(e["tp"], i)  # its first registration: the log just opened
    assert len(opened_at) == TOPICS
    before = sorted(tp for tp, i in opened_at.items() if i < first)
    # the image was current before any log of it opened (before the change: after all of them)
    assert not before, before
    assert opened_at[f"{last}/0"] > first
