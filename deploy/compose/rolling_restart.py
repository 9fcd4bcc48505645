#!/usr/bin/env python3
"""Rolling restart of the compose cluster (``make compose-rolling-restart``), as
docs/deployment.md describes it for an operator, with the writes checked across it.

Theory of operation
-------------------
One node at a time, ``docker-compose stop SERVICE`` (SIGTERM through docker-init,
``stop_grace_period`` 40 s: a broker does its controlled shutdown and moves its leaderships
away first; a controller closes its Raft log), then ``up -d --no-deps --force-recreate SERVICE``
starts a new container from the current image and config on the same data volume — so the same
procedure rolls out a new image (``make compose-rolling-restart`` rebuilds it first) or a
changed config. The stop is separate only so that the stop time and the broker's last word on
its controlled shutdown (``complete`` / ``did not finish within 30.0 s``) can be read from the
old container's log, which the recreate deletes. Then, before the next node:

- the node's container health check says ``healthy`` (``healthcheck.py``);
- the quorum has caught up: every voter reachable with metadata lag 0, every broker
  registered, unfenced, lag 0 (``rafka quorum describe``);
- every ISR of every topic is full again (``rafka topic describe``: ISR = replicas).

Order: the controllers that are not active first, the active controller last (one leader
election instead of up to three), then the brokers. Between restarts the script produces a
batch with ``acks=all`` to an RF-3 topic; at the end every acknowledged record must read back
at its offset, in order, once (``AckLog.verify``). Exit 0, or 1 with the reason.
"""

from __future__ import annotations

import argparse
import sys
import time

from compose_cluster import (
    BROKERS,
    CONTROLLERS,
    NODES,
    AckLog,
    Reporter,
    bootstrap_servers,
    compose,
    container,
    create_rf3_topic,
    logs,
    wait_healthy,
    wait_isr_full,
    wait_quorum,
)
from gen_config import service_name
from rafka.client import Producer

say = Reporter("rolling-restart")


def restart_order(active_controller: int) -> list[int]:
    """Standby controllers, the active controller, then the brokers."""
    return [c for c in CONTROLLERS if c != active_controller] + [active_controller, *BROKERS]


def shutdown_outcome(log_text: str) -> str:
    """`` (controlled shutdown complete)`` or `` (controlled shutdown did not finish within
    30.0 s)`` from a stopped broker's log (``rafka/node.py`` says one of them last); empty for
    a controller, which has no controlled shutdown."""
    said = [line.split("controlled shutdown", 1)[1] for line in log_text.splitlines()
            if "controlled shutdown " in line]
    return f" (controlled shutdown{said[-1]})" if said else ""


def run(bootstrap: str, records: int) -> None:
    wait_healthy(NODES)
    q = wait_quorum(bootstrap)
    log = AckLog(create_rf3_topic(bootstrap, "rolling"))
    with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                  delivery_timeout_ms=60000) as p:
        log.produce(p, [f"start-{i:05d}".encode() for i in range(records)])
        for node in restart_order(q["leader"]):
            t = time.monotonic()
            compose("stop", service_name(node))  # SIGTERM; its logs outlive the stop, not the recreate
            stopped_s = time.monotonic() - t
            outcome = shutdown_outcome(logs(node))
            compose("up", "-d", "--no-deps", "--force-recreate", service_name(node))
            wait_healthy([node])
            wait_quorum(bootstrap)
            wait_isr_full(bootstrap)
            n = log.produce(p, [f"after-{node}-{i:05d}".encode() for i in range(records)])
            say(f"{container(node)}: stopped in {stopped_s:.1f}s{outcome}; recreated, "
                f"healthy, quorum caught up, ISRs full in {time.monotonic() - t:.1f}s; "
                f"{n}/{records} acks=all sends acknowledged after it")
    say("read back: " + log.verify(bootstrap, 3))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="rolling restart of the compose cluster (docs/deployment.md)")
    ap.add_argument("--bootstrap", default=None, help="default: generated/bootstrap")
    ap.add_argument("--records", type=int, default=100, help="records produced after each restart")
    args = ap.parse_args(argv)
    return say.exit_code(run, args.bootstrap or bootstrap_servers(), args.records)


if __name__ == "__main__":
    sys.exit(main())
