"""Issue 14: FIND_COORDINATOR authorized per group / transactional id, internal topics hidden.

Pure: the handler answers the leader of the key's internal partition (COORDINATOR_NOT_AVAILABLE
while the topic is missing or leaderless), and the secured listener names the coordinator by its
secured listener. Real node (authorizer on its SASL_SSL listener, ``User:admin`` super user):
``bob`` may read topic ``t`` and group ``g``, write transactional id ``tx`` — the lookup answers
the node for ``g`` and ``tx`` and the named error for every other id; METADATA of
``__consumer_offsets`` / ``__transaction_state`` is refused to him and answered to the admin; a
consumer in a group bob may not describe fails fast with ``GroupAuthorizationFailedError`` and a
transactional producer with an id he may not describe with
``TransactionalIdAuthorizationFailedError``, nothing committed."""

from __future__ import annotations

import pytest
import trio
from rafka.broker.groups.offsets import offsets_partition
from rafka.broker.handlers.coordinator import find_coordinator
from rafka.broker.txn.coordinator import txn_partition
from rafka.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
from rafka.client.aio.coordinator import KEY_TYPE_GROUP, coordinator_node
from rafka.client.aio.security_admin import create_acls, upsert_scram_credential
from rafka.client.types import TopicPartition
from rafka.metadata import MetadataDelta, MetadataImage, Partition, RegisterBroker, Topic
from rafka.security.listener import secured_dispatch
from rafka.wire.errors import (
    ErrorCode,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    TransactionalIdAuthorizationFailedError,
)
from rafka.wire.protocol import ApiKey, Request

from tests.security.test_coordinator_lookup import _acl
from tests.security.test_secured_broker import create_topic, leaf, running_node, secured

pytestmark = pytest.mark.timeout(300)


def _image(records) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for offset, r in enumerate(records, 1):
        delta.replay(r, offset, 1)
    return delta.apply()


def _offsets_image(leaderless: int | None = None) -> MetadataImage:
    recs = [RegisterBroker(1, "i1", "10.0.0.1", 9092, secure_listener="10.0.0.1:39092"),
            RegisterBroker(2, "i2", "10.0.0.2", 9092), Topic("__consumer_offsets", "co")]
    recs += [Partition("co", p, (1, 2), (1, 2), -1 if p == leaderless else 1 + p % 2)
             for p in range(10)]
    return _image(recs)


def test_the_handler_answers_the_leader_of_the_keys_partition():
    image = _offsets_image()
    keys = [f"group-{i}" for i in range(20)]
    out = find_coordinator({"key_type": 0, "keys": keys}, image)
    assert [c["key"] for c in out["coordinators"]] == keys
    for c in out["coordinators"]:
        leader = 1 + offsets_partition(c["key"], 10) % 2
        assert (c["error"], c["node_id"], c["host"], c["port"]) == (0, leader, f"10.0.0.{leader}", 9092)
    # no __transaction_state yet: retriable, per key
    out = find_coordinator({"key_type": 1, "keys": ["tx"]}, image)
    assert out["coordinators"][0]["error"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert txn_partition("tx", 5) in range(5)
    # a leaderless partition: that key only
    g = keys[0]
    out = find_coordinator({"key_type": 0, "keys": [g, keys[1]]},
                           _offsets_image(leaderless=offsets_partition(g, 10)))
    assert out["coordinators"][0]["error"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    with pytest.raises(InvalidRequestError):
        find_coordinator({"key_type": 7, "keys": ["x"]}, image)


async def test_the_secured_listener_names_the_secured_address():
    image = _offsets_image()
    keys = [f"group-{i}" for i in range(8)]

    async def dispatch(req):
        return find_coordinator(req.body, image)
    out = await secured_dispatch(dispatch, lambda: image)(
        Request(ApiKey.FIND_COORDINATOR, 1, {"key_type": 0, "keys": keys}))
    for c in out["coordinators"]:
        if offsets_partition(c["key"], 10) % 2 == 0:  # led by broker 1: its secured listener
            assert (c["node_id"], c["host"], c["port"]) == (1, "10.0.0.1", 39092)
        else:  # broker 2 has none: a secured client could not reach it
            assert (c["error"], c["node_id"]) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)


@pytest.fixture
def node(tmp_path):
    with running_node(tmp_path, 'authorizer = true\n"super.users" = ["User:admin"]') as n:
        yield n


async def _find(admin: AsyncAdmin, key_type: int, keys: list[str]) -> dict[str, tuple[int, int]]:
    resp = await admin._core.request_any(ApiKey.FIND_COORDINATOR, {"key_type": key_type, "keys": keys})
    return {c["key"]: (c["error"], c["node_id"]) for c in resp.body["coordinators"]}


async def _fails_with(error: type[BaseException], fn) -> None:
    """``fn()`` fails with ``error`` well before any retry budget (30 s) would run out."""
    try:
        with trio.fail_after(20):
            await fn()
    except BaseExceptionGroup as eg:
        exc = leaf(eg)
    except Exception as e:  # noqa: BLE001 - checked below
        exc = e
    else:
        raise AssertionError(f"no {error.__name__}")
    assert isinstance(exc, error), repr(exc)


async def test_lookup_is_authorized_per_id_and_clients_fail_fast(node):
    plain, secure, files, _tmp = node
    with trio.fail_after(240):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "t")
            await upsert_scram_credential(admin, "bob", "bob-pw")
            await upsert_scram_credential(admin, "admin", "admin-pw")
            await create_acls(admin, [
                _acl("User:bob", "topic", "t", "read"), _acl("User:bob", "topic", "t", "write"),
                _acl("User:bob", "group", "g", "read"),
                _acl("User:bob", "transactional_id", "tx", "write")])
        bob = secured(files, user="bob", password="bob-pw")
        try:
            async with AsyncAdmin(secure, request_timeout_ms=30_000, **bob) as a:
                want = {"g": (0, 1), "h": (ErrorCode.GROUP_AUTHORIZATION_FAILED, -1)}
                while (got := await _find(a, 0, ["g", "h"])) != want:  # g: the broker makes
                    assert got["g"][0] == ErrorCode.COORDINATOR_NOT_AVAILABLE, got  # the topic
                    await trio.sleep(0.2)
                want = {"tx": (0, 1), "g": (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)}
                while (got := await _find(a, 1, ["tx", "g"])) != want:
                    assert got["tx"][0] == ErrorCode.COORDINATOR_NOT_AVAILABLE, got
                    await trio.sleep(0.2)
                assert await coordinator_node(a._core, KEY_TYPE_GROUP, "g") == 1
                with pytest.raises(GroupAuthorizationFailedError):
                    await coordinator_node(a._core, KEY_TYPE_GROUP, "nope")
                # the internal topics exist now, and stay hidden from him
                resp = await a._core.request_any(ApiKey.METADATA, {
                    "topics": ["__consumer_offsets", "__transaction_state"]})
                assert [t["error"] for t in resp.body["topics"]] == [
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
                assert await a.list_topics(include_internal=True) == ["t"]
            async with AsyncAdmin(secure, **secured(files, user="admin", password="admin-pw")) as a:
                assert {"__consumer_offsets", "__transaction_state"} <= set(
                    await a.list_topics(include_internal=True))

            # a consumer in a group he may not describe: the named error, not endless retries
            async def consume_other() -> None:
                async with AsyncConsumer("t", bootstrap_servers=secure, group_id="other",
                                         auto_offset_reset="earliest", **bob) as c:
                    await c.committed(TopicPartition("t", 0))

            async def init_other() -> None:  # a transactional id he may not describe
                async with AsyncProducer(secure, transactional_id="not-his", max_block_ms=30_000,
                                         **bob) as p:
                    await p.init_transactions()

            await _fails_with(GroupAuthorizationFailedError, consume_other)
            await _fails_with(TransactionalIdAuthorizationFailedError, init_other)
            # and his own group and id work
            async with AsyncProducer(secure, transactional_id="tx", **bob) as p:
                await p.init_transactions()
                await p.begin_transaction()
                await (await p.send("t", b"x"))
                await p.commit_transaction()
        except BaseExceptionGroup as eg:
            raise leaf(eg) from None
