"""Inter-broker security over loopback (the real Server, PeerPool and client Connection, a stub
dispatch): a peer node's certificate skips SASL and is its principal, the pool maps main
addresses to secured ones and never falls back to plaintext; expired certificates are refused
with named errors; the config checks and the reserved node user names."""

import datetime
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio
from rafka.broker.config import ConfigError, parse_config
from rafka.broker.server import FileSlice, Reply, Server
from rafka.kraft.scram_admin import decide_scram
from rafka.metadata import MetadataImage
from rafka.metadata.image import BrokerRegistration
from rafka.security.certs import CertAuthority, write_node_files
from rafka.security.client import ClientSecurity
from rafka.security.listener import ListenerSecurity, SecurityConfig, node_bypass, parse_security
from rafka.security.peer_pool import PeerPool
from rafka.wire.connection import connect
from rafka.wire.errors import (
    IllegalSaslStateError,
    NetworkException,
    RafkaError,
    TlsHandshakeFailedError,
)
from rafka.wire.protocol import ApiKey, Request

from tests.security.test_listener import CREDS, ask, dispatch

LONG_AGO = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> tuple[Path, CertAuthority]:
    d = tmp_path_factory.mktemp("pki")
    ca = CertAuthority.create()
    write_node_files(d, ca, "node-1", ["localhost", "127.0.0.1"])
    write_node_files(d, ca, "node-2", ["localhost", "127.0.0.1"])
    for name, cert in (("alice", ca.issue("alice", client=True)),
                       ("expired", ca.issue("alice", client=True, not_before=LONG_AGO, days=1)),
                       ("expired-node", ca.issue("node-9", hosts=["127.0.0.1"], not_before=LONG_AGO,
                                                 days=1))):
        (d / f"{name}.pem").write_bytes(cert.cert_pem)
        (d / f"{name}.key").write_bytes(cert.key_pem)
    rogue = CertAuthority.create("rogue").issue("node-3", hosts=["127.0.0.1"])  # not the cluster CA
    (d / "rogue-node.pem").write_bytes(rogue.cert_pem)
    (d / "rogue-node.key").write_bytes(rogue.key_pem)
    return d, ca


def _config(d: Path, protocol: str = "SASL_SSL", *, cert: str = "node-1", **kw) -> SecurityConfig:
    raw = {"listener": "127.0.0.1:0", "protocol": protocol, "ssl.certfile": f"{cert}.pem",
           "ssl.keyfile": f"{cert}.key", "ssl.cafile": "ca.pem", **kw}
    cfg = parse_security(raw, "test", d)
    assert cfg is not None
    return cfg


async def _serve(nursery: trio.Nursery, cfg: SecurityConfig) -> tuple[Server, int]:
    server = Server(dispatch, "127.0.0.1", 0,
                    security=ListenerSecurity.build(cfg, lambda m, u: CREDS.get((m, u))))
    return server, await nursery.start(server.serve)


def _tls(d: Path, cert: str | None = None) -> ClientSecurity:
    kw = {"ssl_certfile": str(d / f"{cert}.pem"), "ssl_keyfile": str(d / f"{cert}.key")} if cert else {}
    return ClientSecurity.from_options(security_protocol="SSL", ssl_cafile=str(d / "ca.pem"), **kw)


async def test_a_peer_node_skips_sasl_and_is_its_certificate(pki):
    d, _ca = pki
    async with trio.open_nursery() as nursery:
        server, port = await _serve(nursery, _config(d, **{"inter.broker.security": True}))
        # node 2 reaches node 1's main address 127.0.0.1:9 -> its secured listener
        pool = PeerPool(nursery, _config(d, cert="node-2", **{"inter.broker.security": True}),
                        [(("127.0.0.1", 9), ("127.0.0.1", port))], lambda: None)
        body = (await pool.request("127.0.0.1", 9, ApiKey.METADATA, {})).body
        assert body["principal"] == "User:node-2"
        await pool.request("127.0.0.1", 9, ApiKey.METADATA, {})  # the same connection
        assert (pool.stats.tls_connections, server.stats.node_connections) == (1, 1)
        assert server.stats.tls_connections == 1
        with pytest.raises(NetworkException, match="no secured listener known"):
            await pool.request("127.0.0.1", 10, ApiKey.METADATA, {})  # never plaintext
        assert pool.stats.refused == 1
        # a client certificate that is not a node's still has to log in
        assert (await ask(port, _tls(d, "alice")))["error"] == IllegalSaslStateError.code
        # without inter-broker security a node certificate is just a certificate
        _s, port2 = await _serve(nursery, _config(d, **{"ssl.client.auth": "requested"}))
        assert (await ask(port2, _tls(d, "node-2")))["error"] == IllegalSaslStateError.code
        await pool.aclose()
        nursery.cancel_scope.cancel()


async def test_the_pool_follows_the_metadata_image(pki):
    d, _ca = pki
    async with trio.open_nursery() as nursery:
        _server, port = await _serve(nursery, _config(d, **{"inter.broker.security": True}))
        holder: dict = {"image": MetadataImage.EMPTY}
        pool = PeerPool(nursery, _config(d, cert="node-2", **{"inter.broker.security": True}),
                        [], lambda: holder["image"])
        with pytest.raises(NetworkException):
            await pool.request("127.0.0.1", 7, ApiKey.METADATA, {})
        reg = BrokerRegistration(1, 5, "x", "127.0.0.1", 7, secure_listener=f"127.0.0.1:{port}")
        holder["image"] = SimpleNamespace(cluster=SimpleNamespace(brokers={1: reg}))
        body = (await pool.request("127.0.0.1", 7, ApiKey.METADATA, {})).body
        assert body["principal"] == "User:node-2"
        await pool.aclose()
        nursery.cancel_scope.cancel()


async def test_an_expired_client_certificate_is_refused(pki):
    d, _ca = pki
    async with trio.open_nursery() as nursery:
        server, port = await _serve(nursery, _config(d, "SSL", **{"ssl.client.auth": "required"}))
        assert (await ask(port, _tls(d, "alice")))["principal"] == "User:alice"
        with pytest.raises(RafkaError) as info:  # TLS 1.3: the server's alert after the handshake
            await ask(port, _tls(d, "expired"))
        assert isinstance(info.value, TlsHandshakeFailedError), info.value  # named (issue 24)
        assert server.stats.tls_refused == 1  # the server refused it, not a hiccup
        assert (await ask(port, _tls(d, "alice")))["error"] == 0  # still serving
        nursery.cancel_scope.cancel()


async def test_a_rogue_node_certificate_gets_a_named_tls_error(pki):
    """Issue 24 item 5: a node whose certificate the cluster CA did not sign is refused, and its
    peer pool says so by name (TLS_HANDSHAKE_FAILED), not BROKER_NOT_AVAILABLE / NETWORK_EXCEPTION."""
    d, _ca = pki
    async with trio.open_nursery() as nursery:
        server, port = await _serve(nursery, _config(d, **{"inter.broker.security": True}))
        pool = PeerPool(nursery, _config(d, cert="rogue-node", **{"inter.broker.security": True}),
                        [(("127.0.0.1", 9), ("127.0.0.1", port))], lambda: None)
        with pytest.raises(TlsHandshakeFailedError, match="certificate"):
            await pool.request("127.0.0.1", 9, ApiKey.METADATA, {})
        assert server.stats.tls_refused >= 1 and server.stats.node_connections == 0
        await pool.aclose()
        nursery.cancel_scope.cancel()


async def test_an_expired_server_certificate_is_refused_by_the_client(pki):
    d, _ca = pki
    async with trio.open_nursery() as nursery:
        _server, port = await _serve(nursery, _config(d, "SSL", cert="expired-node"))
        with pytest.raises(TlsHandshakeFailedError, match="expired"):
            await ask(port, _tls(d))
        nursery.cancel_scope.cancel()


async def test_node_principals_bypass_the_authorizer():
    async def denied(req: Request):
        return {"error": 31}

    run = node_bypass(dispatch, denied)
    for principal, error in (("User:node-3", 0), ("User:alice", 31), ("User:node-x", 31),
                             (None, 31), ("User:node-03", 31)):
        req = Request(api_key=ApiKey.METADATA, api_version=0, correlation_id=1, client_id="t",
                      body={}, principal=principal)
        assert (await run(req))["error"] == error, principal


def test_inter_broker_config(pki, tmp_path):
    d, _ca = pki
    cfg = _config(d, **{"inter.broker.security": True})
    assert cfg.inter_broker and cfg.client_auth == "requested"  # peers may present certificates
    assert _config(d, **{"inter.broker.security": True, "ssl.client.auth": "required"}).client_auth \
        == "required"
    with pytest.raises(ConfigError, match="inter.broker.security"):
        _config(d, "SASL_PLAINTEXT", **{"inter.broker.security": True})
    with pytest.raises(ConfigError, match="inter.broker.security"):
        _config(d, **{"inter.broker.security": "yes"})
    raw = {"node_id": 1, "roles": ["broker", "controller"], "data_dir": str(tmp_path),
           "listener": "127.0.0.1:9092", "raft_listener": "127.0.0.1:9093", "cluster_id": "c",
           "voters": [{"id": 1, "raft": "127.0.0.1:9093", "rpc": "127.0.0.1:9092"}],
           "security": {"listener": "127.0.0.1:9193", "protocol": "SSL",
                        "ssl.certfile": str(d / "node-1.pem"), "ssl.keyfile": str(d / "node-1.key"),
                        "ssl.cafile": str(d / "ca.pem"), "inter.broker.security": True}}
    with pytest.raises(ConfigError, match="secure_rpc"):
        parse_config(raw, "test", base_dir=tmp_path)
    raw["voters"][0]["secure_rpc"] = "127.0.0.1:9193"
    assert parse_config(raw, "test", base_dir=tmp_path).voters[0].secure_rpc == ("127.0.0.1", 9193)


def test_node_user_names_are_reserved():
    from rafka.security.scram import derive_credential

    def upsert(user: str) -> dict:
        c = derive_credential("SCRAM-SHA-256", "pw")
        return {"user": user, "mechanism": "SCRAM-SHA-256", "iterations": c.iterations,
                "salt": c.salt, "stored_key": c.stored_key, "server_key": c.server_key}

    results, _ = decide_scram(MetadataImage.EMPTY, [upsert("node-1"), upsert("node-one")], [])
    assert [r["error"] != 0 for r in results] == [True, False]
    assert "reserved" in results[0]["message"]


async def test_pipelined_file_replies_cross_tls_intact(pki, tmp_path):
    """Replies with file slices over TLS (broker/server.py: pread + send_all, no sendfile),
    many in flight at once so one TLS record and one transport refill carry the end of a frame
    and the start of the next (frame_reader's drain of already-decrypted records must stop at
    the frame's end)."""
    d, _ca = pki
    data = bytes(range(251)) * (40_000)  # ~10 MB, a period prime to the record size
    path = tmp_path / "segment"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)

    async def serve(req: Request):
        pos, n = req.body["pos"], req.body["n"]
        head = b"h" * req.body["head"]
        return Reply({"error": 0, "n": n}, [head, FileSlice(os.dup(fd), pos, n), b"t"])

    cfg = _config(d, "SSL")
    server = Server(serve, "127.0.0.1", 0, security=ListenerSecurity.build(cfg, lambda m, u: None))
    cases = [(1 + 7 * i, 9_000 * i, size) for i, size in enumerate(
        (20_000, 70_001, 1 << 20, 16_384, 3 * (1 << 20) + 5, 9 * (1 << 20), 5, 300_000))]
    try:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            async with connect("127.0.0.1", port, security=_tls(d)) as conn:
                got: dict[int, bytes] = {}

                async def ask_one(i: int, head: int, pos: int, n: int) -> None:
                    resp = await conn.request(ApiKey.METADATA, {"pos": pos, "n": n, "head": head})
                    got[i] = bytes(resp.raw)

                for _ in range(2):
                    got.clear()
                    async with trio.open_nursery() as asks:
                        for i, (head, pos, n) in enumerate(cases):
                            asks.start_soon(ask_one, i, head, pos, n)
                    for i, (head, pos, n) in enumerate(cases):
                        assert got[i] == b"h" * head + data[pos:pos + n] + b"t", i
            nursery.cancel_scope.cancel()
    finally:
        os.close(fd)


async def test_large_frames_cross_tls_intact(pki):
    """Frames over the direct-receive limit both ways over TLS (wire/frame_reader.py's TLS
    path: one decrypted record at a time into the frame's buffer)."""
    d, _ca = pki

    async def echo(req: Request):
        return {"error": 0, "blob": req.body["blob"][::-1]}

    cfg = _config(d, "SSL")
    server = Server(echo, "127.0.0.1", 0, security=ListenerSecurity.build(cfg, lambda m, u: None))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        async with connect("127.0.0.1", port, security=_tls(d)) as conn:
            for size in (70_000, 1 << 20, 3 * (1 << 20) + 5):
                blob = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
                body = (await conn.request(ApiKey.METADATA, {"blob": blob})).body
                assert body["blob"] == blob[::-1]
        nursery.cancel_scope.cancel()
