"""A small blocking rafka client for the Spark source: metadata, list offsets, fetch.

Theory of operation
-------------------
Spark calls the source from plain threads: ``latestOffset`` on the driver, and ``read()`` on an
executor as a *generator* that Spark pulls batches from at its own pace. A blocking socket
speaking the shared sans-I/O codec (``wire.protocol.ClientProtocol``) fits that shape
directly: no event loop to run beside Spark, nothing to hand over between threads, and a fetch
in flight while the previous response is decoded (``send`` now, ``receive`` later) gives the
pipelining that matters for throughput. The protocol and error catalogue are the same ones the
trio client uses.

``Cluster`` keeps the broker list and partition leaders from METADATA, one connection per
broker, and retries retriable errors (refreshing metadata) until ``timeout_ms`` runs out. It is
opened where it is used (executors open their own) and is never pickled. Its
``isolation_level`` (1 = read_committed) goes into every FETCH and LIST_OFFSETS: fetches stop
at the last stable offset and "latest" *is* the last stable offset.

With ``security`` (a ``security.client.ClientSecurity``, from the ``rafka.security.*``
options) each connection does what the trio client's do: the TLS handshake
(``ssl_context.wrap_socket``, the broker's certificate and host name checked), then the SCRAM
login — ``security.sasl.sasl_authenticate`` itself, driven over this blocking socket.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import time
from collections.abc import Iterable, Mapping
from typing import Any

from rafka.wire.errors import RETRIABLE, ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey, ClientProtocol, FrameTooLargeError, Response

__all__ = ["BlockingConnection", "Cluster", "PartitionGone", "parse_servers"]

log = logging.getLogger("spark_source")
_READ_CHUNK = 1 << 20
_LEN = struct.Struct(">I")  # the frame length prefix (wire.protocol's framing)


def parse_servers(servers: str) -> list[tuple[str, int]]:
    out = []
    for addr in servers.split(","):
        host, _, port = addr.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host, int(port)))
    if not out:
        raise ValueError(f"no usable address in bootstrap servers {servers!r}")
    return out


class PartitionGone(Exception):
    """The topic or partition no longer exists (deleted)."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"{topic}-{partition} does not exist (deleted?)")
        self.topic, self.partition = topic, partition


class BlockingConnection:
    """One TCP connection; several requests may be in flight (``send`` / ``receive``)."""

    def __init__(self, host: str, port: int, *, timeout_s: float = 30.0,
                 client_id: str = "rafka-spark", security: Any = None) -> None:
        self.address = (host, port)
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise error_for(ErrorCode.BROKER_NOT_AVAILABLE,
                            f"cannot connect to {host}:{port}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self._proto = ClientProtocol(client_id)
        self._done: dict[int, Response] = {}
        self.closed = False
        if security is not None:
            self._secure(security, host)

    def _secure(self, security: Any, host: str) -> None:
        """TLS handshake and SASL login (see the module docstring); a failure closes."""
        from rafka.security.sasl import sasl_authenticate

        if security.ssl_context is not None:
            try:
                self._sock = security.ssl_context.wrap_socket(self._sock, server_hostname=host)
            except (ssl.SSLError, ssl.CertificateError, OSError) as exc:
                self.close()
                raise error_for(ErrorCode.TLS_HANDSHAKE_FAILED,
                                f"TLS handshake with {host} failed: {exc}") from None
        if security.uses_sasl:
            conn = self

            class _Awaitable:  # sasl_authenticate awaits conn.request; ours never suspends
                async def request(self, api_key: int, body: dict[str, Any]) -> Response:
                    return conn.request(api_key, body)

            login = sasl_authenticate(_Awaitable(), security.sasl_mechanism,  # type: ignore[arg-type]
                                      security.username, security.password)
            try:
                login.send(None)
            except StopIteration:
                return  # logged in
            except BaseException:
                self.close()
                raise
            login.close()
            raise RuntimeError("the SASL login suspended on a blocking connection")

    def send(self, api_key: int, body: dict[str, Any]) -> int:
        cid, frame = self._proto.send(api_key, body)
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise error_for(ErrorCode.NETWORK_EXCEPTION, f"{self._where()}: {exc}") from None
        return cid

    def receive(self, cid: int) -> Response:
        while cid not in self._done:
            (n,) = _LEN.unpack(self._read_exact(4))
            try:
                self._proto.check_frame_length(n)
            except FrameTooLargeError:
                self.close()  # the rest of the stream cannot be framed any more
                raise
            resp = self._proto.decode_frame(self._read_exact(n))
            self._done[resp.correlation_id] = resp
        return self._done.pop(cid)

    def _read_exact(self, n: int) -> bytearray:
        """The next ``n`` bytes of the stream, received straight into their own buffer: a
        FETCH answer (megabytes) is copied once, from the kernel, and the records' Arrow
        columns then point into that buffer (no chunk objects, no decoder buffer to copy out
        of — the copies the profile of a Spark read found in ``FrameDecoder``)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        try:
            while got < n:
                k = self._sock.recv_into(view[got:], min(n - got, _READ_CHUNK))
                if not k:
                    self.close()
                    raise error_for(ErrorCode.NETWORK_EXCEPTION,
                                    f"{self._where()} closed the connection")
                got += k
        except OSError as exc:
            self.close()
            raise error_for(ErrorCode.NETWORK_EXCEPTION, f"{self._where()}: {exc}") from None
        finally:
            view.release()
        return buf

    def request(self, api_key: int, body: dict[str, Any]) -> Response:
        return self.receive(self.send(api_key, body))

    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def close(self) -> None:
        self.closed = True
        try:
            self._sock.close()
        except OSError:
            pass


class Cluster:
    """Metadata, leaders and connections; retries retriable errors for ``timeout_ms``."""

    def __init__(self, servers: str, *, timeout_ms: int = 30_000, isolation_level: int = 0,
                 security: Iterable[tuple[str, str]] = ()) -> None:
        from rafka.security.client import ClientSecurity

        pairs = dict(security)  # rafka.security.* options; none: plaintext (not the ambient)
        self.security = ClientSecurity.from_kwargs(pairs) if pairs else None
        self.bootstrap = parse_servers(servers)
        self.timeout_s = timeout_ms / 1000
        self.isolation_level = isolation_level
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.topics: dict[str, list[int]] = {}
        self._conns: dict[tuple[str, int], BlockingConnection] = {}
        self.metadata_offset = -1  # the newest metadata image an answer came from (see refresh)
        self._seen_at: dict[str, int] = {}  # topic -> newest image offset that listed it

    # -- connections

    def conn(self, address: tuple[str, int]) -> BlockingConnection:
        c = self._conns.get(address)
        if c is None or c.closed:
            c = self._conns[address] = BlockingConnection(*address, timeout_s=self.timeout_s,
                                                          security=self.security)
        return c

    def drop(self, address: tuple[str, int]) -> None:
        c = self._conns.pop(address, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retry(self, what: str, fn: Any) -> Any:
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            try:
                return fn()
            except RafkaError as exc:
                if exc.code not in RETRIABLE or time.monotonic() > deadline:
                    raise
                attempt += 1
                log.debug("%s: %s (retry %d)", what, exc, attempt)
                time.sleep(min(1.0, 0.05 * 2 ** min(attempt, 5)))

    # -- metadata

    def refresh(self, topics: Iterable[str] | None = None) -> dict[str, list[int]]:
        """METADATA for ``topics`` (None = all); returns topic → sorted partitions (existing
        topics only) and updates brokers and leaders."""
        body = {"topics": None if topics is None else sorted(set(topics))}

        def once() -> Response:
            last: Exception | None = None
            for addr in dict.fromkeys(list(self.brokers.values()) + self.bootstrap):
                try:
                    resp = self.conn(addr).request(ApiKey.METADATA, body)
                except RafkaError as exc:
                    self.drop(addr)
                    if exc.code not in RETRIABLE and exc.code != ErrorCode.NETWORK_EXCEPTION:
                        raise  # e.g. SASL_AUTHENTICATION_FAILED, TLS_HANDSHAKE_FAILED: cannot heal
                    last = exc
                    continue
                offset = resp.body.get("metadata_offset")
                if offset is not None and offset < 0:
                    # A broker that has not caught up with the @metadata log since it started
                    # answers from an empty image: no brokers, every topic unknown. Never take
                    # that for a deletion (a restarted leader made a streaming query fail with
                    # a false DataLossError): ask the next broker; if none has caught up, retry.
                    last = error_for(ErrorCode.LEADER_NOT_AVAILABLE,
                                     f"{addr[0]}:{addr[1]} has not caught up with the metadata "
                                     "log since it started")
                    continue
                return resp
            raise error_for(ErrorCode.BROKER_NOT_AVAILABLE,
                            f"no broker reachable (bootstrap {self.bootstrap}): {last}")

        resp = self._retry("metadata", once)
        resp.raise_for_error()
        offset = resp.body.get("metadata_offset")

        def behind(topic: str) -> bool:
            """This answer's image predates one that listed ``topic``: a broker lagging the
            log (by a few records, as brokers routinely do) cannot tell that it was deleted."""
            return offset is not None and offset < self._seen_at.get(topic, -1)

        if offset is not None:
            self.metadata_offset = max(self.metadata_offset, offset)
        for b in resp.body.get("brokers", []):
            self.brokers[int(b["node_id"])] = (str(b["host"]), int(b["port"]))
        found: dict[str, list[int]] = {}
        if topics is None:  # a listing: what a lagging answer leaves out still exists,
            listed = {t["name"] for t in resp.body.get("topics", [])}  # what a current one
            for name in [n for n in self.topics if n not in listed]:   # leaves out is gone
                if behind(name):
                    found[name] = self.topics[name]
                else:
                    self._forget(name)
        for t in resp.body.get("topics", []):
            if t.get("error") and behind(t["name"]) and t["name"] in self.topics:
                found[t["name"]] = self.topics[t["name"]]  # what we knew stays
                continue
            if t.get("error"):
                self._forget(t["name"])
                continue
            parts = []
            for p in t.get("partitions", []):
                tp = (t["name"], int(p["partition"]))
                parts.append(tp[1])
                if p.get("leader", -1) is not None and int(p.get("leader", -1)) >= 0:
                    self.leaders[tp] = int(p["leader"])
                else:
                    self.leaders.pop(tp, None)
            found[t["name"]] = sorted(parts)
            self.topics[t["name"]] = sorted(parts)
            if offset is not None:
                self._seen_at[t["name"]] = max(self._seen_at.get(t["name"], -1), offset)
        return found

    def _forget(self, topic: str) -> None:
        """``topic`` is gone (deleted, or an error names it): drop its partitions and leaders."""
        self.topics.pop(topic, None)
        for tp in [tp for tp in self.leaders if tp[0] == topic]:
            del self.leaders[tp]

    def leader_address(self, tp: tuple[str, int]) -> tuple[str, int]:
        leader = self.leaders.get(tp)
        if leader is None or leader not in self.brokers:
            self.refresh([tp[0]])
            if tp[0] not in self.topics or tp[1] not in self.topics[tp[0]]:
                raise PartitionGone(*tp)
            leader = self.leaders.get(tp)
            if leader is None or leader not in self.brokers:
                raise error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp[0]}-{tp[1]}")
        return self.brokers[leader]

    # -- offsets

    def list_offsets(self, query: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """tp → timestamp (-2 earliest, -1 latest = high watermark or, read_committed, the last
        stable offset, >= 0 first offset with a timestamp at or after it) ⇒ tp → offset (-1 when no record matches a timestamp).
        Partitions that do not exist (any more) are left out of the answer."""
        result: dict[tuple[str, int], int] = {}
        pending = dict(query)
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while pending:
            by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
            for tp in sorted(pending):
                try:
                    by_leader.setdefault(self.leader_address(tp), []).append(tp)
                except PartitionGone:
                    del pending[tp]
                except RafkaError:
                    if time.monotonic() > deadline:
                        raise
            sent = []
            for addr, tps in by_leader.items():
                topics: dict[str, list[dict[str, int]]] = {}
                for t, p in tps:
                    topics.setdefault(t, []).append({"partition": p, "timestamp": pending[(t, p)]})
                body = {"replica_id": -1, "isolation_level": self.isolation_level,
                        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                try:
                    conn = self.conn(addr)
                    sent.append((addr, conn, conn.send(ApiKey.LIST_OFFSETS, body)))
                except RafkaError:
                    self.drop(addr)
            stale = False
            for addr, conn, cid in sent:
                try:
                    resp = conn.receive(cid)
                except RafkaError:
                    self.drop(addr)
                    stale = True
                    continue
                for t in resp.body.get("topics", []):
                    for p in t.get("partitions", []):
                        tp = (t["name"], int(p["partition"]))
                        err = int(p.get("error", 0) or 0)
                        if not err:
                            result[tp] = int(p["offset"])
                            pending.pop(tp, None)
                        elif err in RETRIABLE:
                            self.leaders.pop(tp, None)
                            stale = True
                        else:
                            raise error_for(err, f"list offsets of {tp[0]}-{tp[1]}: "
                                                 f"{p.get('message') or ''}")
            if pending and (stale or not sent):
                if time.monotonic() > deadline:
                    raise error_for(ErrorCode.REQUEST_TIMED_OUT,
                                    f"list offsets: no answer for {sorted(pending)}")
                attempt += 1
                time.sleep(min(1.0, 0.05 * 2 ** min(attempt, 5)))
                self.refresh(sorted({t for t, _ in pending}))
        return result

    # -- fetch

    def send_fetch(self, tp: tuple[str, int], offset: int, max_bytes: int,
                   max_wait_ms: int = 0) -> tuple[BlockingConnection, int]:
        addr = self.leader_address(tp)
        conn = self.conn(addr)
        body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
                "max_bytes": max_bytes, "isolation_level": self.isolation_level,
                "topics": [{"name": tp[0], "partitions": [
                    {"partition": tp[1], "fetch_offset": offset,
                     "partition_max_bytes": max_bytes}]}]}
        return conn, conn.send(ApiKey.FETCH, body)

    @staticmethod
    def receive_fetch(conn: BlockingConnection, cid: int) -> tuple[dict[str, Any], memoryview]:
        """→ (partition entry of the body, raw batch bytes of that partition)."""
        resp = conn.receive(cid)
        resp.raise_for_error()
        topics = resp.body.get("topics") or []
        if not topics or not topics[0].get("partitions"):
            raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, "empty fetch response")
        entry = topics[0]["partitions"][0]
        raw = memoryview(resp.raw) if resp.raw else memoryview(b"")
        return entry, raw[: int(entry.get("records_len", 0) or 0)]
