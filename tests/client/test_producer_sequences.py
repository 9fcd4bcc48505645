"""An idempotent producer's sequences stay usable after the broker refuses or forgets them.

Against a real broker (tests/client/conftest.py, one node): a batch refused under min ISR gives
its sequences back (``_NOT_APPENDED`` in client/aio/sender.py), and a producer whose id the
partition's leader no longer knows takes a new one and goes on (the sender's module text: "A
new producer id when the broker forgot ours").
"""

from __future__ import annotations

import time

import pytest
from rafka.client import Consumer, Producer, TopicPartition, errors
from rafka.wire.errors import ErrorCode

from tests.client.test_producer_split import _offsets


def test_a_send_refused_under_min_isr_leaves_no_sequence_gap(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    """NOT_ENOUGH_REPLICAS is answered before anything is appended (broker/replication/state.py,
    ``check_produce``). A batch that fails for good with it — ``retries=0`` here, as in the chaos
    queue workload — must give its sequences back, or the partition's next batch of this
    idempotent producer leaves a gap the broker refuses for good (UNKNOWN_PRODUCER_ID for a
    partition the producer never wrote, OUT_OF_ORDER_SEQUENCE_NUMBER after that): chaos queue
    seeds 3 and 5 at node code 29d54827d6ea, where producers failed every send for ~80 s."""
    from rafka.client import Admin

    topic = make_topic(1, {"min.insync.replicas": "2"})  # one replica: acks=all is refused
    with Producer(bootstrap, acks="all", enable_idempotence=True, retries=0, linger_ms=0) as p:
        for _ in range(2):  # its first sequences, and again once the partition has its state
            with pytest.raises(errors.RafkaError) as ei:
                p.send(topic, value=b"refused", partition=0).result(30)
            assert ei.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
            with Admin(bootstrap) as admin:
                admin.alter_configs(topic, {"min.insync.replicas": "1"})
            deadline = time.monotonic() + 30
            while True:  # the leader applies the new config from the metadata log
                try:
                    meta = p.send(topic, value=b"accepted", partition=0).result(30)
                    break
                except errors.RafkaError as exc:
                    assert exc.code == ErrorCode.NOT_ENOUGH_REPLICAS, exc  # not a sequence gap
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            with Admin(bootstrap) as admin:
                admin.alter_configs(topic, {"min.insync.replicas": "2"})
            deadline = time.monotonic() + 30
            while True:  # wait until the leader refuses again before the next round
                try:
                    p.send(topic, value=b"accepted", partition=0).result(30)
                except errors.RafkaError as exc:
                    assert exc.code == ErrorCode.NOT_ENOUGH_REPLICAS, exc
                    break
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert meta.offset >= 0
    values = [v for _o, v in _offsets(bootstrap, topic, 1)]
    assert values and set(values) == {b"accepted"}


def _recreate(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and create it again under the same name (one partition, one replica):
    its new partition holds no producer state."""
    from rafka.client import Admin

    with Admin(bootstrap) as admin:
        admin.delete_topic(topic)
        deadline = time.monotonic() + 30
        while True:  # the deletion completes, then the name can be taken again
            try:
                admin.create_topic(topic, 1, 1)
                return
            except errors.RafkaError as exc:
                assert exc.code == ErrorCode.TOPIC_ALREADY_EXISTS, exc
                assert time.monotonic() < deadline
                time.sleep(0.1)


def test_a_producer_the_broker_forgot_gets_a_new_id_and_goes_on(bootstrap: str, topic_name: str) -> None:
    """The partition's leader holds no state for the producer (here: the topic was deleted and
    created again under the same name; in production also a producer idle past the 24 h
    expiry): its next sequence is refused for good with UNKNOWN_PRODUCER_ID. That batch fails,
    the producer takes a new producer id (Kafka's KIP-360 for idempotent producers) and every
    later send goes through — before, every later send of the partition was refused."""
    from rafka.client import Admin

    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    with Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=0) as p:
        assert [p.send(topic_name, value=b"old%d" % i, partition=0).result(30).offset
                for i in range(3)] == [0, 1, 2]
        first_id = p.statistics()["producer_id"]
        _recreate(bootstrap, topic_name)
        with pytest.raises(errors.RafkaError) as ei:  # sequence 3 on a partition that never saw us
            p.send(topic_name, value=b"refused", partition=0).result(60)
        assert ei.value.code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        futs = [p.send(topic_name, value=b"new%d" % i, partition=0) for i in range(50)]
        assert [f.result(60).offset for f in futs] == list(range(50))
        st = p.statistics()
        assert st["producer_id_resets"] == 1 and st["producer_id"] != first_id
    assert [v for _o, v in _offsets(bootstrap, topic_name, 50)] == [b"new%d" % i for i in range(50)]


def test_pipelined_sends_around_a_producer_id_reset_are_neither_lost_silently_nor_doubled(
        bootstrap: str, topic_name: str) -> None:
    """The same, with 300 records sent without waiting right after the topic came back: the
    batches in flight under the old id fail (each with an error the caller sees); the reset
    waits for all of them, and everything after goes through under the new id, in order, once
    each — the log holds exactly the acknowledged records."""
    from rafka.client import Admin

    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    with Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=0,
                  batch_size=512) as p:
        p.send(topic_name, value=b"old", partition=0).result(30)
        _recreate(bootstrap, topic_name)
        futs = [p.send(topic_name, value=b"%04d" % i, partition=0) for i in range(300)]
        acked: list[tuple[int, bytes]] = []
        failed = 0
        for i, f in enumerate(futs):
            try:
                acked.append((f.result(60).offset, b"%04d" % i))
            except errors.RafkaError as exc:
                assert exc.code in (ErrorCode.UNKNOWN_PRODUCER_ID,
                                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER), exc
                assert not acked, "a refusal after a success: the reset lost order"
                failed += 1
        assert failed >= 1 and p.statistics()["producer_id_resets"] == 1
        assert [o for o, _v in acked] == list(range(len(acked)))
    assert _offsets(bootstrap, topic_name, len(acked)) == acked
    tp = TopicPartition(topic_name, 0)
    with Consumer(bootstrap_servers=bootstrap) as c:
        assert c.end_offsets([tp])[tp] == len(acked)  # nothing beyond them either
