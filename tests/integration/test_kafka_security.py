"""TLS and SASL on the Kafka listener (issue 23), with unmodified Kafka clients against a
real ``rafka cluster up --tls --auth`` node.

One node, four Kafka listeners: PLAINTEXT and SASL_SSL from ``cluster up --tls --auth`` (so
that path is what is tested), plus SSL and SASL_PLAINTEXT added to its node.toml
(``kafka.ssl_listener``, ``kafka.sasl_plaintext_listener``) and the node restarted. The
super user ``admin`` creates topics ``ok`` and ``denied``, the user ``alice`` (SCRAM-SHA-256
and -512) and an ACL letting alice read, write and describe ``ok`` only. Then kcat and
confluent-kafka log in over each listener kind and mechanism, and the raw protocol checks
what a client that misbehaves before logging in gets.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rafka.broker.kafka import codec
from rafka.security.scram import ScramClient

from tests.kafka_compat import secured_cluster
from tests.kafka_compat.secured_cluster import SecuredCluster

ALICE_PW = "alice-" + uuid.uuid4().hex[:12]
kcat_missing = pytest.mark.skipif(shutil.which("kcat") is None,
                                  reason="kcat not installed (Debian package kcat: make os-deps)")


@dataclass
class Secured:
    data: Path
    up_output: str
    listeners: dict[str, str]  # Kafka listener name -> HOST:PORT
    ca: str
    admin_pw: str
    cluster: SecuredCluster


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data = tmp_path_factory.mktemp("kafka-sec") / "cluster"
    c = secured_cluster.start(data)
    try:
        for t in ("ok", "denied"):
            secured_cluster.run("topic", "create", t, *c.admin_config)
        c.add_user("alice", ALICE_PW)
        c.allow("User:alice", ["--topic", "ok"], ["read", "write", "describe"])
        s = Secured(data, c.up_output, c.listeners, c.ca, c.admin_password, c)
        _wait_leader(s)
        yield s
    finally:
        secured_cluster.stop(data)


def _wait_leader(s: Secured) -> None:
    """Until the SASL_SSL listener names a leader for ``ok`` (as admin)."""
    from confluent_kafka.admin import AdminClient

    a = AdminClient(_conf(s, "SASL_SSL", "PLAIN", "admin", s.admin_pw))
    deadline = time.monotonic() + 30
    while True:
        md = a.list_topics(timeout=10)
        t = md.topics.get("ok")
        if t is not None and t.error is None and t.partitions and t.partitions[0].leader >= 0:
            return
        assert time.monotonic() < deadline, f"no leader for ok: {md.topics}"
        time.sleep(0.1)


def _conf(s: Secured, listener: str, mechanism: str | None = None, user: str = "alice",
          password: str = ALICE_PW) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": s.listeners[listener],
                            "security.protocol": listener}
    if "SSL" in listener:
        conf["ssl.ca.location"] = s.ca
    if mechanism:
        conf |= {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    return conf


def _kcat_args(s: Secured, listener: str, mechanism: str | None = None,
               password: str = ALICE_PW) -> list[str]:
    args = ["kcat", "-b", s.listeners[listener], "-X", f"security.protocol={listener}"]
    if "SSL" in listener:
        args += ["-X", f"ssl.ca.location={s.ca}"]
    if mechanism:
        args += ["-X", f"sasl.mechanisms={mechanism}", "-X", "sasl.username=alice",
                 "-X", f"sasl.password={password}"]
    return args


# --------------------------------------------------------------------------- cluster up


def test_cluster_up_prints_the_secured_kafka_listener(secured: Secured) -> None:
    assert f"kafka secured listeners (SASL_SSL): {secured.listeners['SASL_SSL']}" in secured.up_output
    assert f"kafka: {secured.listeners['PLAINTEXT']}" in secured.up_output


# --------------------------------------------------------------------------- kcat


@kcat_missing
@pytest.mark.parametrize("listener,mechanism", [
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512")])
def test_kcat_logs_in_produces_and_consumes(secured: Secured, listener: str, mechanism: str) -> None:
    args = _kcat_args(secured, listener, mechanism)
    meta = json.loads(subprocess.run([*args, "-L", "-J", "-t", "ok"], capture_output=True,
                                     text=True, timeout=60, check=True).stdout)
    # a client on this listener is sent to this kind of listener only
    assert [b["name"] for b in meta["brokers"]] == [secured.listeners[listener]]
    line = f"{listener}-{mechanism}-{uuid.uuid4().hex[:8]}"
    subprocess.run([*args, "-P", "-t", "ok"], input=line + "\n", text=True, timeout=60, check=True)
    out = subprocess.run([*args, "-C", "-t", "ok", "-o", "beginning", "-e", "-q"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert line in out.splitlines()


@kcat_missing
def test_kcat_over_ssl_sees_the_ssl_listeners(secured: Secured) -> None:
    meta = json.loads(subprocess.run([*_kcat_args(secured, "SSL"), "-L", "-J"],
                                     capture_output=True, text=True, timeout=60, check=True).stdout)
    assert [b["name"] for b in meta["brokers"]] == [secured.listeners["SSL"]]
    # User:ANONYMOUS under the ACLs (default deny): topics it was granted nothing on are hidden
    assert "denied" not in [t["topic"] for t in meta["topics"]]


# --------------------------------------------------------------------------- confluent-kafka


@pytest.mark.parametrize("listener,mechanism", [
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"), ("SSL", None)])
def test_confluent_kafka_produces_and_consumes(secured: Secured, listener: str,
                                               mechanism: str | None) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    conf = _conf(secured, listener, mechanism)
    if mechanism is None:  # SSL: ANONYMOUS may do nothing; the super user logs in elsewhere
        conf = _conf(secured, "SSL")
        secured.cluster.allow("User:ANONYMOUS", ["--topic", "ok"], ["read", "write", "describe"])
    value = f"{listener}-{mechanism}-{uuid.uuid4().hex}".encode()
    reports: list[Any] = []
    p = Producer({**conf, "acks": "all"})
    md = p.list_topics(timeout=30)
    assert [f"{b.host}:{b.port}" for b in md.brokers.values()] == [secured.listeners[listener]]
    p.produce("ok", value, on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(30) == 0
    assert reports == [None]
    c = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("ok", 0, OFFSET_BEGINNING)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while value not in seen and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen.append(m.value())
        assert value in seen
    finally:
        c.close()


@pytest.mark.parametrize("listener,mechanism", [("SASL_SSL", "PLAIN"),
                                               ("SASL_PLAINTEXT", "SCRAM-SHA-512")])
def test_kafka_python_logs_in_and_produces(secured: Secured, listener: str, mechanism: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    opts: dict[str, Any] = {"bootstrap_servers": secured.listeners[listener],
                            "security_protocol": listener, "sasl_mechanism": mechanism,
                            "sasl_plain_username": "alice", "sasl_plain_password": ALICE_PW}
    if listener == "SASL_SSL":
        opts["ssl_cafile"] = secured.ca
    value = f"kp-{listener}-{uuid.uuid4().hex}".encode()
    with KafkaProducer(acks="all", **opts) as p:
        md = p.send("ok", value).get(timeout=30)
    with KafkaConsumer(consumer_timeout_ms=10000, **opts) as c:
        tp = TopicPartition("ok", 0)
        c.assign([tp])
        c.seek(tp, md.offset)
        assert next(iter(c)).value == value


def test_wrong_password_is_a_named_auth_error_and_the_broker_stays_up(secured: Secured) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []
    p = Producer({**_conf(secured, "SASL_PLAINTEXT", "SCRAM-SHA-256", password="wrong"),
                  "error_cb": errors.append})
    deadline = time.monotonic() + 30
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, errors
        p.poll(0.2)
    auth = next(e for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert "authentication failed" in auth.str()
    # an unknown user reads the same (user names cannot be probed)
    errors2: list[Any] = []
    p2 = Producer({**_conf(secured, "SASL_SSL", "PLAIN", user="mallory", password="x"),
                   "error_cb": errors2.append})
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors2):
        assert time.monotonic() < deadline, errors2
        p2.poll(0.2)
    ok = Producer(_conf(secured, "SASL_PLAINTEXT", "SCRAM-SHA-256"))
    assert ok.list_topics(timeout=30).brokers  # the broker still serves


def test_acl_denial_is_topic_authorization_failed(secured: Secured) -> None:
    from confluent_kafka import KafkaError, Producer

    reports: list[Any] = []
    p = Producer({**_conf(secured, "SASL_SSL", "SCRAM-SHA-512"), "message.timeout.ms": 20000})
    p.produce("denied", b"x", on_delivery=lambda err, msg: reports.append(err))
    p.flush(30)
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_admin_client_creates_a_scram_user_who_then_logs_in(secured: Secured) -> None:
    """AlterUserScramCredentials / DescribeUserScramCredentials (50, 51) through confluent-kafka's
    AdminClient as the super user: the new user is described (mechanism, iterations; never a
    secret), logs in over SASL_PLAINTEXT with the password the admin client salted, is refused
    after its credential is deleted; bad entries get Kafka's named errors per user and leave the
    others' entries applied; ``rafka user list`` sees what the Kafka client made."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(_conf(secured, "SASL_SSL", "PLAIN", "admin", secured.admin_pw))
    pw = "bob-" + uuid.uuid4().hex[:12]
    futs = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                     pw.encode()),
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100),
                                     b"too-few-iterations"),
        UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)])
    assert futs["bob"].result(30) is None
    for user, code in (("carol", KafkaError.UNACCEPTABLE_CREDENTIAL),
                       ("nobody", KafkaError.RESOURCE_NOT_FOUND)):
        with pytest.raises(KafkaException) as err:
            futs[user].result(30)
        assert err.value.args[0].code() == code, (user, err.value)

    futs_d = admin.describe_user_scram_credentials(["bob", "carol"])
    bob = futs_d["bob"].result(30)
    assert [(i.mechanism, i.iterations) for i in bob.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    with pytest.raises(KafkaException) as err:
        futs_d["carol"].result(30)
    assert err.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    everyone = admin.describe_user_scram_credentials().result(30)
    assert {"alice", "bob"} <= set(everyone)
    assert "bob" in secured_cluster.run("user", "list", *secured.cluster.admin_config)

    secured.cluster.allow("User:bob", ["--topic", "ok"], ["write", "describe"])
    reports: list[Any] = []
    p = Producer({**_conf(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", pw), "acks": "all"})
    p.produce("ok", b"from bob", on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0 and reports == [None]

    gone = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)])
    assert gone["bob"].result(30) is None
    errors: list[Any] = []
    p2 = Producer({**_conf(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", pw),
                   "error_cb": errors.append})
    deadline = time.monotonic() + 30
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, errors
        p2.poll(0.2)


# --------------------------------------------------------------------------- raw protocol


def _addr(s: Secured, listener: str) -> tuple[str, int]:
    host, port = s.listeners[listener].split(":")
    return host, int(port)


def _recv_frame(sock: socket.socket) -> bytes | None:
    def exact(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = exact(4)
    if head is None:
        return None
    return exact(struct.unpack(">i", head)[0])


def _request(sock: socket.socket, key: int, version: int, fields: dict[str, Any],
             cid: int = 1) -> Any:
    sock.sendall(codec.encode_request(codec.build(codec.request_schema(key, version), fields), cid))
    payload = _recv_frame(sock)
    if payload is None:
        return None
    return codec.decode_response(payload, key, version)[1]


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(30)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_request_before_authentication_closes_the_connection(secured: Secured) -> None:
    with socket.create_connection(_addr(secured, "SASL_PLAINTEXT"), timeout=30) as sock:
        # ApiVersions is answered before the login
        av = _request(sock, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert int(av.error_code) == 0 and any(k.api_key == 36 for k in av.api_keys)
        sock.sendall(codec.encode_request(codec.build(codec.request_schema(3, 12), {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}), 2))
        assert _closed(sock)


def test_a_large_frame_before_authentication_closes_the_connection(secured: Secured) -> None:
    with socket.create_connection(_addr(secured, "SASL_PLAINTEXT"), timeout=30) as sock:
        sock.sendall(struct.pack(">i", 1 << 20) + b"\0" * 1024)  # above the pre-login 4096
        assert _closed(sock)


def test_plain_is_not_offered_without_tls(secured: Secured) -> None:
    with socket.create_connection(_addr(secured, "SASL_PLAINTEXT"), timeout=30) as sock:
        hs = _request(sock, 17, 1, {"mechanism": "PLAIN"})
        assert int(hs.error_code) == 33  # UNSUPPORTED_SASL_MECHANISM
        assert list(hs.mechanisms) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert _closed(sock)


def test_scram_over_handshake_v0_bare_tokens(secured: Secured) -> None:
    """SaslHandshake v0: the SCRAM messages then travel as bare length-prefixed tokens."""
    with socket.create_connection(_addr(secured, "SASL_PLAINTEXT"), timeout=30) as sock:
        hs = _request(sock, 17, 0, {"mechanism": "SCRAM-SHA-512"})
        assert int(hs.error_code) == 0
        client = ScramClient("SCRAM-SHA-512", "alice", ALICE_PW)
        sock.sendall(codec.frame([client.first_message()]))
        server_first = _recv_frame(sock)
        assert server_first is not None
        sock.sendall(codec.frame([client.final_message(server_first)]))
        server_final = _recv_frame(sock)
        assert server_final is not None
        client.verify(server_final)  # the broker proved it knows the credential
        md = _request(sock, 3, 12, {"topics": [{"name": "ok", "topic_id": None}],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
        assert [t.name for t in md.topics] == ["ok"] and int(md.topics[0].error_code) == 0


def test_failed_scram_answers_sasl_authentication_failed_then_closes(secured: Secured) -> None:
    with socket.create_connection(_addr(secured, "SASL_PLAINTEXT"), timeout=30) as sock:
        assert int(_request(sock, 17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code) == 0
        client = ScramClient("SCRAM-SHA-256", "alice", "not-her-password")
        first = _request(sock, 36, 2, {"auth_bytes": client.first_message()})
        assert int(first.error_code) == 0
        final = _request(sock, 36, 2, {"auth_bytes": client.final_message(first.auth_bytes)})
        assert int(final.error_code) == 58 and final.error_message
        assert _closed(sock)


def test_sasl_on_a_plaintext_listener_is_illegal_sasl_state(secured: Secured) -> None:
    with socket.create_connection(_addr(secured, "PLAINTEXT"), timeout=30) as sock:
        hs = _request(sock, 17, 1, {"mechanism": "SCRAM-SHA-256"})
        assert int(hs.error_code) == 34


def test_a_refused_login_is_readable_though_more_requests_were_pipelined(secured: Secured) -> None:
    """The refusal arrives whole and the connection then ends, with more requests unread."""
    hs = codec.encode_request(codec.build(codec.request_schema(17, 1), {"mechanism": "PLAIN"}), 1)
    md = codec.encode_request(codec.build(codec.request_schema(3, 12), {
        "topics": None, "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}), 2)
    with socket.create_connection(_addr(secured, "SASL_PLAINTEXT"), timeout=30) as sock:
        sock.sendall(hs + md * 20)
        payload = _recv_frame(sock)
        assert payload is not None
        assert int(codec.decode_response(payload, 17, 1)[1].error_code) == 33
        assert _closed(sock)
