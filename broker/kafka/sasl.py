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

That PBKDF2 (~2 ms at 4096 iterations, more for a credential made with more) is the one
expensive step of any login, so it does not run on the event loop: ``step`` — the sans-I/O
half — answers a PLAIN message with a ``PasswordCheck`` instead of an answer, and
``authenticate`` runs the check in a worker thread (``hashlib.pbkdf2_hmac`` releases the GIL,
so the loop keeps serving meanwhile) and hands the result to ``plain_checked``. The threads
are bounded by a ``trio.CapacityLimiter`` the listener shares among its connections
(``PLAIN_CHECK_THREADS``): a storm of PLAIN logins queues for those threads instead of taking
trio's whole default thread pool, and each waiting login is still bounded by the listener's
``sasl.authentication.timeout.ms``.

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

import trio
from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import KafkaContext
from rafka.security.sasl import CredentialSource, SaslGate
from rafka.security.scram import MECHANISMS, ScramCredential, verify_password
from rafka.wire.protocol import ApiKey

__all__ = ["KAFKA_MECHANISMS", "PLAIN", "PLAIN_CHECK_THREADS", "SaslAnswer", "PasswordCheck",
           "KafkaSasl", "sasl_handshake",
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
# worker threads a listener lends to PLAIN's PBKDF2 at once (this machine class has 2 cores)
PLAIN_CHECK_THREADS = 2


@dataclass(frozen=True, slots=True)
class SaslAnswer:
    """The response fields of one SASL request; ``close``: send it, then close."""

    fields: dict[str, Any] = field(default_factory=dict)
    close: bool = False


@dataclass(frozen=True, slots=True)
class PasswordCheck:
    """A PLAIN login waiting for its PBKDF2: ``run()`` (thread-safe, pure) off the event loop,
    then ``KafkaSasl.plain_checked`` with what it returned."""

    user: str
    credential: ScramCredential | None  # None: no such user (checked against _NOBODY)
    password: str

    def run(self) -> bool:
        ok = verify_password(self.credential or _NOBODY, self.password)
        return ok and self.credential is not None


def _fail(code: int, message: str, **extra: Any) -> SaslAnswer:
    return SaslAnswer({"error_code": code, "error_message": message, "session_lifetime": 0,
                       **extra}, close=True)


class KafkaSasl:
    """One connection's SASL login (see the module docstring)."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialSource, *,
                 tls: bool, limiter: trio.CapacityLimiter | None = None) -> None:
        # PLAIN only where the password is encrypted on the wire
        self.mechanisms = tuple(m for m in mechanisms if m != PLAIN or tls)
        self._credentials = credentials
        self._gate = SaslGate(tuple(m for m in self.mechanisms if m in MECHANISMS), credentials)
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.raw = False  # SaslHandshake v0: bare tokens follow
        self.failed = False
        # the threads PLAIN's PBKDF2 may use (shared by the listener's connections); None:
        # a limiter of PLAIN_CHECK_THREADS for this connection alone
        self._limiter = limiter
        self._checking: SaslAnswer | PasswordCheck | None = None  # a PLAIN check under way

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

    def step(self, auth_bytes: bytes) -> SaslAnswer | PasswordCheck:
        """One SaslAuthenticate, sans I/O: the next server message (``auth_bytes``), a
        failure, or for PLAIN the ``PasswordCheck`` to run before ``plain_checked``."""
        if self.mechanism is None or self.authenticated or self.failed:
            return self._closing(_fail(ILLEGAL_SASL_STATE, "SaslAuthenticate before a "
                                       "successful SaslHandshake", auth_bytes=b""))
        if self.mechanism == PLAIN:
            if self._checking is not None:  # the listener waits for a check before reading on
                return self._closing(_fail(ILLEGAL_SASL_STATE, "SaslAuthenticate while the "
                                           "last one is being checked", auth_bytes=b""))
            self._checking = self._plain(bytes(auth_bytes))
            if isinstance(self._checking, PasswordCheck):
                return self._checking
            answer_now, self._checking = self._checking, None
            return answer_now
        answer = self._gate.handle(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": bytes(auth_bytes)})
        if answer.close:
            code = int(answer.body["error"])
            return self._closing(_fail(code, answer.body.get("message") or "authentication failed",
                                       auth_bytes=b""))
        if self._gate.authenticated:
            self.principal = self._gate.principal
        return SaslAnswer({"error_code": 0, "error_message": None,
                           "auth_bytes": answer.body["auth_bytes"], "session_lifetime": 0})

    async def authenticate(self, auth_bytes: bytes) -> SaslAnswer:
        """``step``, with a PLAIN password check run in a worker thread under the limiter."""
        answer = self.step(auth_bytes)
        if isinstance(answer, PasswordCheck):
            if self._limiter is None:
                self._limiter = trio.CapacityLimiter(PLAIN_CHECK_THREADS)
            ok = await trio.to_thread.run_sync(answer.run, limiter=self._limiter)
            return self.plain_checked(answer, ok)
        return answer

    async def raw_token(self, token: bytes) -> bytes | None:
        """The answer token to a bare token after SaslHandshake v0; ``None``: close."""
        answer = await self.authenticate(token)
        return None if answer.close else bytes(answer.fields["auth_bytes"])

    def plain_checked(self, check: PasswordCheck, ok: bool) -> SaslAnswer:
        """The answer to a PLAIN message whose ``PasswordCheck`` returned ``ok``."""
        if check is not self._checking:
            return self._closing(_fail(ILLEGAL_SASL_STATE, "no such PLAIN check under way",
                                       auth_bytes=b""))
        self._checking = None
        if not ok:
            return self._closing(_fail(SASL_AUTHENTICATION_FAILED, "authentication failed: "
                                       "invalid username or password", auth_bytes=b""))
        self.principal = f"User:{check.user}"
        return SaslAnswer({"error_code": 0, "error_message": None, "auth_bytes": b"",
                           "session_lifetime": 0})

    def _plain(self, message: bytes) -> SaslAnswer | PasswordCheck:
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
        return PasswordCheck(user, cred, password)

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
