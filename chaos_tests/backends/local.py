"""Local backend: plain processes on loopback addresses, partitions and delays via proxies.

Theory of operation
-------------------
No root needed.  Node ``n`` binds ``127.0.0.<10+n>``.  For every directed link ``a → b``
(``a`` = 0 for the harness) and every port of ``b`` there is a :class:`~chaos_tests.proxy.LinkProxy`
listening on ``127.1.<a>.<b>:<same port>`` and forwarding to ``127.0.0.<10+b>:<port>``.
Nodes must be configured to dial peers at ``peer_address(a, b, port)`` and clients at
``node_address(b)``; then ``cut(a, b)`` blackholes the two proxies of that pair,
``set_link(a, b, mode, delay_s)`` gives reset / delay faults, and ``heal_all`` returns every
link to ``pass``.  What a proxy cannot do: it cannot stop a node from dialling a peer's
real address directly (configuration must use the proxy addresses), and it cannot make
``connect()`` time out — a blackholed link accepts, then stays silent.

The whole 127.0.0.0/8 block is routed to ``lo`` on Linux; macOS needs
``ifconfig lo0 alias 127.0.0.11`` (and the 127.1.a.b link addresses) first.
"""

from __future__ import annotations

from typing import Any

import trio

from ..proxy import LinkMode, LinkProxy
from .base import Backend, ClusterSpec

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

    def node_host(self, node: int) -> str:
        return f"127.0.0.{10 + node}"

    def peer_address(self, src: int, dst: int, port: int | None = None) -> tuple[str, int]:
        return f"127.1.{src}.{dst}", port or self.spec.node(dst).client_port

    def _links(self) -> list[tuple[int, int, int]]:
        ids = self.spec.node_ids
        return [(a, b, port) for a in [0, *ids] for b in ids if a != b
                for port in self.spec.node(b).ports]

    async def setup(self) -> None:
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        for a, b, port in self._links():
            host, _ = self.peer_address(a, b, port)
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
        self.set_link(a, b, LinkMode.DROP)

    async def heal_all(self) -> None:
        for proxy in self._proxies.values():
            proxy.set_mode(LinkMode.PASS)

    def statistics(self) -> dict[str, Any]:
        return {**super().statistics(),
                "links": {p.name: p.statistics() for p in self._proxies.values()}}
