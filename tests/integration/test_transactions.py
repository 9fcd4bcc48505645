"""Transactions on real processes: 3 nodes, replication factor 3 (docs/transactions.md).

* exactly-once consume → transform → produce (``txn_pipeline.py``) killed -9 twenty times — by
  itself at fixed points of a transaction (after the records were sent, after the offsets, right
  after the commit) and from outside at random moments — and restarted: the output topic read
  with ``read_committed`` holds every input record exactly once;
* a zombie producer (SIGSTOPped, then resumed after a new instance took its transactional id)
  is fenced, and nothing it wrote becomes visible to ``read_committed``;
* an aborted transaction is invisible to ``read_committed`` and visible to
  ``read_uncommitted``;
* a transaction that exceeds its timeout is aborted by the coordinator;
* the coordinator's node is killed mid-commit: the transaction completes or aborts, never hangs
  (every partition's last stable offset reaches its high watermark again).
"""

from __future__ import annotations

import random
import signal
import threading
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rafka.client.errors import RafkaError
from rafka.client.sync import Admin, Consumer, Producer
from rafka.client.types import TopicPartition

from .conftest import JsonLinesProc, LocalCluster, wait_until

pytestmark = pytest.mark.timeout(600)

PIPELINE = Path(__file__).with_name("txn_pipeline.py")
ZOMBIE = Path(__file__).with_name("txn_zombie.py")
DEADLINE_S = 60.0
TXN_STATE_TOPIC = "__transaction_state"


def make_topic(cluster: LocalCluster, name: str, partitions: int = 3) -> None:
    with Admin(bootstrap_servers=cluster.bootstrap) as admin:
        admin.create_topic(name, partitions=partitions, replication_factor=3)


def read_all(bootstrap: str, topic: str, isolation: str, partitions: int = 3,
             timeout_s: float = DEADLINE_S) -> list[Any]:
    """Every record of ``topic`` from the beginning to its end (the LSO for read_committed)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: list[Any] = []
    with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                  enable_auto_commit=False) as c:
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"read of {topic} stuck at " \
                f"{ {tp.partition: c.position(tp) for tp in tps} } of {ends}"
            for records in c.poll(timeout_ms=500).values():
                out.extend(records)
    return out


def values(records: list[Any]) -> list[bytes]:
    return [r.value for r in records]


def lso_caught_up(bootstrap: str, topic: str, partitions: int = 3) -> bool:
    """True when every partition's last stable offset equals its high watermark (no open
    transaction holds read_committed readers back)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed") as rc, \
            Consumer(bootstrap_servers=bootstrap) as ru:
        return rc.end_offsets(tps) == ru.end_offsets(tps)


class Proc(JsonLinesProc):
    def seen(self, ev: str) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["ev"] == ev]


def pipeline(cluster: LocalCluster, log: Path, *extra: str) -> Proc:
    return Proc([str(PIPELINE), cluster.bootstrap, "etl", "in", "out", "etl-1",
                 "--session-ms", "1500", *extra], log)


# --------------------------------------------------------------------------- exactly once


def test_pipeline_exactly_once_across_kill9(cluster3: LocalCluster, tmp_path: Path) -> None:
    boot = cluster3.bootstrap
    make_topic(cluster3, "in")
    make_topic(cluster3, "out")
    n_in = 2000
    with Producer(bootstrap_servers=boot, acks="all") as p:
        for i in range(n_in):
            p.send("in", value=f"v{i}".encode(), key=f"k{i}".encode())
        p.flush()

    rng = random.Random(20261125)
    log = tmp_path / "pipeline.err"
    kills = 0
    rounds: list[tuple[str, int | None]] = []
    phases = ["sent", "offsets", "committed", "outside"]
    for i in range(20):
        phase = phases[i % len(phases)]
        if phase == "outside":
            proc = pipeline(cluster3, log, "--max-idle-s", "8", "--max-records", "10")
            wait_until(lambda proc=proc: proc.seen("ready") or proc.proc.poll() is not None,
                       "pipeline ready")
            time.sleep(rng.uniform(0.2, 1.5))
            if proc.proc.poll() is None:
                proc.kill()
                kills += 1
                rounds.append((phase, -9))
            else:
                rounds.append((phase, proc.wait()))
        else:
            proc = pipeline(cluster3, log, "--max-idle-s", "8", "--max-records", "10",
                            "--crash-txn", str(1 + rng.randrange(3)), "--crash-phase", phase)
            rc = proc.wait(120)
            kills += rc == -signal.SIGKILL
            rounds.append((phase, rc))
    assert kills >= 18, f"only {kills} of 20 runs were killed: {rounds}\n{log.read_text()[-3000:]}"

    final = pipeline(cluster3, log, "--max-idle-s", "6")
    assert final.wait(180) == 0, log.read_text()[-3000:]

    committed = Counter(values(read_all(boot, "out", "read_committed")))
    expected = {f"t:v{i}".encode() for i in range(n_in)}
    missing = expected - set(committed)
    dupes = {v: c for v, c in committed.items() if c > 1}
    assert not missing, f"{len(missing)} input records never committed to out, e.g. {sorted(missing)[:5]}"
    assert not dupes, f"{len(dupes)} outputs committed more than once, e.g. {list(dupes.items())[:5]}"
    assert set(committed) == expected
    # the kills did leave aborted output behind: read_uncommitted sees it, read_committed not
    uncommitted = Counter(values(read_all(boot, "out", "read_uncommitted")))
    assert sum(uncommitted.values()) > sum(committed.values())


# --------------------------------------------------------------------------- visibility


def test_aborted_invisible_to_read_committed_visible_to_read_uncommitted(
        cluster3: LocalCluster) -> None:
    boot = cluster3.bootstrap
    make_topic(cluster3, "vis")
    with Producer(bootstrap_servers=boot, transactional_id="vis-1") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(30):
            p.send("vis", value=f"aborted-{i}".encode(), key=f"{i}".encode())
        p.flush()
        p.abort_transaction()
        with p.transaction():
            for i in range(30):
                p.send("vis", value=f"committed-{i}".encode(), key=f"{i}".encode())
        with pytest.raises(ZeroDivisionError), p.transaction():
            p.send("vis", value=b"aborted-by-exception")
            p.flush()
            raise ZeroDivisionError
    rc = set(values(read_all(boot, "vis", "read_committed")))
    ru = set(values(read_all(boot, "vis", "read_uncommitted")))
    committed = {f"committed-{i}".encode() for i in range(30)}
    aborted = {f"aborted-{i}".encode() for i in range(30)} | {b"aborted-by-exception"}
    assert rc == committed
    assert ru == committed | aborted
    wait_until(lambda: lso_caught_up(boot, "vis"), "LSO back at the high watermark")


# --------------------------------------------------------------------------- zombie


def test_zombie_producer_is_fenced(cluster3: LocalCluster, tmp_path: Path) -> None:
    boot = cluster3.bootstrap
    make_topic(cluster3, "zomb")
    zombie = Proc([str(ZOMBIE), boot, "zomb", "z-1"], tmp_path / "zombie.err")
    wait_until(lambda: zombie.seen("sent"), "zombie sent its first records")
    zombie.proc.send_signal(signal.SIGSTOP)
    try:
        with Producer(bootstrap_servers=boot, transactional_id="z-1") as p:
            p.init_transactions()           # fences the zombie and aborts its open transaction
            with p.transaction():
                p.send("zomb", value=b"new-instance")
    finally:
        zombie.proc.send_signal(signal.SIGCONT)
    assert zombie.wait(90) == 0
    outcome = zombie.seen("outcome")
    # one fatal error type for a fenced producer, whichever call meets the fence (issue 25)
    assert outcome and outcome[-1]["error"] == "ProducerFencedError", outcome
    rc = values(read_all(boot, "zomb", "read_committed"))
    assert rc == [b"new-instance"], rc
    ru = set(values(read_all(boot, "zomb", "read_uncommitted")))
    assert b"zombie-before-pause" in ru            # written, then aborted by the fence
    wait_until(lambda: lso_caught_up(boot, "zomb"), "LSO back at the high watermark")


# --------------------------------------------------------------------------- timeout


def test_transaction_timeout_aborts(cluster3: LocalCluster) -> None:
    boot = cluster3.bootstrap
    make_topic(cluster3, "slow")
    with Producer(bootstrap_servers=boot, transactional_id="slow-1",
                  transaction_timeout_ms=1500) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("slow", value=b"too-late")
        p.flush()
        # the coordinator aborts it once 1.5 s pass; read_committed readers are released
        wait_until(lambda: lso_caught_up(boot, "slow"), "the coordinator aborting the transaction")
        with pytest.raises(RafkaError) as err:
            p.commit_transaction()
        assert type(err.value).__name__ in ("TransactionTimedOutError", "ProducerFencedError",
                                            "InvalidProducerEpochError"), err.value
    assert values(read_all(boot, "slow", "read_committed")) == []
    assert values(read_all(boot, "slow", "read_uncommitted")) == [b"too-late"]


# --------------------------------------------------------------------------- coordinator crash


def coordinator_node(cluster: LocalCluster, transactional_id: str) -> int:
    """The node leading the id's ``__transaction_state`` partition (its coordinator)."""
    with Admin(bootstrap_servers=cluster.bootstrap) as admin:
        parts = admin.describe_topic(TXN_STATE_TOPIC).partitions
    p = zlib.crc32(transactional_id.encode()) % len(parts)
    return next(e.leader for e in parts if e.partition == p)


def test_coordinator_killed_mid_commit_never_hangs(cluster3: LocalCluster) -> None:
    boot = cluster3.bootstrap
    make_topic(cluster3, "crash", partitions=3)
    outcomes: list[str] = []
    with Producer(bootstrap_servers=boot, transactional_id="crash-1") as p:
        p.init_transactions()
        node = coordinator_node(cluster3, "crash-1")
        p.begin_transaction()
        for i in range(300):
            p.send("crash", value=f"c{i}".encode(), key=f"{i}".encode())
        p.flush()

        def commit() -> None:
            try:
                p.commit_transaction()
                outcomes.append("committed")
            except RafkaError as exc:
                outcomes.append(type(exc).__name__)

        t = threading.Thread(target=commit)
        t.start()
        cluster3.kill(node)
        t.join(120)
        assert not t.is_alive(), "commit_transaction hung"
    cluster3.up()  # bring the node back; the transaction must be complete either way
    wait_until(lambda: lso_caught_up(boot, "crash"), "LSO back at the high watermark", 90)
    rc = values(read_all(boot, "crash", "read_committed"))
    assert len(rc) in (0, 300), f"a transaction seen partially: {len(rc)} of 300 records"
    if outcomes == ["committed"]:
        assert len(rc) == 300, "commit_transaction returned but the records are not committed"
    with Admin(bootstrap_servers=boot) as admin:
        desc = admin.describe_transactions(["crash-1"])["crash-1"]
    state = desc.state
    assert state in ("CompleteCommit", "CompleteAbort", "Empty"), desc


def test_txn_state_topic_is_internal_and_replicated(cluster3: LocalCluster) -> None:
    """The coordinator's state lives in a replicated internal topic (created on first use)."""
    with Producer(bootstrap_servers=cluster3.bootstrap, transactional_id="meta-1") as p:
        p.init_transactions()
    with Admin(bootstrap_servers=cluster3.bootstrap) as admin:
        desc = admin.describe_topic(TXN_STATE_TOPIC)
    assert desc.internal
    assert len(desc.partitions) == 5
    assert all(len(e.replicas) == 3 for e in desc.partitions)
