"""The node's connections to its peers over their secured listeners (inter-broker security).

Theory of operation
-------------------
Every piece of a node that talks to another node — the replica fetchers, the controller
channel (registration, heartbeats, metadata fetches, forwarded admin requests), the
transaction coordinator's marker writer and verifier — asks the node's one ``ConnectionPool``
for the peer's *main* listener address, which is what the metadata (``BrokerRegistration.host/
port``) and the voters' ``rpc`` name. With ``"inter.broker.security" = true``
(``security/listener.py``) the node builds a ``PeerPool`` instead: the same pool, except that
``get(host, port)`` first translates a peer's main address to its secured one and connects
there with TLS, presenting the node's certificate (mutual TLS, the node's principal
``User:node-<id>``; no SASL — the listener skips it for node certificates):

* a voter's ``rpc`` → its ``secure_rpc`` (``[[voters]]``, required with inter-broker security:
  the controller channel must work before any metadata is known);
* a registered broker's ``host:port`` → its ``secure_listener`` (``RegisterBroker``), from the
  node's current metadata image (the map is rebuilt when the image changes).

An address with no known secured twin is refused (``NetworkExceptionError``, retriable: the
callers retry, and the registration shows up with the next metadata) — the pool never falls
back to plaintext. ``stats`` counts the TLS connections opened and the refusals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from rafka.security.client import ClientSecurity
from rafka.security.tls import client_context
from rafka.wire.connection import Connection, ConnectionPool
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.settings import parse_hostport

if TYPE_CHECKING:
    from rafka.metadata import MetadataImage
    from rafka.security.listener import SecurityConfig

__all__ = ["PeerPool", "PeerPoolStats", "node_client_security"]

Address = tuple[str, int]


def node_client_security(config: SecurityConfig) -> ClientSecurity:
    """TLS as the node itself: its certificate and key, peers verified against the cluster CA."""
    assert config.certfile and config.keyfile and config.cafile
    ctx = client_context(cafile=config.cafile, certfile=config.certfile, keyfile=config.keyfile)
    return ClientSecurity(protocol="SSL", ssl_context=ctx)


@dataclass(slots=True)
class PeerPoolStats:
    tls_connections: int = 0  # TLS connections opened to peers' secured listeners
    refused: int = 0  # requests for a peer whose secured listener is unknown


class PeerPool(ConnectionPool):
    """A ``ConnectionPool`` that reaches peers on their secured listeners (module docstring)."""

    def __init__(self, nursery: trio.Nursery, config: SecurityConfig,
                 voters: Iterable[tuple[Address, Address]],
                 image_of: Callable[[], MetadataImage | None], **conn_kw: Any) -> None:
        super().__init__(nursery, security=node_client_security(config), **conn_kw)
        self._static = dict(voters)  # voter rpc -> secure_rpc
        self._image_of = image_of
        self._image: Any = None
        self._from_image: dict[Address, Address] = {}
        self.stats = PeerPoolStats()

    def secured(self, host: str, port: int) -> Address | None:
        """The secured twin of a peer's main address (None: not known)."""
        image = self._image_of()
        if image is not None and image is not self._image:
            mapped: dict[Address, Address] = {}
            for reg in image.cluster.brokers.values():
                if reg.secure_listener:
                    mapped[(reg.host, reg.port)] = parse_hostport(reg.secure_listener)
            self._image, self._from_image = image, mapped
        return self._from_image.get((host, port)) or self._static.get((host, port))

    async def get(self, host: str, port: int) -> Connection:
        target = self.secured(host, port)
        if target is None:
            self.stats.refused += 1
            raise error_for(ErrorCode.NETWORK_EXCEPTION,
                            f"no secured listener known for peer {host}:{port} "
                            "(inter.broker.security never falls back to plaintext)")
        key_before = self._conns.get(target)
        conn = await super().get(*target)
        if conn is not key_before:
            self.stats.tls_connections += 1
        return conn

    def discard(self, host: str, port: int) -> None:
        target = self.secured(host, port)
        if target is not None:
            super().discard(*target)
