"""A real single-node rafka process with a SASL_SSL listener next to its plaintext one.

The operator creates a user through the (internal) plaintext listener — the credential goes
through the controller into the metadata log — then, on the secured listener: the right
password produces and consumes; a wrong password, an unknown user, a plaintext client and a
client trusting another CA are each refused with their named error, and nothing they sent is
written."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from rafka.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
from rafka.client.types import TopicPartition
from rafka.security.certs import CertAuthority, write_node_files
from rafka.wire.errors import (
    InvalidReplicationFactorError,
    RafkaError,
    SaslAuthenticationFailedError,
    TlsHandshakeFailedError,
    TlsRequiredError,
)

from rafka.cluster import RAFT_PORT_OFFSET, free_port_block

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running_node(tmp_path: Path, extra: str = "", *, top: str = "", tables: str = ""):
    """A real node process: plaintext listener + SASL_SSL listener (+ ``extra`` [security] lines,
    ``top`` top-level keys, ``tables`` further TOML tables such as ``[broker]``)."""
    base = free_port_block(2)
    plain, secure = base, base + 1
    ca = CertAuthority.create()
    files = write_node_files(tmp_path / "tls", ca, "node-1", ["localhost", "127.0.0.1"])
    (tmp_path / "other-ca.pem").write_bytes(CertAuthority.create("someone else").cert_pem)
    cfg = tmp_path / "node.toml"
    cfg.write_text(f"""
node_id = 1
roles = ["broker", "controller"]
data_dir = "{tmp_path / 'data'}"
listener = "127.0.0.1:{plain}"
raft_listener = "127.0.0.1:{plain + RAFT_PORT_OFFSET}"
{top}
[[voters]]
id = 1
raft = "127.0.0.1:{plain + RAFT_PORT_OFFSET}"
rpc = "127.0.0.1:{plain}"
[security]
listener = "127.0.0.1:{secure}"
protocol = "SASL_SSL"
"ssl.certfile" = "{files.certfile}"
"ssl.keyfile" = "{files.keyfile}"
{extra}
{tables}
""")
    proc = subprocess.Popen([sys.executable, "-m", "rafka.node", "--config", str(cfg)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "stderr", "wb"),
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        yield f"127.0.0.1:{plain}", f"127.0.0.1:{secure}", files, tmp_path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def node(tmp_path):
    with running_node(tmp_path) as n:
        yield n


async def create_topic(admin, name: str) -> None:
    while True:  # until the node has registered and unfenced itself
        try:
            await admin.create_topic(name, 1, 1)
            return
        except InvalidReplicationFactorError:
            await trio.sleep(0.2)


def secured(files, user="alice", password="alice-pw", **kw):
    return {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": user, "sasl_plain_password": password,
            "ssl_cafile": str(files.cafile), **kw}


def leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def produce(bootstrap: str, topic: str, value: bytes, **kw) -> None:
    try:
        async with AsyncProducer(bootstrap, max_block_ms=5000, request_timeout_ms=5000, **kw) as p:
            await (await p.send(topic, value))
    except BaseExceptionGroup as eg:
        raise leaf(eg) from None


async def end_offset(plain: str, topic: str) -> int:
    async with AsyncConsumer(bootstrap_servers=plain) as c:
        tp = TopicPartition(topic, 0)
        return (await c.end_offsets([tp]))[tp]


async def test_secured_listener_end_to_end(node):
    plain, secure, files, tmp = node
    with trio.fail_after(120):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "events")
            await admin.upsert_scram_credential("alice", "alice-pw")
            await admin.upsert_scram_credential("alice", "alice-pw", mechanism="SCRAM-SHA-512")
            assert await admin.describe_scram_credentials() == {
                "alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}

        await produce(secure, "events", b"by alice", **secured(files))
        assert await end_offset(plain, "events") == 1

        async with AsyncConsumer("events", bootstrap_servers=secure, group_id=None,
                                 auto_offset_reset="earliest", **secured(files)) as c:
            got = await c.poll(timeout_ms=10_000)
            assert [r.value for rs in got.values() for r in rs] == [b"by alice"]

        refusals = [
            (SaslAuthenticationFailedError, secured(files, password="wrong")),
            (SaslAuthenticationFailedError, secured(files, user="mallory")),
            (TlsRequiredError, {}),  # a plaintext client on the TLS port
            (TlsHandshakeFailedError, secured(files, ssl_cafile=str(tmp / "other-ca.pem"))),
        ]
        for error, options in refusals:
            with pytest.raises(error) as info:
                await produce(secure, "events", b"intruder", **options)
            assert isinstance(info.value, RafkaError) and not info.value.retriable
        assert await end_offset(plain, "events") == 1  # nothing of theirs was written

        async with AsyncAdmin(plain) as admin:
            await admin.delete_scram_credential("alice")
            assert await admin.describe_scram_credentials() == {"alice": {"SCRAM-SHA-512": 4096}}
        with pytest.raises(SaslAuthenticationFailedError):
            await produce(secure, "events", b"after delete", **secured(files))
        await produce(secure, "events", b"512 still works",
                      **secured(files, sasl_mechanism="SCRAM-SHA-512"))
        assert await end_offset(plain, "events") == 2
