"""A Kafka fetch answer sent from the segment file (broker/kafka/file_records.py): real files,
real sockets. The frame it sends must be byte for byte the frame the in-memory path builds."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.broker.kafka import codec
from rafka.broker.kafka import file_records as fr
from rafka.broker.kafka import records as kr
from rafka.broker.kafka.answer_templates import FetchAnswers
from rafka.log import batch as nb


class _Slice:
    """What a native fetch reply holds: an owned fd and a range of whole batches."""

    def __init__(self, path: Path, position: int, length: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.position, self.length, self.data = position, length, None

    def read_bytearray(self) -> bytearray:
        return bytearray(os.pread(self.fd, self.length, self.position))


def _kafka_batch(base: int, n: int, value_size: int, seed: int = 0) -> bytes:
    rows = [kr.KafkaRow(i, i, b"k%d-%d" % (seed, base + i), bytes([seed % 251]) * value_size,
                        [("h", b"%d" % i)]) for i in range(n)]
    return kr.encode_batch(rows, first_timestamp=1_700_000_000_000, base_offset=base)


def _stored(batch: bytes) -> bytes:
    """As the log stores a Kafka batch: the magic byte tagged (records.accept_produce)."""
    b = bytearray(batch)
    b[16] = nb.KAFKA_MAGIC & 0xFF
    return bytes(b)


def _segment(tmp_path: Path, batches: list[bytes], name: str = "seg") -> tuple[Path, int]:
    """A file with some leading bytes (a slice need not start at 0) and then ``batches``."""
    path = tmp_path / name
    path.write_bytes(b"\0" * 123 + b"".join(batches))
    return path, 123


def _answer(records: list[Any]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": f"t-{i}", "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": 99, "last_stable_offset": 99,
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": r}]} for i, r in enumerate(records)]}


def _encode(version: int):  # type: ignore[no-untyped-def]
    schema = codec.response_schema(1, version)
    return schema.__flexible__, lambda a: codec.encode_response(1, version, 7, codec.build(schema, a))


def _bytes_of(frame: Any) -> bytes:
    """What a ``FileFrame`` puts on the wire, read back part by part."""
    if not isinstance(frame, fr.FileFrame):
        return bytes(frame)
    out = b""
    for part in frame.parts:
        out += part if isinstance(part, bytes) else os.pread(part[0], part[2], part[1])
    return out


def _in_memory(answer: dict[str, Any]) -> dict[str, Any]:
    """What the frame must carry: every partition's records read and converted in memory."""
    for t in answer["responses"]:
        for p in t["partitions"]:
            if isinstance(p["records"], fr.FileRecords):
                p["records"] = p["records"].materialize()
    return answer


@settings(max_examples=40, deadline=None)
@given(version=st.sampled_from([4, 7, 11, 12]),
       layout=st.lists(st.sampled_from(["big", "small", "native", "bytes", "none"]), min_size=1,
                       max_size=4),
       sendfile=st.booleans(), templates=st.booleans())
def test_the_spliced_frame_is_kios_frame_byte_for_byte(tmp_path_factory: Any, version: int,
                                                         layout: list[str], sendfile: bool,
                                                         templates: bool) -> None:
    """Whatever way each partition's records come in (sendfile, read in, converted, already
    bytes, none) and whoever encodes the rest (kio or a template), the frame is the one kio
    writes for the same answer with every record in memory."""
    tmp = tmp_path_factory.mktemp("fr")
    kinds: list[Any] = []
    for i, kind in enumerate(layout):
        if kind == "none":
            kinds.append(("bytes", b""))
            continue
        if kind == "bytes":  # a small answer the adapter already read (inline slice)
            kinds.append(("bytes", kr.to_kafka(bytearray(_stored(_kafka_batch(0, 3, 10, i))))))
            continue
        if kind == "big":  # whole Kafka batches of ~40 KiB: sendfile
            batches = [_stored(_kafka_batch(b * 200, 200, 200, i)) for b in range(3)]
        elif kind == "small":  # 90 batches of ~1 KiB: cheaper in memory
            batches = [_stored(_kafka_batch(b * 4, 4, 200, i)) for b in range(90)]
        else:  # a native batch among Kafka ones: converted in memory
            native = nb.build_batch([(b"k", b"v" * 200, [], 1_700_000_000_000)] * 200)
            batches = [_stored(_kafka_batch(0, 200, 200, i)), native, _stored(_kafka_batch(400, 200, 200, i))]
        path, at = _segment(tmp, batches, f"s{i}")
        kinds.append(("file", (path, at, sum(map(len, batches)))))

    def build() -> dict[str, Any]:
        recs: list[Any] = []
        for kind, v in kinds:
            if kind == "bytes":
                recs.append(v)
            else:
                taken = fr.take_file_records(_Slice(*v))
                assert taken is not None  # every file slice here is ≥ MIN_SLICE_BYTES
                recs.append(taken)
        return _answer(recs)

    flexible, encode = _encode(version)
    want = bytes(encode(_in_memory(build())))
    stats = fr.FetchStats()
    answers = FetchAnswers()
    for _ in range(2 if templates else 1):  # the second answer of a shape is the template's
        skeleton = ((lambda a: answers.encode(version, 7, a)) if templates else None)
        frame = fr.frame_with_files(build(), flexible, encode, stats, sendfile=sendfile,
                                    skeleton=skeleton)
        try:
            assert _bytes_of(frame) == want
            assert isinstance(frame, fr.FileFrame) == (sendfile and "big" in layout)
        finally:
            if isinstance(frame, fr.FileFrame):
                frame.close()
    if templates and version >= 7:  # the throttle time and session id are patchable from v7
        assert answers.hits >= 1
    rounds = 2 if templates else 1
    assert stats.sendfile_bytes == rounds * sum(
        v[2] for (k, v), name in zip(kinds, layout, strict=True) if name == "big" and sendfile)
    # and the answer decodes as a client reads it, each batch's magic 2
    _, body = codec.decode_response(want[4:], 1, version)
    for t in body.responses:
        for b in kr.iter_kafka_batches(t.partitions[0].records or b""):
            assert t.partitions[0].records[b + 16] == 2


def test_plan_takes_the_descriptor_and_patches_each_batch_head(tmp_path: Path) -> None:
    batches = [_stored(_kafka_batch(b * 200, 200, 200)) for b in range(3)]
    path, at = _segment(tmp_path, batches)
    sl = _Slice(path, at, sum(map(len, batches)))
    fd = sl.fd
    rec = fr.take_file_records(sl)
    assert rec is not None and sl.fd == -1 and rec.fd == fd  # reply.close() no longer closes it
    parts = rec.plan()
    assert parts is not None and len(parts) == 6
    pos = at
    for head, (pfd, ppos, plen), b in zip(parts[::2], parts[1::2], batches, strict=True):
        assert head == b[:16] + b"\x02" and (pfd, ppos, plen) == (fd, pos + 17, len(b) - 17)
        pos += len(b)
    rec.close()
    rec.close()  # idempotent
    with pytest.raises(OSError):
        os.fstat(fd)


def test_small_slices_and_inline_reads_stay_in_memory(tmp_path: Path) -> None:
    path, at = _segment(tmp_path, [_stored(_kafka_batch(0, 10, 100))])
    small = _Slice(path, at, path.stat().st_size - at)
    assert fr.take_file_records(small) is None  # under MIN_SLICE_BYTES: one copy is cheaper
    os.close(small.fd)


async def test_a_file_frame_survives_partial_writes_and_a_slow_reader(tmp_path: Path) -> None:
    batches = [_stored(_kafka_batch(b * 2000, 2000, 200, b)) for b in range(4)]  # ~1 MiB
    path, at = _segment(tmp_path, batches)
    flexible, encode = _encode(12)
    rec = fr.take_file_records(_Slice(path, at, sum(map(len, batches))))
    frame = fr.frame_with_files(_answer([rec]), flexible, encode)
    assert isinstance(frame, fr.FileFrame)
    want = _bytes_of(frame)
    a, b = trio.socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # many partial writes
    got = bytearray()
    async with trio.open_nursery() as nursery:
        async def read() -> None:
            while len(got) < len(want):
                got.extend(await b.recv(8192))
                await trio.sleep(0)
        nursery.start_soon(read)
        await frame.send(a)
    assert bytes(got) == want
    assert frame._fds == []  # closed once out
    with pytest.raises(OSError):
        os.fstat(rec.fd if rec.fd >= 0 else -1)
    a.close()
    b.close()


def test_a_segment_that_shrank_under_a_planned_frame_is_a_short_file(tmp_path: Path) -> None:
    batches = [_stored(_kafka_batch(b * 200, 200, 200)) for b in range(3)]
    path, at = _segment(tmp_path, batches)
    flexible, encode = _encode(12)
    frame = fr.frame_with_files(_answer([fr.take_file_records(_Slice(path, at, sum(map(len, batches))))]),
                                flexible, encode)
    assert isinstance(frame, fr.FileFrame)
    os.truncate(path, at + len(batches[0]) + 100)  # a truncation after the plan
    a, b = socket.socketpair()
    a.setblocking(False)
    with pytest.raises(fr.ShortFileError):
        while not frame.write_some(a):
            b.recv(1 << 20)
    frame.close()
    a.close()
    b.close()
