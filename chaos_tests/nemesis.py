"""The nemesis: fault kinds as data, seeded schedules, and a runner that applies them.

Theory of operation
-------------------
A :class:`FaultKind` is pure data: a name, a *family* (``process``, ``network``, ``clock``,
``disk``) and how targets are chosen.  :func:`generate_schedule` walks time from a seeded
``random.Random`` and emits :class:`ScheduledFault` ``(start_s, duration_s, fault)`` entries:
faults of *different* families may overlap (a partition during a clock skew), two faults of
the same family never do (their heals would interfere), at most ``max_concurrent`` are active,
and every fault ends at or before ``heal_at_s``, where a final ``heal-all`` entry follows so
that the liveness phase (final reads) runs on a healed cluster.  The same seed and arguments
give the same schedule; print the seed on failure.

Targets are node ids, or symbols resolved when the fault starts (the schedule is computed
before the cluster exists): ``@controller`` (the active controller) and ``@leader`` (the
leader of the workload's first partition).  Network faults are described by the set of
directed links to cut, :func:`partition_links`, so every backend can apply them with ``cut``.

:class:`NemesisRunner` executes a schedule against a :class:`~chaos_tests.backends.base.Backend`
and records each start/stop as ``nemesis`` events in the history.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from .history import NEMESIS, HistoryWriter

__all__ = [
    "FaultKind",
    "Fault",
    "ScheduledFault",
    "FAULT_KINDS",
    "KINDS_BY_NAME",
    "CONTROLLER",
    "LEADER",
    "generate_schedule",
    "partition_components",
    "partition_links",
    "NemesisRunner",
]

CONTROLLER = "@controller"
LEADER = "@leader"


@dataclass(frozen=True)
class FaultKind:
    name: str
    family: str  # process | network | clock | disk
    targets: str  # how to pick: one | subset | controller | leader | all-nodes
    description: str
    needs_root: bool = False


FAULT_KINDS: tuple[FaultKind, ...] = (
    FaultKind("kill", "process", "subset", "SIGKILL the node processes, restart on heal"),
    FaultKind("kill-leader", "process", "leader",
              "SIGKILL the leader of workload partition 0, restart on heal"),
    FaultKind("pause", "process", "subset", "SIGSTOP the node processes, SIGCONT on heal"),
    FaultKind("lose-unfsynced-writes", "process", "subset",
              "kill and drop every write not fsynced (machine crash); restart on heal"),
    FaultKind("partition-isolate-one", "network", "one", "cut one node from all others"),
    FaultKind("partition-isolate-controller", "network", "controller",
              "cut the active controller from all others"),
    FaultKind("partition-isolate-leader", "network", "leader",
              "cut the leader of a workload partition from all others"),
    FaultKind("partition-halves", "network", "all-nodes",
              "split into a majority and a minority component"),
    FaultKind("partition-ring", "network", "all-nodes",
              "each node sees a majority, but no two nodes the same majority (n >= 4)"),
    FaultKind("clock-skew", "clock", "subset", "shift wall clocks (libfaketime); monotonic kept"),
    FaultKind("disk-full", "disk", "one", "fill the node's data volume", needs_root=True),
)
KINDS_BY_NAME = {k.name: k for k in FAULT_KINDS}


@dataclass(frozen=True)
class Fault:
    kind: str
    targets: tuple[int | str, ...]
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def family(self) -> str:
        return KINDS_BY_NAME[self.kind].family

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)

    def to_dict(self) -> dict[str, Any]:
        return {"fault": self.kind, "targets": list(self.targets), **dict(self.params)}


@dataclass(frozen=True)
class ScheduledFault:
    start_s: float
    duration_s: float
    fault: Fault

    @property
    def end_s(self) -> float:
        return round(self.start_s + self.duration_s, 6)


@dataclass(frozen=True)
class Schedule:
    seed: int
    faults: tuple[ScheduledFault, ...]
    heal_at_s: float
    nodes: tuple[int, ...] = field(default=())


def _pick_subset(rng: random.Random, nodes: Sequence[int]) -> tuple[int, ...]:
    n = len(nodes)
    size = rng.choice([1, 1, max(1, (n - 1) // 2), n // 2 + 1, n])  # one/minority/majority/all
    return tuple(sorted(rng.sample(list(nodes), min(size, n))))


def _make_fault(rng: random.Random, kind: FaultKind, nodes: Sequence[int]) -> Fault:
    if kind.name == "partition-halves":
        shuffled = list(nodes)
        rng.shuffle(shuffled)
        minority = tuple(sorted(shuffled[: len(nodes) // 2]))
        majority = tuple(sorted(shuffled[len(nodes) // 2:]))
        return Fault(kind.name, tuple(sorted(nodes)),
                     (("components", (majority, minority)),))
    if kind.name == "partition-ring":
        order = list(nodes)
        rng.shuffle(order)
        return Fault(kind.name, tuple(order))
    if kind.targets == "one":
        return Fault(kind.name, (rng.choice(list(nodes)),))
    if kind.targets == "controller":
        return Fault(kind.name, (CONTROLLER,))
    if kind.targets == "leader":
        return Fault(kind.name, (LEADER,))
    targets = _pick_subset(rng, nodes)
    if kind.name == "clock-skew":
        skew = rng.choice([-300.0, -60.0, -5.0, -0.5, 0.5, 5.0, 60.0, 300.0])
        return Fault(kind.name, targets, (("skew_s", skew),))
    if kind.name == "disk-full":
        return Fault(kind.name, targets, (("size_bytes", 65536),))
    return Fault(kind.name, targets)


def generate_schedule(seed: int, nodes: Sequence[int], duration_s: float, *,
                      kinds: Iterable[str] | None = None, mean_interval_s: float = 10.0,
                      min_fault_s: float = 2.0, max_fault_s: float = 15.0,
                      warmup_s: float = 3.0, quiet_s: float = 5.0,
                      max_concurrent: int = 2) -> Schedule:
    """A reproducible fault schedule; faults end by ``duration_s - quiet_s`` (the final heal)."""
    rng = random.Random(seed)
    names = list(kinds) if kinds is not None else [k.name for k in FAULT_KINDS]
    chosen = [KINDS_BY_NAME[n] for n in names]
    if len(nodes) < 4:
        chosen = [k for k in chosen if k.name != "partition-ring"]
    if len(nodes) < 2:
        chosen = [k for k in chosen if k.family != "network"]
    heal_at = max(0.0, duration_s - quiet_s)
    faults: list[ScheduledFault] = []
    family_free = dict.fromkeys({k.family for k in chosen}, 0.0)
    t = warmup_s
    while chosen:
        t += rng.uniform(0.5, 1.5) * mean_interval_s
        kind = rng.choice(chosen)
        start = max(t, family_free[kind.family])
        active = sorted(f.end_s for f in faults if f.end_s > start)
        if len(active) >= max_concurrent:
            start = active[len(active) - max_concurrent]
        duration = rng.uniform(min_fault_s, max_fault_s)
        if start + min_fault_s > heal_at:
            break
        start = math.ceil(round(start * 1000, 6)) / 1000  # ms resolution, never earlier than allowed
        duration = math.floor(round(min(duration, heal_at - start) * 1000, 6)) / 1000
        if duration <= 0:
            break
        sf = ScheduledFault(start, duration, _make_fault(rng, kind, nodes))
        faults.append(sf)
        family_free[kind.family] = sf.end_s
        t = start
    return Schedule(seed, tuple(faults), heal_at, tuple(nodes))


def partition_components(fault: Fault, nodes: Sequence[int],
                         isolated: int | None = None) -> list[tuple[int, ...]] | None:
    """The connected components of a partition fault (None for ring, which has none)."""
    if fault.kind == "partition-halves":
        return [tuple(c) for c in fault.param("components")]
    if fault.kind == "partition-ring":
        return None
    node = isolated if isolated is not None else fault.targets[0]
    if not isinstance(node, int):
        raise ValueError(f"unresolved target {node!r}: pass isolated=")
    return [(node,), tuple(n for n in nodes if n != node)]


def partition_links(fault: Fault, nodes: Sequence[int],
                    isolated: int | None = None) -> set[tuple[int, int]]:
    """Directed links ``(a, b)`` to cut (both directions are always included)."""
    nodes = list(nodes)
    if fault.kind == "partition-ring":
        order = list(fault.targets)
        n = len(order)
        reach = (n // 2 + 1) // 2  # neighbours on each side: 1 + 2 * reach >= majority
        ok: set[tuple[int, int]] = set()
        for i, a in enumerate(order):
            for d in range(1, reach + 1):
                for b in (order[(i + d) % n], order[(i - d) % n]):
                    ok |= {(a, b), (b, a)}
        return {(a, b) for a in nodes for b in nodes if a != b and (a, b) not in ok}
    comps = partition_components(fault, nodes, isolated)
    assert comps is not None
    where = {n: i for i, comp in enumerate(comps) for n in comp}
    return {(a, b) for a in nodes for b in nodes if a != b and where[a] != where[b]}


Resolver = Callable[[str], Awaitable[int]]


class NemesisRunner:
    """Applies a schedule through a backend; records ``nemesis`` ops in the history.

    ``resolve`` turns ``@controller`` / ``@leader`` into a node id at fault start (it needs
    the cluster's metadata, so it is supplied by the workload).  ``restart`` is awaited for
    nodes killed by ``kill`` / ``lose-unfsynced-writes`` when the fault ends.

    ``handlers`` (optional) maps a fault kind to an object with ``async start(fault,
    targets)`` / ``async stop(fault, targets)`` that replaces the built-in behaviour for that
    kind (``rafka.chaos_tests.faults``: disk-full, lose-unfsynced-writes).
    """

    def __init__(self, backend: Any, history: HistoryWriter, nodes: Sequence[int], *,
                 resolve: Resolver | None = None,
                 handlers: Mapping[str, Any] | None = None) -> None:
        self.backend = backend
        self.history = history
        self.nodes = list(nodes)
        self.resolve = resolve
        self.handlers = dict(handlers or {})
        self.errors: list[str] = []  # faults that could not be applied or undone
        self._next_id = 0

    async def _targets(self, fault: Fault) -> list[int]:
        out = []
        for t in fault.targets:
            if isinstance(t, str):
                if self.resolve is None:
                    raise ValueError(f"no resolver for target {t}")
                out.append(await self.resolve(t))
            else:
                out.append(t)
        return out

    async def start(self, fault: Fault) -> tuple[int, list[int]]:
        fid = self._next_id
        self._next_id += 1
        targets = await self._targets(fault)
        value = {"action": "start", "id": fid, **fault.to_dict(), "targets": targets}
        inv = self.history.invoke(NEMESIS, "nemesis", value)
        try:
            await self._apply(fault, targets)
        except Exception as exc:
            self.history.info(inv, dict(value, error=repr(exc)))
            raise
        self.history.ok(inv)
        return fid, targets

    async def _apply(self, fault: Fault, targets: list[int]) -> None:
        b = self.backend
        if fault.kind in self.handlers:
            await self.handlers[fault.kind].start(fault, targets)
        elif fault.kind in ("kill", "kill-leader", "lose-unfsynced-writes"):
            for n in targets:
                await b.kill_node(n)
        elif fault.kind == "pause":
            for n in targets:
                await b.pause_node(n)
        elif fault.family == "network":
            isolated = targets[0] if fault.kind in (
                "partition-isolate-one", "partition-isolate-controller",
                "partition-isolate-leader") else None
            for a, c in sorted(partition_links(fault, self.nodes, isolated)):
                if a < c:
                    await b.cut(a, c)
        elif fault.kind == "clock-skew":
            for n in targets:
                await b.skew_clock(n, fault.param("skew_s", 0.0))
        else:
            raise NotImplementedError(f"fault {fault.kind} is not supported by this runner yet")

    async def stop(self, fault: Fault, fid: int, targets: list[int]) -> None:
        inv = self.history.invoke(NEMESIS, "nemesis", {"action": "stop", "id": fid,
                                                         "fault": fault.kind})
        try:
            await self._unapply(fault, targets)
        except Exception as exc:
            self.history.info(inv, {"action": "stop", "id": fid, "fault": fault.kind,
                                    "error": repr(exc)})
            raise
        self.history.ok(inv)

    async def _unapply(self, fault: Fault, targets: list[int]) -> None:
        b = self.backend
        if fault.kind in self.handlers:
            await self.handlers[fault.kind].stop(fault, targets)
        elif fault.kind in ("kill", "kill-leader", "lose-unfsynced-writes"):
            for n in targets:
                await b.start_node(n)
        elif fault.kind == "pause":
            for n in targets:
                await b.resume_node(n)
        elif fault.family == "network":
            await b.heal_all()
        elif fault.kind == "clock-skew":
            for n in targets:
                await b.skew_clock(n, 0.0)

    async def heal_all(self) -> None:
        inv = self.history.invoke(NEMESIS, "nemesis", {"action": "heal-all"})
        try:
            await self.backend.heal_all()
            for n in self.nodes:
                await self.backend.resume_node(n)
        except Exception as exc:
            self.history.info(inv, {"action": "heal-all", "error": repr(exc)})
            raise
        self.history.ok(inv)

    async def run(self, schedule: Schedule) -> None:
        """Run the whole schedule (times relative to now), then heal everything."""
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            for sf in schedule.faults:
                nursery.start_soon(self._one, t0, sf)
        await trio.sleep_until(t0 + schedule.heal_at_s)
        try:
            await self.heal_all()
        except Exception as exc:  # recorded; the campaign heals again before recovery
            self.errors.append(f"heal-all: {exc!r}")

    async def _one(self, t0: float, sf: ScheduledFault) -> None:
        await trio.sleep_until(t0 + sf.start_s)
        try:
            fid, targets = await self.start(sf.fault)
        except Exception as exc:  # recorded as info by start(); the schedule goes on
            self.errors.append(f"start {sf.fault.kind}: {exc!r}")
            return
        await trio.sleep_until(t0 + sf.end_s)
        try:
            await self.stop(sf.fault, fid, targets)
        except Exception as exc:  # recorded as info by stop(); heal_all follows anyway
            self.errors.append(f"stop {sf.fault.kind}: {exc!r}")
