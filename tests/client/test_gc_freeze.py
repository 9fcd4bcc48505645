"""``rafka.wire.gc_freeze``: the first client (or broker) of a process freezes what start-up
created, once, after collecting; ``RAFKA_GC_FREEZE=0`` turns it off.

Each case runs in a fresh interpreter: freezing is once per process and process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, **env: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_freezes_once_per_process() -> None:
    out = _run("""
        import gc
        from rafka.wire.gc_freeze import freeze_startup_objects
        before = gc.get_freeze_count()
        first = freeze_startup_objects()
        frozen = gc.get_freeze_count()
        junk = [[i] for i in range(1000)]  # tracked objects created after the freeze
        second = freeze_startup_objects()
        print(before, first, frozen > 1000, second, gc.get_freeze_count() == frozen)
    """)
    assert out == "0 True True False True"


def test_garbage_from_before_is_collected_not_frozen() -> None:
    out = _run("""
        import gc, weakref
        from rafka.wire.gc_freeze import freeze_startup_objects
        class Node:
            pass
        a, b = Node(), Node()
        a.other, b.other = b, a  # a reference cycle: only the cyclic collector frees it
        alive = weakref.ref(a)
        del a, b
        gc.disable()  # no automatic pass may free it first
        freeze_startup_objects()
        print(alive() is None)
    """)
    assert out == "True"


def test_switched_off_by_environment() -> None:
    out = _run("""
        import gc
        from rafka.wire.gc_freeze import freeze_startup_objects
        print(freeze_startup_objects(), gc.get_freeze_count())
    """, RAFKA_GC_FREEZE="0")
    assert out == "False 0"


@pytest.mark.parametrize("switch, frozen", [("1", "True"), ("0", "False")])
def test_a_client_opening_freezes(switch: str, frozen: str) -> None:
    """``ClientCore.open`` (every async client, hence every sync facade) does it; no broker is
    needed, since opening the pool connects to nothing yet."""
    out = _run("""
        import gc
        import trio
        from rafka.client.aio._core import ClientCore

        async def main():
            async with trio.open_nursery() as nursery:
                core = ClientCore("127.0.0.1:1", client_id="t")
                core.open(nursery)
                await core.aclose()

        trio.run(main)
        print(gc.get_freeze_count() > 0)
    """, RAFKA_GC_FREEZE=switch)
    assert out == frozen


def test_young_threshold_raised_never_lowered() -> None:
    """A broker node starts young GC passes only past ``NODE_YOUNG_THRESHOLD`` net allocations
    (wire/gc_freeze.py, "Young passes in a node"); the older generations keep theirs."""
    out = _run("""
        import gc
        from rafka.wire.gc_freeze import NODE_YOUNG_THRESHOLD, raise_young_threshold
        gc.set_threshold(700, 11, 12)
        first = raise_young_threshold()
        after = gc.get_threshold()
        gc.set_threshold(50_000, 11, 12)
        raise_young_threshold()
        print(first, after == (NODE_YOUNG_THRESHOLD, 11, 12), gc.get_threshold()[0])
    """)
    assert out == "True True 50000"


def test_young_threshold_switched_off_by_environment() -> None:
    out = _run("""
        import gc
        from rafka.wire.gc_freeze import raise_young_threshold
        print(raise_young_threshold(), gc.get_threshold()[0])
    """, RAFKA_GC_FREEZE="0")
    assert out == "False 700"
