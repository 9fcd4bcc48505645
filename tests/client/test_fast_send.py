"""The C fast path of ``Producer.send`` (``client/_sendpath.c``) against the Python one, on a
real single-node broker (tests/client/conftest.py); issue 13.

Every workload runs twice, ``path="c"`` (the ``SendPath`` that ``fast_send.bind_send``
installs) and ``path="python"`` (``AsyncProducer.send_threadsafe``, what ``RAFKA_NO_SPEEDUPS=1``
gives), with the accumulator's sticky choices drawn from a seeded ``random.Random`` and
batches closed only by size (linger 60 s), so the two runs must agree record for record:
partition, offset, timestamp, and what a consumer reads back. Also: errors (too large, bad
partition, closed producer, unknown topic), callbacks, buffer-full blocking, two threads
sending at once, and fallbacks (custom partitioner, serializers). Transactional producers:
tests/client/test_txn_fast_send.py.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rafka.client import Consumer, Producer
from rafka.client import errors as E
from rafka.client.aio import accumulator as accumulator_mod
from rafka.client.aio import fast_send
from rafka.client.partitioner import Murmur2Partitioner
from rafka.client.types import TopicPartition

from tests.client.conftest import drain

pytestmark = pytest.mark.timeout(300)

PATHS = ["c", "python"]


def _producer(bootstrap: str, path: str, **options: Any) -> Producer:
    """A sync producer whose ``send`` is the C fast path or the Python one."""
    if path == "c" and not fast_send.ENABLED:
        pytest.skip("client/_sendpath.c not built (or RAFKA_NO_SPEEDUPS set)")
    options = {"acks": 1, "enable_idempotence": False, **options}
    p = Producer(bootstrap, **options)
    if path == "python":
        p.send = p._async.send_threadsafe  # type: ignore[method-assign]
    return p


def _is_c(p: Producer) -> bool:
    return fast_send.sendpath is not None and isinstance(
        getattr(p.send, "__self__", None), fast_send.sendpath.SendPath)


def _workload(n: int) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(args, kwargs) of ``n`` sends covering the fast path's cases and its fallbacks."""
    rng = random.Random(1234)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for i in range(n):
        value = None if i % 37 == 5 else b"value-%06d-" % i + b"x" * rng.randrange(0, 300)
        kind = i % 7
        if kind in (0, 1):  # keyed
            calls.append(((value,), {"key": b"key-%d" % rng.randrange(50)}))
        elif kind == 2:  # keyless: sticky
            calls.append(((value,), {}))
        elif kind == 3:  # explicit partition, positional, explicit timestamp
            calls.append(((value, None, None, rng.randrange(4), 1_700_000_000_000 + i), {}))
        elif kind == 4:  # headers: list, tuple, empty
            hdrs: Any = [("h", b"%d" % i), ("trace", b"t" * (i % 5))] if i % 3 else ()
            calls.append(((), {"value": value, "key": b"k%d" % (i % 9), "headers": hdrs}))
        elif kind == 5:  # keywords in another order, header tuple
            calls.append(((), {"timestamp_ms": 1_600_000_000_000 + i, "partition": 2,
                               "headers": (("a", b"b"),), "value": value}))
        else:  # a key and an explicit partition: the partition wins
            calls.append(((value,), {"key": b"ignored", "partition": 1}))
    return calls


def _run(bootstrap: str, topic: str, path: str, calls: list[Any],
         monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], float, float]:
    monkeypatch.setattr(accumulator_mod, "random", random.Random(99))  # the sticky choices
    with _producer(bootstrap, path, batch_size=4096, linger_ms=60_000) as p:
        assert _is_c(p) == (path == "c")
        t0 = time.time()
        futures = [p.send(topic, *args, **kw) for args, kw in calls]
        t1 = time.time()
        p.flush()
        metas = [f.result(30) for f in futures]
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, q) for q in range(4)])
        got = drain(c, len(calls))
    return metas, got, t0, t1


@pytest.fixture(scope="module")
def same_workload(bootstrap: str, make_topic_module: Any) -> dict[str, Any]:
    calls = _workload(1500)
    out: dict[str, Any] = {"calls": calls}
    mp = pytest.MonkeyPatch()
    try:
        for path in PATHS:
            if path == "c" and not fast_send.ENABLED:
                continue
            topic = make_topic_module(4)
            out[path] = (topic, *_run(bootstrap, topic, path, calls, mp))
    finally:
        mp.undo()
    return out


@pytest.fixture(scope="module")
def make_topic_module(bootstrap: str) -> Any:
    from rafka.client import Admin

    def make(partitions: int = 1) -> str:
        name = f"fs-{time.time_ns()}"
        with Admin(bootstrap) as admin:
            admin.create_topic(name, partitions, 1)
        return name

    return make


@pytest.mark.parametrize("path", PATHS)
def test_futures_and_log_match_the_calls(same_workload: dict[str, Any], path: str) -> None:
    if path not in same_workload:
        pytest.skip("client/_sendpath.c not built")
    calls = same_workload["calls"]
    topic, metas, got, t0, t1 = same_workload[path]
    part = Murmur2Partitioner()
    for (args, kw), m in zip(calls, metas, strict=True):
        a = dict(zip(("value", "key", "headers", "partition", "timestamp_ms"), args, strict=False))
        a.update(kw)
        assert m.topic == topic
        if a.get("partition") is not None:
            assert m.partition == a["partition"]
        elif a.get("key") is not None:
            assert m.partition == part(a["key"], 4)
        if a.get("timestamp_ms") is not None:
            assert m.timestamp == a["timestamp_ms"]
        else:
            assert int(t0 * 1000) - 1 <= m.timestamp <= int(t1 * 1000) + 1
    # offsets: each partition's records in send order, no gap, no duplicate
    for q in range(4):
        offs = [m.offset for m in metas if m.partition == q]
        assert offs == list(range(len(offs)))
    # what the log holds is what the futures said
    by_pos = {(r.partition, r.offset): r for r in got}
    assert len(by_pos) == len(calls)
    for (args, kw), m in zip(calls, metas, strict=True):
        a = dict(zip(("value", "key", "headers", "partition", "timestamp_ms"), args, strict=False))
        a.update(kw)
        r = by_pos[(m.partition, m.offset)]
        assert (r.value, r.key, r.timestamp) == (a.get("value"), a.get("key"), m.timestamp)
        assert r.headers == tuple(tuple(h) for h in a.get("headers") or ())


def test_c_and_python_paths_agree_record_for_record(same_workload: dict[str, Any]) -> None:
    if "c" not in same_workload:
        pytest.skip("client/_sendpath.c not built")
    _, c_metas, c_got, *_ = same_workload["c"]
    _, py_metas, py_got, *_ = same_workload["python"]
    calls = same_workload["calls"]
    fixed = [i for i, (args, kw) in enumerate(calls)
             if len(args) > 4 or "timestamp_ms" in kw]  # records whose timestamp is given
    assert [(m.partition, m.offset) for m in c_metas] == [(m.partition, m.offset) for m in py_metas]
    assert [c_metas[i].timestamp for i in fixed] == [py_metas[i].timestamp for i in fixed]

    def content(got: list[Any]) -> list[Any]:
        return sorted((r.partition, r.offset, r.key, r.value, r.headers) for r in got)

    assert content(c_got) == content(py_got)


@pytest.mark.parametrize("path", PATHS)
def test_errors_are_the_python_paths(bootstrap: str, make_topic: Any, path: str) -> None:
    topic = make_topic(2)
    with _producer(bootstrap, path, max_request_size=10_000, max_block_ms=500) as p:
        ok = p.send(topic, b"first", key=b"k")
        with pytest.raises(E.RecordTooLargeError):
            p.send(topic, b"x" * 20_000)
        with pytest.raises(E.RecordTooLargeError):  # the headers count in the size
            p.send(topic, b"x", headers=[("h", b"y" * 20_000)])
        with pytest.raises(E.UnknownTopicOrPartitionError):
            p.send(topic, b"x", partition=2)
        with pytest.raises(E.UnknownTopicOrPartitionError):
            p.send(topic, b"x", partition=-1)
        with pytest.raises(TypeError):
            p.send(topic, b"x", bogus=1)
        with pytest.raises(TypeError):
            p.send(topic, b"x", value=b"twice")
        with pytest.raises((E.KafkaTimeoutError, E.UnknownTopicOrPartitionError)):
            p.send(f"no-such-topic-{time.time_ns()}", b"v")
        after = p.send(topic, b"after", key=b"k")  # the producer still works
        assert after.result(30).offset == ok.result(30).offset + 1
    with pytest.raises(E.IllegalStateError):
        p.send(topic, b"closed")


@pytest.mark.parametrize("path", PATHS)
def test_callbacks_and_waits(bootstrap: str, make_topic: Any, path: str) -> None:
    topic = make_topic(3)
    seen: list[Any] = []
    done = threading.Event()
    with _producer(bootstrap, path, linger_ms=20) as p:
        futs = [p.send(topic, b"v%d" % i, key=b"k%d" % (i % 5)) for i in range(200)]
        futs[-1].add_done_callback(lambda f: (seen.append(f.result()), done.set()))
        futs[0].add_done_callback(lambda f: seen.append(f.result()))
        assert done.wait(30)
        assert seen == [futs[-1].result(), futs[0].result()] or seen == [futs[0].result(),
                                                                          futs[-1].result()]
        late: list[Any] = []
        futs[5].add_done_callback(late.append)  # already done: called at once
        assert late == [futs[5]]
        assert all(f.done() and f.exception() is None for f in futs)


@pytest.mark.parametrize("path", PATHS)
def test_buffer_full_blocks_then_goes_on(bootstrap: str, make_topic: Any, path: str) -> None:
    topic = make_topic(2)
    with _producer(bootstrap, path, buffer_memory=20_000, batch_size=4096, linger_ms=1) as p:
        futs = [p.send(topic, b"r%05d" % i + b"." * 200, key=b"k%d" % (i % 3)) for i in range(3000)]
        metas = [f.result(60) for f in futs]
    for q in range(2):
        offs = [m.offset for m in metas if m.partition == q]
        assert offs == list(range(len(offs)))
    with _producer(bootstrap, path, buffer_memory=1000, batch_size=100_000, linger_ms=60_000,
                   max_block_ms=200) as p:
        first = p.send(topic, b"x" * 600, partition=0)
        with pytest.raises(E.BufferExhaustedError):
            p.send(topic, b"y" * 600, partition=0)
        p.flush()
        assert first.result(10).partition == 0


@pytest.mark.parametrize("path", PATHS)
def test_two_threads_sending_at_once(bootstrap: str, make_topic: Any, path: str) -> None:
    topic = make_topic(3)
    n = 20_000
    results: dict[int, list[Any]] = {}
    with _producer(bootstrap, path, batch_size=16 * 1024, linger_ms=2) as p:

        def run(t: int) -> None:
            results[t] = [p.send(topic, b"%d-%d" % (t, i), key=b"t%d" % t) for i in range(n)]

        threads = [threading.Thread(target=run, args=(t,)) for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        p.flush()
        metas = {t: [f.result(60) for f in futs] for t, futs in results.items()}
    for t in range(2):
        assert len({m.partition for m in metas[t]}) == 1  # one key per thread
        offs = [m.offset for m in metas[t]]
        assert offs == sorted(offs) and len(set(offs)) == n  # send order kept
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, q) for q in range(3)])
        got = drain(c, 2 * n)
    assert sorted(r.value for r in got) == sorted(b"%d-%d" % (t, i) for t in range(2) for i in range(n))


def test_fallbacks_keep_python_where_c_cannot(bootstrap: str, make_topic: Any) -> None:
    if not fast_send.ENABLED:
        pytest.skip("client/_sendpath.c not built")
    topic = make_topic(3)
    with Producer(bootstrap, acks=1, partitioner=lambda key, n: n - 1) as p:  # custom partitioner
        assert _is_c(p)
        assert p.send(topic, b"v", key=b"anything").result(30).partition == 2
        assert p.send(topic, b"v", partition=0).result(30).partition == 0
    with Producer(bootstrap, acks=1, value_serializer=str.encode) as p:  # serializers: Python
        assert not _is_c(p)
        assert p.send(topic, "text", partition=1).result(30).partition == 1
    with Producer(bootstrap, transactional_id=f"fs-{time.time_ns()}") as p:
        assert _is_c(p)  # in C too, gated by the transaction's state (test_txn_fast_send.py)


@pytest.fixture(scope="module")
def hypo_producer(bootstrap: str, make_topic_module: Any) -> Any:
    if not fast_send.ENABLED:
        pytest.skip("client/_sendpath.c not built")
    topic = make_topic_module(7)
    with Producer(bootstrap, acks=1, linger_ms=0) as p:
        yield p, topic


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_c_murmur2_places_keys_as_python(hypo_producer: Any, keys: list[bytes]) -> None:
    p, topic = hypo_producer
    assert _is_c(p)
    futs = [p.send(topic, b"v", key=k) for k in keys]
    part = Murmur2Partitioner()
    assert [f.result(30).partition for f in futs] == [part(k, 7) for k in keys]


def test_make_install_built_the_send_path_in_this_tree() -> None:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine: send() runs in Python")
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        pytest.skip("no Python headers on this machine: send() runs in Python")
    client_dir = Path(fast_send.__file__).parent.parent
    assert sorted(client_dir.glob("_sendpath*.so")), "setup.py did not build client/_sendpath.c"
    if os.environ.get("RAFKA_NO_SPEEDUPS", "") in ("", "0"):
        assert fast_send.ENABLED


def test_env_var_forces_the_python_send() -> None:
    code = "from rafka.client.aio import fast_send; print(fast_send.ENABLED)"
    env = {**os.environ, "RAFKA_NO_SPEEDUPS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False"]
