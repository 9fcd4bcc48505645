#!/usr/bin/env python3
"""Write the node configs of the compose cluster (deploy/compose/docker-compose.yml).

Theory of operation
-------------------
The compose cluster has three controller-only nodes (ids 1-3, the Raft voters) and three
broker-only nodes (ids 4-6), each a container with a fixed address on the compose network
``NET.0/24`` (``RAFKA_COMPOSE_NET``, default ``10.79.0``): controller N at ``NET.1N``, broker
N at ``NET.2N``; the host is the bridge's gateway ``NET.1`` and dials every node directly.

This script writes, under ``OUT`` (default ``deploy/compose/generated``)::

    cluster.secret           the cluster secret (32 random bytes, hex; mode 0600), mounted as
                             the compose secret ``cluster_secret`` (/run/secrets/cluster_secret)
    controller-N/node.toml   -> /etc/rafka (read-only) of container rafka-controller-N
    broker-N/node.toml       -> /etc/rafka (read-only) of container rafka-broker-N
    bootstrap                the brokers' client addresses, comma-separated (for clients)

An existing secret is kept (the nodes' data volumes were made with it: a new secret would
lock the restarted controllers out of their own quorum, ``ClusterSecretMismatchError``);
``--new-secret`` replaces it, for a cluster whose volumes are gone. Every config is parsed with
``rafka.broker.config.parse_config`` before anything is written, so a bad setting is an error
here rather than a container that exits. Data lives in the node's named volume
(``/var/lib/rafka``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tomllib
from pathlib import Path
from typing import Any

from rafka.broker.config import ConfigError, parse_config
from rafka.chaos_tests.campaign import toml_dumps

HERE = Path(__file__).resolve().parent
CONTROLLERS = (1, 2, 3)
BROKERS = (4, 5, 6)
CLIENT_PORT = 9092
RAFT_PORT = 19092
METRICS_PORT = 9100
SECRET_IN_CONTAINER = "/run/secrets/cluster_secret"
DATA_IN_CONTAINER = "/var/lib/rafka"
CLUSTER_ID = "rafka-compose"
DEFAULT_NET = os.environ.get("RAFKA_COMPOSE_NET", "10.79.0")  # as docker-compose.yml

# RF-3 topics by default, acks=all needs 2 in-sync replicas: one broker may be down (the
# controllers read these too, as topic defaults of CREATE_TOPICS)
BROKER_SETTINGS = {"default.replication.factor": 3, "min.insync.replicas": 2, "num.partitions": 3}
CONTROLLER_SETTINGS = {"broker.session.timeout.ms": 3000}


def node_ip(net: str, node_id: int) -> str:
    """Controller N at NET.1N, broker N at NET.2N (the addresses docker-compose.yml pins)."""
    return f"{net}.{10 + node_id}" if node_id in CONTROLLERS else f"{net}.{20 + node_id - 3}"


def service_name(node_id: int) -> str:
    return f"controller-{node_id}" if node_id in CONTROLLERS else f"broker-{node_id}"


def node_config(node_id: int, net: str) -> dict[str, Any]:
    """The TOML mapping of one node (docs/internals.md §3)."""
    ip = node_ip(net, node_id)
    controller = node_id in CONTROLLERS
    cfg: dict[str, Any] = {
        "node_id": node_id,
        "roles": ["controller"] if controller else ["broker"],
        "data_dir": f"{DATA_IN_CONTAINER}/node-{node_id}",
        "listener": f"{ip}:{CLIENT_PORT}",
        "cluster_id": CLUSTER_ID,
        "cluster_secret_file": SECRET_IN_CONTAINER,
        "metrics_listener": f"{ip}:{METRICS_PORT}",
    }
    if controller:
        cfg["raft_listener"] = f"{ip}:{RAFT_PORT}"
    cfg["voters"] = [{"id": v, "raft": f"{node_ip(net, v)}:{RAFT_PORT}",
                      "rpc": f"{node_ip(net, v)}:{CLIENT_PORT}"} for v in CONTROLLERS]
    cfg["broker"] = dict(BROKER_SETTINGS)
    cfg["controller"] = dict(CONTROLLER_SETTINGS)
    return cfg


def bootstrap(net: str) -> str:
    return ",".join(f"{node_ip(net, b)}:{CLIENT_PORT}" for b in BROKERS)


def write_configs(out: Path, net: str, *, new_secret: bool = False) -> str:
    """Write secret + configs under ``out``; returns the bootstrap string."""
    texts = {}
    for n in (*CONTROLLERS, *BROKERS):
        text = toml_dumps(node_config(n, net))
        # the secret file exists only in the containers: validate with an inline stand-in
        raw = tomllib.loads(text)
        raw.pop("cluster_secret_file")
        parse_config({**raw, "cluster_secret": "x"}, f"{service_name(n)}/node.toml")
        texts[n] = text
    out.mkdir(parents=True, exist_ok=True)
    secret = out / "cluster.secret"
    if new_secret or not secret.exists() or not secret.read_text().strip():
        tmp = out / "cluster.secret.tmp"
        tmp.write_text(secrets.token_hex(32) + "\n")
        tmp.chmod(0o600)
        tmp.replace(secret)
    for n, text in texts.items():
        d = out / service_name(n)
        d.mkdir(exist_ok=True)
        (d / "node.toml").write_text(text)
    (out / "bootstrap").write_text(bootstrap(net) + "\n")
    return bootstrap(net)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("RAFKA_COMPOSE_CONF", HERE / "generated")),
                    help="directory the compose file mounts (env RAFKA_COMPOSE_CONF)")
    ap.add_argument("--net", default=DEFAULT_NET,
                    help="first three octets of the compose network (env RAFKA_COMPOSE_NET)")
    ap.add_argument("--new-secret", action="store_true", help="replace an existing cluster secret")
    args = ap.parse_args(argv)
    try:
        print(write_configs(args.out, args.net, new_secret=args.new_secret))
    except ConfigError as exc:
        print(f"gen-config: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
