"""The Kafka listener's per-connection SASL login (broker/kafka/sasl.py), sans I/O: SCRAM
through rafka's one SCRAM server, PLAIN over TLS only against the stored SCRAM credential,
and every out-of-order or failed step answered with its named error and a close."""

from __future__ import annotations

import pytest
import trio
from rafka.broker.kafka.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    KafkaSasl,
    PasswordCheck,
    SaslAnswer,
)
from rafka.security.scram import (
    ScramClient,
    ScramCredential,
    derive_credential,
    salted_password,
    stored_and_server_key,
)

ALL = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
CREDS = {(m, "alice"): derive_credential(m, "s3cret") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


def lookup(mechanism: str, user: str):  # type: ignore[no-untyped-def]
    return CREDS.get((mechanism, user))


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_scram_login(mech: str) -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    assert s.handshake(mech, 1).fields == {"error_code": 0,
                                           "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
    c = ScramClient(mech, "alice", "s3cret")
    first = await s.authenticate(c.first_message())
    assert not first.close and not s.authenticated
    final = await s.authenticate(c.final_message(first.fields["auth_bytes"]))
    assert final.fields["error_code"] == 0 and final.fields["session_lifetime"] == 0
    c.verify(final.fields["auth_bytes"])
    assert s.principal == "User:alice"


async def test_scram_wrong_password_fails_and_closes() -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    s.handshake("SCRAM-SHA-256", 1)
    c = ScramClient("SCRAM-SHA-256", "alice", "nope")
    first = await s.authenticate(c.first_message())
    final = await s.authenticate(c.final_message(first.fields["auth_bytes"]))
    assert final.close and final.fields["error_code"] == SASL_AUTHENTICATION_FAILED
    assert not s.authenticated


async def test_plain_over_tls() -> None:
    s = KafkaSasl(ALL, lookup, tls=True)
    assert "PLAIN" in s.handshake("PLAIN", 1).fields["mechanisms"]
    a = await s.authenticate(b"\0alice\0s3cret")
    assert a.fields["error_code"] == 0 and s.principal == "User:alice"


@pytest.mark.parametrize("msg", [b"\0alice\0wrong", b"\0bob\0s3cret", b"bob\0alice\0s3cret",
                                 b"alice\0s3cret", b"\0\0s3cret", b"\xff\0alice\0s3cret",
                                 b"\0alice\0" + b"x" * 2000])
async def test_plain_refusals(msg: bytes) -> None:
    s = KafkaSasl(ALL, lookup, tls=True)
    s.handshake("PLAIN", 1)
    a = await s.authenticate(msg)
    assert a.close and a.fields["error_code"] == SASL_AUTHENTICATION_FAILED
    assert not s.authenticated


def test_plain_is_not_offered_without_tls() -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    a = s.handshake("PLAIN", 1)
    assert a.close and a.fields["error_code"] == UNSUPPORTED_SASL_MECHANISM
    assert a.fields["mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]


async def test_out_of_order_steps_close() -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    a = await s.authenticate(b"n,,n=alice,r=abc")  # before any handshake
    assert a.close and a.fields["error_code"] == ILLEGAL_SASL_STATE
    s = KafkaSasl(ALL, lookup, tls=False)
    s.handshake("SCRAM-SHA-256", 1)
    again = s.handshake("SCRAM-SHA-256", 1)
    assert again.close and again.fields["error_code"] == ILLEGAL_SASL_STATE


async def test_handshake_v0_means_bare_tokens() -> None:
    s = KafkaSasl(ALL, lookup, tls=False)
    s.handshake("SCRAM-SHA-512", 0)
    assert s.raw
    c = ScramClient("SCRAM-SHA-512", "alice", "s3cret")
    server_first = await s.raw_token(c.first_message())
    assert server_first is not None
    server_final = await s.raw_token(c.final_message(server_first))
    assert server_final is not None and s.authenticated
    s2 = KafkaSasl(ALL, lookup, tls=False)
    s2.handshake("SCRAM-SHA-512", 0)
    assert await s2.raw_token(b"garbage") is None  # a failure there just closes


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


# A credential far dearer than a real one (16384 iterations at most are accepted from users)
# so each PLAIN check takes long enough for the loop to be seen running beside it.
def _heavy(password: str, iterations: int) -> ScramCredential:
    salt = b"s" * 32
    stored, server = stored_and_server_key(
        "SCRAM-SHA-512", salted_password("SCRAM-SHA-512", password, salt, iterations))
    return ScramCredential("SCRAM-SHA-512", salt, iterations, stored, server)


HEAVY = {("SCRAM-SHA-512", "carol"): _heavy("pw", 200_000)}


def heavy_lookup(mechanism: str, user: str):  # type: ignore[no-untyped-def]
    return HEAVY.get((mechanism, user))


async def test_plain_checks_run_in_bounded_threads_while_the_loop_keeps_running() -> None:
    """PLAIN's PBKDF2 runs in worker threads under the shared limiter: a storm of logins
    gets the right answers, never holds more threads than the limiter lends, queues the rest,
    and the event loop keeps running a concurrent task meanwhile (counted in its ticks: on
    the loop, a check would allow none while it computes)."""
    limiter = trio.CapacityLimiter(2)
    logins = [b"\0carol\0pw", b"\0carol\0wrong", b"\0nobody\0pw", b"\0carol\0pw",
              b"carol\0carol\0pw", b"\0carol\0pw"]
    results: dict[int, tuple[int, str | None]] = {}
    most_borrowed = most_waiting = 0
    ticks_during_checks = 0
    done = trio.Event()

    async def ticker() -> None:
        nonlocal most_borrowed, most_waiting, ticks_during_checks
        while not done.is_set():
            stats = limiter.statistics()
            most_borrowed = max(most_borrowed, stats.borrowed_tokens)
            most_waiting = max(most_waiting, stats.tasks_waiting)
            if stats.borrowed_tokens:
                ticks_during_checks += 1
            await trio.sleep(0)

    async def login(i: int, msg: bytes) -> None:
        s = KafkaSasl(ALL, heavy_lookup, tls=True, limiter=limiter)
        s.handshake("PLAIN", 1)
        a = await s.authenticate(msg)
        results[i] = (a.fields["error_code"], s.principal)

    async with trio.open_nursery() as outer:
        outer.start_soon(ticker)
        async with trio.open_nursery() as nursery:
            for i, msg in enumerate(logins):
                nursery.start_soon(login, i, msg)
        done.set()

    ok, bad = (0, "User:carol"), (SASL_AUTHENTICATION_FAILED, None)
    assert results == {0: ok, 1: bad, 2: bad, 3: ok, 4: ok, 5: ok}
    assert most_borrowed == 2  # never more threads than the limiter lends...
    assert most_waiting >= 1  # ...and the rest of the storm queued for them
    assert ticks_during_checks >= 20  # the loop ran while PBKDF2 was computing


async def test_a_plain_check_is_answered_once() -> None:
    """The sans-I/O half: ``step`` hands out one PasswordCheck; a second message before its
    result, or a result for a check it did not hand out, is ILLEGAL_SASL_STATE."""
    s = KafkaSasl(ALL, lookup, tls=True)
    s.handshake("PLAIN", 1)
    check = s.step(b"\0alice\0s3cret")
    assert isinstance(check, PasswordCheck) and check.user == "alice"
    again = s.step(b"\0alice\0s3cret")
    assert isinstance(again, SaslAnswer) and again.fields["error_code"] == ILLEGAL_SASL_STATE
    s = KafkaSasl(ALL, lookup, tls=True)
    s.handshake("PLAIN", 1)
    check = s.step(b"\0alice\0s3cret")
    assert isinstance(check, PasswordCheck)
    assert s.plain_checked(check, check.run()).fields["error_code"] == 0
    assert s.principal == "User:alice"
