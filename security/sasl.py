"""SASL over the rafka protocol: the broker's per-connection gate and the client's login.

Theory of operation
-------------------
On a listener whose protocol is SASL_PLAINTEXT or SASL_SSL a connection starts
*unauthenticated*. ``SaslGate`` is its sans-I/O state machine; the server hands it every
request until it says ``authenticated``::

    HANDSHAKE --SASL_HANDSHAKE(mechanism enabled)--> FIRST
    FIRST     --SASL_AUTHENTICATE(client-first)----> FINAL      (answers server-first)
    FINAL     --SASL_AUTHENTICATE(client-final)----> DONE       (answers server-final)

API_VERSIONS is answered in any state (the server dispatches it). Anything else before DONE,
or a message out of order, is ``ILLEGAL_SASL_STATE``; an unknown mechanism is
``UNSUPPORTED_SASL_MECHANISM``; a failed exchange (wrong password, unknown user, garbage) is
``SASL_AUTHENTICATION_FAILED``. Each of these answers has ``close=True``: the server sends it
and closes the connection, so an unauthenticated peer gets exactly one named error and no
second try on the same connection. SASL requests after DONE are ``ILLEGAL_SASL_STATE`` without
closing (re-authentication is not supported).

The principal of an authenticated connection is ``User:<name>``. The server also bounds what
an unauthenticated peer may cost it (a small frame limit, a deadline); see ``broker/server.py``.

``sasl_authenticate(conn, ...)`` is the client's side: SASL_HANDSHAKE, then the two
SASL_AUTHENTICATE round trips of ``security.scram.ScramClient``, raising the broker's named
error (or ``ScramError`` when the *broker* fails to prove it knows the credential).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from rafka.security.scram import MECHANISMS, ScramClient, ScramCredential, ScramServer
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

if TYPE_CHECKING:
    from rafka.wire.connection import Connection

__all__ = ["SASL_APIS", "GateAnswer", "GateState", "SaslGate", "CredentialSource",
           "sasl_authenticate"]

SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})

# (mechanism, user name) -> the stored credential, or None
CredentialSource = Callable[[str, str], ScramCredential | None]


class GateState(Enum):
    HANDSHAKE = "handshake"
    FIRST = "first"
    FINAL = "final"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class GateAnswer:
    body: dict[str, Any]
    close: bool = False


def _error(code: ErrorCode, message: str, **extra: Any) -> GateAnswer:
    return GateAnswer({"error": int(code), "message": message, **extra}, close=True)


class SaslGate:
    """One connection's authentication state (see the module docstring)."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialSource) -> None:
        self.mechanisms = mechanisms
        self._credentials = credentials
        self.state = GateState.HANDSHAKE
        self._scram: ScramServer | None = None
        self.principal: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is GateState.DONE

    def handle(self, api_key: int, body: dict[str, Any]) -> GateAnswer:
        """The answer to one request (the caller answers API_VERSIONS itself)."""
        if self.state is GateState.DONE:
            if api_key in SASL_APIS:
                return GateAnswer({"error": int(ErrorCode.ILLEGAL_SASL_STATE),
                                   "message": "this connection is authenticated already"})
            raise AssertionError("an authenticated connection's requests go to dispatch")
        answer = self._step(api_key, body)
        if answer.close:
            self.state = GateState.FAILED
        return answer

    def _step(self, api_key: int, body: dict[str, Any]) -> GateAnswer:
        state = self.state
        if state is GateState.HANDSHAKE and api_key == ApiKey.SASL_HANDSHAKE:
            mech = body["mechanism"]
            if mech not in self.mechanisms:
                return _error(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              f"mechanism {mech!r} is not enabled on this listener "
                              f"(enabled: {', '.join(self.mechanisms)})",
                              mechanisms=list(self.mechanisms))
            self._scram = ScramServer(mech, lambda user: self._credentials(mech, user))
            self.state = GateState.FIRST
            return GateAnswer({"error": 0, "mechanisms": list(self.mechanisms)})
        if state in (GateState.FIRST, GateState.FINAL) and api_key == ApiKey.SASL_AUTHENTICATE:
            assert self._scram is not None
            try:
                if state is GateState.FIRST:
                    out = self._scram.receive_client_first(body["auth_bytes"])
                    self.state = GateState.FINAL
                else:
                    out = self._scram.receive_client_final(body["auth_bytes"])
                    self.state = GateState.DONE
                    self.principal = f"User:{self._scram.username}"
            except RafkaError as exc:
                return _error(ErrorCode.SASL_AUTHENTICATION_FAILED, exc.message)
            return GateAnswer({"error": 0, "auth_bytes": out})
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = str(api_key)
        return _error(ErrorCode.ILLEGAL_SASL_STATE,
                      f"{name} before authentication ({self.state.value}): this listener needs "
                      "SASL_HANDSHAKE then SASL_AUTHENTICATE first")


async def sasl_authenticate(conn: Connection, mechanism: str, username: str, password: str) -> str:
    """Log in on a fresh connection; returns the principal. Raises the broker's named error."""
    if mechanism not in MECHANISMS:
        raise error_unsupported(mechanism)
    resp = await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism})
    resp.raise_for_error()
    client = ScramClient(mechanism, username, password)
    resp = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": client.first_message()})
    resp.raise_for_error()
    final = client.final_message(resp.body["auth_bytes"])
    resp = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": final})
    resp.raise_for_error()
    client.verify(resp.body["auth_bytes"])
    return f"User:{username}"


def error_unsupported(mechanism: str) -> RafkaError:
    from rafka.wire.errors import error_for

    return error_for(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                     f"sasl_mechanism {mechanism!r} is not supported (use {' or '.join(MECHANISMS)})")
