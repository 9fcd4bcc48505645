"""ACLs, pure: the evaluator (deny wins, prefixes, wildcards, super users, implied describe,
hosts), the controller's decisions, the fold, and the authorizing dispatch with a stub node."""

from __future__ import annotations

from dataclasses import asdict

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.kraft.acl_admin import decide_create_acls, decide_delete_acls
from rafka.metadata import (
    MetadataDelta,
    MetadataImage,
    image_to_records,
    record_from_dict,
    records_to_image,
)
from rafka.metadata.security import AclCreated, AclEntry, AclRemoved
from rafka.security.acl import CLUSTER_NAME, Authorizer, validate_entry
from rafka.security.authz import authorizing_dispatch
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, Request


def allow(principal, rtype, name, op, pattern="literal", host="*"):
    return AclEntry(principal, rtype, pattern, name, op, "allow", host)


def deny(principal, rtype, name, op, pattern="literal", host="*"):
    return AclEntry(principal, rtype, pattern, name, op, "deny", host)


A = "User:alice"


def test_default_deny_and_literal_allow():
    auth = Authorizer([allow(A, "topic", "a", "write")])
    assert auth.authorize(A, "10.0.0.1", "write", "topic", "a")
    assert not auth.authorize(A, "10.0.0.1", "write", "topic", "b")
    assert not auth.authorize(A, "10.0.0.1", "read", "topic", "a")
    assert not auth.authorize("User:bob", "10.0.0.1", "write", "topic", "a")
    assert not auth.authorize(None, "10.0.0.1", "write", "topic", "a")  # unauthenticated
    assert not Authorizer([]).authorize(A, "h", "describe", "cluster", CLUSTER_NAME)


def test_deny_wins_over_allow_whatever_the_order():
    entries = [allow(A, "topic", "*", "all"), deny(A, "topic", "secret", "read")]
    for order in (entries, entries[::-1]):
        auth = Authorizer(order)
        assert not auth.authorize(A, "h", "read", "topic", "secret")
        assert auth.authorize(A, "h", "write", "topic", "secret")  # only read is denied
        assert auth.authorize(A, "h", "read", "topic", "public")
    assert not Authorizer([allow(A, "topic", "t", "read"), deny("User:*", "topic", "t", "all")]
                          ).authorize(A, "h", "read", "topic", "t")


def test_prefixes_and_wildcards():
    auth = Authorizer([allow(A, "topic", "logs.", "read", "prefixed"),
                       allow("User:*", "group", "*", "read"),
                       deny(A, "topic", "logs.private", "read", "prefixed")])
    assert auth.authorize(A, "h", "read", "topic", "logs.app")
    assert not auth.authorize(A, "h", "read", "topic", "logsx")
    assert not auth.authorize(A, "h", "read", "topic", "logs.private.2")
    assert auth.authorize("User:anyone", "h", "read", "group", "g1")
    assert not auth.authorize("User:anyone", "h", "read", "topic", "logs.app")


def test_super_users_and_hosts_and_implied_describe():
    auth = Authorizer([deny("User:admin", "topic", "*", "all"),
                       allow(A, "topic", "t", "write", host="10.0.0.1"),
                       allow(A, "topic", "c", "alter_configs")], super_users=["User:admin"])
    assert auth.authorize("User:admin", "h", "delete", "topic", "x")  # super users: everything
    assert auth.authorize(A, "10.0.0.1", "write", "topic", "t")
    assert not auth.authorize(A, "10.0.0.2", "write", "topic", "t")
    assert auth.authorize(A, "10.0.0.1", "describe", "topic", "t")  # write implies describe
    assert auth.authorize(A, "h", "describe_configs", "topic", "c")
    assert not Authorizer([deny(A, "topic", "t", "write")]).authorize(A, "h", "describe", "topic", "t")
    assert auth.has_any_allow(A, "10.0.0.1", "write", "topic")
    assert not auth.has_any_allow(A, "10.0.0.1", "read", "topic")


def test_validate_entry():
    assert validate_entry(allow(A, "topic", "t", "read")) is None
    for bad in (allow("alice", "topic", "t", "read"), allow(A, "table", "t", "read"),
                allow(A, "topic", "t", "fly"), allow(A, "topic", "*", "read", "prefixed"),
                AclEntry(A, "topic", "literal", "t", "read", "maybe"), allow(A, "topic", "", "read")):
        assert validate_entry(bad) is not None, bad


def test_controller_decisions_and_fold():
    e1, e2 = allow(A, "topic", "t", "read"), deny(A, "topic", "t", "write")
    results, d = decide_create_acls(MetadataImage.EMPTY, [asdict(e1), asdict(e1), asdict(e2),
                                                          {**asdict(e1), "operation": "x"}])
    assert [r["error"] for r in results] == [0, 0, 0, ErrorCode.INVALID_REQUEST]
    assert [r.entry() for r in d.records] == [e1, e2]  # the duplicate is written once
    delta = MetadataDelta(MetadataImage.EMPTY)
    for i, r in enumerate(d.records):
        delta.replay(r, i, 1)
    image = delta.apply()
    assert image.acls.entries == {e1, e2}
    snap = image_to_records(image)
    wire = msgpack.unpackb(msgpack.packb([r.to_dict() for r in snap]))
    assert records_to_image([record_from_dict(x) for x in wire], image.offset, 1) == image
    results, d = decide_delete_acls(image, [{"principal": A, "permission": "deny"},
                                            {"principal": "User:nobody"}])
    assert [len(r["deleted"]) for r in results] == [1, 0]
    assert d.records == [AclRemoved(**asdict(e2))]


@st.composite
def acl_records(draw):
    e = AclEntry(draw(st.sampled_from([A, "User:*"])), "topic", "literal",
                 draw(st.sampled_from(["a", "b"])), draw(st.sampled_from(["read", "write"])),
                 draw(st.sampled_from(["allow", "deny"])))
    return AclCreated(**asdict(e)) if draw(st.booleans()) else AclRemoved(**asdict(e))


@settings(max_examples=100, deadline=None)
@given(st.lists(acl_records(), max_size=25), st.integers(0, 25))
def test_acl_fold_is_split_invariant(recs, cut):
    def fold(cuts):
        image, off = MetadataImage.EMPTY, 0
        for lo, hi in zip([0, *cuts], [*cuts, len(recs)], strict=True):
            delta = MetadataDelta(image)
            for r in recs[lo:hi]:
                delta.replay(r, off, 1)
                off += 1
            image = delta.apply()
        return image
    assert fold([min(cut, len(recs))]) == fold([])


# -- the authorizing dispatch, over a stub node ---------------------------------------------


class StubImage:
    def __init__(self, entries):
        from rafka.metadata.security import AclsImage

        self.acls = AclsImage(frozenset(entries))


async def stub(req: Request):
    topics = req.body.get("topics") or []
    return {"error": 0, "topics": [{"name": t["name"] if isinstance(t, dict) else t, "error": 0,
                                    "partitions": []} for t in topics]}


def req(api, body, principal=A):
    return Request(api, 1, body, principal=principal, client_host="10.0.0.1")


async def test_produce_is_split_per_topic():
    image = StubImage([allow(A, "topic", "a", "write")])
    dispatch = authorizing_dispatch(stub, lambda: image)
    body = {"acks": 1, "timeout_ms": 1, "topics": [
        {"name": "a", "partitions": [{"partition": 0, "records": b""}]},
        {"name": "b", "partitions": [{"partition": 0, "records": b""}, {"partition": 1, "records": b""}]}]}
    out = await dispatch(req(ApiKey.PRODUCE, body))
    by_name = {t["name"]: t for t in out["topics"]}
    assert by_name["a"]["error"] == 0
    assert by_name["b"]["error"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert [p["error"] for p in by_name["b"]["partitions"]] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
    none = await dispatch(req(ApiKey.PRODUCE, {**body, "topics": body["topics"][1:]}, "User:bob"))
    assert [t["name"] for t in none["topics"]] == ["b"]


async def test_metadata_hides_what_one_may_not_describe():
    async def all_topics(r):
        return {"brokers": [], "topics": [{"name": n, "error": 0, "partitions": []} for n in "abc"]}
    dispatch = authorizing_dispatch(all_topics, lambda: StubImage([allow(A, "topic", "b", "read")]))
    out = await dispatch(req(ApiKey.METADATA, {"topics": None}))
    assert [t["name"] for t in out["topics"]] == ["b"]


async def test_internal_topics_metadata_needs_describe_like_any_topic():
    """Issue 14: the coordinator lookup is FIND_COORDINATOR now, so METADATA of
    __consumer_offsets / __transaction_state is no longer answered to every principal; a super
    user (and a peer node, a super user by node_bypass) still sees them."""
    names = ["__consumer_offsets", "__transaction_state", "t"]

    async def all_topics(r):
        wanted = names if r.body.get("topics") is None else r.body["topics"]
        return {"brokers": [], "topics": [{"name": n, "error": 0, "partitions": []} for n in wanted]}
    dispatch = authorizing_dispatch(all_topics, lambda: StubImage([allow("User:bob", "group", "g", "read")]),
                                    ("User:admin",))
    out = await dispatch(req(ApiKey.METADATA, {"topics": names}, "User:bob"))
    assert {t["name"]: t["error"] for t in out["topics"]} == dict.fromkeys(
        names, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert (await dispatch(req(ApiKey.METADATA, {"topics": None}, "User:bob")))["topics"] == []
    listed = await dispatch(req(ApiKey.METADATA, {"topics": None}, "User:admin"))
    assert [t["name"] for t in listed["topics"]] == names


async def test_find_coordinator_is_authorized_per_key(caplog):
    """Describe on each group / transactional id (read/write imply it); denied keys come back
    with their named error, the others are answered by the broker."""
    seen = []

    async def answer(r):
        seen.append(list(r.body["keys"]))
        return {"error": 0, "coordinators": [{"key": k, "node_id": 1, "host": "h", "port": 1,
                                              "error": 0, "message": None} for k in r.body["keys"]]}
    image = StubImage([allow("User:bob", "group", "g", "read"),
                       allow("User:bob", "transactional_id", "tx", "write")])
    dispatch = authorizing_dispatch(answer, lambda: image)
    with caplog.at_level("INFO", logger="rafka.audit"):
        out = await dispatch(req(ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": ["g", "h"]}, "User:bob"))
    codes = {c["key"]: (c["error"], c["node_id"]) for c in out["coordinators"]}
    assert codes == {"g": (0, 1), "h": (ErrorCode.GROUP_AUTHORIZATION_FAILED, -1)}
    assert seen == [["g"]]  # the denied key never reached the broker
    assert "DENIED User:bob from 10.0.0.1: describe group 'h' (api FIND_COORDINATOR)" in caplog.text
    out = await dispatch(req(ApiKey.FIND_COORDINATOR, {"key_type": 1, "keys": ["g"]}, "User:bob"))
    assert out["coordinators"][0]["error"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert seen == [["g"]]
    out = await dispatch(req(ApiKey.FIND_COORDINATOR, {"key_type": 1, "keys": ["tx"]}, "User:bob"))
    assert out["coordinators"][0]["error"] == 0 and seen[-1] == ["tx"]
    for principal in (None, "User:ANONYMOUS"):
        out = await dispatch(req(ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": ["g"]}, principal))
        assert out["coordinators"][0]["error"] == ErrorCode.GROUP_AUTHORIZATION_FAILED


@pytest.mark.parametrize("api,body,code", [
    (ApiKey.CONSUMER_GROUP_HEARTBEAT, {"group_id": "g"}, ErrorCode.GROUP_AUTHORIZATION_FAILED),
    (ApiKey.END_TXN, {"transactional_id": "tx"}, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (ApiKey.BROKER_HEARTBEAT, {}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (ApiKey.FETCH, {"replica_id": 2, "topics": []}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (ApiKey.INIT_PRODUCER_ID, {}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (ApiKey.SASL_HANDSHAKE, {}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # no rule: deny
])
async def test_whole_request_denials(api, body, code, caplog):
    dispatch = authorizing_dispatch(stub, lambda: StubImage([allow(A, "topic", "a", "read")]))
    with caplog.at_level("INFO", logger="rafka.audit"):
        out = await dispatch(req(api, body))
    assert out["error"] == code
    assert "DENIED User:alice from 10.0.0.1" in caplog.text  # the audit trail


async def test_super_user_and_allowed_group_pass():
    image = StubImage([allow(A, "group", "g", "read"), allow(A, "topic", "a", "write")])
    dispatch = authorizing_dispatch(stub, lambda: image, ("User:admin",))
    assert (await dispatch(req(ApiKey.CONSUMER_GROUP_HEARTBEAT, {"group_id": "g"})))["error"] == 0
    assert (await dispatch(req(ApiKey.INIT_PRODUCER_ID, {})))["error"] == 0  # writes some topic
    out = await dispatch(req(ApiKey.ELECT_LEADERS, {"election_type": 0}, "User:admin"))
    assert out["error"] == 0
