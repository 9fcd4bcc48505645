"""Adding and removing a broker on real processes (issue 15; kraft/reassign.py).

One cluster: three combined nodes (controllers + brokers) and a fourth, broker-only node
started from node 3's config. An RF-3 topic on [1, 2, 3] is moved to [2, 3, 4] with a
throttled catch-up while a producer keeps writing (acks=all, idempotent): node 4 ends up with
every record, node 1 deletes its copy, a consumer reads every record once and in order, and no
acknowledged write is lost. Then broker 2 is decommissioned (the topic and ``__consumer_offsets``
move off it, its data stays readable), stopped and unregistered. Bad plans are refused with
their named errors and change nothing; a good one survives the active controller being killed.

No wall-clock assertion: every wait is "poll until, with a bound"; the throttle is checked by
the reassignment still being visible right after it started (the catch-up needs several
seconds at that rate), and by the lag the leader reports.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rafka.client.sync import Admin, Consumer, Producer
from rafka.client.types import TopicPartition
from rafka.wire.protocol import ApiKey

from bench.cluster import add_broker_node  # the documented scale-out, as code

from .conftest import LocalCluster, wait_until
from .test_foundation import drain
from .test_user_defects import rafka

pytestmark = pytest.mark.timeout(600)

TOPIC = "moving"
VALUE = b"x" * 900  # ~1 KB records: N_FIRST of them take seconds at THROTTLE
N_FIRST = 120
THROTTLE = 20_000  # bytes/s
WRITTEN = b"w"  # the writer's records during the move: small, a few KB/s in all
WRITE_RATE = 50  # records/s


@pytest.fixture
def four(cluster_factory: Any, tmp_path: Path) -> Iterator[tuple[LocalCluster, str]]:
    cluster = cluster_factory(3)
    with Admin(bootstrap_servers=cluster.bootstrap) as a:
        a.create_topic(TOPIC, partitions=1, replication_factor=3)  # before node 4: on 1, 2, 3
    proc, addr = add_broker_node(cluster.data_dir, 4, tmp_path / "node-4.out")
    try:
        wait_until(lambda: unfenced(cluster.bootstrap, 4), "broker 4 registered and unfenced", 120)
        yield cluster, f"{cluster.bootstrap},{addr}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()


def unfenced(bootstrap: str, broker_id: int) -> bool:
    with Admin(bootstrap_servers=bootstrap) as a:
        return any(o["id"] == broker_id and o["fenced"] is False for o in a.describe_quorum()["observers"])


def replicas(bootstrap: str, topic: str = TOPIC, p: int = 0) -> tuple[int, ...]:
    with Admin(bootstrap_servers=bootstrap) as a:
        return a.describe_topic(topic).partitions[p].replicas


def partition_dirs(root: Path, name: str) -> list[Path]:
    return [d for d in root.rglob(name) if d.is_dir()]


class Writer:
    """Sends ``b"w" + i`` with acks=all from a thread until stopped (about WRITE_RATE records/s:
    a new replica throttled below the write rate would never catch up — in Kafka too); remembers
    what was acked."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: list[int] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.sent = 0
        self.producer = Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                 linger_ms=2)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        futures = []
        while not self.stop.is_set():
            futures.append((self.sent, self.producer.send(TOPIC, WRITTEN + str(self.sent).encode())))
            self.sent += 1
            time.sleep(1 / WRITE_RATE)
            if len(futures) >= 20:
                self._settle(futures)
                futures = []
        self._settle(futures)

    def _settle(self, futures: list[tuple[int, Any]]) -> None:
        for i, f in futures:
            try:
                f.result(timeout=120)
                self.acked.append(i)
            except Exception as exc:  # noqa: BLE001 - recorded, the test asserts on them
                self.errors.append(exc)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(180)
        self.producer.close()


def read_all(bootstrap: str, n: int) -> list[bytes]:
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign([TopicPartition(TOPIC, 0)])
        c.seek_to_beginning()
        return [r.value for r in drain(c, n, timeout_s=120)]


def index_of(value: bytes) -> int:
    return int(value[len(WRITTEN):])


def test_reassign_to_a_new_broker_under_writes_then_decommission(four, tmp_path):
    cluster, bootstrap = four
    assert sorted(replicas(bootstrap)) == [1, 2, 3]
    with Producer(bootstrap_servers=bootstrap, acks="all") as p:
        for _ in range(N_FIRST):
            p.send(TOPIC, VALUE + b"-first")
        p.flush()

    with Writer(bootstrap) as w:
        wait_until(lambda: len(w.acked) > 10, "the writer is acknowledged", 120)
        r = rafka("partition", "reassign", "--topic", TOPIC, "--partition", "0", "--replicas", "2,3,4",
                  "--throttle", str(THROTTLE), "--json", bootstrap=bootstrap)
        assert r.returncode == 0, r.stderr
        # throttled: ~N_FIRST KB at THROTTLE B/s is still catching up when we look
        st = json.loads(rafka("partition", "reassign", "--status", "--json", bootstrap=bootstrap).stdout)
        (entry,) = st["reassignments"]
        assert entry["adding_replicas"] == [4] and entry["removing_replicas"] == [1]
        assert entry["throttle_bytes_per_s"] == THROTTLE
        assert entry["lag"]["4"] > 0  # from the leader: node 4 is still catching up
        r = rafka("partition", "reassign", "--topic", TOPIC, "--partition", "0", "--replicas", "2,3,4",
                  "--throttle", str(THROTTLE), "--wait", "--wait-timeout-s", "300", bootstrap=bootstrap)
        assert r.returncode == 0, r.stderr
        assert "done" in r.stdout
        acked_during = len(w.acked)
        wait_until(lambda: len(w.acked) > acked_during + 10, "writes go on after the switch", 120)
    assert not w.errors, w.errors[:3]
    assert replicas(bootstrap) == (2, 3, 4)
    assert "no reassignment in progress" in rafka("partition", "reassign", "--status", bootstrap=bootstrap).stdout
    # node 1 deleted its copy
    wait_until(lambda: not partition_dirs(cluster.data_dir / "node-1", f"{TOPIC}-0"), "node 1 deletes its copy")

    # node 4 holds every record: make it the leader (a reorder switches at once) and read there
    r = rafka("partition", "reassign", "--topic", TOPIC, "--partition", "0", "--replicas", "4,2,3",
              bootstrap=bootstrap)
    assert r.returncode == 0, r.stderr
    with Admin(bootstrap_servers=bootstrap) as a:
        def led_by_4() -> bool:
            a._loop.run(a._async._request, ApiKey.ELECT_LEADERS,
                        {"election_type": 0, "topics": [{"name": TOPIC, "partitions": [0]}]})
            return a.describe_topic(TOPIC).partitions[0].leader == 4
        wait_until(led_by_4, "node 4 leads after a preferred election", 60)
    values = read_all(bootstrap, N_FIRST + len(w.acked))
    assert values[:N_FIRST] == [VALUE + b"-first"] * N_FIRST
    written = [index_of(v) for v in values[N_FIRST:]]
    assert written == sorted(set(written)), "a record is duplicated or out of order"
    assert set(w.acked) <= set(written), "an acknowledged write is lost"

    # decommission broker 2: the topic and __consumer_offsets move off it, data stays readable
    with Admin(bootstrap_servers=bootstrap) as a:
        a.describe_topics(["__consumer_offsets"])  # the broker creates the internal topic
        wait_until(lambda: any(2 in p.replicas for p in a.describe_topics(["__consumer_offsets"])[0].partitions),
                   "__consumer_offsets has replicas on broker 2", 60)
    r = rafka("broker", "decommission", "2", "--wait", "--wait-timeout-s", "300", "--json", bootstrap=bootstrap)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["holds"] == [] and any(m["topic"] == "__consumer_offsets" for m in out["moved"])
    assert 2 not in replicas(bootstrap) and len(replicas(bootstrap)) == 3
    # new topics avoid the decommissioned broker
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topic("after", partitions=4, replication_factor=3)
        assert all(2 not in p.replicas for p in a.describe_topic("after").partitions)
    assert read_all(bootstrap, len(values)) == values
    # a running broker cannot be unregistered; a stopped, empty one can
    r = rafka("broker", "unregister", "2", bootstrap=bootstrap)
    assert r.returncode == 1 and "INVALID_REQUEST" in r.stderr and "stop it first" in r.stderr
    cluster.kill(2, signal.SIGTERM)
    boot134 = ",".join(a for a in bootstrap.split(",") if not a.endswith(f":{cluster.port + 1}"))
    wait_until(lambda: rafka("broker", "unregister", "2", bootstrap=boot134).returncode == 0,
               "broker 2 unregistered once fenced", 120)
    assert 2 not in {b.node_id for b in _brokers(boot134)}
    assert read_all(boot134, len(values)) == values


def _brokers(bootstrap: str) -> list[Any]:
    with Admin(bootstrap_servers=bootstrap) as a:
        return a.describe_cluster().brokers


def test_bad_plans_change_nothing_and_a_good_one_survives_a_controller_failover(four, tmp_path):
    cluster, bootstrap = four
    before = replicas(bootstrap)
    cases = [
        (["--topic", TOPIC, "--partition", "0", "--replicas", "2,3,9"], "INVALID_REPLICA_ASSIGNMENT", "broker 9"),
        (["--topic", TOPIC, "--partition", "0", "--replicas", "2,2,4"], "INVALID_REPLICA_ASSIGNMENT", "twice"),
        (["--topic", TOPIC, "--partition", "0", "--replicas", "2,4"], "INVALID_REPLICATION_FACTOR", "factor 3"),
        (["--topic", "nosuch", "--partition", "0", "--replicas", "1,2,3"], "UNKNOWN_TOPIC_OR_PARTITION", "nosuch"),
        (["--topic", TOPIC, "--partition", "0", "--cancel"], "NO_REASSIGNMENT_IN_PROGRESS", TOPIC),
    ]
    plan = tmp_path / "plan.json"  # kafka-reassign-partitions' format; one bad entry spoils it
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [2, 3, 4]},
        {"topic": "nosuch", "partition": 0, "replicas": [1, 2, 3]}]}))
    cases.append((["--plan", str(plan)], "UNKNOWN_TOPIC_OR_PARTITION", "nosuch"))
    for args, code, words in cases:
        r = rafka("partition", "reassign", *args, bootstrap=bootstrap)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert code in r.stderr and words in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    r = rafka("broker", "decommission", "42", bootstrap=bootstrap)
    assert r.returncode == 1 and "BROKER_ID_NOT_REGISTERED" in r.stderr
    assert replicas(bootstrap) == before
    assert "no reassignment in progress" in rafka("partition", "reassign", "--status", bootstrap=bootstrap).stdout
    # the brokers stayed up through all of it: a good plan from a file starts, and survives the
    # active controller being killed mid catch-up (~60 KB at 10 KB/s): a reassignment is
    # metadata, the next active controller switches it
    with Producer(bootstrap_servers=bootstrap, acks="all") as p:
        for _ in range(60):
            p.send(TOPIC, VALUE + b"-first")
        p.flush()
    plan.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": 0, "replicas": [2, 3, 4]}]}))
    r = rafka("partition", "reassign", "--plan", str(plan), "--throttle", "10000", bootstrap=bootstrap)
    assert r.returncode == 0, r.stderr
    with Admin(bootstrap_servers=bootstrap) as a:
        active = a.describe_quorum()["leader_id"]
    cluster.kill(active)  # SIGKILL
    cluster.up()  # brings it back: a target replica on it must catch up too

    def switched() -> bool:
        status = json.loads(rafka("partition", "reassign", "--status", "--json", bootstrap=bootstrap).stdout)
        return not status["reassignments"] and replicas(bootstrap) == (2, 3, 4)

    wait_until(switched, "the next active controller switches the reassignment", 300)
    assert read_all(bootstrap, 60) == [VALUE + b"-first"] * 60

