"""Bounds on what an unauthenticated peer may cost the Raft port (issue 24).

Theory of operation
-------------------
pysyncobj's transport reads whatever a peer sends into one growing buffer until the frame its
4-byte prefix declares is complete, and only then decrypts it — the first frame is where the
cluster secret is checked (kraft/raft_cipher.py: a frame not sealed with the secret fails to open
and the connection is dropped). A peer that declares 2 GiB and streams zeros was therefore buffered
without limit, and kept alive by its own traffic (the library's ``connectionTimeout`` counts
from the last read).

``GuardedTransport`` is pysyncobj's ``TCPTransport`` with one change: each *incoming*
connection becomes a ``_GuardedConnection`` before it reads anything. Until the connection
has delivered one frame that decrypted (so the peer knows the secret):

* a declared frame length above ``PRE_AUTH_FRAME_BYTES`` (the handshake frame is a ~150 byte
  token), or a read buffer larger than that, drops the connection at once;
* the connection must be identified (secret handshake and node address, both small frames)
  within ``PRE_AUTH_DEADLINE_S``, else the transport's tick drops it;
* at most ``MAX_PRE_AUTH_CONNECTIONS`` such connections exist; a further one is dropped on
  arrival.

After that first good frame the peer is a cluster member and the library's own rules apply.
Everything runs on pysyncobj's tick thread, the only thread that touches its connections;
the library's private fields are read by their mangled names (pysyncobj 0.3.17, pinned).
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

__all__ = ["GuardedTransport", "PRE_AUTH_FRAME_BYTES", "PRE_AUTH_DEADLINE_S", "MAX_PRE_AUTH_CONNECTIONS"]

log = logging.getLogger("rafka.kraft.raft_guard")

PRE_AUTH_FRAME_BYTES = 64 * 1024
PRE_AUTH_DEADLINE_S = 10.0
MAX_PRE_AUTH_CONNECTIONS = 64
_LEN = struct.Struct("i")  # pysyncobj's prefix: native signed int


class _GuardedConnection(TcpConnection):  # type: ignore[misc]
    """An incoming connection that refuses large frames until its peer proved the secret."""

    guard_authenticated: bool
    guard_accepted_at: float

    def _TcpConnection__processRead(self) -> bool:  # noqa: N802 (the library's mangled name)
        more: bool = TcpConnection._TcpConnection__processRead(self)
        if not self.guard_authenticated and self._over_pre_auth_limit():
            log.warning("Raft port: dropping an unauthenticated peer that sent more than %d bytes "
                        "before proving the cluster secret", PRE_AUTH_FRAME_BYTES)
            self.disconnect()
            return False
        return more

    def _over_pre_auth_limit(self) -> bool:
        buf: bytes = self._TcpConnection__readBuffer
        if len(buf) > PRE_AUTH_FRAME_BYTES + _LEN.size:
            return True
        if len(buf) >= _LEN.size:
            (n,) = _LEN.unpack_from(buf, 0)
            return bool(n < 0 or n > PRE_AUTH_FRAME_BYTES)
        return False

    def _TcpConnection__processParseMessage(self) -> Any:  # noqa: N802
        message = TcpConnection._TcpConnection__processParseMessage(self)
        if message is not None:
            self.guard_authenticated = True  # it decrypted: the peer has the secret
        return message


class GuardedTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport with the pre-authentication bounds above."""

    dropped_pre_auth = 0  # connections dropped by a bound (per instance once incremented)

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:  # noqa: N802
        conn.__class__ = _GuardedConnection  # before its first read (the poller calls later)
        conn.guard_authenticated = self._syncObj.encryptor is None  # no secret: nothing to prove
        conn.guard_accepted_at = raft_clock()
        if len(self._unknownConnections) >= MAX_PRE_AUTH_CONNECTIONS:
            self.dropped_pre_auth += 1
            log.warning("Raft port: %d connections are still unidentified, dropping a new one",
                        len(self._unknownConnections))
            conn.disconnect()
            return
        super()._onNewIncomingConnection(conn)

    def _onTick(self) -> None:  # noqa: N802
        super()._onTick()
        now = raft_clock()
        for conn in list(self._unknownConnections):
            started = getattr(conn, "guard_accepted_at", None)
            if started is not None and now - started > PRE_AUTH_DEADLINE_S:
                self.dropped_pre_auth += 1
                log.warning("Raft port: dropping a peer that did not identify itself in %.0f s",
                            PRE_AUTH_DEADLINE_S)
                conn.disconnect()  # the library's disconnect callback forgets it
                self._unknownConnections.discard(conn)
