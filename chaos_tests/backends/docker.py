"""Docker backend: each node in a container of the locally built ``rafka-node:local`` image.

Theory of operation
-------------------
The cluster is the compose project ``rafka-chaos`` of ``deploy/docker-compose.yml`` (services
``n1..n3``; node ids must be 1..3) on an ``internal`` bridge network ``10.78.0.0/24`` (no route
out, no NAT).  The harness (node 0) is the bridge's gateway ``10.78.0.1`` and dials nodes
directly, so ``node_address`` / ``peer_address`` are just ``(10.78.0.<10+n>, port)``.

Per node two containers: ``rafka-nN-net`` (``sleep infinity``) owns the network namespace and
the fixed IP; ``rafka-nN`` runs the node inside that namespace (``network_mode: service:nN-net``).
Partitions are ``iptables -A INPUT -s <peer> -j DROP`` run with ``docker exec rafka-nN-net``,
so, as with the netns backend, a cut outlives a kill and restart of the node.

Lifecycle: ``setup`` writes the run directory (``work_dir``: ``conf/nN/node.toml``,
``clock/node-N.faketime``, ``logs/node-N.log``) and a compose override with each node's
command, starts the ``-net`` containers and creates (not starts) the node containers.
``start_node`` = ``docker start`` (also after ``kill_node`` = ``docker kill -s KILL``; the
container, its data volume and its network namespace stay), ``stop_node`` = ``docker stop -t``
(SIGTERM via docker-init, then SIGKILL), ``pause_node`` / ``resume_node`` = ``docker pause`` /
``unpause`` (cgroup freezer), ``teardown`` = ``compose down -v`` (containers, network, data
volumes).  Container lifecycle goes through the docker CLI on the fixed container names rather
than ``compose start/stop``: same effect, a tenth of the latency of docker-compose v1.

Clocks: with ``use_faketime`` (the default; the campaign turns it off when it injects no clock
faults) every node container has the harness's shim (``chaos_tests/backends/faketime_fix.c``,
built into the image) and libfaketime preloaded, with ``FAKETIME_TIMESTAMP_FILE`` in the
bind-mounted ``clock/`` directory; ``skew_clock`` atomically replaces the file on the host and
the node sees the new offset on its next ``time()`` call (``FAKETIME_NO_CACHE=1``; monotonic time
untouched).  The shim matters: with libfaketime 0.9.10 alone CPython's GIL hand-off waits on a
CLOCK_MONOTONIC condvar that libfaketime wakes late (a ``trio.to_thread`` round trip took 12-30
ms instead of ~0.1 ms), pysyncobj's tick thread starved and the controller quorum re-elected
every second or two, so nodes took ~25 s to unfence and no acks=all produce completed.  Without
``use_faketime`` the override sets ``LD_PRELOAD=""`` (a faked ``time()`` costs ~10-20 µs) and
``skew_clock`` raises.

What runs: ``NodeSpec.argv`` as for the other backends, translated for the image: an ``argv[0]``
named ``rafka`` / ``python*`` becomes the image's venv, ``{python}`` the image's interpreter,
``{config}`` ``/etc/rafka/node.toml`` (the host file ``NodeSpec.config_path`` is copied to
``conf/nN/node.toml`` before each start), ``{work_dir}`` the run directory.  The run directory
is bind-mounted at its own host path and nodes start in the host's working directory, so a
config written for the host (the campaign's: ``data_dir`` and ``cluster_secret_file`` under
the run directory, relative or absolute) works unchanged, and node events / logs written there
are read by the harness from the host.  :func:`write_rafka_configs` instead puts the data in
the node's named volume (``/var/lib/rafka``, removed by ``down -v``).

The engine is the one at ``DOCKER_HOST`` (default: the private engine of
``deploy/docker-engine.sh``, ``unix:///run/rafka-docker.sock``); :func:`docker_supported` says
why it cannot be used.  A lock file serialises runs (the container names are fixed).
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import trio

from .base import Backend, BackendError, ClusterSpec, rafka_node_spec

__all__ = [
    "DockerBackend",
    "DEFAULT_DOCKER_HOST",
    "COMPOSE_FILE",
    "PROJECT",
    "IMAGE",
    "SUBNET",
    "HOST_IP",
    "NODE_IDS",
    "docker_bin",
    "docker_env",
    "docker_supported",
    "compose_command",
    "write_rafka_configs",
]

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "deploy" / "docker-compose.yml"
DEFAULT_DOCKER_HOST = "unix:///run/rafka-docker.sock"
PROJECT = "rafka-chaos"
IMAGE = "rafka-node:local"
SUBNET = ipaddress.ip_network("10.78.0.0/24")
HOST_IP = "10.78.0.1"
NODE_IDS = (1, 2, 3)  # the services of deploy/docker-compose.yml
LOCK_PATH = Path("/run/rafka-chaos-docker.lock") if os.geteuid() == 0 else \
    Path(os.environ.get("XDG_RUNTIME_DIR", "/tmp")) / "rafka-chaos-docker.lock"
CONTAINER_VENV = "/opt/rafka/venv"
CONTAINER_PYTHON = f"{CONTAINER_VENV}/bin/python"
CONTAINER_CONFIG = "/etc/rafka/node.toml"
CONTAINER_DATA = "/var/lib/rafka"
CMD_TIMEOUT_S = 60.0


def docker_bin() -> str:
    """The docker CLI: ``$DOCKER_BIN``, else Debian's (matches its dockerd), else PATH's."""
    if os.environ.get("DOCKER_BIN"):
        return os.environ["DOCKER_BIN"]
    if os.path.exists("/usr/bin/docker"):
        return "/usr/bin/docker"
    return shutil.which("docker") or "docker"


def docker_env(docker_host: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["DOCKER_HOST"] = docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
    env.pop("LD_PRELOAD", None)
    return env


def _sh(argv: Sequence[str], env: dict[str, str], *, check: bool = True,
        timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise BackendError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    return r


def compose_command(env: dict[str, str] | None = None) -> list[str] | None:
    """``docker-compose`` (Debian's v1) if installed, else ``docker compose`` (v2) if it works."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    env = env or docker_env()
    try:
        if _sh([docker_bin(), "compose", "version"], env, check=False, timeout=20).returncode == 0:
            return [docker_bin(), "compose"]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return None


def docker_supported(docker_host: str | None = None, image: str = IMAGE) -> str | None:
    """None when this backend can run here, else the reason it cannot."""
    env = docker_env(docker_host)
    try:
        r = _sh([docker_bin(), "version", "--format", "{{.Server.Version}}"], env, check=False,
                timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker CLI unusable: {exc}"
    if r.returncode != 0:
        return (f"no Docker engine at {env['DOCKER_HOST']} (deploy/docker-engine.sh start): "
                f"{r.stderr.strip()[-200:]}")
    if compose_command(env) is None:
        return "neither docker-compose nor `docker compose` (apt-get install docker-compose)"
    if _sh([docker_bin(), "image", "inspect", image], env, check=False, timeout=20).returncode:
        return f"image {image} missing (deploy/build-image.sh)"
    return None


def node_ip(node: int) -> str:
    return HOST_IP if node == 0 else str(SUBNET.network_address + 10 + node)


def write_rafka_configs(work_dir: str | os.PathLike[str], node_ids: Sequence[int] = NODE_IDS, *,
                        client_port: int = 9092, raft_port: int = 19092,
                        cluster_id: str = "rafka-chaos", cluster_secret: str | None = None,
                        broker: dict[str, Any] | None = None,
                        controller: dict[str, Any] | None = None) -> ClusterSpec:
    """Write one node.toml per node (combined broker+controller, container paths and the
    nodes' fixed IPs) under ``work_dir/configs`` and return the ClusterSpec running
    ``rafka server`` on them (docs/internals.md §3)."""
    work = Path(work_dir).resolve()
    (work / "configs").mkdir(parents=True, exist_ok=True)
    secret = cluster_secret or secrets.token_hex(16)

    def toml_table(name: str, values: dict[str, Any] | None) -> list[str]:
        if not values:
            return []
        return [f"[{name}]"] + [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in values.items()]

    nodes = []
    for n in node_ids:
        lines = [f"node_id = {n}", 'roles = ["broker", "controller"]',
                 f'data_dir = "{CONTAINER_DATA}/node-{n}"',
                 f'listener = "{node_ip(n)}:{client_port}"',
                 f'raft_listener = "{node_ip(n)}:{raft_port}"',
                 f"cluster_id = {json.dumps(cluster_id)}", f"cluster_secret = {json.dumps(secret)}"]
        for v in node_ids:
            lines += ["[[voters]]", f"id = {v}", f'raft = "{node_ip(v)}:{raft_port}"',
                      f'rpc = "{node_ip(v)}:{client_port}"']
        lines += toml_table("broker", broker) + toml_table("controller", controller)
        path = work / "configs" / f"node-{n}.toml"
        path.write_text("\n".join(lines) + "\n")
        nodes.append(rafka_node_spec(n, path, client_port=client_port, raft_port=raft_port))
    return ClusterSpec(tuple(nodes), work)


class DockerBackend(Backend):
    def __init__(self, spec: ClusterSpec, *, docker_host: str | None = None,
                 compose_file: str | os.PathLike[str] = COMPOSE_FILE, project: str = PROJECT,
                 image: str = IMAGE, lock_timeout_s: float = 30.0,
                 stop_timeout_s: float = 5.0) -> None:
        super().__init__(spec)
        for n in spec.node_ids:
            if n not in NODE_IDS:
                raise ValueError(f"node ids must be in {NODE_IDS} (the services of {compose_file})")
        self.work_dir = self.work_dir.resolve()
        self.env = docker_env(docker_host)
        self.docker = docker_bin()
        self.compose_file = Path(compose_file)
        self.project = project
        self.image = image
        self.lock_timeout_s = lock_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._lock: IO[str] | None = None
        self._made = False
        self._compose: list[str] = []

    # ---------------------------------------------------------------- names and paths
    def container(self, node: int) -> str:
        return f"rafka-n{node}"

    def net_container(self, node: int) -> str:
        return f"rafka-n{node}-net"

    def node_host(self, node: int) -> str:
        return node_ip(node)

    def _clock_file(self, node: int) -> Path:
        return self.work_dir / "clock" / f"node-{node}.faketime"

    def log_path(self, node: int) -> Path:
        return self.work_dir / "logs" / f"node-{node}.log"

    def _override_path(self) -> Path:
        return self.work_dir / "compose.override.yml"

    def node_argv(self, node: int) -> list[str]:
        spec = self.spec.node(node)
        fill = {"python": CONTAINER_PYTHON, "node_id": str(node), "host": self.node_host(node),
                "client_port": str(spec.client_port), "raft_port": str(spec.raft_port or ""),
                "config": CONTAINER_CONFIG, "work_dir": str(self.work_dir)}
        argv = [a.format(**fill) for a in spec.argv]
        if argv:
            name = Path(argv[0]).name
            if name == "rafka":
                argv[0] = f"{CONTAINER_VENV}/bin/rafka"
            elif name.startswith("python"):
                argv[0] = CONTAINER_PYTHON
        return argv

    # ---------------------------------------------------------------- commands
    async def _run(self, argv: Sequence[str], *, check: bool = True,
                   timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return await trio.to_thread.run_sync(
            lambda: _sh(argv, self.env, check=check, timeout=timeout))

    async def _d(self, *args: str, check: bool = True,
                 timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return await self._run([self.docker, *args], check=check, timeout=timeout)

    async def _c(self, *args: str, check: bool = True,
                 timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        files = ["-f", str(self.compose_file)]
        if self._override_path().exists():
            files += ["-f", str(self._override_path())]
        return await self._run([*self._compose, "-p", self.project, *files, *args],
                               check=check, timeout=timeout)

    def _state(self, node: int) -> dict[str, Any]:
        r = _sh([self.docker, "inspect", "-f", "{{json .State}}", self.container(node)],
                self.env, check=False, timeout=20)
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}

    def running(self, node: int) -> bool:
        """The node's container runs (paused counts as running, as a SIGSTOPped process)."""
        return bool(self._state(node).get("Running"))

    def paused(self, node: int) -> bool:
        return bool(self._state(node).get("Paused"))

    # ---------------------------------------------------------------- lifecycle
    def _acquire_lock(self) -> None:
        fh = open(LOCK_PATH, "w")  # noqa: SIM115 - held for the backend's lifetime
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock = fh
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    fh.close()
                    raise BackendError(f"another docker chaos run holds {LOCK_PATH}") from None
                time.sleep(0.2)

    def _write_run_dir(self) -> None:
        for sub in ("clock", "logs"):
            (self.work_dir / sub).mkdir(parents=True, exist_ok=True)
        services: dict[str, Any] = {}
        for n in self.spec.node_ids:
            (self.work_dir / "conf" / f"n{n}").mkdir(parents=True, exist_ok=True)
            self._copy_config(n)
            clock = self._clock_file(n)
            if not clock.exists():
                clock.write_text("+0\n")
            # relative paths in configs (data_dir, secret file) resolve as on the host: the
            # run dir is mounted at its host path, and the node starts in the host's cwd
            svc: dict[str, Any] = {"command": self.node_argv(n), "working_dir": os.getcwd()}
            env = {} if self.use_faketime else {"LD_PRELOAD": ""}  # merged over the file's
            env.update(self.spec.node(n).env)
            if env:
                svc["environment"] = env
            services[f"n{n}"] = svc
        # JSON is YAML: an override with the per-run commands
        self._override_path().write_text(json.dumps({"version": "3.8", "services": services},
                                                    indent=1) + "\n")

    def _copy_config(self, node: int) -> None:
        src = self.spec.node(node).config_path
        if src:
            dst = self.work_dir / "conf" / f"n{node}" / "node.toml"
            if Path(src).resolve() != dst.resolve():
                shutil.copyfile(src, dst)

    async def setup(self) -> None:
        reason = await trio.to_thread.run_sync(lambda: docker_supported(self.env["DOCKER_HOST"],
                                                                        self.image))
        if reason:
            raise BackendError(reason)
        self._compose = compose_command(self.env) or []
        self.env["RAFKA_RUN_DIR"] = str(self.work_dir)
        self.env["RAFKA_IMAGE"] = self.image
        await trio.to_thread.run_sync(self._acquire_lock)
        self._write_run_dir()
        self._made = True
        await self._c("down", "-v", "-t", "1", "--remove-orphans", check=False)  # a crashed run
        nets = [f"n{n}-net" for n in self.spec.node_ids]
        nodes = [f"n{n}" for n in self.spec.node_ids]
        # two steps: compose v1 resolves network_mode service:nN-net only to a *running* container
        await self._c("up", "-d", "--no-color", *nets)
        await self._c("up", "--no-start", "--no-recreate", "--no-color", *nodes)
        for n in self.spec.node_ids:
            r = await self._d("inspect", "-f", "{{.HostConfig.NetworkMode}}", self.container(n))
            if not r.stdout.strip().startswith("container:"):
                raise BackendError(f"{self.container(n)} is not in {self.net_container(n)}'s "
                                   f"network namespace: {r.stdout.strip()}")

    async def teardown(self) -> None:
        try:
            if self._made:
                await self._c("down", "-v", "-t", "1", "--remove-orphans", check=False)
                self._made = False
        finally:
            if self._lock is not None:
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()
                self._lock = None

    # ---------------------------------------------------------------- processes
    async def start_node(self, node: int, *, wait_ready_s: float | None = 10.0) -> None:
        """``docker start`` the node's container (no-op when it runs); wait for its client port."""
        if self.running(node):
            return
        self._copy_config(node)
        await self._d("start", self.container(node))
        self._paused.discard(node)
        if wait_ready_s is not None:
            await self._wait_ready(node, wait_ready_s)

    async def _wait_ready(self, node: int, timeout_s: float) -> None:
        host, port = self.node_host(node), self.spec.node(node).client_port
        deadline = trio.current_time() + timeout_s
        last_check = 0.0
        while True:
            with trio.move_on_after(1.0):
                try:
                    s = await trio.open_tcp_stream(host, port)
                except OSError:
                    pass
                else:
                    await s.aclose()
                    return
            now = trio.current_time()
            if now - last_check > 1.0:
                last_check = now
                if not await trio.to_thread.run_sync(self.running, node):
                    raise BackendError(f"node {node} exited while starting: {self._log_tail(node)}")
            if now > deadline:
                raise trio.TooSlowError(f"node {node}: {host}:{port} not ready in {timeout_s}s")
            await trio.sleep(0.1)

    def _log_tail(self, node: int, n: int = 15) -> str:
        try:
            return "\n".join(self.log_path(node).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    async def kill_node(self, node: int) -> None:
        """SIGKILL the whole container (works on a paused one too); ``start_node`` restarts it."""
        await self._d("kill", "-s", "KILL", self.container(node), check=False)
        with trio.move_on_after(10):
            while await trio.to_thread.run_sync(self.running, node):
                await trio.sleep(0.1)
        self._paused.discard(node)

    async def stop_node(self, node: int, timeout_s: float | None = None) -> None:
        """``docker stop``: SIGTERM to the node (docker-init forwards it), SIGKILL after
        ``timeout_s``."""
        t = self.stop_timeout_s if timeout_s is None else timeout_s
        if self.paused(node):
            await self._d("unpause", self.container(node), check=False)
        await self._d("stop", "-t", str(max(0, round(t))), self.container(node), check=False)
        self._paused.discard(node)

    async def pause_node(self, node: int) -> None:
        await self._d("pause", self.container(node))
        self._paused.add(node)

    async def resume_node(self, node: int) -> None:
        if self.paused(node):
            await self._d("unpause", self.container(node))
        self._paused.discard(node)

    async def kill_all(self) -> None:
        for node in self.spec.node_ids:
            if self.running(node):
                await self.kill_node(node)

    # ---------------------------------------------------------------- clocks
    async def skew_clock(self, node: int, seconds: float) -> None:
        """Shift the node's wall clock by ``seconds`` (0 heals), live: libfaketime in the image."""
        if not self.use_faketime:
            raise BackendError("clock skew needs use_faketime (libfaketime is not preloaded)")
        clock = self._clock_file(node)
        tmp = clock.with_suffix(".tmp")
        tmp.write_text(f"{seconds:+.3f}\n")
        tmp.replace(clock)

    # ---------------------------------------------------------------- network
    async def _iptables(self, node: int, *args: str) -> None:
        await self._d("exec", self.net_container(node), "iptables", "-w", *args)

    async def cut(self, a: int, b: int, *, reject: bool = False) -> None:
        if a == b:
            raise ValueError("cannot cut a node from itself")
        for x, y in ((a, b), (b, a)):
            if x == 0:
                continue
            if reject:
                await self._iptables(x, "-A", "INPUT", "-p", "tcp", "-s", self.node_host(y),
                                     "-j", "REJECT", "--reject-with", "tcp-reset")
            await self._iptables(x, "-A", "INPUT", "-s", self.node_host(y), "-j", "DROP")

    async def heal_all(self) -> None:
        for n in self.spec.node_ids:
            await self._iptables(n, "-F")

    def _wrap(self, node: int, argv: list[str]) -> list[str]:
        """``docker exec`` in the node's container, or in its ``-net`` container (same network,
        same image, no faketime) while the node is stopped or paused; node 0 is the host."""
        if node == 0:
            return argv
        st = self._state(node)
        target = self.container(node) if st.get("Running") and not st.get("Paused") \
            else self.net_container(node)
        return [self.docker, "exec", target, *argv]

    async def run(self, node: int, argv: Sequence[str], *, timeout_s: float = 30.0,
                  check: bool = False) -> subprocess.CompletedProcess[bytes]:
        with trio.fail_after(timeout_s):
            wrapped = await trio.to_thread.run_sync(self._wrap, node, list(argv))
            return await trio.run_process(wrapped, check=check, capture_stdout=True,
                                          capture_stderr=True, env=self.env)

    def statistics(self) -> dict[str, Any]:
        states = {n: self._state(n) for n in self.spec.node_ids}
        return {"running": sorted(n for n, s in states.items() if s.get("Running")),
                "paused": sorted(n for n, s in states.items() if s.get("Paused")),
                "containers": [self.container(n) for n in self.spec.node_ids],
                "docker_host": self.env["DOCKER_HOST"]}
