"""ACLs on a real node: authorizer = true on its SASL_SSL listener, User:admin a super user.

Users and ACLs are made with the ``rafka`` CLI (user create, acl add) through the internal
plaintext listener; then alice may write topic ``a`` but not ``b``, cannot join a group she
has no read right on, and the super user may do what she may not — over the secured listener,
with the CLI's own security options too."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trio
from rafka.client.aio import AsyncAdmin, AsyncConsumer
from rafka.client.types import TopicPartition
from rafka.wire.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

from tests.security.test_secured_broker import (
    ROOT,
    create_topic,
    end_offset,
    leaf,
    produce,
    running_node,
    secured,
)


def rafka(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rafka.cli", *args], input=stdin, text=True,
                          capture_output=True, timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})


@pytest.fixture
def node(tmp_path):
    with running_node(tmp_path, 'authorizer = true\n"super.users" = ["User:admin"]') as n:
        yield n


async def test_acls_on_a_real_node(node):
    plain, secure, files, _tmp = node
    with trio.fail_after(240):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "a")
            await create_topic(admin, "b")
        for name in ("alice", "admin"):
            out = await trio.to_thread.run_sync(lambda n=name: rafka(
                "user", "create", n, "--password-stdin", "--bootstrap", plain, stdin=f"{n}-pw\n"))
            assert out.returncode == 0, out.stderr
        out = await trio.to_thread.run_sync(lambda: rafka(
            "acl", "add", "--bootstrap", plain, "--principal", "User:alice", "--topic", "a",
            "--operation", "write"))
        assert out.returncode == 0, out.stderr
        assert "ALLOW User:alice write topic:literal:a from *" in out.stdout

        alice = secured(files, user="alice", password="alice-pw")
        await produce(secure, "a", b"allowed", **alice)
        with pytest.raises(TopicAuthorizationFailedError):
            await produce(secure, "b", b"forbidden", **alice)
        assert (await end_offset(plain, "a"), await end_offset(plain, "b")) == (1, 0)
        # DELETE_RECORDS needs delete on the topic: write is not enough
        async with AsyncAdmin(secure, request_timeout_ms=60_000, **alice) as a:
            with pytest.raises(TopicAuthorizationFailedError):
                await a.delete_records({TopicPartition("a", 0): -1})
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as a:
            assert (await a.list_offsets({TopicPartition("a", 0): -2}))[TopicPartition("a", 0)][0] == 0

        with pytest.raises(GroupAuthorizationFailedError):
            try:
                async with AsyncConsumer("a", bootstrap_servers=secure, group_id="g",
                                         auto_offset_reset="earliest", **alice) as c:
                    await c.poll(timeout_ms=10_000)
            except BaseExceptionGroup as eg:
                raise leaf(eg) from None

        admin_opts = secured(files, user="admin", password="admin-pw")
        await produce(secure, "b", b"by a super user", **admin_opts)
        assert await end_offset(plain, "b") == 1

        out = await trio.to_thread.run_sync(lambda: rafka(
            "acl", "list", "--json", "--bootstrap", secure, "--security-protocol", "SASL_SSL",
            "--tls-ca", str(files.cafile), env={"RAFKA_USER": "admin", "RAFKA_PASSWORD": "admin-pw"}))
        assert out.returncode == 0, out.stderr
        assert '"principal": "User:alice"' in out.stdout
        out = await trio.to_thread.run_sync(lambda: rafka(
            "user", "list", "--bootstrap", secure, "--security-protocol", "SASL_SSL",
            "--tls-ca", str(files.cafile), "--user", "alice", "--password", "alice-pw"))
        assert out.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in out.stderr
