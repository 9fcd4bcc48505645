"""Local backend: plain processes on loopback addresses, partitions and delays via proxies.

Theory of operation
-------------------
No root needed.  Node ``n`` binds ``127.0.0.<10+n>``.  For every directed link ``a → b``
(``a`` = 0 for the harness) and every port of ``b`` there is a :class:`~chaos_tests.proxy.LinkProxy`
listening on ``127.1.<a>.<b>:<same port>`` and forwarding to ``127.0.0.<10+b>:<port>``.
``cut(a, b)`` blackholes the two proxies of that pair, ``cut_one_way(a, b)`` holds only what
``a`` sends to ``b`` (an asymmetric partition), ``set_link(a, b, mode, delay_s)`` gives
reset / delay faults, and ``heal_all`` returns every link to ``pass``.

How node traffic reaches the proxies: nodes are configured with each other's *real* addresses
(``peer_address(a, b) = 127.0.0.<10+b>`` for a node ``a``), and every node process (and every
command ``run`` in a node's context) has an ``LD_PRELOAD`` shim (``connect_redirect.c``, built
with gcc by :mod:`~chaos_tests.backends.preload`) that rewrites node a's ``connect()`` to
``127.0.0.<10+b>:port`` into ``127.1.a.b:port``.  So *all* node-to-node TCP goes through the
proxies: Raft, controller RPCs, and what configuration cannot reach — replica fetches,
AlterPartition and redirects, which dial the one address a broker advertises.  (Configuring
proxy addresses instead does not work: pysyncobj identifies a peer by the address string the
peer announces, so node 1 must know node 2 by node 2's own address.)  Without the shim (no gcc,
not Linux) nothing node-to-node can be cut, so ``cut`` between two nodes raises
:class:`BackendError` (the campaign refuses partition nemeses up front);
``redirect_unsupported`` says why.  The harness (node 0) dials ``127.1.0.<b>``.

What the proxies cannot do: the harness's own clients (node 0) dial advertised addresses after
bootstrap, so ``cut(0, n)`` only affects bootstrap connections (no nemesis cuts node 0); a
proxy cannot make ``connect()`` time out — a blackholed link accepts, then stays silent; and
connections already open when a cut starts are not reset, they go silent (as with a DROP rule).

The whole 127.0.0.0/8 block is routed to ``lo`` on Linux; macOS needs
``ifconfig lo0 alias 127.0.0.11`` (and the 127.1.a.b link addresses) first.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from typing import Any

import trio

from ..proxy import LinkMode, LinkProxy
from .base import Backend, BackendError, ClusterSpec
from .preload import connect_redirect_env, connect_redirect_unsupported, merge_preload

__all__ = ["LocalBackend"]

MAX_NODE_ID = 200


class LocalBackend(Backend):
    def __init__(self, spec: ClusterSpec) -> None:
        super().__init__(spec)
        for n in spec.node_ids:
            if not 0 < n <= MAX_NODE_ID:
                raise ValueError(f"node ids must be in 1..{MAX_NODE_ID}")
        self._proxies: dict[tuple[int, int, int], LinkProxy] = {}
        self._nursery_cm: Any = None
        self._nursery: trio.Nursery | None = None
        self.redirect_unsupported = connect_redirect_unsupported()

    def _node_env(self, node: int) -> dict[str, str]:
        env = super()._node_env(node)
        if self.redirect_unsupported is None:
            merge_preload(env, connect_redirect_env(node))
        return env

    def node_host(self, node: int) -> str:
        return f"127.0.0.{10 + node}"

    def peer_address(self, src: int, dst: int, port: int | None = None) -> tuple[str, int]:
        port = port or self.spec.node(dst).client_port
        if src == 0:
            return self.proxy_address(0, dst, port)
        return self.node_host(dst), port  # the node's connect() shim picks the proxy

    def proxy_address(self, src: int, dst: int, port: int) -> tuple[str, int]:
        """Where the proxy of the directed link src → dst listens."""
        return f"127.1.{src}.{dst}", port

    async def run(self, node: int, argv: Sequence[str], *, timeout_s: float = 30.0,
                  check: bool = False) -> subprocess.CompletedProcess[bytes]:
        """Run a command as node ``node`` would connect: with its connect() redirect."""
        env = dict(os.environ)
        if node != 0 and self.redirect_unsupported is None:
            merge_preload(env, connect_redirect_env(node))
        with trio.fail_after(timeout_s):
            return await trio.run_process(list(argv), check=check, capture_stdout=True,
                                          capture_stderr=True, env=env)

    def _links(self) -> list[tuple[int, int, int]]:
        ids = self.spec.node_ids
        return [(a, b, port) for a in [0, *ids] for b in ids if a != b
                for port in self.spec.node(b).ports]

    async def setup(self) -> None:
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        for a, b, port in self._links():
            host, _ = self.proxy_address(a, b, port)
            proxy = LinkProxy(host, port, self.node_host(b), port, name=f"{a}->{b}:{port}")
            await self._nursery.start(proxy.serve)
            self._proxies[(a, b, port)] = proxy

    async def teardown(self) -> None:
        await self.kill_all()
        for proxy in self._proxies.values():
            proxy.set_mode(LinkMode.PASS)

    async def aclose_services(self) -> None:
        if self._nursery_cm is not None:
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
            await self._nursery_cm.__aexit__(None, None, None)
            self._nursery_cm = self._nursery = None
        self._proxies.clear()

    def link(self, a: int, b: int, port: int) -> LinkProxy:
        return self._proxies[(a, b, port)]

    def set_link(self, a: int, b: int, mode: LinkMode | str, delay_s: float = 0.0, *,
                 both: bool = True) -> None:
        """Set the mode of every proxy a → b (and b → a when ``both``)."""
        for (x, y, _port), proxy in self._proxies.items():
            if (x, y) == (a, b) or (both and (x, y) == (b, a)):
                proxy.set_mode(mode, delay_s)

    async def cut(self, a: int, b: int) -> None:
        if a != 0 and b != 0 and self.redirect_unsupported is not None:
            raise BackendError(f"local backend cannot partition node {a} from node {b}: "
                               f"{self.redirect_unsupported} (replication would bypass the "
                               "proxies); use --backend netns")
        self.set_link(a, b, LinkMode.DROP)

    async def cut_one_way(self, src: int, dst: int) -> None:
        """An asymmetric partition: what ``src`` sends to ``dst`` is held, on the connections
        ``src`` dials (their forward bytes) and on those ``dst`` dials (their replies); what
        ``dst`` sends to ``src`` still arrives on connections already open.  New connections
        between them are held either way, as a one-way packet loss stops a TCP handshake."""
        if self.redirect_unsupported is not None:
            raise BackendError(f"local backend cannot partition node {src} from node {dst}: "
                               f"{self.redirect_unsupported}; use --backend netns")
        for (x, y, _port), proxy in self._proxies.items():
            if (x, y) == (src, dst):
                proxy.set_mode(LinkMode.HOLD_FORWARD)
            elif (x, y) == (dst, src):
                proxy.set_mode(LinkMode.HOLD_REPLY)

    async def heal_all(self) -> None:
        for proxy in self._proxies.values():
            proxy.set_mode(LinkMode.PASS)

    def statistics(self) -> dict[str, Any]:
        return {**super().statistics(),
                "links": {p.name: p.statistics() for p in self._proxies.values()}}
