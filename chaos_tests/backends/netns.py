"""Network-namespace backend (root): one IP per node, iptables partitions, real kernel TCP.

Theory of operation
-------------------
Layout (all names start with ``rafka-`` / ``rk-``, all addresses in ``10.77.0.0/24``)::

    root ns:  bridge rafka-br0 10.77.0.1/24   +  "unreachable 10.77.0.0/16" guard route
              rk-v<N>  (veth, enslaved to the bridge)
    rafka-c<N>: eth0 10.77.0.<10+N>/24, lo; no default route

The harness (node 0) talks to nodes from the root namespace over the bridge.  Namespaces have
no default route, so node traffic cannot leave the test subnet; the guard route makes the rest
of 10.77.0.0/16 unreachable from the root namespace, and setup refuses to run when any route
other than ours already covers the subnet.  Node processes run under ``ip netns exec`` (which
execs, so the PID is the node's), in their own process group.

Partitions: ``cut(a, b)`` adds ``iptables -A INPUT -s <b> -j DROP`` in a's namespace and the
mirror rule in b's (packets are dropped, so TCP sees timeouts as with a real partition);
``heal_all`` flushes the filter table of every namespace.  ``cut(..., reject=True)`` uses
``REJECT --reject-with tcp-reset`` instead (fast failure).

Cleanup: ``teardown`` kills our process groups, then every PID still inside our namespaces
(``ip netns pids``), deletes the namespaces, veths, the bridge and the guard route.
:func:`cleanup_stale` does the same by name prefix for leftovers of a crashed run.  A lock
file serialises runs so a second run never cleans up a live one; ``cleanup_stale()`` itself
takes the lock too (waiting up to ``lock_timeout_s``) and refuses while a live run holds it
(a test or ``make -C deploy chaos-clean`` used to wipe a concurrent campaign's namespaces,
SIGKILLing all its nodes at once).  Packages come from
:func:`ensure_packages` / ``make -C deploy chaos-deps`` (apt-get), never assumed.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import trio

from .base import Backend, BackendError, ClusterSpec

__all__ = [
    "NetnsBackend",
    "NS_PREFIX",
    "BRIDGE",
    "SUBNET",
    "GUARD",
    "LOCK_PATH",
    "cleanup_stale",
    "ensure_packages",
    "netns_supported",
    "list_namespaces",
]

NS_PREFIX = "rafka-c"
VETH_PREFIX = "rk-v"
BRIDGE = "rafka-br0"
SUBNET = ipaddress.ip_network("10.77.0.0/24")
GUARD = "10.77.0.0/16"
HOST_IP = "10.77.0.1"
LOCK_PATH = Path("/run/rafka-chaos.lock")
PACKAGES = ("iproute2", "iptables", "faketime")
CMD_TIMEOUT_S = 15.0


def _sh(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check,
                          timeout=CMD_TIMEOUT_S)


def ensure_packages(packages: Sequence[str] = PACKAGES) -> list[str]:
    """apt-get install the missing Debian packages (root); returns what was installed."""
    missing = [p for p in packages if _sh(["dpkg-query", "-W", "-f=${Status}", p],
                                          check=False).stdout.find("install ok installed") < 0]
    if missing:
        if os.geteuid() != 0:
            raise BackendError(f"missing packages {missing}; run as root")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update"], check=True, env=env, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *missing],
                       check=True, env=env, timeout=900)
    return missing


def netns_supported() -> str | None:
    """None when this backend can run here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} missing (make -C deploy chaos-deps)"
    probe = f"{NS_PREFIX}probe{os.getpid()}"
    r = _sh(["ip", "netns", "add", probe], check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    _sh(["ip", "netns", "del", probe], check=False)
    return None


def list_namespaces() -> list[str]:
    r = _sh(["ip", "-j", "netns", "list"], check=False)
    if r.returncode != 0 or not r.stdout.strip():
        return []
    return [n["name"] for n in json.loads(r.stdout)]


def _kill_ns_pids(ns: str) -> None:
    r = _sh(["ip", "netns", "pids", ns], check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _lock(timeout_s: float) -> IO[str]:
    """The run lock (``LOCK_PATH``), held until the returned file is closed."""
    fh = open(LOCK_PATH, "w")  # noqa: SIM115 - the caller owns it
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fh
        except BlockingIOError:
            if time.monotonic() > deadline:
                fh.close()
                raise BackendError(f"another netns chaos run holds {LOCK_PATH}") from None
            time.sleep(0.2)


def cleanup_stale(*, lock_timeout_s: float = 30.0) -> dict[str, list[str]]:
    """Remove our namespaces, links and guard route left by a previous (crashed) run.

    Takes the run lock first (BackendError when a live run keeps holding it)."""
    fh = _lock(lock_timeout_s)
    try:
        return _cleanup_stale_locked()
    finally:
        fh.close()


def _cleanup_stale_locked() -> dict[str, list[str]]:
    removed: dict[str, list[str]] = {"namespaces": [], "links": [], "routes": []}
    for ns in list_namespaces():
        if ns.startswith(NS_PREFIX):
            _kill_ns_pids(ns)
            _sh(["ip", "netns", "del", ns], check=False)
            removed["namespaces"].append(ns)
    r = _sh(["ip", "-j", "link", "show"], check=False)
    for link in json.loads(r.stdout or "[]"):
        name = link.get("ifname", "")
        if name.startswith(VETH_PREFIX) or name == BRIDGE:
            _sh(["ip", "link", "del", name], check=False)
            removed["links"].append(name)
    if _sh(["ip", "route", "del", "unreachable", GUARD], check=False).returncode == 0:
        removed["routes"].append(GUARD)
    return removed


class NetnsBackend(Backend):
    def __init__(self, spec: ClusterSpec, *, lock_timeout_s: float = 30.0) -> None:
        super().__init__(spec)
        for n in spec.node_ids:
            if not 0 < n <= 200:
                raise ValueError("node ids must be in 1..200")
        self.lock_timeout_s = lock_timeout_s
        self._lock: IO[str] | None = None
        self._made = False

    def ns(self, node: int) -> str:
        return f"{NS_PREFIX}{node}"

    def node_host(self, node: int) -> str:
        return HOST_IP if node == 0 else str(SUBNET.network_address + 10 + node)

    def _wrap(self, node: int, argv: list[str]) -> list[str]:
        return argv if node == 0 else ["ip", "netns", "exec", self.ns(node), *argv]

    async def _ip(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return await trio.to_thread.run_sync(lambda: _sh(argv, check=check))

    def _acquire_lock(self) -> None:
        self._lock = _lock(self.lock_timeout_s)  # held for the backend's lifetime

    async def _check_subnet_free(self) -> None:
        r = await self._ip("ip", "-j", "route", "show", "table", "all")
        for route in json.loads(r.stdout or "[]"):
            dst = route.get("dst", "")
            if dst in ("default", ""):
                continue
            try:
                net = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
            except ValueError:
                continue
            if net.version == 4 and net.prefixlen > 0 and net.overlaps(SUBNET):
                raise BackendError(f"route {dst} already covers {SUBNET}; refusing to run")

    async def setup(self) -> None:
        reason = await trio.to_thread.run_sync(netns_supported)
        if reason:
            raise BackendError(reason)
        await trio.to_thread.run_sync(self._acquire_lock)
        await trio.to_thread.run_sync(_cleanup_stale_locked)
        await self._check_subnet_free()
        self._made = True
        await self._ip("ip", "route", "add", "unreachable", GUARD)
        await self._ip("ip", "link", "add", BRIDGE, "type", "bridge")
        await self._ip("ip", "addr", "add", f"{HOST_IP}/{SUBNET.prefixlen}", "dev", BRIDGE)
        await self._ip("ip", "link", "set", BRIDGE, "up")
        for n in self.spec.node_ids:
            ns, veth, peer = self.ns(n), f"{VETH_PREFIX}{n}", f"rk-p{n}"
            await self._ip("ip", "netns", "add", ns)
            await self._ip("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
            await self._ip("ip", "link", "set", peer, "netns", ns)
            await self._ip("ip", "-n", ns, "link", "set", peer, "name", "eth0")
            await self._ip("ip", "-n", ns, "addr", "add",
                           f"{self.node_host(n)}/{SUBNET.prefixlen}", "dev", "eth0")
            await self._ip("ip", "-n", ns, "link", "set", "eth0", "up")
            await self._ip("ip", "-n", ns, "link", "set", "lo", "up")
            await self._ip("ip", "link", "set", veth, "master", BRIDGE, "up")

    async def teardown(self) -> None:
        await self.kill_all()
        if self._made:
            await trio.to_thread.run_sync(_cleanup_stale_locked)
            self._made = False
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    async def _drop_from(self, node: int, src: int, reject: bool) -> None:
        target = ["REJECT", "--reject-with", "tcp-reset"] if reject else ["DROP"]
        if reject:
            await self._ip("ip", "netns", "exec", self.ns(node), "iptables", "-w", "-A",
                           "INPUT", "-p", "tcp", "-s", self.node_host(src), "-j", *target)
        await self._ip("ip", "netns", "exec", self.ns(node), "iptables", "-w", "-A", "INPUT",
                       "-s", self.node_host(src), "-j", "DROP")

    async def cut(self, a: int, b: int, *, reject: bool = False) -> None:
        if a == b:
            raise ValueError("cannot cut a node from itself")
        for x, y in ((a, b), (b, a)):
            if x != 0:
                await self._drop_from(x, y, reject)

    async def heal_all(self) -> None:
        for n in self.spec.node_ids:
            await self._ip("ip", "netns", "exec", self.ns(n), "iptables", "-w", "-F")

    def statistics(self) -> dict[str, Any]:
        return {**super().statistics(), "namespaces": [self.ns(n) for n in self.spec.node_ids]}
