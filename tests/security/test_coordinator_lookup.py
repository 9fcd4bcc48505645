"""Issue 14: a non-admin user's group and transactions find their coordinators under the authorizer.

A real single-node secured cluster (authorizer on its SASL_SSL listener, ``User:admin`` a super
user) with no internal topic yet. ``bob`` holds only read on topic ``t`` and read on group
``g``: he consumes in ``g`` and commits offsets. ``carol`` holds only write on ``t`` and
write/describe on transactional id ``tx``: she runs a transaction. Neither holds any right on
``__consumer_offsets`` / ``__transaction_state``: the brokers create those themselves (as the
node) when a FIND_COORDINATOR needs them, and the lookup is authorized on the group / the id
(describe, implied by read / write), not on the internal topics, whose METADATA stays hidden
from them (tests/security/test_find_coordinator.py)."""

from __future__ import annotations

import pytest
import trio
from rafka.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
from rafka.client.aio.security_admin import create_acls, describe_acls, upsert_scram_credential
from rafka.client.types import TopicPartition

from tests.security.test_secured_broker import create_topic, leaf, running_node, secured

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def node(tmp_path):
    with running_node(tmp_path, 'authorizer = true\n"super.users" = ["User:admin"]') as n:
        yield n


def _acl(principal: str, rtype: str, name: str, op: str) -> dict[str, str]:
    return {"principal": principal, "resource_type": rtype, "pattern_type": "literal",
            "resource_name": name, "operation": op, "permission": "allow"}


def _values(polled) -> list[bytes]:
    return [r.value for recs in polled.values() for r in recs]


async def _internal_topics(plain: str) -> set[str]:
    async with AsyncConsumer(bootstrap_servers=plain) as c:
        return {t for t in await c.topics() if t.startswith("__")}


async def test_group_and_transaction_without_rights_on_internal_topics(node):
    plain, secure, files, _tmp = node
    with trio.fail_after(240):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "t")
            await create_topic(admin, "other")
            for user in ("bob", "carol"):
                await upsert_scram_credential(admin, user, f"{user}-pw")
            await create_acls(admin, [
                _acl("User:bob", "topic", "t", "read"), _acl("User:bob", "group", "g", "read"),
                _acl("User:carol", "topic", "t", "write"),
                _acl("User:carol", "transactional_id", "tx", "write"),
                _acl("User:carol", "transactional_id", "tx", "describe")])
            acls = await describe_acls(admin)
        assert not [a for a in acls if a["resource_name"].startswith("__")]
        assert await _internal_topics(plain) == set()  # nothing made them yet
        async with AsyncProducer(plain) as p:
            for i in range(3):
                await (await p.send("t", b"v%d" % i))

        bob = secured(files, user="bob", password="bob-pw")
        tp = TopicPartition("t", 0)
        try:
            async with AsyncConsumer("t", bootstrap_servers=secure, group_id="g",
                                     auto_offset_reset="earliest", request_timeout_ms=30_000,
                                     **bob) as c:
                got: list[bytes] = []
                while len(got) < 3:
                    got += _values(await c.poll(timeout_ms=5000))
                assert got == [b"v0", b"v1", b"v2"]
                await c.commit()
                assert await c.committed(tp) == 3
                # the internal topics and the topics he may not describe stay hidden
                assert set(await c.topics()) == {"t"}
        except BaseExceptionGroup as eg:
            raise leaf(eg) from None
        assert "__consumer_offsets" in await _internal_topics(plain)

        carol = secured(files, user="carol", password="carol-pw")
        try:
            async with AsyncProducer(secure, transactional_id="tx", request_timeout_ms=30_000,
                                     max_block_ms=60_000, **carol) as p:
                await p.init_transactions()
                await p.begin_transaction()
                await (await p.send("t", b"in-txn"))
                await p.commit_transaction()
        except BaseExceptionGroup as eg:
            raise leaf(eg) from None
        assert await _internal_topics(plain) == {"__consumer_offsets", "__transaction_state"}
        async with AsyncConsumer(bootstrap_servers=plain, isolation_level="read_committed") as c:
            c.assign([tp])
            await c.seek_to_beginning(tp)
            values: list[bytes] = []
            with trio.move_on_after(30):
                while b"in-txn" not in values:
                    values += _values(await c.poll(timeout_ms=2000))
        assert values[-1] == b"in-txn"
