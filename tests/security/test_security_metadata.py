"""Security metadata, pure: SCRAM credential records fold the same under any batch split and
survive a snapshot; the controller's decision checks every entry; the [security] table."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.broker.config import ConfigError, parse_config
from rafka.broker.handlers.security_api import describe_user_scram_credentials
from rafka.kraft.scram_admin import decide_scram
from rafka.metadata import (
    MetadataImage,
    image_to_records,
    record_from_dict,
    records_to_image,
)
from rafka.metadata.records import RegisterBroker
from rafka.metadata.security import UserScramCredential, UserScramCredentialRemoved
from rafka.security.certs import CertAuthority, write_node_files
from rafka.security.scram import derive_credential
from rafka.wire.errors import ErrorCode

from tests.metadata.test_fold import fold

USERS = ["alice", "bob", "c,=d"]
MECHS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


@st.composite
def scram_records(draw):
    user, mech = draw(st.sampled_from(USERS)), draw(st.sampled_from(MECHS))
    if draw(st.booleans()):
        return UserScramCredentialRemoved(user, mech)
    salt = draw(st.binary(min_size=8, max_size=16))
    return UserScramCredential(user, mech, salt, 4096, b"s" * 32, b"k" * 32)


@settings(max_examples=200, deadline=None)
@given(st.lists(scram_records(), max_size=30), st.lists(st.integers(0, 30), max_size=6))
def test_scram_fold_is_split_invariant_and_snapshots_round_trip(recs, cuts):
    image = fold(recs, cuts)
    assert image == fold(recs, [])
    snap = image_to_records(image)
    wire = msgpack.unpackb(msgpack.packb([r.to_dict() for r in snap]))
    assert records_to_image([record_from_dict(d) for d in wire], image.offset, image.epoch) == image
    last = {}
    for r in recs:
        last[(r.user, r.mechanism)] = r
    for (user, mech), r in last.items():
        entry = image.scram.get(user, mech)
        assert (entry is None) == isinstance(r, UserScramCredentialRemoved)
    assert all(mechs for mechs in image.scram.users.values())  # no empty users linger


def test_register_broker_keeps_its_secure_listener():
    image = fold([RegisterBroker(1, "inc", "h", 1, None, secure_listener="h:2")], [])
    assert image.cluster.brokers[1].secure_listener == "h:2"
    assert image_to_records(image)[0].secure_listener == "h:2"


def upsert(user="alice", mech="SCRAM-SHA-256", **over):
    c = derive_credential(mech, "pw")
    return {"user": user, "mechanism": mech, "iterations": c.iterations, "salt": c.salt,
            "stored_key": c.stored_key, "server_key": c.server_key, **over}


def test_decide_scram_checks_each_entry():
    bad = [{**upsert(), "mechanism": "SCRAM-MD5"}, upsert(user=""), upsert(user="i", iterations=1),
           upsert(user="k", stored_key=b"short"), upsert(user="s", salt=b"x")]
    results, decision = decide_scram(MetadataImage.EMPTY, [upsert(), upsert(), *bad],
                                     [{"user": "ghost", "mechanism": "SCRAM-SHA-256"}])
    codes = [r["error"] for r in results]
    assert codes[0] == 0
    assert codes[1:] == [ErrorCode.INVALID_REQUEST] * 6 + [ErrorCode.RESOURCE_NOT_FOUND]
    assert [type(r) for r in decision.records] == [UserScramCredential]
    image = fold(decision.records, [])
    results, decision = decide_scram(image, [], [{"user": "alice", "mechanism": "SCRAM-SHA-256"}])
    assert results[0]["error"] == 0 and decision.records == [
        UserScramCredentialRemoved("alice", "SCRAM-SHA-256")]
    described = describe_user_scram_credentials({"users": None}, fold(
        [UserScramCredential("alice", "SCRAM-SHA-256", b"12345678", 4096, b"s" * 32, b"k" * 32)], []))
    assert described["users"] == [{"user": "alice", "error": 0, "message": None,
                                   "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]}]
    assert b"s" * 32 not in msgpack.packb(described)  # never keys or salts


def config(tmp_path: Path, security: dict) -> object:
    return parse_config({
        "node_id": 1, "roles": ["broker"], "data_dir": "d", "listener": "127.0.0.1:9092",
        "voters": [{"id": 9, "raft": "127.0.0.1:1", "rpc": "127.0.0.1:2"}], "security": security,
    }, "node.toml", base_dir=tmp_path)


def test_security_table(tmp_path):
    files = write_node_files(tmp_path, CertAuthority.create(), "n", ["localhost"])
    cfg = config(tmp_path, {"listener": "0.0.0.0:9093", "ssl.certfile": files.certfile.name,
                            "ssl.keyfile": files.keyfile.name, "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    sec = cfg.security  # type: ignore[attr-defined]
    assert sec.protocol == "SASL_SSL" and sec.uses_tls and sec.uses_sasl
    assert sec.mechanisms == ("SCRAM-SHA-512",) and sec.certfile == str(files.certfile)
    for bad, key in [({"listener": "nope"}, "security.listener"),
                     ({"listener": "h:1", "protocol": "TLS"}, "security.protocol"),
                     ({"listener": "h:1", "protocol": "SSL"}, "security.ssl.certfile"),
                     ({"listener": "h:1", "protocol": "SASL_PLAINTEXT", "typo": 1}, "security.typo"),
                     ({"listener": "h:1", "protocol": "SASL_PLAINTEXT",
                       "sasl.enabled.mechanisms": ["PLAIN"]}, "security.sasl.enabled.mechanisms"),
                     ({"listener": "h:1", "protocol": "SSL", "ssl.certfile": "missing.pem",
                       "ssl.keyfile": "missing.key"}, "security.ssl.certfile"),
                     ({"listener": "127.0.0.1:9092", "protocol": "SASL_PLAINTEXT"}, "security.listener")]:
        with pytest.raises(ConfigError) as info:
            config(tmp_path, bad)
        assert info.value.key == key, bad
    assert parse_config({"node_id": 1, "roles": ["broker"], "data_dir": "d", "listener": "h:1",
                         "voters": [{"id": 9, "raft": "h:2", "rpc": "h:3"}]}).security is None
