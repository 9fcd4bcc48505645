"""The schedule generator is pure: same seed, same schedule; every fault healed in time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.chaos_tests.nemesis import (
    CONTROLLER,
    FAULT_KINDS,
    KINDS_BY_NAME,
    LEADER,
    Fault,
    generate_schedule,
    partition_links,
)

NODES = (1, 2, 3, 4, 5)


def test_same_seed_same_schedule():
    a = generate_schedule(42, NODES, 120)
    b = generate_schedule(42, NODES, 120)
    c = generate_schedule(43, NODES, 120)
    assert a == b
    assert a.faults and a.faults != c.faults


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 7), duration=st.floats(5, 400),
       max_concurrent=st.integers(1, 3))
def test_schedule_invariants(seed, n, duration, max_concurrent):
    nodes = tuple(range(1, n + 1))
    s = generate_schedule(seed, nodes, duration, max_concurrent=max_concurrent,
                          mean_interval_s=5)
    assert s.heal_at_s <= duration
    for i, sf in enumerate(s.faults):
        assert sf.duration_s > 0 and sf.start_s >= 0
        assert sf.end_s <= s.heal_at_s + 1e-6, "fault not healed before the final heal"
        kind = KINDS_BY_NAME[sf.fault.kind]
        for t in sf.fault.targets:
            assert t in nodes or t in (CONTROLLER, LEADER)
        if kind.name == "partition-ring":
            assert n >= 4
        if kind.family == "network":
            assert n >= 2
        # never two faults of one family at once; never more than max_concurrent at once
        overlapping = [o for o in s.faults if o is not sf
                       and o.start_s < sf.end_s and sf.start_s < o.end_s]
        assert all(o.fault.family != sf.fault.family for o in overlapping)
        at_start = [o for o in s.faults if o.start_s <= sf.start_s < o.end_s]
        assert len(at_start) <= max_concurrent
        if i:
            assert s.faults[i - 1].start_s <= sf.start_s


def test_all_kinds_get_generated():
    seen = {sf.fault.kind for seed in range(30)
            for sf in generate_schedule(seed, NODES, 300).faults}
    assert seen == {k.name for k in FAULT_KINDS}


def test_kinds_filter():
    s = generate_schedule(1, NODES, 200, kinds=["kill", "pause"])
    assert {sf.fault.kind for sf in s.faults} <= {"kill", "pause"}
    assert generate_schedule(1, (1,), 200, kinds=["partition-halves"]).faults == ()


def _reach(links, nodes):
    return {a: {a} | {b for b in nodes if b != a and (a, b) not in links} for a in nodes}


def test_partition_halves_links():
    f = Fault("partition-halves", NODES, (("components", ((1, 2, 5), (3, 4))),))
    links = partition_links(f, NODES)
    assert (1, 3) in links and (3, 1) in links and (1, 2) not in links and (3, 4) not in links
    assert len(links) == 2 * 3 * 2


@pytest.mark.parametrize("n", [4, 5, 6, 7])
def test_partition_ring_majorities_all_different(n):
    nodes = tuple(range(1, n + 1))
    order = (3, 1, 4, 2, 5, 7, 6)[:n] if n == 7 else nodes
    links = partition_links(Fault("partition-ring", tuple(order)), nodes)
    reach = _reach(links, nodes)
    assert all(len(r) >= n // 2 + 1 for r in reach.values())
    assert len({frozenset(r) for r in reach.values()}) == n
    assert all((b, a) in links for a, b in links)


def test_isolate_links():
    links = partition_links(Fault("partition-isolate-controller", (CONTROLLER,)), NODES,
                            isolated=2)
    assert links == {(2, b) for b in NODES if b != 2} | {(b, 2) for b in NODES if b != 2}
    with pytest.raises(ValueError):
        partition_links(Fault("partition-isolate-leader", (LEADER,)), NODES)
