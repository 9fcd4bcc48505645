"""``rafka chaos run --secure``: the campaign against a cluster with TLS and SASL/SCRAM on.

Theory of operation
-------------------
:class:`SecureCluster` is made once per campaign (``SecureCluster.create(work_dir)``) and does
what ``rafka cluster up --tls --auth`` (``rafka/local_security.py``) does for a local
cluster, for the nodes of a chaos backend:

* **Certificates.**  A throw-away CA (``rafka.security.certs``) and, per node, a certificate whose
  subjectAltNames are every address a client may dial for that node: the IP it binds
  (``backend.node_host`` — in the netns and docker backends each node has its own IP; in the
  local backend 127.0.0.<10+n>), the address the harness dials (``backend.node_address``: the
  local backend's link proxy 127.1.0.n), ``localhost`` and 127.0.0.1.  Files in
  ``WORK_DIR/tls/`` (keys 0600).
* **Node configs.**  :meth:`SecureCluster.node_table` is the node's ``[security]`` table: a
  ``SASL_SSL`` listener on the node's own IP, port :data:`SECURE_PORT` (the client port + 1),
  SCRAM-SHA-256/512, the authorizer on (default deny) and ``User:admin`` the one super user.
  Its advertised address is the listener, so METADATA asked there names every broker's
  secured listener — the clients never fall back to plaintext ports.
* **Principals.**  Once the brokers are registered, :meth:`SecureCluster.create_principals`
  writes, through the (private, plaintext) main listener: the super
  user ``admin`` and the workload user ``chaos`` (SCRAM-SHA-256 and -512), and ACLs for
  ``User:chaos`` that allow exactly what the workloads do — everything on topics, groups and
  transactional ids *prefixed* ``chaos-`` (every workload name is), ``describe`` and
  ``idempotent_write`` on the cluster — nothing on the internal topics: the clients find
  their coordinators with FIND_COORDINATOR, authorized on the ``chaos-`` group / transactional
  id, and the brokers create ``__consumer_offsets`` / ``__transaction_state`` themselves
  (docs/security.md, "Coordinator lookup"). Without inter-broker security the main listener
  stays open (the nodes talk there), so ``create_principals`` may use it.
  So the workloads run through the authorizer, not around it as a super user.  It then waits (bounded) until the workload user can log in and
  read METADATA on every node's secured listener: the credential is metadata and reaches each
  broker's image on its own time.
* **Clients.**  :meth:`SecureCluster.client_options` are the workload user's kafka-python
  options (``security_protocol="SASL_SSL"``, the CA, SCRAM-SHA-256); the campaign runs its
  phases inside ``security.client.ambient_security(options)``, so every client a workload
  builds without security options (producers, consumers, admins, transactional producers,
  the final reads, the metadata verification) takes them and dials :meth:`bootstrap`.  The
  harness's own control calls (waiting for brokers, resolving nemesis targets, waiting for
  recovery) pass ``security_protocol="PLAINTEXT"`` explicitly and keep using the main
  listener: they are the operator's view, not the workload under test.

Passwords are random per campaign and written only to ``WORK_DIR/tls/users.json`` (0600);
the results keep the user names and ACLs (``notes["security"]``), never a password.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from rafka.security.certs import CertAuthority, TlsFiles, write_node_files

from .backends.base import Backend

__all__ = ["SECURE_PORT", "ADMIN_USER", "WORKLOAD_USER", "WORKLOAD_PREFIX", "SecureCluster",
           "workload_acls"]

log = logging.getLogger("chaos.secure")

SECURE_PORT = 9093  # next to the main listener (9092) on the node's own IP
ADMIN_USER = "admin"
WORKLOAD_USER = "chaos"
WORKLOAD_PREFIX = "chaos-"  # queue, txn, group, metadata topics, transactional ids
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PROTOCOL = "SASL_SSL"


def workload_acls(user: str = WORKLOAD_USER, prefix: str = WORKLOAD_PREFIX) -> list[dict[str, str]]:
    """What the workloads need and nothing else (see the module docstring)."""
    principal = f"User:{user}"
    acls = [{"principal": principal, "resource_type": rtype, "pattern_type": "prefixed",
             "resource_name": prefix, "operation": "all", "permission": "allow"}
            for rtype in ("topic", "group", "transactional_id")]
    acls += [{"principal": principal, "resource_type": "cluster", "pattern_type": "literal",
              "resource_name": "rafka-cluster", "operation": op, "permission": "allow"}
             for op in ("describe", "idempotent_write")]
    return acls


@dataclass
class SecureCluster:
    """The CA, the users' passwords and the per-node certificates of one secured campaign."""

    directory: Path
    ca: CertAuthority
    passwords: dict[str, str]
    port: int = SECURE_PORT
    hosts: dict[int, str] = field(default_factory=dict)  # node -> address clients dial
    files: dict[int, TlsFiles] = field(default_factory=dict)

    @classmethod
    def create(cls, work_dir: Path) -> SecureCluster:
        directory = Path(work_dir).resolve() / "tls"
        directory.mkdir(parents=True, exist_ok=True)
        passwords = {u: secrets.token_urlsafe(18) for u in (ADMIN_USER, WORKLOAD_USER)}
        fd = os.open(directory / "users.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(passwords, fh)
        return cls(directory, CertAuthority.create("rafka chaos CA", days=2), passwords)

    @property
    def cafile(self) -> Path:
        return self.directory / "ca.pem"

    @staticmethod
    def sans(backend: Backend, node: int) -> list[str]:
        """Every name a client may dial ``node`` by (its bind IP, the harness's address)."""
        return sorted({backend.node_host(node), backend.node_address(node)[0],
                       "localhost", "127.0.0.1"})

    def node_table(self, backend: Backend, node: int) -> dict[str, Any]:
        """Issue the node's certificate and return its ``[security]`` table."""
        files = write_node_files(self.directory, self.ca, f"node-{node}", self.sans(backend, node))
        self.files[node] = files
        host = backend.node_host(node)
        self.hosts[node] = host
        return {
            "listener": f"{host}:{self.port}",
            "protocol": PROTOCOL,
            "ssl.certfile": str(files.certfile),
            "ssl.keyfile": str(files.keyfile),
            "sasl.enabled.mechanisms": list(MECHANISMS),
            "authorizer": True,
            "super.users": [f"User:{ADMIN_USER}"],
        }

    def bootstrap(self) -> str:
        """The secured listeners, as advertised (what the workloads dial)."""
        return ",".join(f"{h}:{self.port}" for _, h in sorted(self.hosts.items()))

    def client_options(self, user: str = WORKLOAD_USER) -> dict[str, Any]:
        """kafka-python security options of ``user`` (the workload user by default)."""
        return {"security_protocol": PROTOCOL, "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_plain_username": user, "sasl_plain_password": self.passwords[user],
                "ssl_cafile": str(self.cafile)}

    def notes(self) -> dict[str, Any]:
        """What the results record (no passwords)."""
        return {"protocol": PROTOCOL, "bootstrap": self.bootstrap(),
                "workload_user": f"User:{WORKLOAD_USER}", "super_users": [f"User:{ADMIN_USER}"],
                "authorizer": True, "acls": workload_acls()}

    async def create_principals(self, plain_bootstrap: str, *, timeout_s: float = 60.0) -> None:
        """Users and ACLs through the main listener, then wait until the workload user can
        log in on every node's secured listener (bounded by ``timeout_s``)."""
        from rafka.client import AsyncAdmin
        from rafka.client.aio import security_admin

        with trio.fail_after(timeout_s):
            while True:
                try:
                    async with AsyncAdmin(bootstrap_servers=plain_bootstrap,
                                          client_id="chaos-secure-setup",
                                          security_protocol="PLAINTEXT",
                                          request_timeout_ms=10_000) as admin:
                        for user, password in self.passwords.items():
                            for mech in MECHANISMS:
                                await admin.upsert_scram_credential(user, password, mechanism=mech)
                        await security_admin.create_acls(admin, workload_acls())
                    break
                except Exception as exc:  # noqa: BLE001 - retried until the deadline
                    log.info("cannot create the chaos users yet: %r", exc)
                    await trio.sleep(0.5)
            for node, host in sorted(self.hosts.items()):
                await self._wait_login(f"{host}:{self.port}", node)

    async def _wait_login(self, address: str, node: int) -> None:
        from rafka.client import AsyncAdmin

        while True:
            try:
                async with AsyncAdmin(bootstrap_servers=address, client_id="chaos-secure-check",
                                      request_timeout_ms=5_000, **self.client_options()) as admin:
                    await admin.list_topics()
                return
            except Exception as exc:  # noqa: BLE001 - the credential may not be there yet
                log.info("node %d: secured login not ready: %r", node, exc)
                await trio.sleep(0.5)

