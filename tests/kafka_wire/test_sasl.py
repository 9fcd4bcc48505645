"""The Kafka listener's per-connection SASL login (broker/kafka/sasl.py), sans I/O: SCRAM
through rafka's one SCRAM server, PLAIN over TLS only against the stored SCRAM credential,
and every out-of-order or failed step answered with its named error and a close."""

from __future__ import annotations

import pytest
from rafka.broker.kafka.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    KafkaSasl,
)
from rafka.security.scram import ScramClient, derive_credential

ALL = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
CREDS = {(m, "alice"): derive_credential(m, "s3cret") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


def lookup(mechanism: str, user: str):  # type: ignore[no-untyped-def]
    return CREDS.get((mechanism, user))


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login(mech: str) -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    assert s.handshake(mech, 1).fields == {"error_code": 0,
                                           "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
    c = ScramClient(mech, "alice", "s3cret")
    first = s.authenticate(c.first_message())
    assert not first.close and not s.authenticated
    final = s.authenticate(c.final_message(first.fields["auth_bytes"]))
    assert final.fields["error_code"] == 0 and final.fields["session_lifetime"] == 0
    c.verify(final.fields["auth_bytes"])
    assert s.principal == "User:alice"


def test_scram_wrong_password_fails_and_closes() -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    s.handshake("SCRAM-SHA-256", 1)
    c = ScramClient("SCRAM-SHA-256", "alice", "nope")
    first = s.authenticate(c.first_message())
    final = s.authenticate(c.final_message(first.fields["auth_bytes"]))
    assert final.close and final.fields["error_code"] == SASL_AUTHENTICATION_FAILED
    assert not s.authenticated


def test_plain_over_tls() -> None:
    s = KafkaSasl(ALL, lookup, tls=True)
    assert "PLAIN" in s.handshake("PLAIN", 1).fields["mechanisms"]
    a = s.authenticate(b"\0alice\0s3cret")
    assert a.fields["error_code"] == 0 and s.principal == "User:alice"


@pytest.mark.parametrize("msg", [b"\0alice\0wrong", b"\0bob\0s3cret", b"bob\0alice\0s3cret",
                                 b"alice\0s3cret", b"\0\0s3cret", b"\xff\0alice\0s3cret",
                                 b"\0alice\0" + b"x" * 2000])
def test_plain_refusals(msg: bytes) -> None:
    s = KafkaSasl(ALL, lookup, tls=True)
    s.handshake("PLAIN", 1)
    a = s.authenticate(msg)
    assert a.close and a.fields["error_code"] == SASL_AUTHENTICATION_FAILED
    assert not s.authenticated


def test_plain_is_not_offered_without_tls() -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    a = s.handshake("PLAIN", 1)
    assert a.close and a.fields["error_code"] == UNSUPPORTED_SASL_MECHANISM
    assert a.fields["mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_out_of_order_steps_close() -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    a = s.authenticate(b"n,,n=alice,r=abc")  # before any handshake
    assert a.close and a.fields["error_code"] == ILLEGAL_SASL_STATE
    s = KafkaSasl(ALL, lookup, tls=False)
    s.handshake("SCRAM-SHA-256", 1)
    again = s.handshake("SCRAM-SHA-256", 1)
    assert again.close and again.fields["error_code"] == ILLEGAL_SASL_STATE


def test_handshake_v0_means_bare_tokens() -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    s.handshake("SCRAM-SHA-512", 0)
    assert s.raw
    c = ScramClient("SCRAM-SHA-512", "alice", "s3cret")
    server_first = s.raw_token(c.first_message())
    assert server_first is not None
    server_final = s.raw_token(c.final_message(server_first))
    assert server_final is not None and s.authenticated
    s2 = KafkaSasl(ALL, lookup, tls=False)
    s2.handshake("SCRAM-SHA-512", 0)
    assert s2.raw_token(b"garbage") is None  # a failure there just closes


def test_advertised_addresses_are_keyed_by_listener_name() -> None:
    """A broker registers its Kafka listeners as Kafka's advertised.listeners string (a lone
    PLAINTEXT one as HOST:PORT); each listener answers the brokers' address of its own name."""
    from types import SimpleNamespace

    from rafka.broker.kafka.context import kafka_address, kafka_listeners

    assert kafka_listeners("h:1") == {"PLAINTEXT": "h:1"}
    assert kafka_listeners("PLAINTEXT://h:1,sasl_ssl://h:3") == {"PLAINTEXT": "h:1", "SASL_SSL": "h:3"}
    assert kafka_listeners(None) == {}
    regs = {1: SimpleNamespace(kafka_listener="PLAINTEXT://a:1,SSL://a:2,SASL_SSL://a:3"),
            2: SimpleNamespace(kafka_listener="b:1"),
            3: SimpleNamespace(kafka_listener=None)}
    image = SimpleNamespace(cluster=SimpleNamespace(brokers=regs))
    assert kafka_address(image, 1) == ("a", 1)  # type: ignore[arg-type]
    assert kafka_address(image, 1, "SASL_SSL") == ("a", 3)  # type: ignore[arg-type]
    assert kafka_address(image, 2, "PLAINTEXT") == ("b", 1)  # type: ignore[arg-type]
    # a broker without a listener of that name is left out (None), never given another kind
    assert kafka_address(image, 2, "SASL_SSL") is None  # type: ignore[arg-type]
    assert kafka_address(image, 1, "SASL_PLAINTEXT") is None  # type: ignore[arg-type]
    assert kafka_address(image, 3) is None and kafka_address(image, 4) is None  # type: ignore[arg-type]
