"""What a secured listener enforces, and how a node's ``[security]`` table describes it.

Theory of operation
-------------------
A node always has its main ``listener`` (PLAINTEXT: without inter-broker security the brokers,
the controllers and the node's own clients talk there — keep it on a private network,
docs/security.md). The optional
``[security]`` table adds a second, client-facing listener with its own protocol, as Kafka's
named listeners do::

    [security]
    listener = "0.0.0.0:9193"              # required
    advertised_listener = "broker1:9193"   # optional: what METADATA on this listener names
    protocol = "SASL_SSL"                  # SSL | SASL_PLAINTEXT | SASL_SSL
    "ssl.certfile" = "node.pem"
    "ssl.keyfile" = "node.key"
    "ssl.cafile" = "ca.pem"                # verifies client certificates (mutual TLS)
    "ssl.client.auth" = "none"             # none | requested | required
    "sasl.enabled.mechanisms" = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    "sasl.authentication.timeout.ms" = 10000
    "sasl.max.unauthenticated.frame.bytes" = 4096
    authorizer = true                      # check ACLs on every API (default false)
    "super.users" = ["User:admin"]         # may do everything
    "inter.broker.security" = true         # peers talk to each other here (mutual TLS)
    "main.listener.authorizer" = true      # default with the two above: PLAINTEXT = ANONYMOUS

``parse_security(raw, source, base)`` checks the table (a ``ConfigError`` naming the key on any
problem) and returns a ``SecurityConfig``; ``ListenerSecurity`` is what the ``Server`` gets at
run time: the same settings, the built ``ssl.SSLContext`` and the credential source (the
node's metadata image). Without the table nothing changes.

The node (``rafka/node.py``) serves the secured listener with ``secured_dispatch`` — the same
``NodeApi.dispatch``, except that METADATA names every broker by the secured listener it
registered (``RegisterBroker.secure_listener``, from ``advertised(config)``), so a secured
client is never sent to a plaintext port — and looks credentials up with
``image_credentials``.

The main listener under the authorizer (``"main.listener.authorizer"``, on by default when
both ``authorizer`` and ``inter.broker.security`` are): with the peers on the secured listener,
nothing but clients needs the plaintext one, so ``anonymous_dispatch`` puts it behind the same
ACLs as ``User:ANONYMOUS`` — default deny — as Kafka does with a PLAINTEXT listener. An operator
who wants it open says so (``"main.listener.authorizer" = false``, ACLs for ``User:ANONYMOUS``,
or ``User:ANONYMOUS`` in ``super.users``). Without inter-broker security it cannot be on (the
nodes talk there): a ``ConfigError`` says so.

Inter-broker security (``"inter.broker.security" = true``, docs/security.md): the node reaches
its peers — follower fetches, the controller channel, transaction markers — on their secured
listeners with TLS, presenting its own certificate (``ssl.certfile``, CN ``node-<id>``, signed
by the cluster CA ``ssl.cafile``). Such a listener asks for client certificates (``ssl.client.
auth`` at least ``requested``); a connection whose verified certificate names a node
(``is_node_principal``: ``User:node-<int>``) skips SASL (``ListenerSecurity.skips_sasl``) and
is a super user (``node_bypass``). The names are reserved: no SCRAM user may be ``node-<int>``
(``kraft/scram_admin.py``), so only a certificate from the cluster CA can be a node.
"""

from __future__ import annotations

import dataclasses
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rafka.security.sasl import CredentialSource
from rafka.security.scram import MECHANISMS, ScramCredential
from rafka.security.tls import CLIENT_AUTH, server_context
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, Request
from rafka.wire.settings import ConfigError, parse_hostport

if TYPE_CHECKING:
    from rafka.metadata import MetadataImage
    from rafka.wire.dispatch import Dispatch

__all__ = ["PROTOCOLS", "ProtocolFlags", "SecurityConfig", "ListenerSecurity", "parse_security", "advertised",
           "image_credentials", "secured_dispatch", "node_principal", "is_node_principal",
           "node_bypass", "anonymous_dispatch", "NODE_USER", "ANONYMOUS", "parse_mechanisms"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_KEYS = {"listener", "advertised_listener", "protocol", "ssl.certfile", "ssl.keyfile",
         "ssl.cafile", "ssl.client.auth", "sasl.enabled.mechanisms",
         "sasl.authentication.timeout.ms", "sasl.max.unauthenticated.frame.bytes",
         "ssl.handshake.timeout.ms", "authorizer", "super.users", "inter.broker.security",
         "main.listener.authorizer"}
_NODE_PRINCIPAL = re.compile(r"User:node-(0|[1-9][0-9]{0,8})")
NODE_USER = re.compile(r"node-(0|[1-9][0-9]{0,8})")  # reserved SCRAM user names
ANONYMOUS = "User:ANONYMOUS"  # the principal of the main listener under its authorizer


def node_principal(node_id: int) -> str:
    """The principal a node's certificate names (CN ``node-<id>``)."""
    return f"User:node-{node_id}"


def is_node_principal(principal: str | None) -> bool:
    return principal is not None and _NODE_PRINCIPAL.fullmatch(principal) is not None


class ProtocolFlags:
    """What a ``protocol`` (one of ``PROTOCOLS``) turns on, for the settings that name one: a
    listener's ``SecurityConfig`` and a client's ``ClientSecurity``."""

    __slots__ = ()
    protocol: str

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class SecurityConfig(ProtocolFlags):
    listener: tuple[str, int]
    advertised_listener: tuple[str, int] | None
    protocol: str
    certfile: str | None = None
    keyfile: str | None = None
    cafile: str | None = None
    client_auth: str = "none"
    mechanisms: tuple[str, ...] = tuple(MECHANISMS)
    authentication_timeout_ms: int = 10_000
    max_unauthenticated_frame_bytes: int = 4096
    handshake_timeout_ms: int = 10_000
    authorizer: bool = False  # ACLs checked on every API (security/authz.py)
    super_users: tuple[str, ...] = ()
    inter_broker: bool = False  # peers connect here with mutual TLS as their node principal
    # the main (PLAINTEXT) listener runs as User:ANONYMOUS behind the ACLs too (anonymous_dispatch)
    main_listener_authorizer: bool = False


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """A listener's run-time security: ``Server(security=...)``."""

    config: SecurityConfig
    ssl_context: ssl.SSLContext | None
    credentials: CredentialSource

    @classmethod
    def build(cls, config: SecurityConfig, credentials: CredentialSource) -> ListenerSecurity:
        ctx = None
        if config.uses_tls:
            assert config.certfile and config.keyfile
            ctx = server_context(config.certfile, config.keyfile, cafile=config.cafile,
                                 client_auth=config.client_auth)
        return cls(config, ctx, credentials)

    def skips_sasl(self, certificate_principal: str | None) -> bool:
        """A peer node (its verified certificate names a node) needs no SASL login here."""
        return self.config.inter_broker and is_node_principal(certificate_principal)


def parse_mechanisms(value: Any, allowed: tuple[str, ...], source: str, key: str) -> list[str]:
    """A SASL mechanism list setting — a list, or a comma-separated string — checked to be a
    non-empty subset of ``allowed`` (a ``ConfigError`` naming ``key`` otherwise). Shared by
    ``security.sasl.enabled.mechanisms`` and ``kafka.sasl_mechanisms`` (broker/config.py)."""
    mechs = value
    if isinstance(mechs, str):
        mechs = [m.strip() for m in mechs.split(",") if m.strip()]
    if not isinstance(mechs, list) or not mechs or any(m not in allowed for m in mechs):
        raise ConfigError(source, key, f"expected a non-empty subset of {list(allowed)}, got {mechs!r}")
    return mechs


def _path(raw: Mapping[str, Any], key: str, base: Path, source: str) -> str | None:
    v = raw.get(key)
    if v is None:
        return None
    p = Path(str(v))
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise ConfigError(source, f"security.{key}", f"{p} is not a readable file")
    return str(p)


def _positive(raw: Mapping[str, Any], key: str, default: int, lo: int, hi: int, source: str) -> int:
    v = raw.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConfigError(source, f"security.{key}", f"expected an integer {lo}..{hi}, got {v!r}")
    return v


def parse_security(raw: Any, source: str, base: Path) -> SecurityConfig | None:
    """The ``[security]`` table (None when absent); ``ConfigError`` naming the bad key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(source, "[security]", "must be a table")
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(source, f"security.{key}", "unknown security setting")
    try:
        listener = parse_hostport(raw.get("listener"))
        adv = raw.get("advertised_listener")
        advertised = parse_hostport(adv) if adv is not None else None
    except ValueError as exc:
        raise ConfigError(source, "security.listener", str(exc)) from None
    protocol = str(raw.get("protocol", "SASL_SSL")).upper()
    if protocol not in PROTOCOLS[1:]:
        raise ConfigError(source, "security.protocol",
                          f"must be one of {', '.join(PROTOCOLS[1:])}, got {protocol!r}")
    client_auth = str(raw.get("ssl.client.auth", "none")).lower()
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(source, "security.ssl.client.auth",
                          f"must be one of {', '.join(CLIENT_AUTH)}, got {client_auth!r}")
    mechs = parse_mechanisms(raw.get("sasl.enabled.mechanisms", list(MECHANISMS)), MECHANISMS,
                             source, "security.sasl.enabled.mechanisms")
    cfg = SecurityConfig(
        listener=listener, advertised_listener=advertised, protocol=protocol,
        certfile=_path(raw, "ssl.certfile", base, source),
        keyfile=_path(raw, "ssl.keyfile", base, source),
        cafile=_path(raw, "ssl.cafile", base, source),
        client_auth=client_auth, mechanisms=tuple(mechs),
        authentication_timeout_ms=_positive(raw, "sasl.authentication.timeout.ms", 10_000,
                                            100, 600_000, source),
        max_unauthenticated_frame_bytes=_positive(raw, "sasl.max.unauthenticated.frame.bytes",
                                                  4096, 512, 1 << 20, source),
        handshake_timeout_ms=_positive(raw, "ssl.handshake.timeout.ms", 10_000, 100, 600_000,
                                       source),
    )
    authorizer = raw.get("authorizer", False)
    supers = raw.get("super.users", [])
    if isinstance(supers, str):
        supers = [s.strip() for s in supers.split(";") if s.strip()]
    if not isinstance(authorizer, bool):
        raise ConfigError(source, "security.authorizer", f"expected true or false, got {authorizer!r}")
    if not isinstance(supers, list) or any(not isinstance(s, str) or not s.startswith("User:")
                                           for s in supers):
        raise ConfigError(source, "security.super.users",
                          f"expected a list of User:<name>, got {supers!r}")
    cfg = dataclasses.replace(cfg, authorizer=authorizer, super_users=tuple(supers))
    inter = raw.get("inter.broker.security", False)
    if not isinstance(inter, bool):
        raise ConfigError(source, "security.inter.broker.security",
                          f"expected true or false, got {inter!r}")
    if inter:
        if not cfg.uses_tls or not cfg.cafile:
            raise ConfigError(source, "security.inter.broker.security",
                              "needs protocol SSL or SASL_SSL and ssl.cafile (the cluster CA: "
                              "peers present their node certificates)")
        # peers must be able to present their certificates; clients without one still may
        cfg = dataclasses.replace(cfg, inter_broker=True, client_auth=(
            "requested" if client_auth == "none" else client_auth))
    # default: on once nothing but clients needs the main listener (the peers use this one)
    main_authz = raw.get("main.listener.authorizer", cfg.authorizer and cfg.inter_broker)
    if not isinstance(main_authz, bool):
        raise ConfigError(source, "security.main.listener.authorizer",
                          f"expected true or false, got {main_authz!r}")
    if main_authz and not (cfg.authorizer and cfg.inter_broker):
        raise ConfigError(source, "security.main.listener.authorizer",
                          "needs authorizer = true and inter.broker.security = true (without "
                          "inter-broker security the nodes themselves talk on the main listener)")
    cfg = dataclasses.replace(cfg, main_listener_authorizer=main_authz)
    if cfg.uses_tls and not (cfg.certfile and cfg.keyfile):
        raise ConfigError(source, "security.ssl.certfile",
                          f"protocol {protocol} needs ssl.certfile and ssl.keyfile")
    if client_auth != "none" and not cfg.cafile:
        raise ConfigError(source, "security.ssl.cafile",
                          f"ssl.client.auth={client_auth} needs ssl.cafile")
    return cfg


# -- a node's secured listener -----------------------------------------------------------


def advertised(config: SecurityConfig) -> str:
    """"host:port" other nodes register for this node's secured listener."""
    host, port = config.advertised_listener or config.listener
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


def image_credentials(image_of: Callable[[], MetadataImage]) -> CredentialSource:
    """Credentials looked up in the node's current metadata image (``image_of()``)."""

    def lookup(mechanism: str, user: str) -> ScramCredential | None:
        if NODE_USER.fullmatch(user):  # reserved for nodes' certificates (never a SASL login)
            return None
        e = image_of().scram.get(user, mechanism)
        if e is None:
            return None
        return ScramCredential(mechanism, e.salt, e.iterations, e.stored_key, e.server_key)

    return lookup


def secured_dispatch(dispatch: Dispatch, image_of: Callable[[], MetadataImage]) -> Dispatch:
    """``dispatch`` for the secured listener: METADATA names each broker by its secured
    listener (brokers without one are left out — a secured client could not reach them), and
    so does FIND_COORDINATOR (a coordinator without one is COORDINATOR_NOT_AVAILABLE)."""

    def secured_address(node_id: Any) -> tuple[str, int] | None:
        reg = image_of().cluster.brokers.get(node_id)
        if reg is None or not reg.secure_listener:
            return None
        return parse_hostport(reg.secure_listener)

    async def run(req: Request) -> Any:
        out = await dispatch(req)
        if req.api_key == ApiKey.METADATA and isinstance(out, dict) and "brokers" in out:
            brokers = []
            for b in out["brokers"]:
                addr = secured_address(b["node_id"])
                if addr is not None:
                    brokers.append({**b, "host": addr[0], "port": addr[1]})
            out = {**out, "brokers": brokers}
        elif req.api_key == ApiKey.FIND_COORDINATOR and isinstance(out, dict) \
                and isinstance(out.get("coordinators"), list):
            out = {**out, "coordinators": [_secured_coordinator(c, secured_address)
                                           for c in out["coordinators"]]}
        return out

    return run


def _secured_coordinator(entry: dict[str, Any],
                         secured_address: Callable[[Any], tuple[str, int] | None]) -> dict[str, Any]:
    if entry.get("error") or entry.get("node_id", -1) < 0:
        return entry
    addr = secured_address(entry["node_id"])
    if addr is None:
        return {**entry, "node_id": -1, "host": None, "port": None,
                "error": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "message": f"coordinator {entry['node_id']} has no secured listener"}
    return {**entry, "host": addr[0], "port": addr[1]}


def anonymous_dispatch(dispatch: Dispatch, authorized: Dispatch) -> Dispatch:
    """The main listener of a node with ``main.listener.authorizer``: every request runs as
    ``User:ANONYMOUS`` through ``authorized`` (the ACLs: default deny, so nothing unless the
    operator grants ANONYMOUS something or lists it in ``super.users``), except the membership
    check a starting node makes on its voters' main listeners (``DESCRIBE_QUORUM`` with
    ``local_only``, ``kraft/membership.py``: cluster id, voter ids, a proof of the secret)."""

    async def run(req: Request) -> Any:
        if req.api_key == ApiKey.DESCRIBE_QUORUM and req.body.get("local_only"):
            return await dispatch(req)
        return await authorized(dataclasses.replace(req, principal=ANONYMOUS))

    return run


def node_bypass(dispatch: Dispatch, authorized: Dispatch) -> Dispatch:
    """``authorized`` (behind the ACLs) for everyone but peer nodes, which are super users."""

    async def run(req: Request) -> Any:
        if is_node_principal(req.principal):
            return await dispatch(req)
        return await authorized(req)

    return run
