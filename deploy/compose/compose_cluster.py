"""What the compose smoke test and the rolling restart share: the cluster's containers and the
waits an operator does by hand (docs/deployment.md).

Theory of operation
-------------------
The cluster is the compose project of ``docker-compose.yml`` beside this file; its node
containers have fixed names (``rafka-controller-N``, ``rafka-broker-N``; ``gen_config``).
Container lifecycle goes through the docker CLI on those names (``docker kill`` / ``start`` /
``restart``), health is what the image's health check last said (``docker inspect``,
``healthcheck.py``), and cluster state comes from the rafka client over the host's route to
the compose network: ``Admin.describe_quorum`` (voters caught up, brokers unfenced) and
``Admin.describe_topic`` (ISR full). Every wait polls with a deadline and raises
``ClusterError`` saying what it waited for and what it saw last.

``AckLog`` is the history check: each acknowledged send (partition, offset, value) is kept,
and ``verify`` reads every partition from its start to the high watermark and requires each
acknowledged record at its offset, acknowledged offsets increasing in send order per
partition (order kept) and no value twice (no duplicates).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gen_config import BROKERS, CLIENT_PORT, CONTROLLERS, DEFAULT_NET, node_ip, service_name
from rafka.chaos_tests.backends.docker import compose_command, docker_bin, docker_env
from rafka.client import Admin, Consumer, Producer, TopicPartition

__all__ = ["ClusterError", "container", "node_address", "docker", "logs", "compose", "health",
           "wait_healthy", "wait_quorum", "wait_fenced", "wait_isr_full", "partition_leaders",
           "bootstrap_servers", "create_rf3_topic", "Reporter", "AckLog", "NODES", "CONTROLLERS", "BROKERS"]

NODES = (*CONTROLLERS, *BROKERS)
HERE = Path(__file__).resolve().parent
T = TypeVar("T")


class ClusterError(Exception):
    """The cluster did not reach a state in time (the message says which and what it saw)."""


def container(node_id: int) -> str:
    return f"rafka-{service_name(node_id)}"


def node_address(node_id: int, net: str | None = None) -> str:
    """The node's client address on the compose network (``gen_config.node_ip``)."""
    return f"{node_ip(net or DEFAULT_NET, node_id)}:{CLIENT_PORT}"


def _run(argv: Sequence[str], timeout_s: float, with_stderr: bool = False) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, env=docker_env(), timeout=timeout_s)
    if r.returncode != 0:
        raise ClusterError(f"{' '.join(argv)}: {r.stderr.strip()[-500:]}")
    return (r.stdout + r.stderr if with_stderr else r.stdout).strip()


def docker(*args: str, timeout_s: float = 90.0) -> str:
    """Run the docker CLI against the engine of DOCKER_HOST (default the private engine)."""
    return _run([docker_bin(), *args], timeout_s)


def logs(node_id: int, tail: int = 200) -> str:
    """The last ``tail`` lines the node's container printed (stdout and stderr: the node logs
    to stderr). A recreated container's logs are gone: read them before ``up --force-recreate``."""
    return _run([docker_bin(), "logs", "--tail", str(tail), container(node_id)], 30.0, with_stderr=True)


def compose(*args: str, timeout_s: float = 180.0) -> str:
    """docker-compose (v1) or ``docker compose`` (v2) on this project (COMPOSE_PROJECT_NAME,
    default ``rafka``, as ``make compose-up``)."""
    cmd = compose_command(docker_env())
    if cmd is None:
        raise ClusterError("neither docker-compose nor `docker compose` (make -C deploy compose-deps)")
    project = os.environ.get("COMPOSE_PROJECT_NAME") or "rafka"
    return _run([*cmd, "-p", project, "-f", str(HERE / "docker-compose.yml"), *args], timeout_s)


def health(node_id: int) -> str:
    """``healthy`` / ``unhealthy`` / ``starting``, or the container state when it is not running."""
    out = docker("inspect", "-f", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}",
                 container(node_id))
    state, _, status = out.partition(" ")
    return status if state == "running" and status else state


def _until(what: str, probe: Callable[[], tuple[bool, Any]], timeout_s: float, every_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            ok, last = probe()
        except Exception as exc:  # a node that is down answers with an error: keep waiting
            ok, last = False, f"{type(exc).__name__}: {exc}"
        if ok:
            return last
        if time.monotonic() >= deadline:
            raise ClusterError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last}")
        time.sleep(every_s)


def wait_healthy(node_ids: Iterable[int], timeout_s: float = 180.0) -> None:
    ids = list(node_ids)

    def probe() -> tuple[bool, dict[int, str]]:
        states = {n: health(n) for n in ids}
        return all(s == "healthy" for s in states.values()), states

    _until(f"nodes {ids} healthy", probe, timeout_s)


def wait_quorum(bootstrap: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Every voter reachable with lag 0 and every broker registered, unfenced, lag 0."""
    def probe() -> tuple[bool, Any]:
        with Admin(bootstrap, request_timeout_ms=5000) as a:
            q = a.describe_quorum()
        voters = {v["id"]: (v.get("reachable"), v.get("lag")) for v in q.get("voters") or []}
        observers = {o["id"]: (o.get("fenced"), o.get("lag")) for o in q.get("observers") or []}
        ok = (q.get("leader_id") is not None
              and all(voters.get(c) == (True, 0) for c in CONTROLLERS)
              and all(observers.get(b) == (False, 0) for b in BROKERS))
        return ok, {"leader": q.get("leader_id"), "voters": voters, "brokers": observers}

    return _until("the quorum caught up (voters lag 0, brokers unfenced)", probe, timeout_s)


def wait_fenced(bootstrap: str, broker: int, timeout_s: float = 60.0) -> None:
    """Until the active controller has fenced ``broker`` (DESCRIBE_QUORUM observers)."""
    def probe() -> tuple[bool, Any]:
        with Admin(bootstrap, request_timeout_ms=5000) as a:
            obs = {o["id"]: o.get("fenced") for o in a.describe_quorum().get("observers") or []}
        return obs.get(broker) is True, obs

    _until(f"broker {broker} fenced", probe, timeout_s, every_s=0.2)


def wait_isr_full(bootstrap: str, topics: Sequence[str] | None = None, timeout_s: float = 120.0) -> None:
    """Every partition of ``topics`` (default: every topic, internal ones too) has ISR = replicas."""
    def probe() -> tuple[bool, Any]:
        with Admin(bootstrap, request_timeout_ms=5000) as a:
            names = list(topics) if topics is not None else a.list_topics(include_internal=True)
            short = {f"{t.name}/{p.partition}": (sorted(p.isr), sorted(p.replicas))
                     for t in a.describe_topics(names) for p in t.partitions
                     if sorted(p.isr) != sorted(p.replicas)}
        return not short, short or "all full"

    _until(f"every ISR of {list(topics) if topics else 'every topic'} full", probe, timeout_s)


def create_rf3_topic(bootstrap: str, prefix: str, partitions: int = 3) -> str:
    """A fresh topic ``PREFIX-<unix time>``: RF 3, ``min.insync.replicas`` 2, every ISR full."""
    topic = f"{prefix}-{int(time.time())}"
    with Admin(bootstrap) as a:
        a.create_topic(topic, partitions=partitions, replication_factor=3,
                       config={"min.insync.replicas": "2"})
    wait_isr_full(bootstrap, [topic])
    return topic


class Reporter:
    """Progress lines ``NAME [  12.3s] ...`` of a check script, and its exit code."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        print(f"{self.name} [{time.monotonic() - self.t0:5.1f}s] {msg}", flush=True)

    def exit_code(self, check: Callable[..., None], *args: Any) -> int:
        """0 when ``check(*args)`` returns, 1 (said in one line) when it raises."""
        try:
            check(*args)
        except Exception as exc:  # ClusterError, a client error, a docker CLI timeout
            self(f"FAILED: {type(exc).__name__}: {exc}")
            return 1
        self("PASSED")
        return 0


def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    with Admin(bootstrap, request_timeout_ms=10000) as a:
        return {p.partition: p.leader for p in a.describe_topic(topic).partitions}


@dataclass
class AckLog:
    """Acknowledged sends of one topic and the check that they were all kept, in order."""

    topic: str
    acked: list[tuple[int, int, bytes]] = field(default_factory=list)  # (partition, offset, value)
    failed: list[str] = field(default_factory=list)

    def produce(self, producer: Producer, values: Sequence[bytes], timeout_s: float = 60.0) -> int:
        """Send values keyed by themselves; wait for each; returns how many were acknowledged."""
        futures: list[tuple[bytes, Future[Any]]] = [
            (v, producer.send(self.topic, value=v, key=v)) for v in values]
        before = len(self.acked)
        for v, f in futures:
            try:
                meta = f.result(timeout=timeout_s)
            except Exception as exc:  # not acknowledged: allowed to be lost, not to be duplicated
                self.failed.append(f"{v!r}: {type(exc).__name__}: {exc}")
                continue
            self.acked.append((meta.partition, meta.offset, v))
        return len(self.acked) - before

    def verify(self, bootstrap: str, partitions: int, timeout_s: float = 60.0) -> str:
        """Read every partition to its end; raise ClusterError on a lost, moved, reordered or
        duplicated record; returns a one-line summary."""
        t0 = time.monotonic()
        read = read_all(bootstrap, self.topic, partitions, timeout_s)
        read_s = time.monotonic() - t0
        problems = []
        last: dict[int, int] = {}
        for p, off, v in self.acked:
            if off <= last.get(p, -1):
                problems.append(f"p{p}: offset {off} acknowledged after {last[p]} (order)")
            last[p] = off
            got = read.get(p, {}).get(off)
            if got != v:
                problems.append(f"p{p}@{off}: acknowledged {v!r}, read {got!r} (lost)")
        values = [v for recs in read.values() for v in recs.values()]
        dups = len(values) - len(set(values))
        if dups:
            problems.append(f"{dups} values read twice (duplicates)")
        if problems:
            raise ClusterError(f"{len(problems)} problems, first: " + "; ".join(problems[:5]))
        return (f"{len(self.acked)} acknowledged records all read back in order at their offsets "
                f"in {read_s:.1f}s ({len(values)} records in {self.topic}, "
                f"{len(self.failed)} sends not acknowledged)")


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float) -> dict[int, dict[int, bytes]]:
    """{partition: {offset: value}} of every record below each partition's high watermark."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                  auto_offset_reset="earliest") as c:
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while any(c.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() >= deadline:
                where = {tp.partition: (c.position(tp), ends[tp]) for tp in tps}
                raise ClusterError(f"reading {topic} timed out at (position, end) {where}")
            for tp, recs in c.poll(timeout_ms=1000).items():
                for r in recs:
                    out[tp.partition][r.offset] = r.value
    return out


def bootstrap_servers() -> str:
    """The brokers' client addresses (``generated/bootstrap``, else from the default network)."""
    path = Path(os.environ.get("RAFKA_COMPOSE_CONF", HERE / "generated")) / "bootstrap"
    if path.exists():
        return path.read_text().strip()
    return ",".join(node_address(b) for b in BROKERS)


def main(argv: list[str] | None = None) -> int:
    """``python compose_cluster.py wait``: until every node is healthy and the quorum caught up,
    then print how to connect (the last step of ``make compose-up``)."""
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] != ["wait"]:
        print("usage: compose_cluster.py wait [TIMEOUT_S]", file=sys.stderr)
        return 2
    timeout_s = float(args[1]) if len(args) > 1 else 300.0
    bootstrap = bootstrap_servers()
    t0 = time.monotonic()
    try:
        wait_healthy(NODES, timeout_s)
        q = wait_quorum(bootstrap, timeout_s)
    except ClusterError as exc:
        print(f"compose: {exc}", file=sys.stderr)
        return 1
    print(f"compose: 3 controllers + 3 brokers healthy after {time.monotonic() - t0:.0f}s of waiting; "
          f"active controller {q['leader']}\n"
          f"  export RAFKA_BOOTSTRAP={bootstrap}\n"
          f"  .venv/bin/rafka quorum describe      # or: rafka topic create t --partitions 3 --replication-factor 3\n"
          f"  metrics: http://{node_address(BROKERS[0]).rsplit(':', 1)[0]}:9100/metrics (every node, port 9100)\n"
          f"  make compose-test | compose-rolling-restart | compose-down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
