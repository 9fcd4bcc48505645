"""Which node answered each queue-workload op (issue 28), against 3 real ``rafka server`` nodes.

The ``node`` of an op comes from the client, not from the backend's addresses, so the netns
(or, without root, the local) backend stands for all of them.  A new producer knows no leader
before its first metadata answer, so its first send's invoke has no node; before the fix the
completion copied the invoke's, and the docker seed-1 anomaly (a producer's first send, acked
and later truncated on another node) could not be told apart by the checker.  Each completion
must carry the node that answered: the partition's leader (per DESCRIBE on the cluster) for
sends, polls and final reads, the group coordinator for commits.
"""

from __future__ import annotations

import pytest
import trio
from rafka.chaos_tests.backends.netns import netns_supported
from rafka.chaos_tests.campaign import bootstrap_of, make_cluster, wait_brokers
from rafka.chaos_tests.history import HistoryWriter, read_history
from rafka.chaos_tests.workloads.common import RunContext
from rafka.chaos_tests.workloads.queue import (
    QueueSpec,
    _commit,
    _final_read_one,
    _poll,
    _send_one,
    _tp,
    create_queue_topic,
)
from rafka.client.aio.coordinator import KEY_TYPE_GROUP, coordinator_node


def _backend_name() -> str:
    return "netns" if netns_supported() is None else "local"


@pytest.mark.chaos
@pytest.mark.timeout(240)
async def test_completions_record_the_node_that_answered(tmp_path):
    from rafka.client import AsyncAdmin, AsyncConsumer, AsyncProducer

    spec = QueueSpec(topic="nodes", partitions=3)
    backend = make_cluster(_backend_name(), tmp_path / "work", 3)
    async with backend:
        for n in backend.spec.node_ids:
            await backend.start_node(n, wait_ready_s=60)
        bootstrap = bootstrap_of(backend)
        await wait_brokers(bootstrap, 3, 60)
        with HistoryWriter(tmp_path / "history.jsonl") as history:
            ctx = RunContext(history, bootstrap, op_timeout_s=10.0, request_timeout_ms=5000)
            await create_queue_topic(ctx, spec)
            async with AsyncAdmin(bootstrap_servers=bootstrap) as admin:
                desc = await admin.describe_topic(spec.topic)
            leaders = {p.partition: p.leader for p in desc.partitions}

            with trio.fail_after(120):
                # as producer_process configures it: retries=0, one request in flight
                async with AsyncProducer(bootstrap_servers=bootstrap, acks="all",
                                         enable_idempotence=True, retries=0, linger_ms=0,
                                         max_in_flight_requests_per_connection=1,
                                         request_timeout_ms=5000) as producer:
                    for i in range(2 * spec.partitions):  # the first send knows no leader yet
                        assert await _send_one(ctx, producer, 1, spec.topic,
                                               i % spec.partitions) == "ok"
                async with AsyncConsumer(bootstrap_servers=bootstrap, group_id="g",
                                         auto_offset_reset="earliest",
                                         enable_auto_commit=False) as consumer:
                    consumer.assign([_tp(spec.topic, 0)])
                    records: list = []
                    while not records:
                        kind, records = await _poll(ctx, consumer, 2)
                        assert kind == "ok"
                    assert await _commit(ctx, consumer, 2, "g", {(spec.topic, 0): 1}) == "ok"
                await _final_read_one(ctx, spec.topic, 1, 60)
            async with AsyncAdmin(bootstrap_servers=bootstrap) as admin:  # asked afresh
                coordinator = await coordinator_node(admin._core, KEY_TYPE_GROUP, "g")
        assert {p.partition: p.leader for p in desc.partitions} == leaders

    ops = read_history(tmp_path / "history.jsonl")
    sends = [op for op in ops if op.f == "send"]
    assert sends[0].type == "invoke" and sends[0].node is None  # why the completion must say it
    done = [op for op in sends if op.type == "ok"]
    assert len(done) == 2 * spec.partitions
    assert [op.node for op in done] == [leaders[op.value["partition"]] for op in done]
    polls = [op for op in ops if op.f == "poll" and op.type == "ok" and op.value["records"]]
    assert polls[-1].node == leaders[0]
    assert polls[-1].value["leaders"] == {f"{spec.topic}/0": leaders[0]}
    commit = next(op for op in ops if op.f == "commit" and op.type == "ok")
    assert commit.node == coordinator
    final = next(op for op in ops if op.f == "final-read" and op.type == "ok")
    assert final.value["complete"] and final.node == leaders[1]
