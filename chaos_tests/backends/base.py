"""The backend interface: where nodes run and how faults reach them.

Theory of operation
-------------------
A backend owns the *infrastructure* of a chaos run: an address per node, the node processes,
the network between them and their clocks.  It knows nothing about rafka: what to run is a
:class:`NodeSpec` (an ``argv`` template) inside a :class:`ClusterSpec`.  This is the seam for
the part that starts real rafka nodes: build one ``NodeSpec`` per node with
:func:`rafka_node_spec` after writing each node's TOML config (``docs/internals.md`` §3),
using ``backend.node_host(n)`` for its own listeners and ``backend.peer_address(n, m, port)``
for every address it dials (the local backend routes those through proxies).

``argv`` placeholders, filled per node: ``{python}`` ``{node_id}`` ``{host}`` ``{client_port}``
``{raft_port}`` ``{config}`` ``{work_dir}``.

Node 0 means "the harness" (clients): ``cut(0, n)`` isolates node n from clients.

Processes are started in their own session (process group), stdout+stderr appended to
``work_dir/node-<id>.log`` (where node events are read from), signalled by process group,
and always reaped.  Clock skew (:mod:`chaos_tests.backends.faketime`): with ``use_faketime``
every node is started with ``LD_PRELOAD`` = a small sleep shim (compiled here with gcc) +
libfaketime and a per-node timestamp file (``+0`` at start) that ``skew_clock`` rewrites;
``FAKETIME_NO_CACHE=1`` makes the change live and ``DONT_FAKE_MONOTONIC=1`` keeps the
monotonic clock (used for timeouts and for node-event ``mono_ns``) untouched.  The shim is what
keeps ``time.sleep`` working under libfaketime 0.9.10 (see that module for exactly which
clocks are skewed).  When libfaketime or gcc is missing, nodes start without it and
``skew_clock`` raises :class:`BackendError` naming the missing piece.

Use a backend as an async context manager: ``async with LocalBackend(spec) as b: ...``;
``teardown`` runs even when the body fails and removes everything the backend created.
"""

from __future__ import annotations

import abc
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from .preload import FAKETIME_LIB, clock_skew_unsupported, faketime_available, faketime_env

__all__ = [
    "NodeSpec",
    "ClusterSpec",
    "Backend",
    "BackendError",
    "FAKETIME_LIB",
    "faketime_available",
    "clock_skew_unsupported",
    "rafka_node_spec",
    "wait_port",
]



class BackendError(RuntimeError):
    pass


@dataclass(frozen=True)
class NodeSpec:
    node_id: int
    argv: tuple[str, ...]
    roles: tuple[str, ...] = ("broker", "controller")
    client_port: int = 9092
    raft_port: int | None = 19092
    config_path: str | None = None
    env: tuple[tuple[str, str], ...] = ()

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.client_port,) + ((self.raft_port,) if self.raft_port else ())


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[NodeSpec, ...]
    work_dir: Path = field(default_factory=lambda: Path("chaos-work"))

    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self.nodes]

    def node(self, node_id: int) -> NodeSpec:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)


def rafka_node_spec(node_id: int, config_path: str | os.PathLike[str], *,
                    roles: Sequence[str] = ("broker", "controller"), client_port: int = 9092,
                    raft_port: int | None = 19092) -> NodeSpec:
    """A NodeSpec that runs ``rafka server --config PATH`` from this virtualenv."""
    exe = Path(sys.executable).with_name("rafka")
    return NodeSpec(node_id, (str(exe), "server", "--config", "{config}"), tuple(roles),
                    client_port, raft_port, str(config_path))


async def wait_port(host: str, port: int, timeout_s: float = 10.0) -> None:
    """Wait until a TCP connect to host:port succeeds (raises trio.TooSlowError)."""
    with trio.fail_after(timeout_s):
        while True:
            try:
                s = await trio.open_tcp_stream(host, port)
            except OSError:
                await trio.sleep(0.05)
                continue
            await s.aclose()
            return


class Backend(abc.ABC):
    """Abstract base: process bookkeeping and faketime are shared; network is per backend."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.work_dir = Path(spec.work_dir)
        self._procs: dict[int, trio.Process] = {}
        self._paused: set[int] = set()
        self._expected_down: set[int] = set()  # killed / stopped on purpose since last start
        self._exit_seen: set[int] = set()
        # preload libfaketime (+ the sleep shim, backends/faketime.py) so skew_clock works;
        # callers that run no clock faults turn it off (no preload at all then)
        self.use_faketime = True

    # ---------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> Backend:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            await self.setup()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        with trio.CancelScope(shield=True):
            await self.teardown()
        await self.aclose_services()

    async def aclose_services(self) -> None:  # noqa: B027 - optional hook
        """Stop in-process services (proxies); runs after ``teardown``, unshielded so that
        nurseries opened in ``setup`` are exited in the right order."""

    async def setup(self) -> None:  # noqa: B027 - optional hook
        """Create the infrastructure (namespaces, proxies...)."""

    @abc.abstractmethod
    async def teardown(self) -> None:
        """Remove every process, interface, proxy and file the backend made."""

    # ---------------------------------------------------------------- addresses
    @abc.abstractmethod
    def node_host(self, node: int) -> str:
        """The IP the node binds its listeners to."""

    def node_address(self, node: int, port: int | None = None) -> tuple[str, int]:
        """Where the harness (clients) dial ``node`` (``port`` defaults to the client port)."""
        return self.peer_address(0, node, port)

    def peer_address(self, src: int, dst: int, port: int | None = None) -> tuple[str, int]:
        """Where node ``src`` (0 = harness) dials node ``dst``'s ``port``."""
        return self.node_host(dst), port or self.spec.node(dst).client_port

    # ---------------------------------------------------------------- processes
    def _wrap(self, node: int, argv: list[str]) -> list[str]:
        """Prefix that puts a command into the node's network context."""
        return argv

    def _clock_file(self, node: int) -> Path:
        return self.work_dir / f"node-{node}.faketime"

    def _node_env(self, node: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(dict(self.spec.node(node).env))
        if self.use_faketime and clock_skew_unsupported() is None:
            clock = self._clock_file(node)
            if not clock.exists():
                clock.write_text("+0\n")
            env.update(faketime_env(clock))
        return env

    def node_argv(self, node: int) -> list[str]:
        spec = self.spec.node(node)
        fill = {"python": sys.executable, "node_id": str(node), "host": self.node_host(node),
                "client_port": str(spec.client_port), "raft_port": str(spec.raft_port or ""),
                "config": spec.config_path or "", "work_dir": str(self.work_dir)}
        return [a.format(**fill) for a in spec.argv]

    def log_path(self, node: int) -> Path:
        return self.work_dir / f"node-{node}.log"

    def running(self, node: int) -> bool:
        p = self._procs.get(node)
        return p is not None and p.returncode is None

    async def start_node(self, node: int, *, wait_ready_s: float | None = 10.0) -> None:
        """Start the node's process (no-op when it runs); wait for its client port."""
        if self.running(node):
            return
        env = self._node_env(node)
        argv = self._wrap(node, self._env_prefix(env) + self.node_argv(node))
        with open(self.log_path(node), "ab") as log:
            self._procs[node] = await trio.lowlevel.open_process(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=self._base_env(env))
        self._paused.discard(node)
        self._expected_down.discard(node)
        self._exit_seen.discard(node)
        if wait_ready_s is not None:  # dial the node itself: a proxy would accept at once
            await wait_port(self.node_host(node), self.spec.node(node).client_port,
                            wait_ready_s)

    def _env_prefix(self, env: Mapping[str, str]) -> list[str]:
        """``env K=V ...`` for variables that must not apply to the wrapper (LD_PRELOAD)."""
        keys = ("LD_PRELOAD", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_NO_CACHE", "DONT_FAKE_MONOTONIC")
        pairs = [f"{k}={env[k]}" for k in keys if k in env]
        return ["env", *pairs] if pairs else []

    def _base_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k != "LD_PRELOAD"}

    async def _signal(self, node: int, sig: int) -> None:
        p = self._procs.get(node)
        if p is None or p.returncode is not None:
            return
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    async def _reap(self, node: int, timeout_s: float) -> bool:
        p = self._procs.get(node)
        if p is None:
            return True
        with trio.move_on_after(timeout_s):
            await p.wait()
            return True
        return False

    def poll_exits(self) -> list[dict[str, Any]]:
        """Node processes that ended although nobody killed or stopped them (a crash of the
        node itself), each reported once per start: ``{"node", "returncode"}``."""
        out = []
        for node, p in self._procs.items():
            if node in self._expected_down or node in self._exit_seen:
                continue
            if p.returncode is not None:
                self._exit_seen.add(node)
                out.append({"node": node, "returncode": p.returncode})
        return out

    async def kill_node(self, node: int) -> None:
        self._expected_down.add(node)
        await self._signal(node, signal.SIGKILL)
        await self._signal(node, signal.SIGCONT)
        await self._reap(node, 10)
        self._paused.discard(node)

    async def stop_node(self, node: int, timeout_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``."""
        self._expected_down.add(node)
        await self._signal(node, signal.SIGTERM)
        await self._signal(node, signal.SIGCONT)
        if not await self._reap(node, timeout_s):
            await self.kill_node(node)
        self._paused.discard(node)

    async def pause_node(self, node: int) -> None:
        await self._signal(node, signal.SIGSTOP)
        self._paused.add(node)

    async def resume_node(self, node: int) -> None:
        await self._signal(node, signal.SIGCONT)
        self._paused.discard(node)

    async def kill_all(self) -> None:
        for node in list(self._procs):
            await self.kill_node(node)

    # ---------------------------------------------------------------- clocks
    async def skew_clock(self, node: int, seconds: float) -> None:
        """Shift the node's wall clock by ``seconds`` (0 heals), live."""
        reason = clock_skew_unsupported()
        if reason:
            raise BackendError(f"clock skew unavailable: {reason}")
        if not self.use_faketime:
            raise BackendError("clock skew needs use_faketime = True before nodes start")
        tmp = self._clock_file(node).with_suffix(".tmp")
        tmp.write_text(f"{seconds:+.3f}\n")
        tmp.replace(self._clock_file(node))

    # ---------------------------------------------------------------- network
    @abc.abstractmethod
    async def cut(self, a: int, b: int) -> None:
        """Drop all traffic between a and b (both directions; 0 = the harness)."""

    @abc.abstractmethod
    async def heal_all(self) -> None:
        """Undo every cut."""

    async def run(self, node: int, argv: Sequence[str], *, timeout_s: float = 30.0,
                  check: bool = False) -> subprocess.CompletedProcess[bytes]:
        """Run a command in the node's network context; bounded by ``timeout_s``."""
        with trio.fail_after(timeout_s):
            return await trio.run_process(self._wrap(node, list(argv)), check=check,
                                          capture_stdout=True, capture_stderr=True)

    def statistics(self) -> dict[str, Any]:
        return {"running": sorted(n for n in self._procs if self.running(n)),
                "paused": sorted(self._paused)}
