"""The C codec (``log/_codec.c``) against the pure-Python path, on random input (issue 13).

Every test that goes through the public functions runs twice, ``path="c"`` and
``path="pure"`` (the module globals that ``log/speedups.py`` set at import are switched to
``None`` for the pure run, as ``RAFKA_NO_SPEEDUPS=1`` would): encode byte for byte, decode
column for column, the same named errors on corrupt or truncated sections, murmur2 and
``send_batch``'s planning bit for bit, and the lazy ``send_batch`` result.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rafka.client.aio import accumulator as accumulator_mod
from rafka.client.aio import batch_send
from rafka.client.aio.accumulator import RecordAccumulator
from rafka.client.aio.batch_send import RecordMetadataList, plan_batch
from rafka.client.aio.enqueue import Enqueue
from rafka.client.aio.fetch import CompletedFetch
from rafka.client.aio.producer import AsyncProducer
from rafka.client.errors import CorruptRecordError
from rafka.client.partitioner import murmur2
from rafka.client.types import ConsumerRecord, RecordMetadata, TopicPartition
from rafka.log import batch as batch_mod
from rafka.log import speedups
from rafka.log.batch import build_batch_rows, build_raw_batch, stamp

TS = 1_700_000_000_000
TP = TopicPartition("t", 0)
needs_c = pytest.mark.skipif(speedups.codec is None, reason="C codec not built or RAFKA_NO_SPEEDUPS set")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(params=["c", "pure"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "c":
        if speedups.codec is None:
            pytest.skip("C codec not built or RAFKA_NO_SPEEDUPS set")
    else:
        monkeypatch.setattr(batch_mod, "_c", None)
        monkeypatch.setattr(batch_send, "_c", None)
        monkeypatch.setattr(accumulator_mod, "_c", None)
    return str(request.param)


def _use(path: str) -> pytest.MonkeyPatch:
    """Switch the paths inside a hypothesis example (fixtures run once per test)."""
    mp = pytest.MonkeyPatch()
    c = speedups.codec if path == "c" else None
    mp.setattr(batch_mod, "_c", c)
    mp.setattr(batch_send, "_c", c)
    mp.setattr(accumulator_mod, "_c", c)
    return mp


# ---------------------------------------------------------------- the build


def test_make_install_built_the_extension_in_this_tree() -> None:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine: the pure-Python codec is used")
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        pytest.skip("no Python headers (python3-dev) on this machine: the pure-Python codec is used")
    log_dir = Path(batch_mod.__file__).parent
    built = sorted(p.name for p in log_dir.glob("_codec*.so"))
    assert built, f"make install did not build log/_codec.c in {log_dir} (setup.py ext_modules)"
    import rafka.log._codec as codec  # noqa: PLC0415 - the import is what is tested

    assert Path(codec.__file__).parent == log_dir


def test_env_var_forces_the_pure_path() -> None:
    code = "from rafka.log import speedups, batch; print(speedups.ENABLED, batch._c is None)"
    env = {**os.environ, "RAFKA_NO_SPEEDUPS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True"]


# ---------------------------------------------------------------- strategies

_key = st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=8).map(str.encode))
_value = st.one_of(st.none(), st.binary(max_size=300), st.integers(65_536, 70_000).map(lambda n: bytes([n % 251]) * n))
_headers = st.one_of(st.just([]), st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=10)),
                                            max_size=3))


@st.composite
def _rows(draw: st.DrawFn) -> list[tuple]:
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    tds = draw(st.lists(st.integers(-2**40, 2**40), min_size=n, max_size=n))
    keys = draw(st.lists(_key, min_size=n, max_size=n))
    values = draw(st.lists(_value, min_size=n, max_size=n))
    hdrs = draw(st.lists(_headers, min_size=n, max_size=n))
    od = -1
    rows = []
    for g, td, k, v, h in zip(gaps, tds, keys, values, hdrs, strict=True):
        od += g if draw(st.booleans()) else 1  # compaction gaps sometimes
        rows.append((od, td, k, v, h))
    return rows


def _batch(rows: list[tuple], compression: str, ts_type: int, base: int = 100) -> bytes:
    """A batch whose offset deltas may have gaps (as after compaction)."""
    section = msgpack.packb([list(r) for r in rows], use_bin_type=True)
    return _frame(section, rows, compression, ts_type, base)


def _frame(section: bytes, rows: list[tuple], compression: str, ts_type: int, base: int) -> bytes:
    import lz4.frame  # noqa: PLC0415

    if compression == "lz4":
        section = lz4.frame.compress(section)
    b = bytearray(build_raw_batch(
        section, base_offset=0, last_offset_delta=max(r[0] for r in rows), record_count=len(rows),
        first_timestamp=TS, max_timestamp=TS + max(r[1] for r in rows),
        attributes=(1 if compression == "lz4" else 0) | (0x08 if ts_type else 0)))
    stamp(b, 0, base, 0)
    return bytes(b)


def _columns(raw: bytes, path: str, step: int) -> tuple[list, list, list] | str:
    """take_columns in runs of ``step`` (and one mixed take) → (columns, positions, records)
    or the name of the error raised."""
    mp = _use(path)
    try:
        cf = CompletedFetch(TP, memoryview(raw))
        cols, positions, recs = [], [], []
        pos = 0
        while True:
            cb, pos = cf.take_columns(pos, step)
            positions.append(pos)
            if not len(cb):
                break
            cols.append((cb.offsets, cb.timestamps, cb.timestamp_types, cb.keys, cb.values,
                         cb.headers))
            recs += cb.records()
            more, pos = cf.take(pos, 1)  # the record path reading the same decoded batch
            positions.append(pos)
            recs += more
        return cols, positions, recs
    except CorruptRecordError as exc:
        return f"CorruptRecordError at {exc.start_offset}"
    finally:
        mp.undo()


def _records(raw: bytes, path: str, step: int) -> tuple[list, list] | str:
    """``take`` in runs of ``step`` → (records, positions), or the name of the error raised."""
    mp = _use(path)
    try:
        cf = CompletedFetch(TP, memoryview(raw))
        recs, positions, pos = [], [], 0
        while True:
            more, pos = cf.take(pos, step)
            positions.append(pos)
            if not more:
                return recs, positions
            recs += more
    except CorruptRecordError as exc:
        return f"CorruptRecordError at {exc.start_offset}"
    finally:
        mp.undo()


# ---------------------------------------------------------------- encode


@needs_c
@SETTINGS
@given(rows=_rows(), extra=st.lists(st.one_of(st.booleans(), st.integers(-2**63, 2**64 - 1),
                                              st.text(max_size=300), st.binary(max_size=300)),
                                    max_size=5))
def test_pack_batch_is_msgpack_byte_for_byte(rows: list[tuple], extra: list) -> None:
    rows = rows + [tuple(extra)]
    expected = msgpack.Packer(use_bin_type=True).pack(rows)
    assert speedups.codec.pack_batch(rows, []) == expected
    assert speedups.codec.pack_batch([list(r) for r in rows], []) == expected


@needs_c
def test_pack_batch_defers_what_it_does_not_pack() -> None:
    for odd in (1.5, {"a": 1}, 2**64, memoryview(b"x"), object()):
        with pytest.raises(speedups.Unsupported):
            speedups.codec.pack_batch([(0, 0, None, odd, ())], [])


@SETTINGS
@given(rows=_rows(), compression=st.sampled_from(["none", "lz4"]))
def test_build_batch_rows_same_bytes_either_path(rows: list[tuple], compression: str) -> None:
    rows = [(i, td, k, v, h) for i, (_, td, k, v, h) in enumerate(rows)]
    built = []
    for p in ("c", "pure"):
        mp = _use(p)
        try:
            built.append(build_batch_rows(rows, TS, compression=compression))
        finally:
            mp.undo()
    assert built[0] == built[1]  # lz4.frame is deterministic: the same section, the same frame


# ---------------------------------------------------------------- decode


@SETTINGS
@given(rows=_rows(), compression=st.sampled_from(["none", "lz4"]), ts_type=st.integers(0, 1),
       step=st.sampled_from([1, 4, 1000]))
def test_decode_columns_equal_pure_and_records(rows: list[tuple], compression: str, ts_type: int,
                                                step: int) -> None:
    raw = _batch(rows, compression, ts_type) + _batch(rows, compression, ts_type, base=10_000)
    c, pure = _columns(raw, "c", step), _columns(raw, "pure", step)
    assert c == pure
    by_record = _records(raw, "c", step)
    assert by_record == _records(raw, "pure", step)
    assert c[2] == by_record[0]  # type: ignore[index]


@SETTINGS
@given(rows=_rows(), compression=st.sampled_from(["none", "lz4"]))
def test_to_arrow_same_either_path(rows: list[tuple], compression: str) -> None:
    pytest.importorskip("pyarrow")
    raw = _batch(rows, compression, 0) + _batch(rows, compression, 1, base=5000)
    out = []
    for p in ("c", "pure"):
        mp = _use(p)
        try:
            cf = CompletedFetch(TP, memoryview(raw))
            first, pos = cf.take_columns(0, 3)  # parts: a window, then the rest
            rest, _ = cf.take_columns(pos, 10**6)
            first.extend(rest)
            out.append(first.to_arrow())
        finally:
            mp.undo()
    assert out[0].equals(out[1]) and out[0].schema.equals(out[1].schema, check_metadata=True)


def test_column_batch_pickles_as_lists(path: str) -> None:
    rows = [(i, i, b"k%d" % i if i % 2 else None, b"v" * i, [("h", b"x")] if i == 3 else [])
            for i in range(6)]
    cb, _ = CompletedFetch(TP, memoryview(_batch(rows, "none", 0))).take_columns(0, 100)
    again = pickle.loads(pickle.dumps(cb))
    assert again.records() == cb.records() and len(again) == 6 and again.tp == TP


@SETTINGS
@given(rows=_rows(), data=st.data())
def test_corrupt_sections_give_the_same_named_error(rows: list[tuple], data: st.DataObject) -> None:
    """A mangled section under a valid CRC: the C decoder never reads out of bounds or
    crashes, and the public result — columns or ``CorruptRecordError`` — is the pure one."""
    section = bytearray(msgpack.packb([list(r) for r in rows], use_bin_type=True))
    how = data.draw(st.sampled_from(["truncate", "flip", "extend"]))
    if how == "truncate":
        section = section[:data.draw(st.integers(0, len(section) - 1))]
    elif how == "flip":
        i = data.draw(st.integers(0, len(section) - 1))
        section[i] = data.draw(st.integers(0, 255))
    else:
        section += data.draw(st.binary(min_size=1, max_size=8))
    raw = _frame(bytes(section), rows, "none", 0, 7)
    assert _columns(raw, "c", 5) == _columns(raw, "pure", 5)
    assert _records(raw, "c", 5) == _records(raw, "pure", 5)
    if speedups.codec is not None:
        try:
            speedups.codec.decode_columns(bytes(section), len(rows), 7, TS, 0, TS)
        except speedups.Unsupported:
            pass


@needs_c
def test_every_prefix_of_a_section_is_refused() -> None:
    rows = [[i, i, b"k%d" % i, b"v" * i, [["h", b"x"]] if i % 2 else []] for i in range(20)]
    section = msgpack.packb(rows, use_bin_type=True)
    assert speedups.codec.decode_columns(section, 20, 0, TS, 0, TS)[0]
    for k in range(len(section)):
        with pytest.raises(speedups.Unsupported):
            speedups.codec.decode_columns(section[:k], 20, 0, TS, 0, TS)
        with pytest.raises(speedups.Unsupported):
            speedups.codec.decode_records(section[:k], 20, 0, TS, 0, TS, "t", 0, ConsumerRecord)
    with pytest.raises(speedups.Unsupported):
        speedups.codec.decode_columns(section, 19, 0, TS, 0, TS)  # count mismatch
    with pytest.raises(speedups.Unsupported):
        speedups.codec.decode_columns(section + b"\x00", 20, 0, TS, 0, TS)  # trailing bytes
    with pytest.raises(speedups.Unsupported):
        speedups.codec.decode_columns(section, 20, 2**63 - 5, TS, 0, TS)  # offset overflow


# ---------------------------------------------------------------- producer planning


@needs_c
@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=64))
def test_c_murmur2_is_the_python_one(key: bytes) -> None:
    assert speedups.codec.murmur2(key) == murmur2(key)


def _producer() -> Enqueue:
    p = AsyncProducer("127.0.0.1:1")  # never started: only its enqueue path's planning is used
    p._enqueue.loop_thread = -1
    return p._enqueue


@SETTINGS
@given(keys=st.lists(st.one_of(st.none(), st.binary(max_size=20)), min_size=1, max_size=200),
       n=st.integers(1, 12), partition=st.one_of(st.none(), st.integers(0, 11)),
       seed=st.integers(0, 1000))
def test_send_batch_plan_same_either_path(keys: list, n: int, partition: int | None,
                                          seed: int) -> None:
    values = [b"v" * (i % 7) if i % 5 else None for i in range(len(keys))]
    if partition is not None:
        partition %= n
    out = []
    for p in ("c", "pure"):
        mp = _use(p)
        try:
            random.seed(seed)
            fut, groups = plan_batch(_producer(), "t", values, keys, None, partition, TS, n)
            out.append([(g.partition, g.keys, g.values, g.headers, list(g.cum),
                         None if g.index is None else list(g.index)) for g in groups])
        finally:
            mp.undo()
    assert out[0] == out[1]


@SETTINGS
@given(keys=st.lists(st.one_of(st.none(), st.binary(max_size=20)), min_size=1, max_size=300),
       with_headers=st.booleans(), batch_size=st.integers(50, 3000), seed=st.integers(0, 1000))
def test_append_many_same_rows_either_path(keys: list, with_headers: bool, batch_size: int,
                                           seed: int) -> None:
    """Segments (C path) stand for exactly the rows of the pure path, and pack to the same
    batch bytes."""
    values = [b"v" * (i % 9) if i % 6 else None for i in range(len(keys))]
    hdrs = [[("h", b"%d" % i)] if with_headers and i % 4 == 0 else () for i in range(len(keys))]
    out = []
    for p in ("c", "pure"):
        mp = _use(p)
        try:
            random.seed(seed)
            fut, groups = plan_batch(_producer(), "t", values, keys, hdrs, None, TS, 4)
            acc = RecordAccumulator(batch_size=batch_size, buffer_memory=1 << 24, linger_ms=5,
                                    wakeup=lambda: None, loop_thread=-1)
            assert acc.append_many("t", groups, TS, 4, 1 << 20)
            for part in range(4):  # a ``send`` after it: into the open batches, after them
                assert acc.append("t", part, b"late", b"row", (), TS + 1, 19, 4) is not None
            _, again = plan_batch(_producer(), "t", values, keys, hdrs, None, TS + 2, 4)
            assert acc.append_many("t", again, TS + 2, 4, 1 << 20)  # segments after rows
            drained = acc.drain(time.monotonic(), force=True)
            encoded = [b.encode() for b in drained]  # before .records turns segments into rows
            counts = [b.record_count for b in drained]
            out.append([(b.partition, b.records, b.size, e, c)
                        for b, e, c in zip(drained, encoded, counts, strict=True)])
        finally:
            mp.undo()
    assert out[0] == out[1]


def test_send_batch_sends_what_the_lists_held_at_the_call(path: str) -> None:
    """Records wait as slices of send_batch's lists: a caller reusing its own lists after the
    call does not change what is sent."""
    values, keys = [b"a", b"b", b"c"], [b"k1", None, b"k1"]
    for partition in (None, 1):
        fut, groups = plan_batch(_producer(), "t", values, keys, None, partition, TS, 2)
        acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 24, linger_ms=5,
                                wakeup=lambda: None, loop_thread=-1)
        assert acc.append_many("t", groups, TS, 2, 1 << 20)
        values[0], keys[0] = b"changed", b"changed"
        rows = [r[2:4] for b in acc.drain(time.monotonic(), force=True)
                for r in batch_mod.decode_records(b.encode())]
        assert sorted(rows, key=repr) == sorted([(b"k1", b"a"), (None, b"b"), (b"k1", b"c")],
                                                key=repr)
        values[0], keys[0] = b"a", b"k1"


def test_send_batch_result_is_lazy_and_equal_to_the_list(path: str) -> None:
    keys = [b"key-%d" % (i % 5) if i % 4 else None for i in range(30)]
    values = [b"%d" % i for i in range(30)]
    fut, groups = plan_batch(_producer(), "t", values, keys, None, None, TS, 3)
    acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 24, linger_ms=5,
                            wakeup=lambda: None, loop_thread=-1)
    assert acc.append_many("t", groups, TS, 3, 1 << 20)
    fut._watch()
    for b in acc.drain(time.monotonic(), force=True):
        b.result.complete(base_offset=100 * b.partition)
    res = fut.result(0)
    assert isinstance(res, RecordMetadataList) and res._items is None and len(res) == 30
    expected, seen = [], {}
    for g in groups:
        for i in g.index if g.index is not None else range(30):
            seen[i] = g.partition
    counts: dict[int, int] = {}
    for i in range(30):
        p = seen[i]
        expected.append(RecordMetadata("t", p, 100 * p + counts.get(p, 0), TS))
        counts[p] = counts.get(p, 0) + 1
    assert res == expected and expected == res and list(res) == expected
    assert res[3] == expected[3] and res[-1] == expected[-1] and res[2:5] == expected[2:5]
    assert res._items is not None  # built once, on access


# ---------------------------------------------------------------- Kafka records sections

_kheaders = st.one_of(st.just([]), st.lists(st.tuples(st.text(max_size=6),
                                                      st.one_of(st.none(), st.binary(max_size=10))),
                                            max_size=3))


@st.composite
def _krows(draw: st.DrawFn) -> list[tuple]:
    """``_rows`` with Kafka's null header values too."""
    rows = draw(_rows())
    return [(od, td, k, v, draw(_kheaders)) for od, td, k, v, _h in rows]


def _kbatch(rows: list[tuple], codec: int, ts_type: int, base: int = 100) -> bytes:
    """A batch stored as a Kafka client produced it (``log/kafka_section.py``)."""
    from rafka.log import kafka_section as ks  # noqa: PLC0415

    section = ks.compress(codec, ks.encode_rows(rows))
    b = bytearray(build_raw_batch(
        section, base_offset=0, last_offset_delta=max(r[0] for r in rows), record_count=len(rows),
        first_timestamp=TS, max_timestamp=TS + max(r[1] for r in rows),
        attributes=codec | (0x08 if ts_type else 0), magic=batch_mod.KAFKA_MAGIC))
    stamp(b, 0, base, 0)
    return bytes(b)


@SETTINGS
@given(rows=_krows(), codec=st.sampled_from([0, 1, 2, 3, 4]), ts_type=st.integers(0, 1),
       step=st.sampled_from([1, 4, 1000]))
def test_kafka_sections_decode_the_same_in_c_and_pure(rows: list[tuple], codec: int, ts_type: int,
                                                      step: int) -> None:
    """C and pure decoders of a Kafka section agree — columns, records, positions — and give
    what the same records stored as a native (msgpack) batch give."""
    raw = _kbatch(rows, codec, ts_type) + _kbatch(rows, codec, ts_type, base=10_000)
    c, pure = _columns(raw, "c", step), _columns(raw, "pure", step)
    assert c == pure
    by_record = _records(raw, "c", step)
    assert by_record == _records(raw, "pure", step)
    native = _batch(rows, "none", ts_type) + _batch(rows, "none", ts_type, base=10_000)
    assert by_record == _records(native, "c", step)
    assert c == _columns(native, "c", step)


@needs_c
@SETTINGS
@given(rows=_krows(), ts_type=st.integers(0, 1))
def test_c_decodes_kafka_sections_itself(rows: list[tuple], ts_type: int) -> None:
    """The C codec takes Kafka sections (does not defer them to Python)."""
    from rafka.log import kafka_section as ks  # noqa: PLC0415

    section = ks.encode_rows(rows)
    got = speedups.codec.decode_records(section, len(rows), 7, TS, ts_type, TS + 5, "t", 0,
                                        ConsumerRecord, True)
    want = ks.decode_rows(section, len(rows), use_list=False)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (7 + od, k, v, hs) for od, _td, k, v, hs in want]
    assert speedups.codec.decode_columns(section, len(rows), 7, TS, ts_type, TS + 5, True)[0]


@SETTINGS
@given(rows=_krows(), data=st.data())
def test_corrupt_kafka_sections_give_the_same_named_error(rows: list[tuple],
                                                          data: st.DataObject) -> None:
    from rafka.log import kafka_section as ks  # noqa: PLC0415

    section = bytearray(ks.encode_rows(rows))
    how = data.draw(st.sampled_from(["truncate", "flip", "extend"]))
    if how == "truncate":
        section = section[:data.draw(st.integers(0, len(section) - 1))]
    elif how == "flip":
        i = data.draw(st.integers(0, len(section) - 1))
        section[i] = data.draw(st.integers(0, 255))
    else:
        section += data.draw(st.binary(min_size=1, max_size=8))
    b = bytearray(build_raw_batch(
        bytes(section), base_offset=0, last_offset_delta=max(r[0] for r in rows),
        record_count=len(rows), first_timestamp=TS, max_timestamp=TS + max(r[1] for r in rows),
        attributes=0, magic=batch_mod.KAFKA_MAGIC))
    stamp(b, 0, 7, 0)
    raw = bytes(b)
    assert _columns(raw, "c", 5) == _columns(raw, "pure", 5)
    assert _records(raw, "c", 5) == _records(raw, "pure", 5)


@needs_c
def test_every_prefix_of_a_kafka_section_is_refused() -> None:
    from rafka.log import kafka_section as ks  # noqa: PLC0415

    rows = [(i, i, b"k%d" % i, b"v" * i, [("h", b"x"), ("n", None)] if i % 2 else [])
            for i in range(20)]
    section = ks.encode_rows(rows)
    assert speedups.codec.decode_columns(section, 20, 0, TS, 0, TS, True)[0]
    for k in range(len(section)):
        with pytest.raises(speedups.Unsupported):
            speedups.codec.decode_columns(section[:k], 20, 0, TS, 0, TS, True)
        with pytest.raises(speedups.Unsupported):
            speedups.codec.decode_records(section[:k], 20, 0, TS, 0, TS, "t", 0, ConsumerRecord,
                                          True)
    with pytest.raises(speedups.Unsupported):
        speedups.codec.decode_columns(section, 21, 0, TS, 0, TS, True)  # count mismatch
    with pytest.raises(speedups.Unsupported):
        speedups.codec.decode_columns(section + b"\x00", 20, 0, TS, 0, TS, True)  # trailing
    with pytest.raises(speedups.Unsupported):  # an 11-byte varint
        speedups.codec.decode_columns(b"\xff" * 11, 1, 0, TS, 0, TS, True)


@SETTINGS
@given(rows=_krows(), compression=st.sampled_from(["none", "lz4"]))
def test_native_batch_as_kafka_section_same_either_path(rows: list[tuple], compression: str) -> None:
    """What a Kafka reader of a native batch gets (``as_kafka_section``): the C conversion's
    bytes are the pure one's, and they decode to the native batch's rows."""
    from rafka.log import kafka_section as ks  # noqa: PLC0415

    raw = _batch(rows, compression, 0)
    h = batch_mod.parse_header(raw)
    out = []
    for p in ("c", "pure"):
        mp = _use(p)
        try:
            out.append(batch_mod.as_kafka_section(raw, 0, h))
        finally:
            mp.undo()
    assert out[0] == out[1]
    assert ks.decode_rows(out[0], len(rows), use_list=False) == tuple(
        (od, td, k, v, tuple(map(tuple, hs))) for od, td, k, v, hs in rows)
