"""A self-contained local cluster: N combined nodes as subprocesses (``rafka cluster up/down``).

Theory of operation
-------------------
``DATA_DIR`` holds everything: ``cluster.secret`` (mode 0600, the Raft transport's key),
``cluster.json`` (the cluster's shape and the pid of each node) and ``node-<id>/`` with each
node's ``node.toml``, its data and its ``stdout.log``. Node ``i`` (1-based) listens for clients
on ``PORT + i - 1``, for Raft on ``PORT + 10000 + i - 1`` and serves Prometheus metrics on
``PORT + 20000 + i - 1`` (``up`` prints their URLs); every node is a voter and a broker.

``up`` creates that layout the first time; on a data dir that already holds a cluster it keeps
the existing layout (ids, ports, secret, data) and starts only the nodes that are not running
— so it restarts a stopped cluster and brings back a killed node. A node counts as running when
its recorded pid is alive *and* that process's command line names its config (no confusion
with a recycled pid). Nodes run ``python -m rafka.node --config …`` in their own session, so a
Ctrl-C in the terminal reaches only ``cluster up``, which then stops them in order.

A foreground ``cluster up`` owns its nodes: ``rafka/node_cli.py`` stops them however it ends
(SIGINT, SIGTERM, SIGHUP, its stdout pipe closed), and nodes it starts get
``PR_SET_PDEATHSIG`` (Linux) and ``RAFKA_PARENT_PID``, so even a SIGKILLed ``cluster up``
takes them down within seconds: SIGTERM, and a node that finds its parent gone skips the
controlled shutdown (no quorum is left to hand over to) but still closes its logs cleanly. ``--detach`` nodes are started without it: they outlive their starter.

Ready means: every node answers METADATA, a controller leader is known, and every broker is
registered and unfenced in the metadata of every node. ``down`` sends SIGTERM (controlled
shutdown, clean logs), waits, and SIGKILLs whatever is left after the timeout.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from rafka import local_security
from rafka.wire.connection import connect
from rafka.wire.errors import RafkaError
from rafka.wire.ports import (
    KAFKA_PORT_OFFSET,
    KAFKA_SECURE_PORT_OFFSET,
    METRICS_PORT_OFFSET,
    RAFT_PORT_OFFSET,
)
from rafka.wire.protocol import ApiKey

__all__ = ["ClusterError", "NodeSpec", "cluster_up", "cluster_down", "load_cluster", "parse_overrides",
           "wait_ready", "stop_nodes", "start_missing", "RAFT_PORT_OFFSET", "METRICS_PORT_OFFSET",
           "metrics_urls"]

CLUSTER_FILE = "cluster.json"
SECRET_FILE = "cluster.secret"
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


class ClusterError(Exception):
    """Something the user must fix; the message says what."""


@dataclass
class NodeSpec:
    id: int
    host: str
    port: int
    raft_port: int
    data_dir: Path
    pid: int | None = None

    @property
    def config_path(self) -> Path:
        return self.data_dir / "node.toml"

    @property
    def client(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def controller(self) -> str:
        return f"{self.host}:{self.raft_port}"

    @property
    def kafka(self) -> str | None:
        """Its Kafka-protocol listener, ``None`` when PORT+KAFKA_PORT_OFFSET is past 65535."""
        port = self.port + KAFKA_PORT_OFFSET
        return f"{self.host}:{port}" if port <= 65535 else None

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "roles": ["broker", "controller"], "client": self.client,
               "controller": self.controller, "rpc": self.client, "pid": self.pid,
               "config": str(self.config_path), "data_dir": str(self.data_dir)}
        if self.kafka:
            out["kafka"] = self.kafka
        return out


# --------------------------------------------------------------------------- layout


def free_port_block(n: int, host: str = "127.0.0.1") -> int:
    """A base port P such that P..P+n-1 (clients) and their Raft, Kafka and metrics ports
    (P+RAFT_PORT_OFFSET.., P+KAFKA_PORT_OFFSET.., P+METRICS_PORT_OFFSET..) are all free, for
    tests and benchmarks that start throwaway clusters.

    Every one of those ports lies below the kernel's ephemeral range (32768+ here), so no
    outgoing connection of any process can take one as its source port — between this probe
    and the node's bind, or while a killed node is down and about to restart. (The metrics
    ports used to reach into that range: a node restarted by a test once failed to bind its
    metrics listener, EADDRINUSE, in the twenty-leader-kills test.)
    """
    import random
    import socket

    offsets = (0, RAFT_PORT_OFFSET, METRICS_PORT_OFFSET, KAFKA_PORT_OFFSET, KAFKA_SECURE_PORT_OFFSET)
    eph = ephemeral_port_range()
    top = min(eph[0] if eph else 32768, 32768) - max(offsets) - n
    if top <= 5000:  # an unusually low ephemeral range: no block fits below it, take any
        top = 22000 - n
    for _ in range(200):
        base = random.randrange(4000, top)
        wanted = [base + off + i for off in offsets for i in range(n)]
        try:
            for p in wanted:
                with socket.socket() as t:
                    t.bind((host, p))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no free block of {n} client + {n} raft ports on {host}")


def ephemeral_port_range() -> tuple[int, int] | None:
    """The kernel's range for outgoing connections' source ports (Linux), or None."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def _reserved_ports() -> set[int]:
    """``net.ipv4.ip_local_reserved_ports``: never handed out as source ports."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_reserved_ports").read_text().strip()
    except OSError:
        return set()
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def _refuse_ephemeral_raft_ports(port: int, count: int) -> None:
    """Raft ports inside the ephemeral range can be taken by any outgoing connection as its
    source port while a node is down or starting; the node then cannot bind its Raft listener
    and sits out of the quorum until the port frees (issue 27: 53 s; a closed connection's
    TIME_WAIT holds it 60 s). Refuse such a layout unless the ports are reserved."""
    span = ephemeral_port_range()
    if span is None:
        return
    raft = range(port + RAFT_PORT_OFFSET, port + RAFT_PORT_OFFSET + count)
    risky = [p for p in raft if span[0] <= p <= span[1] and p not in _reserved_ports()]
    if risky:
        below = span[0] - RAFT_PORT_OFFSET - count
        raise ClusterError(
            f"--port {port} puts Raft ports {risky[0]}-{risky[-1]} inside the kernel's ephemeral port range "
            f"{span[0]}-{span[1]} (net.ipv4.ip_local_port_range): an outgoing connection can take one as its "
            f"source port and keep that node out of the quorum. Use --port {below} or lower, or reserve "
            f"them: sysctl -w net.ipv4.ip_local_reserved_ports={risky[0]}-{risky[-1]}")


def parse_overrides(pairs: list[str] | tuple[str, ...], section: str) -> dict[str, str]:
    """``["k=v", ...]`` → ``{k: v}``, each checked against the known settings of ``section``
    (``broker`` / ``controller``) so a typo fails here, not in every node's log."""
    from rafka.broker.config import BROKER_SETTINGS, CONTROLLER_SETTINGS

    specs = BROKER_SETTINGS if section == "broker" else CONTROLLER_SETTINGS
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ClusterError(f"--{section}-config expects KEY=VALUE, got {pair!r}")
        if key not in specs:
            raise ClusterError(f"--{section}-config: unknown {section} setting {key!r}")
        try:
            specs[key][0](value)
        except (TypeError, ValueError) as exc:
            raise ClusterError(f"--{section}-config {key}: {exc}") from None
        out[key] = value
    return out


_DEFAULT_BROKER = {"log.flush.policy": "batch"}
_DEFAULT_CONTROLLER = {"broker.session.timeout.ms": "3000"}


def _node_toml(n: NodeSpec, nodes: list[NodeSpec], cluster_id: str, secret_file: Path,
               broker: dict[str, str] | None = None, controller: dict[str, str] | None = None,
               security_lines: list[str] | None = None,
               security: dict[str, Any] | None = None) -> str:
    lines = [
        f"node_id = {n.id}",
        'roles = ["broker", "controller"]',
        f"data_dir = {json.dumps(str(n.data_dir))}",
        f'listener = "{n.client}"',
        f'raft_listener = "{n.controller}"',
        f'cluster_id = "{cluster_id}"',
        f"cluster_secret_file = {json.dumps(str(secret_file))}",
    ]
    if n.port + METRICS_PORT_OFFSET <= 65535:
        lines.append(f'metrics_listener = "{n.host}:{n.port + METRICS_PORT_OFFSET}"')
    if n.kafka:
        lines.append(f'kafka.listener = "{n.kafka}"')
        lines += local_security.kafka_toml(n, security)  # with --tls/--auth
    for v in nodes:
        lines += ["", "[[voters]]", f"id = {v.id}", f'raft = "{v.controller}"', f'rpc = "{v.client}"']
        lines += local_security.voter_toml(v, security)  # secure_rpc with --tls
    for section, defaults, given in (("broker", _DEFAULT_BROKER, broker),
                                     ("controller", _DEFAULT_CONTROLLER, controller)):
        lines += ["", f"[{section}]"]
        lines += [f"{json.dumps(k)} = {json.dumps(str(v))}" for k, v in {**defaults, **(given or {})}.items()]
    lines += security_lines or []  # [security] with --tls/--auth (rafka/local_security.py)
    return "\n".join(lines) + "\n"


def _write_configs(data_dir: Path, state: dict[str, Any], broker: dict[str, str] | None,
                   controller: dict[str, str] | None) -> None:
    """(Re)write every node's node.toml; a bad setting is a ClusterError before anything starts."""
    from rafka.broker.config import ConfigError, parse_config

    nodes: list[NodeSpec] = state["nodes"]
    texts = {}
    for n in nodes:
        text = _node_toml(n, nodes, state["cluster_id"], data_dir / SECRET_FILE, broker, controller,
                          local_security.security_toml(n, data_dir, state.get("security")),
                          state.get("security"))
        try:
            parse_config(tomllib.loads(text), f"node {n.id} config", base_dir=data_dir)
        except ConfigError as exc:
            raise ClusterError(f"bad setting: {exc}") from None
        texts[n.id] = text
    for n in nodes:
        n.data_dir.mkdir(parents=True, exist_ok=True)
        n.config_path.write_text(texts[n.id])


def _create(data_dir: Path, count: int, host: str, port: int,
            broker_config: dict[str, str] | None = None,
            controller_config: dict[str, str] | None = None,
            security: dict[str, bool] | None = None) -> dict[str, Any]:
    if count < 1:
        raise ClusterError("--nodes must be at least 1")
    if port + RAFT_PORT_OFFSET + count - 1 > 65535:
        raise ClusterError(f"--port {port} is too high: Raft ports are PORT+{RAFT_PORT_OFFSET}+i")
    _refuse_ephemeral_raft_ports(port, count)
    data_dir.mkdir(parents=True, exist_ok=True)
    secret_file = data_dir / SECRET_FILE
    fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(secret_file, 0o600)
    cluster_id = uuid.uuid4().hex
    nodes = [NodeSpec(i, host, port + i - 1, port + RAFT_PORT_OFFSET + i - 1, data_dir / f"node-{i}")
             for i in range(1, count + 1)]
    state = {"cluster_id": cluster_id, "nodes": nodes, "security": security}
    _prepare_security(data_dir, state)
    _write_configs(data_dir, state, broker_config, controller_config)
    _save(data_dir, state)
    return state


def kafka_bootstrap(state: dict[str, Any]) -> str:
    """The Kafka clients' bootstrap string of the cluster ("" without Kafka listeners)."""
    return ",".join(n.kafka for n in state["nodes"] if n.kafka)


def _save(data_dir: Path, state: dict[str, Any]) -> None:
    nodes: list[NodeSpec] = state["nodes"]
    doc = {"cluster_id": state["cluster_id"],
           "bootstrap": ",".join(n.client for n in nodes),
           "raft_port_offset": RAFT_PORT_OFFSET,
           "nodes": [n.to_json() for n in nodes]}
    if state.get("security"):
        doc["security"] = state["security"]
    tmp = data_dir / (CLUSTER_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, data_dir / CLUSTER_FILE)


def load_cluster(data_dir: Path) -> dict[str, Any] | None:
    path = data_dir / CLUSTER_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        nodes = []
        for d in doc["nodes"]:
            host, _, port = d["client"].rpartition(":")
            raft_port = int(d["controller"].rpartition(":")[2])
            nodes.append(NodeSpec(int(d["id"]), host, int(port), raft_port, Path(d["data_dir"]), d.get("pid")))
        return {"cluster_id": doc["cluster_id"], "nodes": nodes, "security": doc.get("security")}
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{path} is damaged ({exc}); move it away to create a new cluster") from None


# --------------------------------------------------------------------------- processes


def is_running(n: NodeSpec) -> bool:
    if not n.pid:
        return False
    try:
        os.kill(n.pid, 0)
        cmdline = Path(f"/proc/{n.pid}/cmdline").read_bytes()
    except (OSError, ProcessLookupError):
        return False
    try:
        if Path(f"/proc/{n.pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False  # a zombie: exited, not yet reaped
    except OSError:
        return False
    if not cmdline:
        # Right after exec the kernel may not show the new argv yet (measured: /proc/PID/cmdline
        # read empty in ~1 of 4 fresh spawns): alive and not a zombie counts as running.
        return True
    return str(n.config_path).encode() in cmdline


_PR_SET_PDEATHSIG = 1


def _death_signal_hook() -> Any:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), or None where prctl does not exist. libc is loaded here, in
    the parent: the hook runs between fork and exec, where only the prctl call is safe."""
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(1)

    return hook


def start_missing(data_dir: Path, state: dict[str, Any], *, die_with_parent: bool = False) -> list[int]:
    """Start every node that is not running; returns their ids. ``die_with_parent``: the nodes
    get SIGTERM when this process dies, however it dies (a foreground ``cluster up``)."""
    started = []
    hook = _death_signal_hook() if die_with_parent else None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.pop("RAFKA_PARENT_PID", None)
    if die_with_parent:  # the node skips its controlled shutdown once we are gone (rafka/node.py)
        env["RAFKA_PARENT_PID"] = str(os.getpid())
    for n in state["nodes"]:
        if is_running(n):
            continue
        n.data_dir.mkdir(parents=True, exist_ok=True)
        with open(n.data_dir / "stdout.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "rafka.node", "--config", str(n.config_path)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=env, cwd=str(data_dir), preexec_fn=hook)
        n.pid = proc.pid
        started.append(n.id)
    _save(data_dir, state)
    return started


def stop_nodes(data_dir: Path, state: dict[str, Any], timeout_s: float = 30.0,
               controlled_s: float = 3.0) -> list[int]:
    """Stop every running node; returns the ids stopped.

    SIGTERM starts each node's controlled shutdown. When the whole cluster stops, the quorum
    goes with it and leadership has nowhere to move, so after ``controlled_s`` a second SIGTERM
    tells the nodes still up to skip it (they still close their logs cleanly); SIGKILL after
    ``timeout_s``."""
    running = [n for n in state["nodes"] if is_running(n)]
    for n in running:
        _signal(n, signal.SIGTERM)
    _wait_stopped(running, controlled_s)
    for n in running:
        if is_running(n):
            _signal(n, signal.SIGTERM)
    _wait_stopped(running, timeout_s)
    for n in running:
        if is_running(n):
            _signal(n, signal.SIGKILL)
    for n in state["nodes"]:
        n.pid = None
    _save(data_dir, state)
    return [n.id for n in running]


def _wait_stopped(nodes: list[NodeSpec], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(is_running(n) for n in nodes):
        _reap()
        time.sleep(0.05)


def _signal(n: NodeSpec, sig: int) -> None:
    if n.pid:
        try:
            os.kill(n.pid, sig)
        except ProcessLookupError:
            pass


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


# --------------------------------------------------------------------------- readiness


async def _node_view(n: NodeSpec) -> dict[str, Any] | None:
    try:
        with trio.move_on_after(2):
            async with connect(n.host, n.port) as conn:
                return (await conn.request(ApiKey.METADATA, {"topics": []})).body
    except Exception:  # noqa: BLE001 - not up yet
        return None
    return None


async def _ready_once(nodes: list[NodeSpec]) -> str | None:
    """None when ready, else what we are still waiting for."""
    ids = {n.id for n in nodes}
    for n in nodes:
        view = await _node_view(n)
        if view is None:
            return f"node {n.id} ({n.client}) is not answering"
        if view.get("controller_id", -1) < 0:
            return f"node {n.id} knows no active controller yet"
        unfenced = {b["node_id"] for b in view.get("brokers", []) if not b.get("fenced")}
        if not ids <= unfenced:
            return f"node {n.id} sees brokers {sorted(unfenced)} unfenced, waiting for {sorted(ids)}"
    return None


def _last_error(n: NodeSpec) -> str:
    """The line a node printed when it gave up (``rafka: node N: ...``), else its last line."""
    try:
        lines = (n.data_dir / "stdout.log").read_text(errors="replace").splitlines()
    except OSError:
        return "no output"
    for line in reversed(lines[-200:]):
        if line.startswith("rafka:"):
            return line
    return lines[-1] if lines else "no output"


def wait_ready(state: dict[str, Any], timeout_s: float = 60.0) -> None:
    async def run() -> None:
        why: str | None = "not checked"
        with trio.move_on_after(timeout_s):
            while True:
                _reap()
                dead = [n for n in state["nodes"] if n.pid and not is_running(n)]
                if dead:  # it will not get ready: say why now instead of after the timeout
                    n = dead[0]
                    raise ClusterError(f"node {n.id} exited: {_last_error(n)}")
                why = await _ready_once(state["nodes"])
                if why is None:
                    return
                await trio.sleep(0.2)
        raise ClusterError(f"cluster not ready after {timeout_s:.0f} s: {why}")

    trio.run(run)


# --------------------------------------------------------------------------- commands


def cluster_up(data_dir: Path, nodes: int, host: str, port: int, *,
               ready_timeout_s: float = 60.0, echo: Any = print,
               broker_config: dict[str, str] | None = None,
               controller_config: dict[str, str] | None = None,
               die_with_parent: bool = False, tls: bool = False, auth: bool = False) -> dict[str, Any]:
    """Create or restart the cluster. ``broker_config`` / ``controller_config`` override node
    settings (``--broker-config k=v``); on an existing cluster, given overrides rewrite every
    node's ``node.toml`` (same ids, ports, secret) and apply to the nodes started now.
    ``die_with_parent``: the nodes started now die with this process (see ``start_missing``).
    ``tls`` / ``auth``: every node also gets a secured listener (rafka/local_security.py);
    recorded in the cluster, so a later plain ``up`` keeps them."""
    data_dir = data_dir.resolve()
    state = load_cluster(data_dir)
    wanted = {"tls": tls, "auth": auth} if tls or auth else None
    if state is None:
        state = _create(data_dir, nodes, host, port, broker_config, controller_config, wanted)
        echo(f"created a {nodes}-node cluster in {data_dir}")
    else:
        if len(state["nodes"]) != nodes:
            echo(f"{data_dir} holds a {len(state['nodes'])}-node cluster; restarting it as it is")
        old = state.get("security") or {}
        new = {k: bool(old.get(k) or (wanted or {}).get(k)) for k in ("tls", "auth")}
        added = new != {k: bool(old.get(k)) for k in ("tls", "auth")}
        if added:  # --tls/--auth on an existing cluster: its nodes get them from their next start
            state["security"] = new
            _prepare_security(data_dir, state)
            _save(data_dir, state)
            echo("security added: nodes already running keep their old settings until restarted")
        if broker_config or controller_config or added:
            _write_configs(data_dir, state, broker_config, controller_config)
    started = start_missing(data_dir, state, die_with_parent=die_with_parent)
    if started:
        echo(f"started node(s) {', '.join(map(str, started))}")
    else:
        echo("every node is already running")
    try:
        wait_ready(state, ready_timeout_s)
    except ClusterError as exc:
        logs = ", ".join(str(n.data_dir / "stdout.log") for n in state["nodes"])
        raise ClusterError(f"{exc} (see {logs})") from None
    urls = metrics_urls(state)
    if urls:
        echo(f"metrics: {' '.join(urls)}")
    kafka = kafka_bootstrap(state)
    if kafka:
        echo(f"kafka: {kafka}")
    _secure_ready(data_dir, state, ready_timeout_s, echo)
    return state


def _prepare_security(data_dir: Path, state: dict[str, Any]) -> None:
    try:
        local_security.prepare(data_dir, state["nodes"], state.get("security") or {})
    except ValueError as exc:
        raise ClusterError(str(exc)) from None


def _secure_ready(data_dir: Path, state: dict[str, Any], timeout_s: float, echo: Any) -> None:
    """With --auth, the admin's credentials written; then how to connect (rafka/local_security.py)."""
    settings = state.get("security")
    if settings and settings.get("auth"):
        async def admin() -> None:
            with trio.fail_after(timeout_s):
                await local_security.ensure_admin(state["nodes"], data_dir, settings)

        try:
            trio.run(admin)
        except (trio.TooSlowError, OSError, ValueError, RafkaError) as exc:
            raise ClusterError(f"cannot create the admin user: {exc}") from None
    for line in local_security.how_to_connect(data_dir, state["nodes"], settings):
        echo(line)


def metrics_urls(state: dict[str, Any]) -> list[str]:
    """The Prometheus endpoints of the cluster's nodes (those whose node.toml sets
    ``metrics_listener``; a cluster created before metrics existed has none)."""
    from rafka.broker.config import ConfigError, load_config

    out = []
    for n in state["nodes"]:
        try:
            listener = load_config(n.config_path).metrics_listener
        except ConfigError:
            continue
        if listener is not None:
            host = n.host if listener[0] in ("0.0.0.0", "::", "") else listener[0]
            out.append(f"http://{host}:{listener[1]}/metrics")
    return out


def cluster_down(data_dir: Path, timeout_s: float = 30.0) -> list[int]:
    data_dir = data_dir.resolve()
    state = load_cluster(data_dir)
    if state is None:
        raise ClusterError(f"no cluster in {data_dir} (no {CLUSTER_FILE})")
    return stop_nodes(data_dir, state, timeout_s)


def bootstrap(state: dict[str, Any]) -> str:
    """The clients' bootstrap: the secured listeners when the cluster has them."""
    if state.get("security"):
        return local_security.secure_bootstrap(state["nodes"])
    return ",".join(n.client for n in state["nodes"])
