#!/usr/bin/env python3
"""Smoke test of the compose cluster (``make compose-test``): produce, consume, kill a
partition leader, keep going on the survivors, bring it back, check it rejoins the ISR.

Theory of operation
-------------------
Runs on the host against a running compose cluster (``make compose-up``), through the brokers'
addresses on the compose network (``generated/bootstrap``):

1. the cluster is healthy (every container's health check) and the quorum caught up;
2. creates an RF-3 topic (``min.insync.replicas`` 2) and produces ``--records`` keyed records
   with ``acks=all`` and idempotence; reads every partition back (``AckLog.verify``);
3. ``docker kill`` (SIGKILL) the broker leading partition 0, waits until the controller moved
   leadership of every partition off it, produces ``--records`` more through the two
   survivors and reads everything back: every acknowledged record of both phases at its
   offset, in order, none twice — and the killed broker's partitions took writes meanwhile.
   It also times a new client whose bootstrap list starts with the dead broker (the
   connection setup timeout bounds that stall);
4. ``docker start`` it, waits until it is healthy and back in every ISR, produces a last
   batch and verifies the whole history once more.

Exit 0 when every step held, 1 with the step and the reason otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time

from compose_cluster import (
    BROKERS,
    NODES,
    AckLog,
    ClusterError,
    Reporter,
    bootstrap_servers,
    container,
    create_rf3_topic,
    docker,
    node_address,
    partition_leaders,
    wait_fenced,
    wait_healthy,
    wait_isr_full,
    wait_quorum,
)
from rafka.client import Admin, Producer

say = Reporter("compose-test")


def values(phase: str, n: int) -> list[bytes]:
    return [f"{phase}-{i:06d}".encode() for i in range(n)]


def first_metadata_s(bootstrap: str) -> float:
    """Seconds a new client takes to get its first METADATA answer (addresses tried in order)."""
    t = time.monotonic()
    with Admin(bootstrap) as a:
        a.list_topics()
    return time.monotonic() - t


def run(bootstrap: str, records: int, partitions: int, request_timeout_ms: int) -> None:
    wait_healthy(NODES)
    wait_quorum(bootstrap)
    say("6 nodes healthy, quorum caught up")
    topic = create_rf3_topic(bootstrap, "smoke", partitions)
    log = AckLog(topic)
    with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                  linger_ms=5, delivery_timeout_ms=60000, request_timeout_ms=request_timeout_ms) as p:
        n = log.produce(p, values("before", records))
        say(f"topic {topic} (RF 3, {partitions} partitions): {n}/{records} acks=all sends acknowledged")
        say("read back: " + log.verify(bootstrap, partitions))

        leaders = partition_leaders(bootstrap, topic)
        victim = leaders[0]
        if victim not in BROKERS:
            raise ClusterError(f"partition 0 has no broker leader: {leaders}")
        led = {part for part, b in leaders.items() if b == victim}
        docker("kill", container(victim))
        say(f"docker kill {container(victim)} (leader of partitions {sorted(led)}; leaders were {leaders})")
        # asked through the survivors only: how long the controller takes to fence the broker
        # and move its partitions, not how long a client takes to give up on a vanished host
        survivors = ",".join(a for a in bootstrap.split(",") if a != node_address(victim))
        t_kill = time.monotonic()
        wait_fenced(survivors, victim, timeout_s=60)
        t_fenced = time.monotonic() - t_kill
        now = partition_leaders(survivors, topic)
        if victim in now.values():
            raise ClusterError(f"broker {victim} is fenced but still leads: {now}")
        say(f"broker {victim} fenced {t_fenced:.1f}s after the kill; leaders now {now}")
        # a new client whose bootstrap list starts with the dead broker: its connect gets no
        # answer, and the connection setup timeout (10 s) bounds the wait before the next address
        dead_first = f"{node_address(victim)},{survivors}"
        say(f"a new client with the dead broker first in its bootstrap list got metadata in "
            f"{first_metadata_s(dead_first):.1f}s")

        t_during = time.monotonic()
        before = {part: sum(1 for q, _o, _v in log.acked if q == part) for part in led}
        n = log.produce(p, values("during", records))
        after = {part: sum(1 for q, _o, _v in log.acked if q == part) for part in led}
        say(f"{n}/{records} sends acknowledged by the 2 survivors in {time.monotonic() - t_during:.1f}s")
        stuck = [part for part in led if after[part] == before[part]]
        if stuck:
            raise ClusterError(f"partitions {stuck} of the killed leader took no write after the kill")
        say("read back: " + log.verify(bootstrap, partitions))

        docker("start", container(victim))
        say(f"docker start {container(victim)}")
        wait_healthy([victim])
        wait_isr_full(bootstrap, [topic])
        say(f"broker {victim} healthy and back in every ISR of {topic}")
        n = log.produce(p, values("after", records))
        say(f"{n}/{records} sends acknowledged with 3 brokers")
    say("read back: " + log.verify(bootstrap, partitions))
    if log.failed:
        say(f"not acknowledged (allowed, none read back): {log.failed[:3]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="compose cluster smoke test (docs/deployment.md)")
    ap.add_argument("--bootstrap", default=None, help="default: generated/bootstrap")
    ap.add_argument("--records", type=int, default=300, help="records per phase")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--request-timeout-ms", type=int, default=30000,
                    help="the producer's; bounds its wait on requests in flight to the killed broker")
    args = ap.parse_args(argv)
    return say.exit_code(run, args.bootstrap or bootstrap_servers(), args.records, args.partitions,
                         args.request_timeout_ms)


if __name__ == "__main__":
    sys.exit(main())
