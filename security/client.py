"""A client's security settings, as kafka-python names them, and what they do to a connection.

Theory of operation
-------------------
``ClientSecurity.from_options(security_protocol=..., sasl_mechanism=..., sasl_plain_username=...,
sasl_plain_password=..., ssl_cafile=..., ssl_certfile=..., ssl_keyfile=...)`` validates the
options once (a ``ValueError`` naming the option) and builds the ``ssl.SSLContext``;
``ClientCore`` passes it to its ``ConnectionPool``, so every connection a client opens does
the same:

1. ``wrap(stream, host)``: with SSL / SASL_SSL, a ``trio.SSLStream`` whose handshake is done
   (the broker's certificate verified against ``ssl_cafile`` and its host name); a failure is
   ``TlsHandshakeFailedError`` (not retriable: a wrong CA does not heal);
2. ``login(conn)``: with SASL_PLAINTEXT / SASL_SSL, the SCRAM exchange
   (``security.sasl.sasl_authenticate``) before the connection is handed out.

``PLAINTEXT`` (the default) does neither: nothing changes for existing users.

A client built *without* any security option takes the **ambient** settings:
``with ambient_security({...}):`` (a context variable) is how the ``rafka`` CLI's shared
``--security-protocol`` / ``--user`` / ``--command-config`` options (``client/connect_options.py``)
reach every client a command builds, without threading them through each call. The sync
facades build their async client in the caller's thread, so they see it too. Explicit options
always win; outside such a block the ambient is empty (plaintext).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from rafka.security.listener import PROTOCOLS, ProtocolFlags
from rafka.security.sasl import sasl_authenticate
from rafka.security.scram import MECHANISMS
from rafka.security.tls import BulkReceiveStream, client_context
from rafka.wire.errors import ErrorCode, error_for

if TYPE_CHECKING:
    from rafka.wire.connection import Connection

__all__ = ["ClientSecurity", "SECURITY_OPTIONS", "ambient_security"]

# the keyword arguments every client (producer, consumer, admin, ClientCore) accepts
SECURITY_OPTIONS = ("security_protocol", "sasl_mechanism", "sasl_plain_username",
                    "sasl_plain_password", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                    "ssl_check_hostname")

_AMBIENT: ContextVar[Mapping[str, Any] | None] = ContextVar("rafka_ambient_security", default=None)


@contextmanager
def ambient_security(options: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, a client built without security options uses ``options``."""
    unknown = set(options) - set(SECURITY_OPTIONS)
    if unknown:
        raise TypeError(f"unexpected security option(s): {', '.join(sorted(unknown))}")
    token = _AMBIENT.set(dict(options))
    try:
        yield
    finally:
        _AMBIENT.reset(token)


@dataclass(frozen=True)
class ClientSecurity(ProtocolFlags):
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ssl_context: ssl.SSLContext | None = None

    @classmethod
    def from_options(cls, *, security_protocol: str = "PLAINTEXT",
                     sasl_mechanism: str | None = None, sasl_plain_username: str | None = None,
                     sasl_plain_password: str | None = None, ssl_cafile: str | None = None,
                     ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                     ssl_check_hostname: bool = True) -> ClientSecurity:
        protocol = (security_protocol or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {', '.join(PROTOCOLS)}, "
                             f"got {security_protocol!r}")
        mech = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mech = (sasl_mechanism or "SCRAM-SHA-256").upper()
            if mech not in MECHANISMS:
                raise ValueError(f"sasl_mechanism must be one of {', '.join(MECHANISMS)}, "
                                 f"got {sasl_mechanism!r}")
            if not sasl_plain_username or not sasl_plain_password:
                raise ValueError(f"security_protocol {protocol} needs sasl_plain_username "
                                 "and sasl_plain_password")
        ctx = None
        if protocol in ("SSL", "SASL_SSL"):
            try:
                ctx = client_context(cafile=ssl_cafile, certfile=ssl_certfile, keyfile=ssl_keyfile,
                                     check_hostname=ssl_check_hostname)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"cannot load the TLS files (ssl_cafile={ssl_cafile!r}, "
                                 f"ssl_certfile={ssl_certfile!r}): {exc}") from None
        return cls(protocol, mech, sasl_plain_username, sasl_plain_password, ctx)

    @classmethod
    def from_kwargs(cls, options: dict[str, Any]) -> ClientSecurity | None:
        """From a client's keyword arguments (None: plaintext, nothing to do); unknown keys are
        a ``TypeError`` like any unexpected keyword argument. No option at all: the ambient
        settings (``ambient_security``)."""
        options = options or _AMBIENT.get() or {}
        unknown = set(options) - set(SECURITY_OPTIONS)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        sec = cls.from_options(**options)
        return None if sec.protocol == "PLAINTEXT" else sec

    async def wrap(self, stream: trio.abc.Stream, host: str) -> trio.abc.Stream:
        """The stream to speak over (TLS handshake done), see the module docstring."""
        if self.ssl_context is None:
            return stream
        # BulkReceiveStream: refills of 256 KiB, not trio's 64 KiB (security/tls.py)
        tls = trio.SSLStream(BulkReceiveStream(stream), self.ssl_context, server_hostname=host)
        try:
            await tls.do_handshake()
        except (ssl.SSLError, ssl.CertificateError, trio.BrokenResourceError) as exc:
            await trio.aclose_forcefully(stream)
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
            raise error_for(ErrorCode.TLS_HANDSHAKE_FAILED,
                            f"TLS handshake with {host} failed: {cause}") from None
        return tls

    async def login(self, conn: Connection) -> str | None:
        """SASL on a fresh connection (no-op without SASL); returns the principal."""
        if not self.uses_sasl:
            return None
        assert self.sasl_mechanism and self.username and self.password is not None
        return await sasl_authenticate(conn, self.sasl_mechanism, self.username, self.password)
