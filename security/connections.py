"""How many connections a node holds open, in total and per client IP address.

Theory of operation
-------------------
``ConnectionCounter`` is the node's one ledger (sans I/O), shared by all its listeners — the
main one and the ``[security]`` one — so ``max.connections`` bounds the node, not each port,
and ``max.connections.per.ip`` bounds what one address may hold across them (Kafka's names).
The server asks ``try_open(ip)`` for each accepted socket *before* any TLS handshake or
authentication (a refused peer costs one small frame), and calls ``close(ip)`` exactly once
when a connection it admitted ends. A refusal is a message for the ``TOO_MANY_CONNECTIONS``
frame (correlation id −1) the server sends before closing.

An unauthenticated connection is also bounded in time and size by its listener
(``ssl.handshake.timeout.ms``, ``sasl.authentication.timeout.ms``,
``sasl.max.unauthenticated.frame.bytes``; ``broker/server.py``): a client trickling one byte a
second holds a slot only until that deadline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["ConnectionCounter"]


@dataclass
class ConnectionCounter:
    max_connections: int
    max_connections_per_ip: int
    open_total: int = 0
    by_ip: Counter[str] = field(default_factory=Counter)

    def try_open(self, ip: str | None) -> str | None:
        """Admit a connection from ``ip`` (None: unknown, counted only in the total); returns
        None when admitted, else why not."""
        if self.open_total >= self.max_connections:
            return f"connection limit of {self.max_connections} reached"
        if ip is not None and self.by_ip[ip] >= self.max_connections_per_ip:
            return f"connection limit of {self.max_connections_per_ip} per IP address reached for {ip}"
        self.open_total += 1
        if ip is not None:
            self.by_ip[ip] += 1
        return None

    def close(self, ip: str | None) -> None:
        """A connection ``try_open`` admitted has ended."""
        assert self.open_total > 0, "close without open"
        self.open_total -= 1
        if ip is not None:
            self.by_ip[ip] -= 1
            if self.by_ip[ip] <= 0:
                del self.by_ip[ip]
