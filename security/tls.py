"""TLS for rafka listeners and clients: stdlib ``ssl`` contexts under ``trio.SSLStream``.

Theory of operation
-------------------
``server_context`` builds a listener's context (TLS 1.2+, its certificate and key; with
``client_auth="required"`` every client must present a certificate signed by ``cafile`` —
mutual TLS — and ``"requested"`` takes one when offered). ``client_context`` builds a
client's (verifies the broker's certificate against ``cafile``, or the system store, and its
host name; optionally presents a client certificate). ``certificate_principal`` names the
peer of a mutual-TLS connection: ``User:<CN>`` of its certificate's subject.

``accept_tls(stream, context)`` is the server's side of one connection: it reads the first
bytes, and when they are not a TLS record (a plaintext rafka frame begins with a 4-byte length
below the frame limit, never with the TLS handshake byte 0x16 followed by 0x03) it raises
``PlaintextOnTlsPortError`` carrying those bytes' stream so the server can answer one
``TLS_REQUIRED`` frame in clear and close — a plaintext client sees a named error, not a hang.
Otherwise it returns a ``trio.SSLStream`` whose handshake is done (the caller bounds it in time).

``BulkReceiveStream`` is what a client's ``SSLStream`` runs over: ``SSLStream`` refills its
incoming buffer with ``transport.receive_some()`` — no size, so trio's 64 KiB default, four 16
KiB records — and a 1 MiB fetch answer took 16 of those; asking for 256 KiB takes 4, and the
frame reader decrypts every record of a refill in one step (``rafka.wire.frame_reader``; the
client's CPU per MiB of a TLS fetch 1.29 → 1.07 ms by the drain alone, → 0.83 with this,
docs/performance.md "Security").
"""

from __future__ import annotations

import ssl
from typing import Any

import trio

__all__ = [
    "CLIENT_AUTH",
    "BulkReceiveStream",
    "PlaintextOnTlsPortError",
    "PrefixedStream",
    "accept_tls",
    "certificate_principal",
    "peer_host",
    "client_context",
    "server_context",
]

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS_HANDSHAKE = 0x16


def server_context(certfile: str, keyfile: str, *, cafile: str | None = None,
                   client_auth: str = "none") -> ssl.SSLContext:
    """A listener's context; ``client_auth`` is none, requested or required (needs ``cafile``)."""
    if client_auth not in CLIENT_AUTH:
        raise ValueError(f"client_auth must be one of {', '.join(CLIENT_AUTH)}, got {client_auth!r}")
    if client_auth != "none" and not cafile:
        raise ValueError(f"client_auth={client_auth} needs a cafile to verify client certificates")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    if cafile:
        ctx.load_verify_locations(cafile)
    ctx.verify_mode = CLIENT_AUTH[client_auth]
    return ctx


def client_context(*, cafile: str | None = None, certfile: str | None = None,
                   keyfile: str | None = None, check_hostname: bool = True) -> ssl.SSLContext:
    """A client's context: verifies the broker (``cafile`` or the system store)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    if certfile:
        ctx.load_cert_chain(certfile, keyfile)
    return ctx


def certificate_principal(stream: Any) -> str | None:
    """``User:<CN>`` of the verified peer certificate of an ``SSLStream`` (None: none sent)."""
    get = getattr(stream, "getpeercert", None)
    cert = get() if get is not None else None
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return f"User:{value}"
    return None


def peer_host(stream: Any) -> str | None:
    """The peer's IP address of a (possibly wrapped) trio socket stream."""
    for _ in range(4):
        sock = getattr(stream, "socket", None)
        if sock is not None:
            try:
                return str(sock.getpeername()[0])
            except (OSError, IndexError):
                return None
        stream = getattr(stream, "transport_stream", None) or getattr(stream, "inner", None)
        if stream is None:
            return None
    return None


class _WrappedStream(trio.abc.Stream):
    """A stream over ``inner`` that changes only how it receives: sending and closing go
    straight to ``inner``."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class PrefixedStream(_WrappedStream):
    """A stream that first yields ``prefix`` (bytes already read from ``inner``)."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        super().__init__(inner)
        self.prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.prefix:
            n = len(self.prefix) if max_bytes is None else max_bytes
            out, self.prefix = self.prefix[:n], self.prefix[n:]
            await trio.lowlevel.checkpoint()
            return out
        return await self.inner.receive_some(max_bytes)


TRANSPORT_RECEIVE_BYTES = 256 * 1024


class BulkReceiveStream(_WrappedStream):
    """``inner`` with ``receive_some()`` (no size) asking for ``TRANSPORT_RECEIVE_BYTES``."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner)
        self.socket = getattr(inner, "socket", None)

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(TRANSPORT_RECEIVE_BYTES if max_bytes is None else max_bytes)


class PlaintextOnTlsPortError(Exception):
    """The first bytes on a TLS listener were not a TLS handshake record."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__("a plaintext client on a TLS listener")
        self.stream = stream


async def accept_tls(stream: trio.abc.Stream, context: ssl.SSLContext) -> trio.SSLStream[Any]:
    """The server side of TLS on ``stream`` with its handshake done (see the module doc)."""
    first = b""
    while len(first) < 2:
        chunk = await stream.receive_some(2 - len(first))
        if not chunk:
            raise trio.BrokenResourceError("the peer closed before the TLS handshake")
        first += chunk
    prefixed = PrefixedStream(stream, first)
    if first[0] != _TLS_HANDSHAKE or first[1] != 0x03:
        raise PlaintextOnTlsPortError(prefixed)
    tls = trio.SSLStream(prefixed, context, server_side=True)
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError:
        await _send_pending_alert(tls)
        raise
    return tls


async def _send_pending_alert(tls: trio.SSLStream[Any]) -> None:
    """Send the TLS alert a failed handshake left unsent (trio drops it): the peer then learns
    *why* (e.g. ``unknown ca`` for a certificate the cluster CA did not sign) and can name the
    error (``wire.connection.transport_error``) instead of seeing a bare EOF. Reads trio's
    private outgoing BIO (trio 0.35); without it nothing is sent, as before."""
    bio = getattr(tls, "_outgoing", None)
    data = bio.read() if isinstance(bio, ssl.MemoryBIO) else b""
    if data:
        with trio.move_on_after(1.0):
            try:
                await tls.transport_stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
