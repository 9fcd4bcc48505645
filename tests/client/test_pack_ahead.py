"""The producer packs the records of batches that wait for an in-flight slot ahead of time
(``AsyncProducer._pack_ahead``, ``ProducerBatch.pack``) and frames them when they are sent.

Pure: a batch packed ahead frames to exactly the bytes of a direct build with the sequence it
gets later (plain and lz4), a pack made for another compression is redone, and a batch whose
sequence moves after it was packed is framed with the new one. Real broker
(tests/client/conftest.py): an idempotent producer held to one request in flight packs batches
ahead, and every record lands once, in order, where its metadata says.
"""

from __future__ import annotations

import time

import trio
from rafka.client import AsyncAdmin, AsyncProducer, Consumer, TopicPartition
from rafka.client.aio.accumulator import PartitionState, ProducerBatch, RecordAccumulator
from rafka.log.batch import build_batch_rows, parse_header


def _batch(values: list[bytes], ts0: int = 1000) -> ProducerBatch:
    acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 24, linger_ms=5,
                            wakeup=lambda: None, loop_thread=-1)
    for i, v in enumerate(values):
        acc.append("t", 0, b"k%d" % (i % 3), v, [("h", b"x")] if i % 2 else [], ts0 + 3 * i,
                   12 + len(v), 1)
    (b,) = acc.drain(time.monotonic(), force=True)
    return b


def _direct(b: ProducerBatch, compression: str, seq: int) -> bytes:
    return build_batch_rows(list(b.records), b.ts0, compression=compression, producer_id=7,
                            producer_epoch=2, base_sequence=seq)


def test_a_batch_packed_ahead_frames_to_the_bytes_of_a_direct_build() -> None:
    for compression in ("none", "lz4"):
        b = _batch([b"value-%d" % i * 5 for i in range(200)])
        b.pack(compression)
        assert b.packed is not None
        got = b.encode(compression=compression, producer_id=7, producer_epoch=2, base_sequence=41)
        assert got == _direct(b, compression, 41)
        assert b.packed is None  # the section is not kept once framed


def test_a_pack_for_another_compression_is_redone() -> None:
    b = _batch([b"v" * 300] * 50)
    b.pack("none")
    got = b.encode(compression="lz4", producer_id=7, producer_epoch=2, base_sequence=0)
    assert got == _direct(b, "lz4", 0)
    assert parse_header(got, 0).attributes & 0x7 != 0  # lz4 bits set


def test_a_sequence_moved_after_packing_is_framed_with_the_new_one() -> None:
    """``release_sequences`` renumbers later batches (their payload is dropped); one packed
    ahead is framed with the sequence it has when it is sent."""
    st = PartitionState()
    bs = [_batch([b"v"] * n) for n in (3, 1, 4)]
    st.pending.extend(bs)
    for _ in bs:
        nb = st.next_to_send(0, 5)
        assert nb is not None
        st.assign_sequence(nb)
        nb.pack("none")
        st.sent(nb)
    st.done(bs[1])
    st.release_sequences(bs[1])
    assert bs[2].base_sequence == 3
    got = bs[2].encode(compression="none", producer_id=7, producer_epoch=2,
                       base_sequence=bs[2].base_sequence)
    assert parse_header(got, 0).base_sequence == 3
    assert got == _direct(bs[2], "none", 3)


async def test_batches_waiting_for_a_slot_are_packed_ahead_and_land_in_order(
        bootstrap: str, topic_name: str) -> None:
    topic = topic_name
    async with AsyncAdmin(bootstrap) as admin:
        await admin.create_topic(topic, 3, 1)
    n = 6000
    values = [b"%06d" % i + b"-" * (i % 90) for i in range(n)]
    keys = [b"key-%d" % (i % 23) for i in range(n)]
    async with AsyncProducer(bootstrap, acks="all", enable_idempotence=True, batch_size=8192,
                             linger_ms=0, max_in_flight_requests_per_connection=1) as p:
        fut = await p.send_batch(topic, values, keys=keys)
        with trio.fail_after(60):
            metas = await fut
        stats = p.statistics()
    assert stats["batches_packed_ahead"] > 0
    assert stats["incomplete_batches"] == 0 and stats["buffer_used_bytes"] == 0
    where = {(m.partition, m.offset): i for i, m in enumerate(metas)}
    assert len(where) == n

    def read() -> dict[tuple[int, int], tuple[bytes, bytes]]:
        got: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, q) for q in range(3)])
            deadline = time.monotonic() + 60
            while len(got) < n and time.monotonic() < deadline:
                for tp, recs in c.poll(timeout_ms=500).items():
                    got.update({(tp.partition, r.offset): (r.key, r.value) for r in recs})
        return got

    got = await trio.to_thread.run_sync(read)
    assert len(got) == n
    for (q, off), (k, v) in got.items():
        i = where[(q, off)]
        assert (k, v) == (keys[i], values[i])
    for q in range(3):  # each partition: its records in input order, offsets without gaps
        idx = [where[(q, o)] for o in sorted(o for (qq, o) in got if qq == q)]
        assert idx == sorted(idx)
        offs = sorted(o for (qq, o) in got if qq == q)
        assert offs == list(range(offs[0], offs[0] + len(offs)))

