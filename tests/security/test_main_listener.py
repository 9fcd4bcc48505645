"""Issue 14: the plaintext main listener of a ``rafka cluster up --tls --auth`` cluster.

With inter-broker security the peers talk on the secured listeners, so the main listener
carries only clients; with the authorizer on it runs every request as ``User:ANONYMOUS``
behind the ACLs (``"main.listener.authorizer"``, security/listener.py) — default deny. On a
real one-node ``cluster up --tls --auth`` (which creates ``admin`` through the secured listener
with a node certificate): a plaintext client on the main listener is refused produce, consume,
topic creation and user creation with named errors, nothing is written; readiness (METADATA
of no topic) still works there; the admin on the secured listener sees nothing of it. The
config: on by default with authorizer + inter-broker security, refused without the latter."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from rafka.broker.config import ConfigError
from rafka.client.aio import AsyncAdmin, AsyncConsumer
from rafka.client.types import TopicPartition
from rafka.security.listener import parse_security
from rafka.wire.errors import (
    ClusterAuthorizationFailedError,
    RafkaError,
    TopicAuthorizationFailedError,
)
from rafka.wire.protocol import ApiKey

from rafka.local_security import SECURE_PORT_OFFSET, read_admin_password
from tests.integration.conftest import LocalCluster, rafka_cli
from tests.integration.test_secure_cluster import _free_secured_block
from tests.security.test_secured_broker import leaf, produce

pytestmark = pytest.mark.timeout(300)


def _table(tmp_path: Path, **extra) -> dict:
    for name in ("c.pem", "c.key", "ca.pem"):
        (tmp_path / name).write_text("x")
    return {"listener": "127.0.0.1:1", "protocol": "SASL_SSL", "ssl.certfile": "c.pem",
            "ssl.keyfile": "c.key", "ssl.cafile": "ca.pem", **extra}


def test_main_listener_authorizer_setting(tmp_path):
    def parse(**kw):
        return parse_security(_table(tmp_path, **kw), "node.toml", tmp_path)

    both = {"authorizer": True, "inter.broker.security": True}
    assert parse(**both).main_listener_authorizer  # the default once peers left it
    assert not parse(**both, **{"main.listener.authorizer": False}).main_listener_authorizer
    assert not parse(authorizer=True).main_listener_authorizer  # the nodes talk there
    assert not parse(**{"inter.broker.security": True}).main_listener_authorizer
    with pytest.raises(ConfigError, match="main.listener.authorizer.*inter.broker.security"):
        parse(authorizer=True, **{"main.listener.authorizer": True})
    with pytest.raises(ConfigError, match="expected true or false"):
        parse(**both, **{"main.listener.authorizer": "yes"})


async def _refused(error: tuple[type[BaseException], ...], fn) -> BaseException:
    try:
        with trio.fail_after(60):
            await fn()
    except BaseExceptionGroup as eg:
        exc = leaf(eg)
    except RafkaError as e:
        exc = e
    else:
        raise AssertionError("not refused")
    assert isinstance(exc, error), repr(exc)
    return exc


async def test_plaintext_client_on_a_tls_auth_cluster_gets_nothing(tmp_path):
    port = _free_secured_block(1)
    data = tmp_path / "secured"
    cluster = LocalCluster(data, 1, port)
    plain, secure = f"127.0.0.1:{port}", f"127.0.0.1:{port + SECURE_PORT_OFFSET}"
    try:
        r = rafka_cli("cluster", "up", "--nodes", "1", "--data-dir", str(data), "--port", str(port),
                      "--detach", "--tls", "--auth", timeout=180)
        if (data / "cluster.json").exists():
            cluster._remember()
        assert r.returncode == 0, r.stdout + r.stderr  # admin was created on the secured listener
        assert "User:ANONYMOUS under the ACLs" in r.stderr
        admin = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                 "sasl_plain_username": "admin", "sasl_plain_password": read_admin_password(data),
                 "ssl_cafile": str(data / "tls" / "ca.pem")}
        with trio.fail_after(240):
            async with AsyncAdmin(secure, request_timeout_ms=60_000, **admin) as a:
                await a.create_topic("a", 1, 1)
                await produce(secure, "a", b"by admin", **admin)

            async with AsyncAdmin(plain, request_timeout_ms=10_000) as anon:
                # readiness checks (METADATA of no topic) still work; topics are hidden
                meta = await anon._core.request_any(ApiKey.METADATA, {"topics": []})
                assert [b["node_id"] for b in meta.body["brokers"]] == [1]
                assert await anon.list_topics(include_internal=True) == []
                await _refused((TopicAuthorizationFailedError, ClusterAuthorizationFailedError),
                               lambda: anon.create_topic("x", 1, 1))
                await _refused((ClusterAuthorizationFailedError,),
                               lambda: anon.upsert_scram_credential("mallory", "pw"))
            await _refused((TopicAuthorizationFailedError, ClusterAuthorizationFailedError),
                           lambda: produce(plain, "a", b"anonymous"))

            async def consume() -> None:
                async with AsyncConsumer(bootstrap_servers=plain, request_timeout_ms=10_000) as c:
                    tp = TopicPartition("a", 0)
                    c.assign([tp])
                    await c.seek_to_beginning(tp)
                    got = await c.poll(timeout_ms=5000)
                    raise AssertionError(f"read {got}")
            await _refused((TopicAuthorizationFailedError,), consume)

            # the Kafka listener runs behind the same ACLs, the APIs read from the replicas too
            kafka = cluster.info()["nodes"][0]["kafka"]
            olfe = await trio.to_thread.run_sync(lambda: _kafka_roundtrip(kafka, 23, 4, {
                "replica_id": -1, "topics": [{"topic": "a", "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}))
            assert int(olfe.topics[0].partitions[0].error_code) == 29  # TOPIC_AUTHORIZATION_FAILED
            dirs = await trio.to_thread.run_sync(lambda: _kafka_roundtrip(kafka, 35, 4, {
                "topics": None}))
            assert int(dirs.error_code) == 31 and dirs.results == ()  # CLUSTER_AUTHORIZATION_FAILED
            deleted = await trio.to_thread.run_sync(lambda: _kafka_roundtrip(kafka, 21, 2, {
                "topics": [{"name": "a", "partitions": [{"partition_index": 0, "offset": -1}]}],
                "timeout": 1000}))
            assert int(deleted.topics[0].partitions[0].error_code) == 29

            async with AsyncAdmin(secure, **admin) as a:  # nothing the anonymous client sent
                assert await a.list_topics() == ["a"]
                assert "mallory" not in await a.describe_scram_credentials()
            async with AsyncConsumer(bootstrap_servers=secure, **admin) as c:
                tp = TopicPartition("a", 0)
                assert (await c.end_offsets([tp]))[tp] == 1
    finally:
        cluster.stop()


def _kafka_roundtrip(addr: str, api_key: int, version: int, body: dict) -> object:
    import socket
    import struct

    from rafka.broker.kafka import codec

    host, port = addr.split(":")
    req = codec.build(codec.request_schema(api_key, version), body)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(codec.encode_request(req, 1))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "connection closed"
            buf += chunk
    return codec.decode_response(buf[4:], api_key, version)[1]
