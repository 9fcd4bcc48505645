"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as a sans-I/O exchange.

Theory of operation
-------------------
The broker never stores a password: ``derive_credential(mechanism, password)`` turns it into
a ``ScramCredential`` — a random salt, an iteration count, ``StoredKey = H(ClientKey)`` and
``ServerKey`` (``ClientKey``/``ServerKey`` = HMAC(SaltedPassword, "Client Key"/"Server Key"),
``SaltedPassword`` = PBKDF2-HMAC(password, salt, iterations)). That credential is what the
controller writes to the metadata log (``metadata/security.py``).

The exchange is four messages, each a byte string the caller carries however it likes (rafka
carries them in SASL_AUTHENTICATE requests, ``security/sasl.py``)::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce + server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>      (or e=<error>)

``ScramClient`` and ``ScramServer`` are the two state machines; each method takes the peer's
message and returns the next one, or raises ``ScramError`` (a ``SaslAuthenticationFailedError``,
wire code SASL_AUTHENTICATION_FAILED). The server checks the proof by recomputing
``ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage)`` and comparing ``H(ClientKey)`` with
``StoredKey`` in constant time; the client checks the server signature, so a server that does
not know the credential cannot pretend to. An unknown user is not told apart from a wrong
password: the server answers with a salt derived from the user name and a per-process secret
and fails the proof, so user names cannot be probed.

Not supported: channel binding (the gs2 header must be ``n,,`` or ``y,,``; ``p=`` is refused),
an authorization id other than the user, and full SASLprep (names are escaped as RFC 5802 says;
passwords are NFKC-normalised, which is SASLprep's mapping for the common cases).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Final

from rafka.wire.errors import ErrorCode, error_class

__all__ = [
    "MECHANISMS",
    "stored_and_server_key",
    "DEFAULT_ITERATIONS",
    "MIN_ITERATIONS",
    "MAX_ITERATIONS",
    "ScramCredential",
    "ScramError",
    "ScramClient",
    "ScramServer",
    "derive_credential",
    "salted_password",
    "verify_password",
]

# mechanism -> hashlib name
MECHANISMS: Final[dict[str, str]] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS: Final = 4096
MIN_ITERATIONS: Final = 4096  # RFC 7677's minimum (Kafka's too)
MAX_ITERATIONS: Final = 16384  # bounds the client's work a server can ask for (Kafka's too)
_MAX_MESSAGE: Final = 1024  # a SCRAM message is ~200 bytes; anything far larger is hostile
_NONCE_BYTES: Final = 24


class ScramError(error_class(ErrorCode.SASL_AUTHENTICATION_FAILED)):  # type: ignore[misc]
    """The SCRAM exchange failed (bad message, wrong proof, unknown user, bad server): a
    ``SaslAuthenticationFailedError``."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the cluster keeps of a user's password for one mechanism."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hash_name(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unsupported mechanism {mechanism!r} (supported: "
                         f"{', '.join(MECHANISMS)})") from None


def _hmac(name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, name).digest()


def _normalize(password: str) -> bytes:
    return unicodedata.normalize("NFKC", password).encode()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(Normalize(password), salt, i)`` of RFC 5802 (PBKDF2 with HMAC-H)."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), _normalize(password), salt, iterations)


def _keys(mechanism: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) from a SaltedPassword."""
    name = _hash_name(mechanism)
    client_key = _hmac(name, salted, b"Client Key")
    return client_key, hashlib.new(name, client_key).digest(), _hmac(name, salted, b"Server Key")


def stored_and_server_key(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of a SaltedPassword: what a Kafka AlterUserScramCredentials
    upsertion carries is the salted password, rafka stores these two."""
    _ck, stored, server = _keys(mechanism, salted)
    return stored, server


def derive_credential(mechanism: str, password: str, *, salt: bytes | None = None,
                      iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """The stored form of ``password`` (a fresh random salt unless one is given)."""
    if not password:
        raise ScramError("the password must not be empty")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    salt = os.urandom(32) if salt is None else salt
    _ck, stored, server = _keys(mechanism, salted_password(mechanism, password, salt, iterations))
    return ScramCredential(mechanism, salt, iterations, stored, server)


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was derived from: its StoredKey is
    recomputed (PBKDF2 with the credential's salt and iterations) and compared in constant
    time. For SASL/PLAIN (the Kafka listener over TLS), which sends the password itself and
    is checked against the same stored SCRAM credential; nothing else is kept."""
    if not password:
        return False
    _ck, stored, _server = _keys(credential.mechanism, salted_password(
        credential.mechanism, password, credential.salt, credential.iterations))
    return hmac.compare_digest(stored, credential.stored_key)


# -- message syntax --------------------------------------------------------------------


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    """RFC 5802's saslname: '=2C' is ',' and '=3D' is '='; any other '=' is an error."""
    out: list[str] = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code not in ("2C", "3D"):
                raise ScramError("bad escape in the user name")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _attrs(msg: str, what: str) -> dict[str, str]:
    """'a=1,b=2' → {'a': '1', 'b': '2'}; every part must be one letter, '=', a value."""
    out: dict[str, str] = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError(f"malformed {what}")
        out.setdefault(part[0], part[2:])
    return out


def _text(data: bytes, what: str) -> str:
    if len(data) > _MAX_MESSAGE:
        raise ScramError(f"{what} is longer than {_MAX_MESSAGE} bytes")
    try:
        return bytes(data).decode()
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError):
        raise ScramError(f"{what} is not base64") from None


def _nonce() -> str:
    return base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


# -- the two state machines ------------------------------------------------------------


class State(Enum):
    START = "start"
    SENT_FIRST = "sent-first"  # client: waits for server-first / server: waits for client-final
    SENT_FINAL = "sent-final"  # client: waits for server-final
    DONE = "done"
    FAILED = "failed"


class ScramClient:
    """``first = c.first_message()``; ``final = c.final_message(server_first)``;
    ``c.verify(server_final)`` — raises ``ScramError`` when the server cannot prove itself."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self.username = username
        self._password = password
        self._nonce = nonce or _nonce()
        self.state = State.START
        self._bare = ""
        self._server_signature = b""

    def first_message(self) -> bytes:
        self._expect(State.START)
        self._bare = f"n={_escape(self.username)},r={self._nonce}"
        self.state = State.SENT_FIRST
        return f"n,,{self._bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        self._expect(State.SENT_FIRST)
        try:
            text = _text(server_first, "server-first message")
            a = _attrs(text, "server-first message")
            if "e" in a:
                raise ScramError(f"the server refused: {a['e']}")
            nonce, salt, iterations = a.get("r", ""), _b64(a.get("s", ""), "salt"), a.get("i", "")
            if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
                raise ScramError("the server's nonce does not extend ours")
            if not iterations.isdigit() or not MIN_ITERATIONS <= int(iterations) <= MAX_ITERATIONS:
                raise ScramError(f"the server asks for {iterations!r} iterations "
                                 f"(allowed {MIN_ITERATIONS}-{MAX_ITERATIONS})")
            salted = salted_password(self.mechanism, self._password, salt, int(iterations))
            client_key, stored_key, server_key = _keys(self.mechanism, salted)
            without_proof = f"c=biws,r={nonce}"
            auth = f"{self._bare},{text},{without_proof}".encode()
            proof = _xor(client_key, _hmac(self._hash, stored_key, auth))
            self._server_signature = _hmac(self._hash, server_key, auth)
        except ScramError:
            self.state = State.FAILED
            raise
        self.state = State.SENT_FINAL
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        self._expect(State.SENT_FINAL)
        self.state = State.FAILED
        a = _attrs(_text(server_final, "server-final message"), "server-final message")
        if "e" in a:
            raise ScramError(f"the server refused: {a['e']}")
        if not hmac.compare_digest(_b64(a.get("v", ""), "server signature"), self._server_signature):
            raise ScramError("the server's signature is wrong (it does not know the credential)")
        self.state = State.DONE

    def _expect(self, state: State) -> None:
        if self.state is not state:
            raise ScramError(f"SCRAM client is {self.state.value}, not {state.value}")


# a lookup returns the user's credential for this mechanism, or None (unknown user)
CredentialLookup = Callable[[str], ScramCredential | None]
_FAKE_SALT_KEY: Final = secrets.token_bytes(32)  # per process: unknown users get stable salts


class ScramServer:
    """``first = s.receive_client_first(msg)``; ``final = s.receive_client_final(msg)``;
    then ``s.username`` is authenticated. Any failure raises ``ScramError``."""

    def __init__(self, mechanism: str, lookup: CredentialLookup, *,
                 nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._lookup = lookup
        self._nonce = nonce or _nonce()
        self.state = State.START
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._known = False
        self._auth_prefix = ""
        self._full_nonce = ""
        self._client_nonce = ""

    @property
    def authenticated(self) -> bool:
        return self.state is State.DONE

    def receive_client_first(self, data: bytes) -> bytes:
        self._expect(State.START)
        self.state = State.FAILED
        text = _text(data, "client-first message")
        if text.startswith("p="):
            raise ScramError("channel binding is not supported")
        if not (text.startswith("n,") or text.startswith("y,")):
            raise ScramError("malformed client-first message (gs2 header)")
        authzid, sep, bare = text[2:].partition(",")
        if not sep:
            raise ScramError("malformed client-first message")
        if authzid:
            raise ScramError("an authorization id is not supported")
        a = _attrs(bare, "client-first message")
        if "m" in a:
            raise ScramError("mandatory extensions are not supported")
        user, client_nonce = _unescape(a.get("n", "")), a.get("r", "")
        if not user or not client_nonce or not client_nonce.isprintable() or "," in client_nonce:
            raise ScramError("client-first message needs a user name and a nonce")
        cred = self._lookup(user)
        self._known = cred is not None and cred.mechanism == self.mechanism
        if not self._known:
            cred = self._fake_credential(user)
        assert cred is not None
        self.username, self._credential = user, cred
        self._full_nonce = client_nonce + self._nonce
        self._client_nonce = client_nonce
        first = (f"r={self._full_nonce},s={base64.b64encode(cred.salt).decode()},"
                 f"i={cred.iterations}")
        self._auth_prefix = f"{bare},{first}"
        self.state = State.SENT_FIRST
        return first.encode()

    def receive_client_final(self, data: bytes) -> bytes:
        self._expect(State.SENT_FIRST)
        self.state = State.FAILED
        text = _text(data, "client-final message")
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message has no proof")
        a = _attrs(without_proof, "client-final message")
        if a.get("c") not in ("biws", "eSws"):  # base64 of "n,," / "y,,"
            raise ScramError("channel binding data does not match the gs2 header")
        # librdkafka before 2.6.1 (kcat 1.7.1's 2.0.2, confluent-kafka < 2.6.1) sends its own
        # nonce again in front of the server's r= (librdkafka PR 4895); Kafka 3.8.1-3.9 took it
        # with endsWith. Exactly that form is taken: it still holds the server's fresh nonce, and
        # the proof covers the message as sent
        if a.get("r") not in (self._full_nonce, self._client_nonce + self._full_nonce):
            raise ScramError("the nonce changed during the exchange")
        proof = _b64(proof_part, "client proof")
        cred = self._credential
        assert cred is not None
        auth = f"{self._auth_prefix},{without_proof}".encode()
        signature = _hmac(self._hash, cred.stored_key, auth)
        if len(proof) != len(signature):
            raise ScramError(f"authentication failed for user {self.username!r}")
        client_key = _xor(proof, signature)
        stored = hashlib.new(self._hash, client_key).digest()
        if not (hmac.compare_digest(stored, cred.stored_key) and self._known):
            raise ScramError(f"authentication failed for user {self.username!r}")
        self.state = State.DONE
        return f"v={base64.b64encode(_hmac(self._hash, cred.server_key, auth)).decode()}".encode()

    def _fake_credential(self, user: str) -> ScramCredential:
        salt = _hmac("sha256", _FAKE_SALT_KEY, f"{self.mechanism}:{user}".encode())
        key = hashlib.new(self._hash, salt).digest()
        return ScramCredential(self.mechanism, salt, DEFAULT_ITERATIONS, key, key)

    def _expect(self, state: State) -> None:
        if self.state is not state:
            raise ScramError(f"SCRAM exchange is {self.state.value}, not {state.value}")
