"""A chaos campaign against a real rafka cluster: configure, start, fault, heal, read, check, report.

Theory of operation
-------------------
:func:`run` (``rafka chaos run``) does, in order, with everything bounded in time:

1. **Layout.**  One :class:`~chaos_tests.backends.base.NodeSpec` per node
   (:func:`~chaos_tests.backends.base.rafka_node_spec`, ``rafka server --config node-N.toml``)
   and a TOML config per node (:func:`node_config`, ``docs/internals.md`` §3): combined
   ``roles = ["broker", "controller"]``, the client listener on the node's own IP
   (``backend.node_host``) port 9092, the Raft listener on port 19092, every voter's raft and
   rpc address *as this node dials it* (``backend.peer_address``: the local backend routes
   peers through its link proxies), a shared cluster secret file, one data dir per node under
   the work dir, and broker settings for safety testing (``min.insync.replicas = 2``, unclean
   leader election off, short ISR lag and session timeouts so faults have effects within a
   short run).
2. **Start** every node, wait until all brokers are registered, create the queue topic and
   wait until each partition has a leader and a full ISR.
3. **Run** the workloads (:mod:`rafka.chaos_tests.workloads`: ``queue`` by default, or ``txn`` —
   then its topics, final reads in both isolation levels and :func:`check_all_txn`
   replace the queue's) until ``time_limit_s`` and, at the
   same time, the :class:`~chaos_tests.nemesis.NemesisRunner` over
   ``generate_schedule(seed, nodes, time_limit_s, kinds=...)``; ``@controller`` resolves through
   DESCRIBE_QUORUM, ``@leader`` through the topic metadata (leader of partition 0).  The
   schedule ends with a heal-all ``quiet_s`` before the time limit.
4. **Recover**: heal everything again, restart any node that is down, wait (bounded) until
   every partition has a leader and a full ISR; then the **final reads** of every partition
   from the beginning to its high watermark, and the metadata workload's verification.
5. **Check** the history (:func:`~chaos_tests.checkers.check_all`) with the node events
   (``DATA_DIR/events.jsonl`` and ``rafka-event:`` lines in the node logs); **report**
   (``summary.txt``, ``results.json``, ``timeline.png``, ``history.jsonl``, copies of the node
   logs) into the results folder.  The backend is torn down whatever happens (the
   ``async with`` of the backend), and the seed is printed first and last.

``--unsafe-ack-before-replication`` is the "the checker can fail" switch: acknowledgements
that do not wait for replication.  When the broker knows the setting
``unsafe.ack.before.replication`` it is set (producers keep ``acks=all``); otherwise producers
use ``acks=1`` — the same acknowledgement point (after the leader's local append), chosen by
the client — and the results say which one ran.

``--secure`` (:mod:`rafka.chaos_tests.secure`): every node also gets a SASL_SSL listener with the
authorizer; the workloads and final reads use it as an ACL'd user, the harness's own calls the
main listener.

Exit status of :func:`main_run`: 0 = no anomaly, 1 = anomalies, 2 = the campaign could not run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import secrets
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import trio
from rafka.broker.events import event_files
from rafka.security.client import ambient_security

from .backends.base import Backend, ClusterSpec, rafka_node_spec
from .checkers import CheckResult, Summary, check_all
from .checkers_txn import check_all_txn
from .faults import unmount_leftovers
from .history import HistoryWriter, read_history
from .nemesis import CONTROLLER, KINDS_BY_NAME, LEADER, NemesisRunner, generate_schedule
from .node_events import read_node_events
from .report import write_report
from .secure import SecureCluster
from .workloads.common import RunContext
from .workloads.metadata import MetadataSpec, metadata_process, verify_topics
from .workloads.queue import QueueSpec, create_queue_topic, final_reads, run_queue
from .workloads.txn import TxnSpec, create_txn_topics, run_txn, txn_final_reads

__all__ = [
    "CampaignOptions",
    "CampaignResult",
    "NEMESIS_ALIASES",
    "expand_nemesis",
    "node_config",
    "toml_dumps",
    "make_cluster",
    "broker_supports",
    "resolve_target",
    "run",
    "main_run",
]

log = logging.getLogger("chaos.campaign")

CLIENT_PORT = 9092
RAFT_PORT = 19092
UNSAFE_SETTING = "unsafe.ack.before.replication"

# CLI nemesis names → fault kinds of chaos_tests.nemesis
NEMESIS_ALIASES: dict[str, tuple[str, ...]] = {
    "kill": ("kill",),
    "pause": ("pause",),
    "partition": ("partition-isolate-one", "partition-isolate-controller",
                  "partition-isolate-leader", "partition-halves", "partition-ring"),
    "clock": ("clock-skew",),
    "disk": ("disk-full",),
    "crash": ("lose-unfsynced-writes",),
}

DEFAULT_BROKER_SETTINGS: dict[str, Any] = {
    "min.insync.replicas": 2,
    "default.replication.factor": 3,
    "unclean.leader.election.enable": False,
    "replica.lag.time.max.ms": 4000,
    "replica.fetch.wait.max.ms": 200,
    "broker.heartbeat.interval.ms": 250,
    "log.segment.bytes": 1 << 20,
    "log.flush.policy": "batch",
    "controlled.shutdown.timeout.ms": 5000,
    "request.forward.timeout.ms": 5000,
    # the node-event checkers need every high-watermark move (off by default: broker/events.py)
    "events.hw.enable": True,
}
DEFAULT_CONTROLLER_SETTINGS: dict[str, Any] = {
    "broker.session.timeout.ms": 3000,
}


def expand_nemesis(names: Iterable[str]) -> list[str]:
    """``["kill", "partition"]`` → fault kinds; full kind names pass through."""
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        kinds = NEMESIS_ALIASES.get(name, (name,) if name in KINDS_BY_NAME else None)
        if kinds is None:
            known = sorted({*NEMESIS_ALIASES, *KINDS_BY_NAME})
            raise ValueError(f"unknown nemesis {name!r}; known: {', '.join(known)}")
        out.extend(k for k in kinds if k not in out)
    return out


# --------------------------------------------------------------------------- configuration

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def toml_dumps(doc: Mapping[str, Any]) -> str:
    """The small TOML subset node configs use: scalars, lists, tables, arrays of tables."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    arrays: list[tuple[str, Sequence[Mapping[str, Any]]]] = []
    for k, v in doc.items():
        if isinstance(v, Mapping):
            tables.append((k, v))
        elif isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
            arrays.append((k, v))
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    for k, items in arrays:
        for item in items:
            lines += ["", f"[[{k}]]"] + [f"{ik} = {_toml_value(iv)}" for ik, iv in item.items()]
    for k, table in tables:
        lines += ["", f"[{k}]"] + [f"{json.dumps(tk)} = {_toml_value(tv)}"
                                   for tk, tv in table.items()]
    return "\n".join(lines) + "\n"


def node_config(backend: Backend, node: int, *, data_dir: Path, secret_file: Path,
                cluster_id: str = "rafka-chaos", broker: Mapping[str, Any] | None = None,
                controller: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The TOML mapping of one combined node (module docstring, step 1)."""
    host = backend.node_host(node)
    client_port, raft_port = backend.spec.node(node).client_port, backend.spec.node(node).raft_port
    voters = []
    for v in backend.spec.node_ids:
        if v == node:
            raft, rpc = (host, raft_port), (host, client_port)
        else:
            raft = backend.peer_address(node, v, raft_port)
            rpc = backend.peer_address(node, v, client_port)
        voters.append({"id": v, "raft": f"{raft[0]}:{raft[1]}", "rpc": f"{rpc[0]}:{rpc[1]}"})
    return {
        "node_id": node,
        "roles": ["broker", "controller"],
        "data_dir": str(data_dir),
        "listener": f"{host}:{client_port}",
        "raft_listener": f"{host}:{raft_port}",
        "cluster_id": cluster_id,
        "cluster_secret_file": str(secret_file),
        "voters": voters,
        "broker": {**DEFAULT_BROKER_SETTINGS, **(broker or {})},
        "controller": {**DEFAULT_CONTROLLER_SETTINGS, **(controller or {})},
    }


def broker_supports(setting: str) -> bool:
    """Whether this build's broker config knows ``setting``."""
    try:
        from rafka.broker.config import BROKER_SETTINGS
    except ImportError:
        return False
    return setting in BROKER_SETTINGS


def backend_class(name: str) -> type[Backend]:
    if name == "netns":
        from .backends.netns import NetnsBackend
        return NetnsBackend
    if name == "local":
        from .backends.local import LocalBackend
        return LocalBackend
    if name == "docker":
        try:
            from .backends import docker as docker_mod  # built by another engineer
        except ImportError as exc:
            raise ValueError(f"docker backend not available in this build: {exc}") from None
        cls = getattr(docker_mod, "DockerBackend", None)
        if cls is None:
            raise ValueError("chaos_tests.backends.docker has no DockerBackend")
        return cls  # type: ignore[no-any-return]
    raise ValueError(f"unknown backend {name!r} (netns | docker | local)")


def unsupported_faults(backend_name: str, kinds: Sequence[str]) -> str | None:
    """Why this backend cannot really apply one of ``kinds`` here (None: it can)."""
    from .backends.preload import clock_skew_unsupported, connect_redirect_unsupported
    from .nemesis import KINDS_BY_NAME as kinds_by_name

    if "clock-skew" in kinds and backend_name != "docker":
        reason = clock_skew_unsupported()
        if reason:
            return f"--nemesis clock: {reason}"
    if backend_name == "local" and any(kinds_by_name[k].family == "network" for k in kinds):
        reason = connect_redirect_unsupported()
        if reason:
            return (f"--backend local cannot apply partitions here: {reason}; replication "
                    "and client traffic would bypass the link proxies (use --backend netns)")
    return None


def data_dir_of(work_dir: Path, node: int) -> Path:
    return work_dir / f"node-{node}" / "data"


def make_cluster(backend_name: str, work_dir: Path, nodes: int, *,
                 broker: Mapping[str, Any] | None = None,
                 controller: Mapping[str, Any] | None = None,
                 faketime: bool = False, security: SecureCluster | None = None,
                 client_port: int = CLIENT_PORT, raft_port: int = RAFT_PORT) -> Backend:
    """The backend with its spec, secret and node configs written under ``work_dir``
    (with ``security``: each node's certificate and ``[security]`` table, secure.py).
    Other ports than the defaults let two harnesses share a machine (quorum_torture.py)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    ids = list(range(1, nodes + 1))
    specs = tuple(rafka_node_spec(n, work_dir / f"node-{n}.toml", client_port=client_port,
                                  raft_port=raft_port) for n in ids)
    backend = backend_class(backend_name)(ClusterSpec(specs, work_dir))
    backend.use_faketime = faketime
    secret_file = work_dir / "cluster.secret"
    fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    for n in ids:
        d = data_dir_of(work_dir, n)
        d.mkdir(parents=True, exist_ok=True)
        cfg = node_config(backend, n, data_dir=d, secret_file=secret_file, broker=broker,
                          controller=controller)
        if security is not None:
            cfg["security"] = security.node_table(backend, n)
        (work_dir / f"node-{n}.toml").write_text(toml_dumps(cfg))
    return backend


# --------------------------------------------------------------------------- options/result

@dataclass(frozen=True)
class CampaignOptions:
    backend: str = "netns"
    nemesis: tuple[str, ...] = ("kill", "partition")
    time_limit_s: float = 60.0
    seed: int = 1
    work_dir: Path = Path("chaos-work")
    results_dir: Path | None = None
    nodes: int = 3
    unsafe_ack_before_replication: bool = False
    queue: QueueSpec = field(default_factory=QueueSpec)
    workload: str = "queue"  # or "txn" (workloads/txn.py, checkers_txn.py)
    txn: TxnSpec = field(default_factory=TxnSpec)
    metadata: bool = True
    groups: bool = True
    op_timeout_s: float = 5.0
    start_timeout_s: float = 90.0
    recovery_timeout_s: float = 60.0
    final_read_timeout_s: float = 60.0
    mean_interval_s: float = 8.0
    min_fault_s: float = 2.0
    max_fault_s: float = 10.0
    quiet_s: float = 5.0
    warmup_s: float = 3.0
    png: bool = True
    secure: bool = False  # TLS + SCRAM listeners, workloads as an ACL'd user (secure.py)
    # broker settings over DEFAULT_BROKER_SETTINGS (the CLI's --flush: log.flush.policy)
    broker_config: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class CampaignResult:
    seed: int
    valid: bool
    results_dir: Path
    summary: Summary | None = None
    error: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return 2
        return 0 if self.valid else 1


# --------------------------------------------------------------------------- cluster queries

def bootstrap_of(backend: Backend) -> str:
    return ",".join("{}:{}".format(*backend.node_address(n, CLIENT_PORT))
                    for n in backend.spec.node_ids)


async def _admin_call(bootstrap: str, fn: Any, timeout_s: float) -> Any:
    from rafka.client import AsyncAdmin

    with trio.fail_after(timeout_s):
        async with AsyncAdmin(bootstrap_servers=bootstrap, security_protocol="PLAINTEXT",
                              request_timeout_ms=int(timeout_s * 1000)) as admin:
            return await fn(admin)


async def resolve_target(bootstrap: str, symbol: str, topic: str, *,
                         timeout_s: float = 5.0) -> int:
    """``@controller`` → the Raft leader (DESCRIBE_QUORUM); ``@leader`` → leader of topic/0."""
    if symbol == CONTROLLER:
        body = await _admin_call(bootstrap, lambda a: a.describe_quorum(), timeout_s)
        leader = body.get("leader_id")
    elif symbol == LEADER:
        desc = await _admin_call(bootstrap, lambda a: a.describe_topic(topic), timeout_s)
        leader = min(desc.partitions, key=lambda p: p.partition).leader
    else:
        raise ValueError(f"unknown target {symbol!r}")
    if not isinstance(leader, int) or leader < 0:
        raise LookupError(f"{symbol}: no leader known")
    return leader


async def wait_brokers(bootstrap: str, nodes: int, timeout_s: float) -> None:
    with trio.fail_after(timeout_s):
        while True:
            try:
                desc = await _admin_call(bootstrap, lambda a: a.describe_cluster(), 5.0)
                if len(desc.brokers) >= nodes:
                    return
            except Exception as exc:  # noqa: BLE001
                log.debug("cluster not ready: %r", exc)
            await trio.sleep(0.5)


async def wait_recovered(bootstrap: str, topic: str, rf: int, timeout_s: float) -> float | None:
    """Seconds until every partition of ``topic`` has a leader and a full ISR (None: never)."""
    t0 = trio.current_time()
    with trio.move_on_after(timeout_s):
        while True:
            try:
                desc = await _admin_call(bootstrap, lambda a: a.describe_topic(topic), 5.0)
                if all(p.leader >= 0 and len(p.isr) >= rf for p in desc.partitions):
                    return trio.current_time() - t0
            except Exception as exc:  # noqa: BLE001
                log.debug("not recovered yet: %r", exc)
            await trio.sleep(0.5)
    return None


# --------------------------------------------------------------------------- the run

def _fault_handlers(backend: Backend, kinds: Sequence[str], work_dir: Path) -> dict[str, Any]:
    """Handlers for the faults that need mounts; disk-full first (it may sit under the FUSE)."""
    handlers: dict[str, Any] = {}
    data_dirs = {n: data_dir_of(work_dir, n) for n in backend.spec.node_ids}
    if "disk-full" in kinds:
        from .faults.disk import DiskFull
        from .faults.unfsynced import LoseUnfsyncedWrites

        volume = data_dirs
        if "lose-unfsynced-writes" in kinds:  # the tmpfs holds the FUSE's backing dirs
            probe = LoseUnfsyncedWrites(backend, data_dirs, work_dir)
            volume = {n: probe._backing(n) for n in data_dirs}
        handlers["disk-full"] = DiskFull(backend, volume)
    if "lose-unfsynced-writes" in kinds:
        from .faults.unfsynced import LoseUnfsyncedWrites

        handlers["lose-unfsynced-writes"] = LoseUnfsyncedWrites(backend, data_dirs, work_dir)
    return handlers


async def _run_phases(opts: CampaignOptions, backend: Backend, results: Path,
                      notes: dict[str, Any], queue: QueueSpec, acks: str,
                      security: SecureCluster | None = None) -> Summary:
    ids = backend.spec.node_ids
    kinds = [k for k in expand_nemesis(opts.nemesis)]
    txn = opts.workload == "txn"
    spec: QueueSpec | TxnSpec = opts.txn if txn else queue
    handlers = _fault_handlers(backend, kinds, backend.work_dir)
    async with _mounted(handlers):
        for n in ids:
            await backend.start_node(n, wait_ready_s=opts.start_timeout_s)
        bootstrap = bootstrap_of(backend)
        notes["bootstrap"] = bootstrap
        t_start = time.monotonic()
        await wait_brokers(bootstrap, len(ids), opts.start_timeout_s)
        if security is not None:  # workloads: the secured listeners (run() set the ambient)
            await security.create_principals(bootstrap, timeout_s=opts.start_timeout_s)
            notes["security"] = security.notes()
        history_path = results / "history.jsonl"
        with HistoryWriter(history_path) as history:
            ctx = RunContext(history, bootstrap if security is None else security.bootstrap(),
                             op_timeout_s=opts.op_timeout_s,
                             request_timeout_ms=int(min(3.0, opts.op_timeout_s) * 1000))
            if txn:
                await create_txn_topics(ctx, opts.txn, timeout_s=opts.start_timeout_s)
            else:
                await create_queue_topic(ctx, queue, timeout_s=opts.start_timeout_s)
            notes["startup_s"] = round(time.monotonic() - t_start, 2)
            schedule = generate_schedule(
                opts.seed, ids, opts.time_limit_s, kinds=kinds,
                mean_interval_s=opts.mean_interval_s, min_fault_s=opts.min_fault_s,
                max_fault_s=opts.max_fault_s, warmup_s=opts.warmup_s, quiet_s=opts.quiet_s)
            notes["schedule"] = [{"start_s": f.start_s, "duration_s": f.duration_s,
                                  **f.fault.to_dict()} for f in schedule.faults]
            rng = random.Random(opts.seed)

            async def resolve(symbol: str) -> int:
                try:
                    return await resolve_target(bootstrap, symbol, spec.topic)
                except Exception as exc:  # noqa: BLE001 - fall back to a seeded pick
                    pick = rng.choice(ids)
                    log.info("cannot resolve %s (%r); using node %d", symbol, exc, pick)
                    return pick

            runner = NemesisRunner(backend, history, ids, resolve=resolve, handlers=handlers)
            ctx.deadline = trio.current_time() + opts.time_limit_s
            workload_notes: dict[str, Any] = {}

            async def workloads() -> None:
                async with trio.open_nursery() as n:
                    if opts.metadata:
                        n.start_soon(metadata_process, ctx, MetadataSpec())
                    workload_notes.update(await run_txn(ctx, opts.txn) if txn else
                                          await run_queue(ctx, queue, groups=opts.groups))

            exits: list[dict[str, Any]] = []
            notes["unexpected_exits"] = exits

            t0_run = time.monotonic()
            async with trio.open_nursery() as watcher:
                watcher.start_soon(_watch_exits, backend, exits, t0_run)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(workloads)
                    nursery.start_soon(runner.run, schedule)
                watcher.cancel_scope.cancel()
            _note_exits(backend, exits, t0_run)
            notes.update(workload_notes)
            notes["nemesis_errors"] = runner.errors
            # liveness phase: everything healed and running
            await runner.heal_all()
            for h in handlers.values():
                await h.heal_all()
            for n in ids:
                if not backend.running(n):
                    await backend.start_node(n, wait_ready_s=opts.start_timeout_s)
            rec = await wait_recovered(bootstrap, spec.topic, spec.replication_factor,
                                       opts.recovery_timeout_s)
            notes["recovery_s"] = None if rec is None else round(rec, 2)
            notes["final_reads"] = await (
                txn_final_reads(ctx, opts.txn, timeout_s=opts.final_read_timeout_s) if txn
                else final_reads(ctx, queue, timeout_s=opts.final_read_timeout_s))
            meta_result: CheckResult | None = None
            if opts.metadata:
                history.flush()
                meta_result = await verify_topics(ctx.bootstrap, read_history(history_path),
                                                  MetadataSpec())
            notes["ops"] = dict(sorted(ctx.stats.items()))
            notes["faults"] = {k: h.statistics() for k, h in handlers.items()}
            start_mono = history.start_mono_ns
            notes["history_start_mono_ns"] = start_mono  # node events' mono_ns - this = op time
        # evidence, read while the data dirs are still mounted
        await backend.kill_all()
        events = read_node_events(_event_files(backend))
        _copy_logs(backend, results)
    ops = read_history(history_path)
    summary = (check_all_txn if txn else check_all)(ops, events, start_mono_ns=start_mono)
    if meta_result is not None:
        summary.checkers["metadata"] = meta_result
        summary.anomalies.extend(meta_result.anomalies)
        summary.valid = summary.valid and meta_result.valid
    notes["node_events"] = len(events)
    paths = write_report(results, ops, summary, png=opts.png, seed=opts.seed,
                         backend=opts.backend, nemesis=list(opts.nemesis),
                         time_limit_s=opts.time_limit_s, acks=acks, notes=notes)
    with open(paths["summary"], "a", encoding="utf-8") as fh:
        fh.write(_run_notes_text(notes))
    return summary


def _run_notes_text(notes: Mapping[str, Any]) -> str:
    """What summary.txt adds below the checkers: faults applied, liveness, node crashes."""
    sched = notes.get("schedule", [])
    kinds: dict[str, int] = {}
    for f in sched:
        kinds[f["fault"]] = kinds.get(f["fault"], 0) + 1
    lines = ["", f"faults scheduled: {len(sched)}"
             + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")"
                if kinds else "")]
    errs = notes.get("nemesis_errors") or []
    if errs:
        lines.append(f"faults that could not be applied/undone: {len(errs)}")
        lines += [f"  {e}" for e in errs[:10]]
    lines.append(f"recovery after heal: {notes.get('recovery_s')} s (None = not recovered)")
    exits = notes.get("unexpected_exits") or []
    lines.append(f"unexpected node exits (not the nemesis): {len(exits)}")
    lines += [f"  node {e['node']} at {e['t_s']} s, status {e['returncode']}: {e['last_error']}"
              for e in exits[:20]]
    return "\n".join(lines) + "\n"


async def _watch_exits(backend: Backend, exits: list[dict[str, Any]], t0: float) -> None:
    """Record node processes that die on their own during the run (not the nemesis)."""
    while True:
        _note_exits(backend, exits, t0)
        await trio.sleep(0.5)


def _note_exits(backend: Backend, exits: list[dict[str, Any]], t0: float) -> None:
    poll = getattr(backend, "poll_exits", None)
    for e in poll() if poll is not None else []:
        e["t_s"] = round(time.monotonic() - t0, 1)
        e["last_error"] = _last_error_line(backend.log_path(e["node"]))
        log.warning("node %s exited on its own (status %s) at %.1f s: %s", e["node"],
                    e["returncode"], e["t_s"], e["last_error"])
        exits.append(e)


def _last_error_line(path: Path) -> str | None:
    """The last exception line of a node's output (``SomeError: message``), if any."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65536))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        text = line.strip(" |")
        head = text.split(":", 1)[0]
        if ":" in text and (head.endswith(("Error", "Exception", "Group")) or "." in head
                            and head.rsplit(".", 1)[1].endswith(("Error", "Exception"))):
            return text[:300]
    return None


def _event_files(backend: Backend) -> list[Path]:
    out = []
    for n in backend.spec.node_ids:
        out += event_files(data_dir_of(backend.work_dir, n) / "events.jsonl")
    return out


class _mounted:  # noqa: N801 - used as ``async with _mounted(handlers)``
    """Set up fault handlers that need mounts before nodes start; undo them afterwards."""

    def __init__(self, handlers: Mapping[str, Any]) -> None:
        self.handlers = list(handlers.values())
        self.done: list[Any] = []

    async def __aenter__(self) -> None:
        try:
            for h in self.handlers:
                self.done.append(h)  # before setup: a half-done setup (one of three mounts) is undone too
                await h.setup()
        except BaseException:
            await self.__aexit__()
            raise

    async def __aexit__(self, *exc: object) -> None:
        with trio.CancelScope(shield=True):
            for h in reversed(self.done):
                try:
                    await h.teardown()
                except Exception as e:  # noqa: BLE001
                    log.warning("fault teardown failed: %r", e)


async def run(opts: CampaignOptions) -> CampaignResult:
    """Run one campaign (module docstring); never raises for a cluster problem."""
    results = opts.results_dir or Path("chaos-results") / time.strftime(
        f"%Y%m%d-%H%M%S-seed{opts.seed}")
    if (results / "history.jsonl").exists():
        # HistoryWriter appends: a second run into the same folder would mix two histories
        # (indices restart at 0) and every checker would pair the wrong operations
        print(f"chaos: {results} already holds a run (history.jsonl); choose another --results",
              flush=True)
        return CampaignResult(opts.seed, False, results,
                              error=f"results folder {results} is not empty")
    results.mkdir(parents=True, exist_ok=True)
    work_dir = Path(opts.work_dir)
    if work_dir.exists():
        unmount_leftovers(work_dir)  # a killed earlier run may have left its FUSE/tmpfs mounts
        shutil.rmtree(work_dir)
    notes: dict[str, Any] = {"seed": opts.seed}
    queue = opts.queue
    broker_overrides: dict[str, Any] = dict(opts.broker_config)
    acks = "all"
    if opts.unsafe_ack_before_replication:
        if broker_supports(UNSAFE_SETTING):
            broker_overrides[UNSAFE_SETTING] = True
            notes["unsafe"] = f"broker setting {UNSAFE_SETTING}=true"
        else:
            acks = "1"
            notes["unsafe"] = (f"broker lacks {UNSAFE_SETTING}: producers use acks=1 "
                               "(acknowledged after the leader's local append)")
        queue = replace(queue, acks=acks)
    print(f"chaos: seed {opts.seed}, backend {opts.backend}, nemesis {','.join(opts.nemesis)}, "
          f"time limit {opts.time_limit_s:g} s, results {results}", flush=True)
    result = CampaignResult(opts.seed, False, results, notes=notes)
    try:
        kinds = expand_nemesis(opts.nemesis)
        reason = unsupported_faults(opts.backend, kinds)
        if reason:
            raise ValueError(reason)
        security = SecureCluster.create(work_dir) if opts.secure else None
        backend = make_cluster(opts.backend, work_dir, opts.nodes, broker=broker_overrides,
                               faketime="clock-skew" in kinds, security=security)
        hard_limit = (opts.time_limit_s + 2 * opts.start_timeout_s + opts.recovery_timeout_s
                      + opts.final_read_timeout_s * max(1, len(
                          opts.txn.tps() if opts.workload == "txn" else queue.tps())) + 120)
        with trio.fail_after(hard_limit):
            async with backend:
                with (ambient_security(security.client_options()) if security is not None
                      else contextlib.nullcontext()):
                    summary = await _run_phases(opts, backend, results, notes, queue, acks,
                                                security)
        result.summary = summary
        result.valid = summary.valid
    except Exception as exc:  # noqa: BLE001 - reported, exit status 2
        log.exception("campaign failed")
        result.error = f"{type(exc).__name__}: {exc}"
        (results / "error.txt").write_text(result.error + "\n")
    _print_outcome(result)
    return result


def _copy_logs(backend: Backend, results: Path) -> None:
    dest = results / "nodes"
    dest.mkdir(exist_ok=True)
    for n in backend.spec.node_ids:
        for src in (backend.log_path(n), data_dir_of(backend.work_dir, n) / "node.log",
                    *event_files(data_dir_of(backend.work_dir, n) / "events.jsonl"),
                    backend.work_dir / f"node-{n}.toml"):
            if src.exists():
                try:
                    shutil.copyfile(src, dest / f"node-{n}-{src.name}")
                except OSError as exc:
                    log.debug("cannot copy %s: %s", src, exc)


def _print_outcome(result: CampaignResult) -> None:
    summary_path = result.results_dir / "summary.txt"
    if summary_path.exists():
        print(summary_path.read_text(), end="", flush=True)
    if result.error:
        print(f"chaos: ERROR {result.error}", flush=True)
    verdict = "VALID (no anomalies)" if result.exit_code == 0 else (
        "INVALID (anomalies found)" if result.exit_code == 1 else "DID NOT RUN")
    print(f"chaos: seed {result.seed}: {verdict}; results in {result.results_dir}", flush=True)


def main_run(opts: CampaignOptions) -> int:
    """Synchronous entry point (the CLI): run the campaign and return its exit status."""
    if not math.isfinite(opts.time_limit_s) or opts.time_limit_s <= 0:
        raise ValueError("time limit must be a positive number of seconds")
    return trio.run(run, opts).exit_code


def options_dict(opts: CampaignOptions) -> dict[str, Any]:
    d = asdict(opts)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in d.items()}


