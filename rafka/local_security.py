"""``rafka cluster up --tls --auth``: a secured local cluster in one command.

Theory of operation
-------------------
``rafka/cluster.py`` records the choice in ``cluster.json`` (``"security": {"tls": …,
"auth": …}``) and asks this module for the rest:

* ``prepare(data_dir, nodes, settings)`` — once per data dir: a throw-away CA and one
  certificate per node (``DATA_DIR/tls/``: ``ca.pem``, ``node-<id>.pem`` / ``.key`` (0600),
  ``rafka.security.certs``), and with ``auth`` a generated password for the super user ``admin``,
  written with everything a client needs to ``DATA_DIR/admin.properties`` (0600; Kafka's
  ``--command-config`` format, read by every ``rafka`` client command). Existing files are
  kept, so a restart keeps its CA and password.
* ``security_toml(node, data_dir, settings)`` — the node's ``[security]`` table: a second
  client listener on ``PORT + 30000 + i - 1`` (``SECURE_PORT_OFFSET``), protocol ``SSL``
  (``--tls``), ``SASL_PLAINTEXT`` (``--auth``) or ``SASL_SSL`` (both); with ``--auth`` the
  authorizer is on (default deny) and ``User:admin`` is the one super user. With ``--tls``
  the nodes also talk to each other there (``"inter.broker.security" = true``, mutual TLS as
  ``User:node-<id>`` with their own certificates; ``voter_toml`` adds each voter's
  ``secure_rpc``): replication, the controller channel and transaction markers are encrypted.
* ``ensure_admin(nodes, data_dir, settings)`` — once the cluster is ready, the ``admin`` SCRAM
  credentials (SHA-256 and SHA-512) are written. With ``--tls --auth`` the main listeners are
  behind the authorizer as ``User:ANONYMOUS`` (``"main.listener.authorizer"``, on by default
  with inter-broker security: default deny), so this goes to the secured listener with a
  node's certificate (a super user without SASL — whoever can read ``DATA_DIR/tls`` is the
  cluster's operator anyway). With ``--auth`` alone the main listener stays PLAINTEXT and open
  (the nodes talk there), bound to ``--host`` (127.0.0.1 by default); docs/security.md.
* ``kafka_toml(node, settings)`` — the node's secured Kafka listener (broker/kafka/,
  docs/kafka-compat.md "Security"), of the same protocol as the secured native one, on its
  Kafka port + 10000 (``PORT + KAFKA_SECURE_PORT_OFFSET + i - 1`` = ``PORT + 15000 + i - 1``,
  below the ephemeral range as ``free_port_block`` keeps a block; none past 65535):
  ``kafka.ssl_listener`` (``--tls``), ``kafka.sasl_plaintext_listener`` (``--auth``) or
  ``kafka.sasl_ssl_listener`` (both). Its TLS files, SASL limits, authorizer and super user are
  the ``[security]`` table's; ``kafka_secure_bootstrap`` is its bootstrap string.
* ``how_to_connect(...)`` — the lines ``cluster up`` prints under the secured bootstrap.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from rafka.wire.ports import KAFKA_PORT_OFFSET, KAFKA_SECURE_PORT_OFFSET

__all__ = ["SECURE_PORT_OFFSET", "ADMIN_USER", "ADMIN_FILE", "TLS_DIR", "protocol", "secure_port",
           "secure_bootstrap", "kafka_secure_port", "kafka_secure_bootstrap", "kafka_toml",
           "prepare", "security_toml", "voter_toml", "ensure_admin", "how_to_connect",
           "read_admin_password"]

SECURE_PORT_OFFSET = 30000  # node i's secured listener: PORT + 30000 + i - 1
ADMIN_USER = "admin"
ADMIN_FILE = "admin.properties"
TLS_DIR = "tls"


def _enabled(settings: dict[str, Any] | None) -> bool:
    return bool(settings and (settings.get("tls") or settings.get("auth")))


def protocol(settings: dict[str, Any]) -> str:
    tls, auth = bool(settings.get("tls")), bool(settings.get("auth"))
    return {(True, True): "SASL_SSL", (True, False): "SSL", (False, True): "SASL_PLAINTEXT"}[(tls, auth)]


def secure_port(port: int) -> int:
    return port + SECURE_PORT_OFFSET


def secure_bootstrap(nodes: list[Any]) -> str:
    return ",".join(f"{n.host}:{secure_port(n.port)}" for n in nodes)


_KAFKA_KEY = {"SSL": "ssl_listener", "SASL_PLAINTEXT": "sasl_plaintext_listener",
              "SASL_SSL": "sasl_ssl_listener"}


def kafka_secure_port(node: Any) -> int | None:
    """The node's secured Kafka listener port (None: past 65535, or no Kafka listener)."""
    kafka = getattr(node, "kafka", None)
    if not kafka:
        return None
    port = int(kafka.rpartition(":")[2]) + KAFKA_SECURE_PORT_OFFSET - KAFKA_PORT_OFFSET
    return port if port <= 65535 else None


def kafka_secure_bootstrap(nodes: list[Any]) -> str:
    return ",".join(f"{n.host}:{kafka_secure_port(n)}" for n in nodes if kafka_secure_port(n))


def kafka_toml(node: Any, settings: dict[str, Any] | None) -> list[str]:
    """The ``kafka.*_listener`` line of the node's secured Kafka listener (none when off)."""
    port = kafka_secure_port(node)
    if not _enabled(settings) or port is None:
        return []
    assert settings is not None
    return [f'kafka.{_KAFKA_KEY[protocol(settings)]} = "{node.host}:{port}"']


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def read_admin_password(data_dir: Path) -> str | None:
    from rafka.client.connect_options import read_properties

    path = data_dir / ADMIN_FILE
    if not path.exists():
        return None
    return read_properties(path.read_text()).get("sasl.password") or None


def prepare(data_dir: Path, nodes: list[Any], settings: dict[str, Any]) -> None:
    """Certificates and the admin's password (kept when already there); see the docstring."""
    if not _enabled(settings):
        return
    if nodes and secure_port(max(n.port for n in nodes)) > 65535:
        raise ValueError(f"--port {min(n.port for n in nodes)} is too high for --tls/--auth: "
                         f"secured listeners are PORT+{SECURE_PORT_OFFSET}+i")
    tls_dir = data_dir / TLS_DIR
    if settings.get("tls"):
        from rafka.security.certs import CertAuthority, write_node_files

        missing = [n for n in nodes if not (tls_dir / f"node-{n.id}.pem").exists()
                   or not (tls_dir / f"node-{n.id}.key").exists()]
        if missing or not (tls_dir / "ca.pem").exists():
            ca = CertAuthority.create(f"rafka local CA {data_dir.name}", days=365)
            for n in nodes:  # a new CA: every node gets a certificate signed by it
                write_node_files(tls_dir, ca, f"node-{n.id}",
                                 sorted({n.host, "localhost", "127.0.0.1"}))
    if settings.get("auth"):
        password = read_admin_password(data_dir) or secrets.token_urlsafe(18)
        lines = [f"# {ADMIN_USER}, the super user of the rafka cluster in {data_dir} "
                 "(written by 'rafka cluster up --auth'; keep it secret)",
                 f"# use: rafka <command> --command-config {data_dir / ADMIN_FILE}",
                 f"bootstrap.servers={secure_bootstrap(nodes)}",
                 f"security.protocol={protocol(settings)}",
                 "sasl.mechanism=SCRAM-SHA-256",
                 f"sasl.username={ADMIN_USER}",
                 f"sasl.password={password}"]
        if settings.get("tls"):
            lines.append(f"ssl.cafile={tls_dir / 'ca.pem'}")
        _write_secret(data_dir / ADMIN_FILE, "\n".join(lines) + "\n")


def security_toml(node: Any, data_dir: Path, settings: dict[str, Any] | None) -> list[str]:
    """The node's ``[security]`` table as TOML lines (none when security is off)."""
    if not _enabled(settings):
        return []
    assert settings is not None
    lines = ["", "[security]", f'listener = "{node.host}:{secure_port(node.port)}"',
             f'protocol = "{protocol(settings)}"']
    if settings.get("tls"):
        tls_dir = data_dir / TLS_DIR
        lines += [f'"ssl.certfile" = {json.dumps(str(tls_dir / f"node-{node.id}.pem"))}',
                  f'"ssl.keyfile" = {json.dumps(str(tls_dir / f"node-{node.id}.key"))}',
                  # peers reach each other here, mutual TLS as User:node-<id> (peer_pool.py)
                  f'"ssl.cafile" = {json.dumps(str(tls_dir / "ca.pem"))}',
                  '"inter.broker.security" = true']
    if settings.get("auth"):
        lines += ["authorizer = true", f'"super.users" = ["User:{ADMIN_USER}"]']
    return lines


def voter_toml(voter: Any, settings: dict[str, Any] | None) -> list[str]:
    """Extra lines of a ``[[voters]]`` entry: its secured listener with --tls."""
    if not settings or not settings.get("tls"):
        return []
    return [f'secure_rpc = "{voter.host}:{secure_port(voter.port)}"']


async def ensure_admin(nodes: list[Any], data_dir: Path, settings: dict[str, Any]) -> None:
    """Write the admin's SCRAM credentials (idempotent). With ``--tls`` through the secured
    listeners as a node (its certificate makes it a super user there, without SASL): the main
    listeners then answer only as ``User:ANONYMOUS`` under the ACLs. With ``--auth`` alone
    through the main listeners (the nodes talk there too: they stay open)."""
    from rafka.client.aio import AsyncAdmin

    password = read_admin_password(data_dir)
    if password is None:
        raise ValueError(f"{data_dir / ADMIN_FILE} has no sasl.password")
    options: dict[str, Any] = {}
    bootstrap = ",".join(n.client for n in nodes)
    if settings.get("tls"):
        tls_dir, node = data_dir / TLS_DIR, nodes[0]
        bootstrap = secure_bootstrap(nodes)
        options = {"security_protocol": "SSL", "ssl_cafile": str(tls_dir / "ca.pem"),
                   "ssl_certfile": str(tls_dir / f"node-{node.id}.pem"),
                   "ssl_keyfile": str(tls_dir / f"node-{node.id}.key")}
    async with AsyncAdmin(bootstrap, client_id="rafka-cluster-up",
                          request_timeout_ms=30_000, **options) as admin:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            await admin.upsert_scram_credential(ADMIN_USER, password, mechanism=mech)


def how_to_connect(data_dir: Path, nodes: list[Any], settings: dict[str, Any] | None) -> list[str]:
    """What ``cluster up`` prints (on stderr) under the secured bootstrap."""
    if not _enabled(settings):
        return []
    assert settings is not None
    proto = protocol(settings)
    out = [f"secured listeners ({proto}): {secure_bootstrap(nodes)}"]
    kafka = kafka_secure_bootstrap(nodes)
    if kafka:
        out.append(f"kafka secured listeners ({proto}): {kafka}")
        if settings.get("auth"):
            out.append(f"  Kafka clients: security.protocol={proto} sasl.mechanism=SCRAM-SHA-256 "
                       f"(or SCRAM-SHA-512{', PLAIN' if settings.get('tls') else ''}) "
                       f"sasl.username={ADMIN_USER}, the password in {data_dir / ADMIN_FILE}")
    if settings.get("auth"):
        out.append(f"super user {ADMIN_USER}: {data_dir / ADMIN_FILE} (mode 0600); e.g.")
        out.append(f"  rafka topic list --command-config {data_dir / ADMIN_FILE}")
        out.append(f"  rafka user create alice --command-config {data_dir / ADMIN_FILE}")
    if settings.get("tls"):
        out.append(f"CA certificate: {data_dir / TLS_DIR / 'ca.pem'} (clients: --tls-ca)")
    if settings.get("tls") and settings.get("auth"):
        out.append("main listeners (PLAINTEXT, User:ANONYMOUS under the ACLs: nothing by "
                   "default): " + ",".join(n.client for n in nodes))
    else:
        out.append("internal listeners (PLAINTEXT, no authorization; keep private): "
                   + ",".join(n.client for n in nodes))
    return out
