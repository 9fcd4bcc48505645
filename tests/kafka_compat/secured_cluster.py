"""A one-node ``rafka cluster up --tls --auth`` with every kind of Kafka listener, for tests
that point Kafka clients at TLS and SASL (tests/integration/test_kafka_security.py and
run_kafka_python_suite.py's SASL/SSL part).

``cluster up --tls --auth`` gives the node PLAINTEXT and SASL_SSL Kafka listeners; ``start``
adds SSL and SASL_PLAINTEXT ones to its node.toml (``kafka.ssl_listener``,
``kafka.sasl_plaintext_listener``) and restarts it, so one node serves all four. The super
user ``admin``'s client settings are in ``DATA_DIR/admin.properties``; ``add_user`` and
``allow`` go through the ``rafka`` CLI as admin.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rafka.wire.ports import KAFKA_PORT_OFFSET, KAFKA_SECURE_PORT_OFFSET

from rafka.cluster import free_port_block
from rafka.local_security import SECURE_PORT_OFFSET

__all__ = ["SecuredCluster", "start", "stop", "RAFKA"]

RAFKA = str(Path(sys.executable).with_name("rafka"))
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SecuredCluster:
    data: Path
    up_output: str  # what the first ``cluster up`` printed
    listeners: dict[str, str]  # Kafka listener name -> HOST:PORT
    ca: str  # the cluster CA's certificate (PEM)
    admin_password: str

    @property
    def admin_config(self) -> list[str]:
        return ["--command-config", str(self.data / "admin.properties")]

    def add_user(self, name: str, password: str) -> None:
        """``name`` with both SCRAM mechanisms."""
        run("user", "create", name, "--mechanism", "both", "--password-stdin",
            *self.admin_config, stdin=password + "\n")

    def allow(self, principal: str, resource: list[str], operations: list[str]) -> None:
        ops = [a for op in operations for a in ("--operation", op)]
        run("acl", "add", "--allow", principal, *resource, *ops, *self.admin_config)


def run(*args: str, stdin: str | None = None, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFKA_")}
    r = subprocess.run([RAFKA, *args], capture_output=True, text=True, timeout=120,
                       input=stdin, env=env, cwd=str(ROOT))
    if check and r.returncode != 0:
        raise RuntimeError(f"rafka {' '.join(args)}: {r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


def _base_port() -> int:
    """A free block whose secured native port (+30000) is free too (``free_port_block``
    probes the rest, the secured Kafka ports included)."""
    for _ in range(50):
        base = free_port_block(3)
        try:
            for p in (base + SECURE_PORT_OFFSET,):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port block with secured ports")


def start(data: Path) -> SecuredCluster:
    """The cluster in ``data`` (see the module docstring); ``stop`` it."""
    port = _base_port()
    up = run("cluster", "up", "--nodes", "1", "--tls", "--auth", "--detach",
             "--data-dir", str(data), "--port", str(port))
    try:
        # the block's client ports 2 and 3 (free_port_block(3) probed them; there is one node):
        # below the ephemeral range, unlike a port the kernel picks
        ssl_port, sasl_port = port + 1, port + 2
        cfg = data / "node-1" / "node.toml"
        text = cfg.read_text()
        line = re.search(r"^kafka\.sasl_ssl_listener = .*$", text, re.M)
        if line is None:
            raise RuntimeError(f"cluster up --tls --auth wrote no SASL_SSL Kafka listener:\n{text}")
        cfg.write_text(text.replace(line.group(0), line.group(0) + "\n"
                                    f'kafka.ssl_listener = "127.0.0.1:{ssl_port}"\n'
                                    f'kafka.sasl_plaintext_listener = "127.0.0.1:{sasl_port}"'))
        run("cluster", "down", "--data-dir", str(data))
        run("cluster", "up", "--detach", "--data-dir", str(data))
        props = (data / "admin.properties").read_text()
        password = re.search(r"^sasl.password=(.*)$", props, re.M)
        assert password is not None
        kafka_port = port + KAFKA_PORT_OFFSET
        return SecuredCluster(data, up, {
            "PLAINTEXT": f"127.0.0.1:{kafka_port}",
            "SASL_SSL": f"127.0.0.1:{port + KAFKA_SECURE_PORT_OFFSET}",
            "SSL": f"127.0.0.1:{ssl_port}",
            "SASL_PLAINTEXT": f"127.0.0.1:{sasl_port}"},
            str(data / "tls" / "ca.pem"), password.group(1))
    except BaseException:
        stop(data)
        raise


def stop(data: Path) -> None:
    run("cluster", "down", "--data-dir", str(data), check=False)
