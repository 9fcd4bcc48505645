"""SASL on the Kafka listener: SaslHandshake (17) and SaslAuthenticate (36), per connection.

Theory of operation
-------------------
A connection accepted on a ``SASL_PLAINTEXT`` or ``SASL_SSL`` Kafka listener gets a
``KafkaSasl``: its sans-I/O login state. Until it says ``authenticated`` the listener
(``listener.py``) lets through only ApiVersions (answered as usual), SaslHandshake and
SaslAuthenticate, which it hands to ``handshake`` / ``authenticate``; any other request
closes the connection unanswered, as a Kafka broker does. Each answer is a ``SaslAnswer``
(the response fields and whether to close after sending it)::

    SaslHandshake(mechanism)     -> error 0 and the enabled mechanisms, or
                                    UNSUPPORTED_SASL_MECHANISM (33) and close
    SaslAuthenticate(auth_bytes) -> the mechanism's next message, or
                                    SASL_AUTHENTICATION_FAILED (58) with a reason and close
    anything out of order        -> ILLEGAL_SASL_STATE (34) and close

SCRAM-SHA-256 / SCRAM-SHA-512 are rafka's own server exchange: the handshake and the two
authenticate round trips go through ``security.sasl.SaslGate`` (``security.scram.ScramServer``,
credentials from the node's metadata image — the ones ``rafka user create`` writes), so the
Kafka and native listeners share one SCRAM. PLAIN (RFC 4616: ``authzid NUL user NUL
password``) is offered only on a TLS connection — the password crosses the wire — and is
checked against the same stored SCRAM credential (``security.scram.verify_password``: the
StoredKey recomputed from the password, SHA-512's credential first, then SHA-256's; no
password is ever stored). An unknown user costs the same PBKDF2 as a wrong password.

SaslHandshake v0 means the legacy framing (before KIP-152): the mechanism's messages then
travel as bare length-prefixed tokens, without Kafka headers; ``raw`` says so and
``raw_token`` answers them (a failure there just closes, as Kafka does). From v1 they are
SaslAuthenticate requests.

Re-authentication (KIP-368) is declined: SaslAuthenticate v1+ answers ``session_lifetime_ms``
0, so clients never start it, and SASL requests on an authenticated connection are answered
ILLEGAL_SASL_STATE by the ``SERVED`` adapters below (without closing). The principal of an
authenticated connection is ``User:<name>``; the listener puts it on every request, so the
ACLs (``security.authz``) see it exactly as on the native secured listener.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import KafkaContext
from rafka.security.sasl import CredentialSource, SaslGate
from rafka.security.scram import MECHANISMS, ScramCredential, verify_password
from rafka.wire.protocol import ApiKey

__all__ = ["KAFKA_MECHANISMS", "PLAIN", "SaslAnswer", "KafkaSasl", "sasl_handshake",
           "sasl_authenticate", "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE",
           "SASL_AUTHENTICATION_FAILED"]

PLAIN = "PLAIN"
KAFKA_MECHANISMS = (*MECHANISMS, PLAIN)  # what kafka.sasl_mechanisms may name
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
_MAX_PLAIN = 1024  # a PLAIN message is user and password; far more is not a login
# an unknown PLAIN user is checked against this (always fails), so it costs a real PBKDF2
_NOBODY = ScramCredential("SCRAM-SHA-512", b"\0" * 32, 4096, b"\1" * 64, b"\1" * 64)


@dataclass(frozen=True, slots=True)
class SaslAnswer:
    """The response fields of one SASL request; ``close``: send it, then close."""

    fields: dict[str, Any] = field(default_factory=dict)
    close: bool = False


def _fail(code: int, message: str, **extra: Any) -> SaslAnswer:
    return SaslAnswer({"error_code": code, "error_message": message, "session_lifetime": 0,
                       **extra}, close=True)


class KafkaSasl:
    """One connection's SASL login (see the module docstring)."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialSource, *,
                 tls: bool) -> None:
        # PLAIN only where the password is encrypted on the wire
        self.mechanisms = tuple(m for m in mechanisms if m != PLAIN or tls)
        self._credentials = credentials
        self._gate = SaslGate(tuple(m for m in self.mechanisms if m in MECHANISMS), credentials)
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.raw = False  # SaslHandshake v0: bare tokens follow
        self.failed = False

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def handshake(self, mechanism: str, version: int) -> SaslAnswer:
        if self.mechanism is not None or self.failed:
            return self._closing(_fail(ILLEGAL_SASL_STATE, "SaslHandshake was already sent on "
                                       "this connection", mechanisms=list(self.mechanisms)))
        if mechanism not in self.mechanisms:
            why = " (PLAIN needs a TLS listener)" if mechanism == PLAIN else ""
            return self._closing(_fail(
                UNSUPPORTED_SASL_MECHANISM, f"mechanism {mechanism!r} is not enabled on this "
                f"listener{why} (enabled: {', '.join(self.mechanisms)})",
                mechanisms=list(self.mechanisms)))
        if mechanism != PLAIN:
            answer = self._gate.handle(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism})
            if answer.close:  # not reached: the mechanism was checked above
                return self._closing(_fail(UNSUPPORTED_SASL_MECHANISM, answer.body["message"],
                                           mechanisms=list(self.mechanisms)))
        self.mechanism = mechanism
        self.raw = version == 0
        return SaslAnswer({"error_code": 0, "mechanisms": list(self.mechanisms)})

    def authenticate(self, auth_bytes: bytes) -> SaslAnswer:
        """One SaslAuthenticate: the next server message (``auth_bytes``) or a failure."""
        if self.mechanism is None or self.authenticated or self.failed:
            return self._closing(_fail(ILLEGAL_SASL_STATE, "SaslAuthenticate before a "
                                       "successful SaslHandshake", auth_bytes=b""))
        if self.mechanism == PLAIN:
            return self._plain(bytes(auth_bytes))
        answer = self._gate.handle(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": bytes(auth_bytes)})
        if answer.close:
            code = int(answer.body["error"])
            return self._closing(_fail(code, answer.body.get("message") or "authentication failed",
                                       auth_bytes=b""))
        if self._gate.authenticated:
            self.principal = self._gate.principal
        return SaslAnswer({"error_code": 0, "error_message": None,
                           "auth_bytes": answer.body["auth_bytes"], "session_lifetime": 0})

    def raw_token(self, token: bytes) -> bytes | None:
        """The answer token to a bare token after SaslHandshake v0; ``None``: close."""
        answer = self.authenticate(token)
        return None if answer.close else bytes(answer.fields["auth_bytes"])

    def _plain(self, message: bytes) -> SaslAnswer:
        bad = _fail(SASL_AUTHENTICATION_FAILED, "authentication failed: invalid username or "
                    "password", auth_bytes=b"")
        if len(message) > _MAX_PLAIN:
            return self._closing(bad)
        try:
            authzid, user, password = message.decode("utf-8").split("\0")
        except ValueError:
            return self._closing(_fail(SASL_AUTHENTICATION_FAILED, "malformed PLAIN message "
                                       "(authzid NUL user NUL password)", auth_bytes=b""))
        if not user or (authzid and authzid != user):
            return self._closing(_fail(SASL_AUTHENTICATION_FAILED, "an authorization id other "
                                       "than the user is not supported", auth_bytes=b""))
        cred = None
        for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            cred = self._credentials(mech, user)
            if cred is not None:
                break
        if not verify_password(cred or _NOBODY, password) or cred is None:
            return self._closing(bad)
        self.principal = f"User:{user}"
        return SaslAnswer({"error_code": 0, "error_message": None, "auth_bytes": b"",
                           "session_lifetime": 0})

    def _closing(self, answer: SaslAnswer) -> SaslAnswer:
        self.failed = True
        return answer


# --------------------------------------------------------------------------- SERVED adapters
# A connection that is not logging in (a PLAINTEXT or SSL listener, or one already logged in)
# reaches these: Kafka answers ILLEGAL_SASL_STATE there.


async def sasl_handshake(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": ()}


async def sasl_authenticate(ctx: KafkaContext, req: KafkaRequest) -> dict[str, Any]:
    return {"error_code": ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime": 0,
            "error_message": "no SASL login on this connection (not a SASL listener, or "
                             "authenticated already: re-authentication is not supported)"}
