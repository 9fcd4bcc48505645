"""Clock skew on real rafka nodes: libfaketime + the sleep shim (chaos_tests/backends/preload.py).

A one-node rafka cluster runs with the shim preloaded; its wall clock is shifted live, and the
node's own node events (``wall_ms`` next to the unfaked ``mono_ns``) show the shift, while the
node keeps working (pysyncobj's tick thread sleeps with ``time.sleep``: under plain
libfaketime 0.9.10 it died with EINVAL and the quorum stopped).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import trio
from rafka.chaos_tests.backends.netns import netns_supported
from rafka.chaos_tests.backends.preload import (
    CONNECT_SOURCE,
    SHIM_SOURCE,
    build_so,
    clock_skew_unsupported,
    connect_redirect_unsupported,
)
from rafka.chaos_tests.campaign import (
    _admin_call,
    bootstrap_of,
    data_dir_of,
    make_cluster,
    unsupported_faults,
    wait_brokers,
)

_clock = clock_skew_unsupported()


def _backend_name() -> str:
    return "netns" if netns_supported() is None else "local"


@pytest.mark.skipif(_clock is not None, reason=_clock or "")
def test_sleep_shim_keeps_time_sleep_working(tmp_path):
    """The bug and the fix in one process each: plain libfaketime breaks time.sleep."""
    from rafka.chaos_tests.backends.preload import FAKETIME_LIB, faketime_env

    clock = tmp_path / "clock"
    clock.write_text("+3600\n")
    code = ("import time, threading; time.sleep(0.05); threading.Event().wait(0.05);"
            "print(time.time())")
    env = {**os.environ, **faketime_env(clock)}
    ok = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert abs(float(ok.stdout) - time.time() - 3600) < 30  # the wall clock is skewed
    # the GIL hand-off (pthread_cond_timedwait on a monotonic condvar) stays fast
    code2 = ("import time, trio\n"
             "async def main():\n"
             "    t = time.perf_counter()\n"
             "    for _ in range(100):\n"
             "        await trio.to_thread.run_sync(lambda: None)\n"
             "    print(time.perf_counter() - t)\n"
             "trio.run(main)\n")
    fast = subprocess.run([sys.executable, "-c", code2], env=env, capture_output=True,
                          text=True, timeout=120)
    assert fast.returncode == 0, fast.stderr
    assert float(fast.stdout) < 1.5  # ~0.03 s; ~3 s with libfaketime's own timedwait
    bare = subprocess.run([sys.executable, "-c", code], env={**env, "LD_PRELOAD": FAKETIME_LIB},
                          capture_output=True, text=True, timeout=60)
    assert bare.returncode != 0 and "Invalid argument" in bare.stderr  # why the shim exists


def test_shims_compile_and_are_cached(tmp_path):
    if connect_redirect_unsupported() is not None:
        pytest.skip(connect_redirect_unsupported())
    a = build_so(CONNECT_SOURCE, tmp_path)
    assert a.exists() and build_so(CONNECT_SOURCE, tmp_path) == a
    if SHIM_SOURCE.exists():
        assert build_so(SHIM_SOURCE, tmp_path).exists()


def test_unsupported_faults_are_refused_with_a_reason(monkeypatch):
    from rafka.chaos_tests.backends import preload

    monkeypatch.setattr(preload, "_cc", lambda: "no-such-compiler-xyz")
    assert "clock" in (unsupported_faults("netns", ["clock-skew"]) or "")
    assert "partition" in (unsupported_faults("local", ["partition-halves"]) or "")
    assert unsupported_faults("local", ["kill"]) is None
    assert unsupported_faults("netns", ["partition-halves"]) is None


@pytest.mark.chaos
@pytest.mark.timeout(240)
@pytest.mark.skipif(_clock is not None, reason=_clock or "")
async def test_rafka_node_wall_clock_shifts_live(tmp_path):
    backend = make_cluster(_backend_name(), tmp_path / "work", 1, faketime=True)
    events = data_dir_of(tmp_path / "work", 1) / "events.jsonl"

    async def skew_seen(topic: str) -> float:
        """Create a topic; the node's skew = its wall_ms minus the real time at its mono_ns."""
        with trio.fail_after(60):
            while True:  # the broker may still be fenced right after registering
                try:
                    await _admin_call(bootstrap, lambda a: a.create_topic(topic, 1, 1), 10)
                    break
                except Exception as exc:  # noqa: BLE001
                    if "ALREADY_EXISTS" in str(exc):
                        break
                    print("create_topic:", exc)
                    await trio.sleep(0.5)
        with trio.fail_after(30):
            while True:
                for line in events.read_text().splitlines():
                    ev = json.loads(line)
                    if ev.get("event") == "partition" and ev.get("tp") == f"{topic}/0":
                        real = ev["mono_ns"] / 1e9 + (time.time() - time.monotonic())
                        return ev["wall_ms"] / 1000 - real
                await trio.sleep(0.2)

    async with backend:
        await backend.start_node(1, wait_ready_s=60)
        bootstrap = bootstrap_of(backend)
        await wait_brokers(bootstrap, 1, 60)
        assert abs(await skew_seen("t0")) < 5
        await backend.skew_clock(1, 300)
        assert 295 < await skew_seen("t1") < 305
        await backend.skew_clock(1, -120)
        assert -125 < await skew_seen("t2") < -115
        await backend.skew_clock(1, 0)
        assert abs(await skew_seen("t3")) < 5
        assert backend.running(1)
    log = backend.log_path(1).read_text(errors="replace")
    assert "Invalid argument" not in log and "Traceback" not in log
