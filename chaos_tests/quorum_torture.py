"""Quorum torture: one controller fault per round, then the time from heal to the next commit.

Theory of operation
-------------------
A real 3- (or 5-) node cluster of combined nodes on the local backend (plain processes on
loopback, node-to-node links through :mod:`chaos_tests.proxy`; ports of our own so it can run
beside a chaos campaign). Each round:

1. asks the quorum who leads (``DESCRIBE_QUORUM``) and picks the victims of the round's
   pattern (:data:`PATTERNS`);
2. applies the fault for ``fault_s`` (uniform in ``--fault-s``): a voter paused, killed,
   isolated, cut off one way, its link to one follower delayed or flapping, its wall clock
   jumped, or all voters paused or killed. When a quorum survives the fault, a topic create is
   sent 0.5 s in through a live node other than the old leader (and not an end of a faulty
   link); ``during_s`` is its time to acknowledgement (None: not within the fault) — issue
   27's shape 2, a write that waited for a paused former controller;
3. heals (SIGCONT, restart, the proxies back to pass, the clock back) and measures
   ``heal_to_commit_s``: heal → a topic create acknowledged through a node that was not a
   victim where there is one, else not the first victim (a fresh admin
   client per attempt, each attempt bounded, retried until ``commit_timeout_s``; None means no
   progress — a failed round). After a kill it also measures, in parallel, ``restart_s``: heal
   (the processes spawned) → every restarted process accepts connections on its own client
   port, and ``up_to_commit_s`` = ``heal_to_commit_s`` − ``restart_s``: what Raft and rafka
   cost once the processes are up, apart from Python start-up (negative: the write committed
   through the survivors before the last restarted process listened);
4. waits until every voter is reachable and caught up (bounded) so rounds stay independent.

Every round is one JSONL line (``--out``): pattern, victims, the fault's size (link delay, clock
jump, flap bursts), leader and term before and after,
the two durations, errors, and the watchdog's stall / bind lines that appeared in the node logs
during the round (kraft/raft_watchdog.py logs every link's Raft state there), and any forward
that ran out of time (broker/handlers/admin.py logs its controller attempts). At the end it
prints p50 / p99 / max per pattern and the worst rounds. A run first writes a header line,
``{"run": {"commit", "node_code", ...}}``: ``node_code`` hashes the git trees of the directories
the nodes import (:data:`NODE_CODE_DIRS`), so runs appended to one ``--out`` file (the harness
appends) can be pooled, and ``--summary-only`` says when they did not run the same node code.
``python -m chaos_tests.quorum_torture
--help``; chaos_tests/tests/test_quorum_torture.py runs a short slice in the default suite and
a longer one under ``-m slow``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from .backends.base import Backend, wait_port
from .campaign import make_cluster, wait_brokers

__all__ = ["PATTERNS", "TortureOptions", "run_torture", "summarize", "main"]

# name -> (victims, action, staggered). victims: "leader" | "follower" | "all", or "link": the
# leader and one follower, the two ends of one link. actions: "pause" (SIGSTOP), "kill" (-9,
# restarted at the heal), "isolate" (every link of the victim blackholed both ways; the harness
# still reaches it), "oneway-out" / "oneway-in" (an asymmetric partition: what the victim sends
# to every other voter is held / what they send it is held; the backend's cut_one_way),
# "delay" (both directions of the link delayed by one value per round, in LINK_DELAY_S),
# "flap" (the link blackholed and restored in bursts of FLAP_S, as a lossy link looks to TCP:
# stalls while segments are retransmitted, nothing lost or reordered), "clock" (the victim's
# wall clock jumped by ±CLOCK_JUMP_S; monotonic time is untouched, as on a real NTP step;
# needs libfaketime, else the pattern is left out with a note).
PATTERNS: dict[str, tuple[str, str, bool]] = {
    "pause-leader": ("leader", "pause", False),
    "pause-follower": ("follower", "pause", False),
    "kill-leader": ("leader", "kill", False),
    "kill-follower": ("follower", "kill", False),
    "isolate-leader": ("leader", "isolate", False),
    "pause-all": ("all", "pause", False),
    "pause-all-staggered": ("all", "pause", True),
    "kill-all": ("all", "kill", False),
    "isolate-follower": ("follower", "isolate", False),
    "oneway-leader-out": ("leader", "oneway-out", False),
    "oneway-leader-in": ("leader", "oneway-in", False),
    "delay-leader-link": ("link", "delay", False),
    "flap-leader-link": ("link", "flap", False),
    "clock-jump-leader": ("leader", "clock", False),
}
_NETWORK_ACTIONS = ("isolate", "oneway-out", "oneway-in", "delay", "flap")
LINK_DELAY_S = (0.05, 1.5)  # one way; elections time out after 0.35-1.0 s
FLAP_S = (0.05, 0.4)  # each blackholed or passing burst
CLOCK_JUMP_S = (30.0, 600.0)
# A leader that can send but not hear (oneway-leader-in) keeps its followers in its lease
# until it gives up leading (check-quorum: pysyncobj's leaderFallbackTimeout, >= 0.6 s) and they
# then time out (raftMinTimeout-raftMaxTimeout, 0.7-2.0 s since session 23): by design nothing
# commits for the first 1.3-3.0 s of that fault, so it lasts at least this long for its
# during-fault write to measure the takeover, not the floor. (3.0 s, right for the 0.35-1.0 s
# timing it was set for, let a long run miss the write once in ~28 rounds: the new controller
# came ~3 s into the fault, session 28.)
_MIN_FAULT_S = {"oneway-leader-in": 4.0}
_STAGGER_S = 0.7
_ATTEMPT_S = 5.0  # the client's request timeout, which the node's forward also gets as its deadline
# the harness's own bound on an attempt is a little longer, so that a node whose forward ran
# out of time answers REQUEST_TIMED_OUT (and logs where the time went) before we hang up
_ATTEMPT_GRACE_S = 1.0


@dataclass(frozen=True)
class TortureOptions:
    rounds: int = 10
    nodes: int = 3
    patterns: tuple[str, ...] = tuple(PATTERNS)
    fault_s: tuple[float, float] = (2.0, 6.0)
    seed: int = 1
    work_dir: Path = Path("quorum-torture-work")
    out: Path = Path("quorum-torture.jsonl")
    commit_timeout_s: float = 30.0
    settle_timeout_s: float = 30.0
    time_limit_s: float | None = None  # stop starting rounds after this
    client_port: int = 15092
    raft_port: int = 25092
    # single-partition topics created before the first round (kill-all's restart cost grows
    # with the partition logs each broker re-opens: docs/quorum.md, "the first image")
    topics: int = 0
    # keep at most this many of the rounds' own topics (``tq-<round>``, ``tq-<round>-during``):
    # the oldest are deleted between rounds, up to 50 per request (_batch). None: keep them all — then the
    # cluster grows by ~1.5 topics a round, and a kill-all's restart (metadata fold, image,
    # log opens) grows with it (docs/quorum.md, Run G)
    keep_topics: int | None = None


@dataclass
class Round:
    round: int
    pattern: str
    victims: list[int] = field(default_factory=list)
    fault_s: float = 0.0
    # the fault's size where the pattern has one: the link delay (s, one way), the clock jump
    # (s, signed), the number of blackholed bursts of a flapping link
    fault_size: float | None = None
    leader_before: int | None = None
    term_before: int | None = None
    during_s: float | None = None
    heal_to_commit_s: float | None = None
    # kill patterns: heal (the restarted processes spawned) -> every one of them accepts
    # connections on its client port (Python start-up, config, listener bind); None: not
    # within the commit timeout, or no restart in this pattern
    restart_s: float | None = None
    # heal_to_commit_s - restart_s: what Raft and rafka cost once the processes are up
    # (negative: the write committed through the survivors before the last restart listened)
    up_to_commit_s: float | None = None
    heal_at: float | None = None  # wall clock (time.time()) of the heal, to find it in node logs
    leader_after: int | None = None
    term_after: int | None = None
    committed_via: int | None = None
    errors: list[str] = field(default_factory=list)
    watchdog: list[str] = field(default_factory=list)


def _addr(backend: Backend, node: int, port: int) -> str:
    return "{}:{}".format(*backend.node_address(node, port))


async def _describe(backend: Backend, nodes: Sequence[int], port: int) -> dict[str, Any] | None:
    """The quorum as the first answering node of ``nodes`` sees it (None: nobody answered)."""
    from rafka.client import AsyncAdmin

    for n in nodes:
        with trio.move_on_after(3.0):
            try:
                async with AsyncAdmin(bootstrap_servers=_addr(backend, n, port),
                                      request_timeout_ms=3000) as admin:
                    return await admin.describe_quorum()
            except Exception:  # noqa: BLE001 - a node down or electing: ask the next
                continue
    return None


async def _create_until(backend: Backend, via: int, port: int, name: str, timeout_s: float,
                        errors: list[str]) -> float | None:
    """Seconds until a create of ``name`` sent through node ``via`` is acknowledged (retried
    with a fresh client per bounded attempt); None if not within ``timeout_s``.

    An attempt starts once ``via`` accepts connections on its own client port: a restarted
    node spends 2-5 s of Python start-up before it listens (``restart_s``), and an attempt
    clocked from the heal was cut at its bound while the node was still forwarding the create
    it had received a second earlier — the "unanswered 5 s attempt" of runs A and B."""
    from rafka.client import AsyncAdmin

    t0 = time.monotonic()
    host, direct_port = backend.node_host(via), backend.spec.node(via).client_port
    with trio.move_on_after(timeout_s):
        while True:
            await wait_port(host, direct_port, timeout_s + 1)  # the scope above bounds it
            with trio.move_on_after(_ATTEMPT_S + _ATTEMPT_GRACE_S) as attempt:
                try:
                    async with AsyncAdmin(bootstrap_servers=_addr(backend, via, port),
                                          request_timeout_ms=int(_ATTEMPT_S * 1000)) as admin:
                        await admin.create_topic(name, 1, 1, exist_ok=True)
                    return time.monotonic() - t0
                except Exception as exc:  # noqa: BLE001 - recorded, then retried
                    if len(errors) < 5:
                        errors.append(f"{time.monotonic() - t0:.1f}s via {via}: {type(exc).__name__}: {exc}"[:300])
            if attempt.cancelled_caught and len(errors) < 5:
                errors.append(f"{time.monotonic() - t0:.1f}s via {via}: no answer within {_ATTEMPT_S + _ATTEMPT_GRACE_S} s")
            await trio.sleep(0.1)
    return None


async def _listening(backend: Backend, nodes: list[int], t0: float, timeout_s: float) -> float | None:
    """Seconds from ``t0`` until every node of ``nodes`` accepts a TCP connection on its own
    client port (dialled directly, not through a proxy); None if not within ``timeout_s``."""
    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            for n in nodes:  # wait_port's own bound is longer: the scope above ends it
                nursery.start_soon(wait_port, backend.node_host(n), backend.spec.node(n).client_port,
                                   timeout_s + 1)
        return round(time.monotonic() - t0, 3)
    return None


def _victims(kind: str, leader: int, ids: list[int], rng: random.Random) -> list[int]:
    if kind == "leader":
        return [leader]
    if kind == "follower":
        return [rng.choice([n for n in ids if n != leader])]
    if kind == "link":
        return [leader, rng.choice([n for n in ids if n != leader])]
    order = list(ids)
    rng.shuffle(order)
    return order


def _fault_size(action: str, rng: random.Random) -> float | None:
    if action == "delay":
        return round(rng.uniform(*LINK_DELAY_S), 3)
    if action == "clock":
        return round(rng.choice((-1, 1)) * rng.uniform(*CLOCK_JUMP_S), 1)
    return None


async def _apply(backend: Backend, action: str, victims: list[int], ids: list[int], staggered: bool,
                 size: float | None) -> None:
    if action == "delay":  # one link: victims are its two ends
        backend.set_link(victims[0], victims[1], "delay", delay_s=size or 0.0)  # type: ignore[attr-defined]
        return
    if action == "flap":  # one_round runs _flap for the fault's length
        return
    for v in victims:
        others = [o for o in ids if o != v]
        if action == "pause":
            await backend.pause_node(v)
        elif action == "kill":
            await backend.kill_node(v)
        elif action == "isolate":  # every link of v to the other nodes (the harness still reaches it)
            for o in others:
                await backend.cut(v, o)
        elif action == "oneway-out":
            for o in others:
                await backend.cut_one_way(v, o)  # type: ignore[attr-defined]
        elif action == "oneway-in":
            for o in others:
                await backend.cut_one_way(o, v)  # type: ignore[attr-defined]
        elif action == "clock":
            await backend.skew_clock(v, size or 0.0)
        if staggered:
            await trio.sleep(_STAGGER_S)


async def _flap(backend: Backend, rec: Round, rng: random.Random) -> None:
    """Blackhole and restore the link between ``rec.victims`` in random bursts until cancelled
    (the heal returns it to pass), counting the blackholed bursts in ``rec.fault_size``."""
    a, b = rec.victims
    bursts = 0
    while True:
        backend.set_link(a, b, "drop")  # type: ignore[attr-defined]
        bursts += 1
        rec.fault_size = bursts
        await trio.sleep(rng.uniform(*FLAP_S))
        backend.set_link(a, b, "pass")  # type: ignore[attr-defined]
        await trio.sleep(rng.uniform(*FLAP_S))


async def _heal(backend: Backend, action: str, victims: list[int], staggered: bool) -> None:
    for v in victims:
        if action == "pause":
            await backend.resume_node(v)
        elif action == "kill":
            await backend.start_node(v, wait_ready_s=None)
        elif action == "clock":
            await backend.skew_clock(v, 0.0)
        if staggered:
            await trio.sleep(_STAGGER_S)
    if action in _NETWORK_ACTIONS:
        await backend.heal_all()


def _log_marks(backend: Backend, ids: list[int]) -> dict[int, int]:
    return {n: backend.log_path(n).stat().st_size if backend.log_path(n).exists() else 0 for n in ids}


def _watchdog_lines(backend: Backend, marks: dict[int, int]) -> list[str]:
    out = []
    for n, start in marks.items():
        path = backend.log_path(n)
        if not path.exists():
            continue
        with open(path, "rb") as f:
            f.seek(start)
            for line in f.read().decode(errors="replace").splitlines():
                if ("rafka.kraft.engine" in line and ("Raft stall" in line or "not bound" in line)) \
                        or ("rafka.admin" in line and "no answer within" in line):
                    out.append(f"node {n}: {line[:2000]}")
    return out[:20]


async def _settle(backend: Backend, ids: list[int], port: int, timeout_s: float) -> bool:
    """Every voter reachable and caught up, as the leader sees it."""
    with trio.move_on_after(timeout_s):
        while True:
            q = await _describe(backend, ids, port)
            voters = (q or {}).get("voters") or []
            if q and q.get("leader_id") in ids and voters and all(
                    v.get("reachable") and v.get("lag") == 0 for v in voters):
                return True
            await trio.sleep(0.5)
    return False


async def one_round(backend: Backend, opts: TortureOptions, r: int, pattern: str, rng: random.Random) -> Round:
    ids = backend.spec.node_ids
    port = opts.client_port
    kind, action, staggered = PATTERNS[pattern]
    rec = Round(r, pattern, fault_s=round(max(rng.uniform(*opts.fault_s), _MIN_FAULT_S.get(pattern, 0.0)), 2))
    q = await _describe(backend, ids, port) or {}
    rec.leader_before, rec.term_before = q.get("leader_id"), q.get("epoch")
    leader = rec.leader_before if rec.leader_before in ids else ids[0]
    rec.victims = _victims(kind, leader, ids, rng)
    rec.fault_size = _fault_size(action, rng)
    marks = _log_marks(backend, ids)
    t_fault = time.monotonic()
    await _apply(backend, action, rec.victims, ids, staggered, rec.fault_size)
    live = [n for n in ids if n not in rec.victims and n != leader]
    async with trio.open_nursery() as during:
        if action == "flap":
            during.start_soon(_flap, backend, rec, random.Random(rng.random()))
        if kind != "all" and live:  # a quorum survives: a write through a live node must commit
            await trio.sleep(0.5)
            rec.during_s = await _create_until(backend, live[0], port, f"tq-{r}-during",
                                               max(0.1, rec.fault_s - (time.monotonic() - t_fault)), rec.errors)
        await trio.sleep(max(0.0, rec.fault_s - (time.monotonic() - t_fault)))
        during.cancel_scope.cancel()
    await _heal(backend, action, rec.victims, staggered)
    t_heal = time.monotonic()
    rec.heal_at = round(time.time(), 3)
    # through a node that was not a victim where there is one (a link's third node), else
    # through one other than the first victim
    outside = [n for n in ids if n not in rec.victims]
    via = outside[0] if outside else next(n for n in ids if n != rec.victims[0])
    rec.committed_via = via
    async with trio.open_nursery() as nursery:
        if action == "kill":
            async def restarted() -> None:
                rec.restart_s = await _listening(backend, rec.victims, t_heal, opts.commit_timeout_s)
            nursery.start_soon(restarted)
        done = await _create_until(backend, via, port, f"tq-{r}", opts.commit_timeout_s, rec.errors)
        rec.heal_to_commit_s = None if done is None else round(time.monotonic() - t_heal, 3)
    if rec.heal_to_commit_s is not None and rec.restart_s is not None:
        rec.up_to_commit_s = round(rec.heal_to_commit_s - rec.restart_s, 3)
    if rec.during_s is not None:
        rec.during_s = round(rec.during_s, 3)
    if not await _settle(backend, ids, port, opts.settle_timeout_s):
        rec.errors.append("did not settle (every voter reachable, lag 0) within the settle timeout")
    q = await _describe(backend, ids, port) or {}
    rec.leader_after, rec.term_after = q.get("leader_id"), q.get("epoch")
    rec.watchdog = _watchdog_lines(backend, marks)
    return rec


# what the nodes run: a round's result depends on these directories only (the harness, tests,
# docs and benches may change between two runs whose rounds are pooled)
NODE_CODE_DIRS = ("broker", "client", "kraft", "log", "metadata", "rafka", "security", "wire")


def node_code_id(repo: Path | None = None) -> dict[str, str | None]:
    """The commit of the checkout the nodes import, and a hash of the git trees of
    :data:`NODE_CODE_DIRS` in it (None outside a git checkout, or with uncommitted changes in
    those directories: then no two runs can be shown to have run the same node code)."""
    import hashlib
    import subprocess

    repo = repo or Path(__file__).resolve().parent.parent

    def git(*argv: str) -> str | None:
        r = subprocess.run(["git", "-C", str(repo), *argv], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    ids = git("rev-parse", "HEAD", *(f"HEAD:{d}" for d in NODE_CODE_DIRS))  # one line each
    dirty = git("status", "--porcelain", "--", *NODE_CODE_DIRS)
    if ids is None or dirty:
        return {"commit": git("rev-parse", "HEAD"), "node_code": None}
    commit, *trees = ids.split()
    digest = hashlib.sha1(" ".join(trees).encode()).hexdigest()[:12]
    return {"commit": commit[:12], "node_code": digest}


def runnable_patterns(patterns: Sequence[str]) -> tuple[list[str], list[str]]:
    """The patterns of ``patterns`` this machine can run, and why any were left out: the clock
    needs libfaketime, the network faults the local backend's connect() shim."""
    from .backends.preload import clock_skew_unsupported, connect_redirect_unsupported

    kept, notes = list(patterns), []
    for why, actions in ((clock_skew_unsupported(), ("clock",)),
                         (connect_redirect_unsupported(), _NETWORK_ACTIONS)):
        if why and any(PATTERNS[p][1] in actions for p in kept):
            notes.append(f"{'/'.join(actions)} patterns left out: {why}")
            kept = [p for p in kept if PATTERNS[p][1] not in actions]
    return kept, notes


def read_out(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run headers and the rounds of an ``--out`` file (runs may be appended to one file)."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [x["run"] for x in lines if "run" in x], [x for x in lines if "pattern" in x]


async def run_torture(opts: TortureOptions) -> list[Round]:
    """Start the cluster, run the rounds (one JSONL line each to ``opts.out``), stop it."""
    unknown = [p for p in opts.patterns if p not in PATTERNS]
    if unknown:
        raise ValueError(f"unknown patterns {unknown}; known: {', '.join(PATTERNS)}")
    patterns, notes = runnable_patterns(opts.patterns)
    for note in notes:
        print(note, file=sys.stderr, flush=True)
    patterns = patterns or ["pause-leader"]
    # libfaketime only when a clock pattern runs: it costs a file read per wall-clock call
    backend = make_cluster("local", opts.work_dir, opts.nodes, client_port=opts.client_port,
                           raft_port=opts.raft_port,
                           faketime=any(PATTERNS[p][1] == "clock" for p in patterns))
    rng = random.Random(opts.seed)
    rounds: list[Round] = []
    t0 = time.monotonic()
    async with backend:
        for n in backend.spec.node_ids:
            await backend.start_node(n, wait_ready_s=60)
        bootstrap = ",".join(_addr(backend, n, opts.client_port) for n in backend.spec.node_ids)
        await wait_brokers(bootstrap, opts.nodes, 90)
        await _settle(backend, backend.spec.node_ids, opts.client_port, opts.settle_timeout_s)
        if opts.topics:
            await _precreate(bootstrap, opts.topics)
        with open(opts.out, "a") as out:
            # a header line: which node code ran, so that runs can be pooled honestly
            out.write(json.dumps({"run": {**node_code_id(), "seed": opts.seed, "patterns": patterns,
                                          "fault_s": list(opts.fault_s), "nodes": opts.nodes,
                                          "topics": opts.topics, "keep_topics": opts.keep_topics,
                                          "started": round(time.time(), 3)}}) + "\n")
            created: list[str] = []
            batch = _batch(opts)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_stop_on_signal, stop)
                for r in range(opts.rounds):
                    if stop.is_set() or (opts.time_limit_s is not None
                                         and time.monotonic() - t0 > opts.time_limit_s):
                        break
                    rec = await _round_and_record(backend, opts, r, patterns[r % len(patterns)], rng, out)
                    rounds.append(rec)
                    # a during-fault create that timed out may still have committed: named too
                    created += [f"tq-{r}-during", f"tq-{r}"] if PATTERNS[rec.pattern][0] != "all" else [f"tq-{r}"]
                    if opts.keep_topics is not None and len(created) >= opts.keep_topics + batch:
                        await _delete_topics(bootstrap, created[:batch])
                        del created[:batch]
                nursery.cancel_scope.cancel()
        await backend.kill_all()
    return rounds


def _batch(opts: TortureOptions) -> int:
    """Topics deleted per request once ``keep_topics`` is exceeded by this many."""
    return max(1, min(50, opts.keep_topics or 0))


async def _stop_on_signal(stop: trio.Event) -> None:
    """SIGTERM / SIGINT end the run after the round in progress: the nodes are killed on the
    way out (a plain SIGTERM would leave them running)."""
    import signal

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            print(f"signal {signum}: stopping after this round", file=sys.stderr, flush=True)
            stop.set()


async def _delete_topics(bootstrap: str, names: list[str]) -> None:
    """Delete the harness's oldest topics; a failure is printed and the run goes on (the
    next deletion retries nothing: a leftover topic only makes the cluster a little bigger)."""
    from rafka.client import AsyncAdmin

    with trio.move_on_after(30):
        try:
            async with AsyncAdmin(bootstrap_servers=bootstrap, request_timeout_ms=10_000) as admin:
                await admin.delete_topics(names, raise_on_error=False)
            return
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            print(f"deleting {len(names)} topics: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


async def _round_and_record(backend: Backend, opts: TortureOptions, r: int, pattern: str,
                            rng: random.Random, out: Any) -> Round:
    rec = await one_round(backend, opts, r, pattern, rng)
    out.write(json.dumps(rec.__dict__) + "\n")
    out.flush()
    size = "" if rec.fault_size is None else f" size {rec.fault_size}"
    print(f"round {r} {rec.pattern} victims {rec.victims}{size}: heal->commit {rec.heal_to_commit_s} s, "
          f"during {rec.during_s}, term {rec.term_before}->{rec.term_after}"
          + (f", errors {rec.errors[:2]}" if rec.errors else ""), file=sys.stderr, flush=True)
    return rec


async def _precreate(bootstrap: str, count: int, per_request: int = 50) -> None:
    """Create ``count`` single-partition topics ``tq-pre-<i>`` (existing ones are kept)."""
    from rafka.client import AsyncAdmin
    from rafka.wire.errors import ErrorCode

    async with AsyncAdmin(bootstrap_servers=bootstrap, request_timeout_ms=30_000) as admin:
        for start in range(0, count, per_request):
            names = [f"tq-pre-{i}" for i in range(start, min(count, start + per_request))]
            errors = await admin.create_topics([(n, 1, 1) for n in names], raise_on_error=False)
            bad = {n: e for n, e in errors.items()
                   if e is not None and e.code != ErrorCode.TOPIC_ALREADY_EXISTS}
            if bad:
                raise RuntimeError(f"pre-creating topics: {bad}")
    print(f"pre-created {count} topics", file=sys.stderr, flush=True)


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def summarize(rounds: Sequence[dict[str, Any]], worst: int = 5) -> str:
    """p50 / p99 / max of heal→commit (and of the write during the fault) per pattern, failed
    rounds, and the ``worst`` slowest rounds with their errors and watchdog lines."""
    lines = ["pattern               rounds  heal->commit p50 / p99 / max (s)   no-commit   during-fault p50 / max (s)  missed"
             "  term kept"]
    for pattern in sorted({r["pattern"] for r in rounds}):
        rs = [r for r in rounds if r["pattern"] == pattern]
        heal = [r["heal_to_commit_s"] for r in rs if r["heal_to_commit_s"] is not None]
        during = [r["during_s"] for r in rs if r["during_s"] is not None]
        with_during = [r for r in rs if r["pattern"] in PATTERNS and PATTERNS[r["pattern"]][0] != "all"]
        h = f"{_pct(heal, 50):6.2f} / {_pct(heal, 99):6.2f} / {max(heal):6.2f}" if heal else "   -"
        d = f"{_pct(during, 50):6.2f} / {max(during):6.2f}" if during else "   -"
        kept = sum(1 for r in rs if r["term_before"] is not None and r["term_after"] == r["term_before"])
        lines.append(f"{pattern:22s}{len(rs):6d}  {h:34s}{len(rs) - len(heal):9d}   {d:26s}"
                     f"{len(with_during) - len(during):6d}{kept:11d}")
    restarts = [r for r in rounds if r.get("restart_s") is not None]
    if restarts:  # kill patterns: the restart (Python start-up) apart from what Raft + rafka cost
        lines.append("kill patterns: heal -> restarted processes listening, and processes up -> commit "
                     "(negative: committed through the survivors first, counted as 0)")
        lines.append("pattern               rounds  restart p50 / p99 / max (s)        up->commit p50 / p99 / max (s)")
        for pattern in sorted({r["pattern"] for r in restarts}):
            rs = [r for r in restarts if r["pattern"] == pattern]
            up = [r["restart_s"] for r in rs]
            cost = [max(0.0, r["up_to_commit_s"]) for r in rs if r.get("up_to_commit_s") is not None]
            u = f"{_pct(up, 50):6.2f} / {_pct(up, 99):6.2f} / {max(up):6.2f}"
            c = f"{_pct(cost, 50):6.2f} / {_pct(cost, 99):6.2f} / {max(cost):6.2f}" if cost else "   -"
            lines.append(f"{pattern:22s}{len(rs):6d}  {u:35s}{c}")
    slow = sorted(rounds, key=lambda r: -1e9 if r["heal_to_commit_s"] is None else -r["heal_to_commit_s"])
    lines.append(f"worst {min(worst, len(slow))} rounds:")
    for r in slow[:worst]:
        size = "" if r.get("fault_size") is None else f" size {r['fault_size']}"
        lines.append(f"  round {r['round']} {r['pattern']} victims {r['victims']} fault {r['fault_s']} s{size}: "
                     f"heal->commit {r['heal_to_commit_s']} s (restart {r.get('restart_s')} s), "
                     f"during {r['during_s']}, leader "
                     f"{r['leader_before']}@{r['term_before']} -> {r['leader_after']}@{r['term_after']}")
        lines += [f"    error: {e}" for e in r["errors"][:3]] + [f"    {w[:400]}" for w in r["watchdog"][:3]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos_tests.quorum_torture", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--patterns", default=",".join(PATTERNS), help="comma-separated; default: all")
    ap.add_argument("--fault-s", default="2,6", help="MIN,MAX seconds of each fault")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=None, help="start no round after this many seconds")
    ap.add_argument("--work-dir", type=Path, default=Path("quorum-torture-work"))
    ap.add_argument("--out", type=Path, default=Path("quorum-torture.jsonl"))
    ap.add_argument("--client-port", type=int, default=TortureOptions.client_port,
                    help="first node's client port (others follow); another harness on the box needs others")
    ap.add_argument("--raft-port", type=int, default=TortureOptions.raft_port,
                    help="first node's Raft port; keep it below the ephemeral range (docs/quorum.md)")
    ap.add_argument("--topics", type=int, default=0,
                    help="single-partition topics to create before the first round")
    ap.add_argument("--keep-topics", type=int, default=None,
                    help="delete the rounds' oldest topics beyond this many (default: keep all)")
    ap.add_argument("--summary-only", action="store_true", help="print the summary of --out and exit")
    a = ap.parse_args(argv)
    if not a.summary_only:
        lo, hi = (float(x) for x in a.fault_s.split(","))
        opts = TortureOptions(rounds=a.rounds, nodes=a.nodes, patterns=tuple(a.patterns.split(",")),
                              fault_s=(lo, hi), seed=a.seed, work_dir=a.work_dir, out=a.out,
                              time_limit_s=a.time_limit, client_port=a.client_port,
                              raft_port=a.raft_port, topics=a.topics, keep_topics=a.keep_topics)
        trio.run(run_torture, opts)
    runs, rounds = read_out(a.out)
    codes = sorted({str(r.get("node_code")) for r in runs})
    if runs:
        print(f"{len(runs)} run(s) in {a.out}; node code: {', '.join(codes)}"
              + (" — MIXED: these rounds did not all run the same node code" if len(codes) > 1 else ""))
    print(summarize(rounds))
    bad = [r for r in rounds if r["heal_to_commit_s"] is None]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
