#!/usr/bin/env python3
"""Container health check of a compose node (``docker inspect`` / ``docker-compose ps``).

Theory of operation
-------------------
Runs inside a node container (mounted read-only, run by the image's venv python every
``interval`` of the compose healthcheck). It reads the node's own config
(``/etc/rafka/node.toml``) and asks the node itself, on its client listener, the same question
an operator asks with ``rafka quorum describe`` (DESCRIBE_QUORUM, which any node forwards to
the active controller):

- a controller is healthy when the quorum has a leader and this voter is reachable and within
  ``--max-lag`` metadata records of the leader's high watermark (caught up);
- a broker is healthy when it serves METADATA, lists itself in it, and the active controller
  sees it as an unfenced observer within ``--max-lag`` records (registered, heartbeating,
  caught up: it leads and follows partitions).

Prints one line saying why (docker keeps it in the health log) and exits 0 (healthy) or 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rafka.broker.config import load_config
from rafka.client.sync import Admin


def check(config_path: str, max_lag: int, timeout_ms: int) -> tuple[bool, str]:
    cfg = load_config(config_path)
    host, port = cfg.advertised
    me = cfg.node_id
    with Admin(f"{host}:{port}", request_timeout_ms=timeout_ms) as admin:
        q: dict[str, Any] = admin.describe_quorum()
        leader = q.get("leader_id")
        if leader is None:
            return False, "the quorum has no leader"
        if cfg.is_controller:
            v = next((v for v in q.get("voters") or [] if v.get("id") == me), None)
            if v is None or not v.get("reachable"):
                return False, f"voter {me} is not reachable from the active controller {leader}"
            if v.get("lag") is None or v["lag"] > max_lag:
                return False, f"voter {me} lags {v.get('lag')} records (max {max_lag})"
            return True, f"voter {me}: leader {leader} epoch {q.get('epoch')} lag {v['lag']}"
        o = next((o for o in q.get("observers") or [] if o.get("id") == me), None)
        if o is None:
            return False, f"broker {me} is not registered with the active controller {leader}"
        if o.get("fenced") is not False:
            return False, f"broker {me} is fenced"
        if o.get("lag") is None or o["lag"] > max_lag:
            return False, f"broker {me} lags {o.get('lag')} metadata records (max {max_lag})"
        ids = {b.node_id for b in admin.describe_cluster().brokers}
        if me not in ids:
            return False, f"broker {me} is missing from its own METADATA ({sorted(ids)})"
        return True, f"broker {me}: unfenced, metadata lag {o['lag']}, brokers {sorted(ids)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="health of this rafka node")
    ap.add_argument("--config", default="/etc/rafka/node.toml")
    ap.add_argument("--max-lag", type=int, default=50, help="metadata records behind the leader")
    ap.add_argument("--timeout-ms", type=int, default=5000)
    args = ap.parse_args(argv)
    try:
        ok, why = check(args.config, args.max_lag, args.timeout_ms)
    except Exception as exc:  # any failure to answer is "unhealthy", said in one line
        ok, why = False, f"{type(exc).__name__}: {exc}"
    print(("healthy: " if ok else "unhealthy: ") + why)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
