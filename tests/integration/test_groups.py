"""Consumer groups on real processes: a 3-node ``rafka cluster up`` and consumers that are real
subprocesses (``group_consumer.py``: blocking Consumer, prints JSON lines, process-then-commit).

* 3 consumers on a 6-partition topic get 2 partitions each; ``kill -9`` of one moves its
  partitions to the two others (session timeout 2 s); no record is skipped across the rebalances
  (at-least-once, checked record by record: every produced record was printed by a survivor, or by
  the killed consumer *before* an offset it had committed); a second group receives every record;
  the killed member's late commit is rejected with ``UNKNOWN_MEMBER_ID``.
* Committed offsets survive ``kill -9`` of the active controller and of the leader of the group's
  ``__consumer_offsets`` partition (both restarted through the fixture); the member keeps its
  identity across the controller failover; ``commit()`` commits what iteration yielded; the
  ``rafka group`` CLI (list / describe --json with lag / reset-offsets / delete, one-line errors).

No wall-clock assertion: every wait is "until, with a generous deadline".
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from rafka.broker.groups.offsets import OFFSETS_TOPIC, offsets_partition
from rafka.client.aio._core import ClientCore
from rafka.client.errors import UnknownMemberIdError  # type: ignore[attr-defined]
from rafka.client.groups import coordinator_request
from rafka.client.sync import Admin, Consumer, Producer
from rafka.client.types import TopicPartition
from rafka.wire.protocol import ApiKey

from .conftest import PROJECT_ROOT, JsonLinesProc, LocalCluster, wait_until

pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).with_name("group_consumer.py")
SESSION_MS = 2000
DEADLINE_S = 60.0


class ConsumerProc(JsonLinesProc):
    """One ``group_consumer.py`` subprocess; its JSON lines are collected by a reader thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, log_dir: Path, name: str) -> None:
        self.name = name
        super().__init__([str(SCRIPT), bootstrap, group, topic, "--session-ms", str(SESSION_MS)],
                         log_dir / f"{name}.err", mode="w")

    def owned(self) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        for e in self.snapshot():
            tps = {tuple(x) for x in e.get("tps", ())}
            if e["ev"] == "assigned":
                out |= tps
            elif e["ev"] in ("revoked", "lost"):
                out -= tps
        return out

    def records(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["ev"] == "rec"]

    def committed(self) -> dict[int, int]:
        """partition -> highest offset this process committed (successfully)."""
        out: dict[int, int] = {}
        for e in self.snapshot():
            if e["ev"] == "commit":
                for _t, p, off in e["offsets"]:
                    out[p] = max(out.get(p, 0), off)
        return out

    def member(self) -> tuple[str, int]:
        a = [e for e in self.snapshot() if e["ev"] == "assigned"]
        return (a[-1]["member"], a[-1]["epoch"]) if a else ("", -1)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def interrupt(self) -> None:
        """Ctrl-C: the consumer closes (leaves the group) and exits."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self._reader.join(5)
        self.stderr.close()


@pytest.fixture
def procs(tmp_path: Path):
    made: list[ConsumerProc] = []

    def start(bootstrap: str, group: str, topic: str) -> ConsumerProc:
        p = ConsumerProc(bootstrap, group, topic, tmp_path, f"c{len(made)}-{group}")
        made.append(p)
        return p

    yield start
    for p in made:
        p.close()


def rafka(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rafka.cli", *args, "--bootstrap", bootstrap],
                          capture_output=True, text=True, timeout=120, cwd=str(PROJECT_ROOT))


def describe(bootstrap: str, group: str) -> dict[str, Any]:
    r = rafka("group", "describe", group, "--json", bootstrap=bootstrap)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def produce(bootstrap: str, topic: str, start: int, n: int, partitions: int) -> dict[tuple[int, int], str]:
    """``n`` records ``v<i>`` round-robin over the partitions; returns (partition, offset) -> value."""
    out: dict[tuple[int, int], str] = {}
    with Producer(bootstrap, acks="all", linger_ms=2) as producer:
        futs = [(f"v{i}", producer.send(topic, value=f"v{i}".encode(), partition=i % partitions))
                for i in range(start, start + n)]
        producer.flush()
        for v, f in futs:
            md = f.result()
            out[(md.partition, md.offset)] = v
    return out


# --------------------------------------------------------------------------- rebalances


def test_three_consumers_kill_one_no_record_skipped_two_groups(cluster3: LocalCluster, procs,
                                                               tmp_path: Path) -> None:
    bs = cluster3.bootstrap
    with Admin(bs) as admin:
        admin.create_topic("orders", 6, 3)
    produced = produce(bs, "orders", 0, 600, 6)

    ga = [procs(bs, "ga", "orders") for _ in range(3)]
    gb = procs(bs, "gb", "orders")

    def balanced(cs: list[ConsumerProc], each: int) -> bool:
        owned = [c.owned() for c in cs]
        return all(len(o) == each for o in owned) and len(set().union(*owned)) == each * len(cs)

    wait_until(lambda: balanced(ga, 2), "3 members with 2 partitions each")
    d = describe(bs, "ga")
    assert d["state"] == "Stable" and len(d["members"]) == 3
    assert sorted(len(m["assignment"][0]["partitions"]) for m in d["members"]) == [2, 2, 2]

    # more records while the group works, then kill -9 a member in the middle of them
    producer_done = threading.Event()

    def more() -> None:
        for k in range(6):
            produced.update(produce(bs, "orders", 600 + 200 * k, 200, 6))
            time.sleep(0.1)
        producer_done.set()

    t = threading.Thread(target=more)
    t.start()
    wait_until(lambda: len(ga[0].records()) > 100, "the victim consumed something")
    victim, survivors = ga[0], ga[1:]
    victim_member = victim.member()
    victim.kill()
    wait_until(lambda: balanced(survivors, 3), "the 2 survivors own 3 partitions each")
    t.join(60)
    assert producer_done.is_set()

    # at-least-once, record by record: what the victim committed it had printed before
    victim_committed = victim.committed()
    delivered: dict[tuple[int, int], str] = {}
    for r in victim.records():
        if r["o"] < victim_committed.get(r["p"], 0):
            delivered[(r["p"], r["o"])] = r["v"]

    def all_delivered() -> bool:
        got = dict(delivered)
        for c in survivors:
            got.update({(r["p"], r["o"]): r["v"] for r in c.records()})
        return all(got.get(k) == v for k, v in produced.items())

    wait_until(all_delivered, f"every one of {len(produced)} records delivered in group ga")
    got_b = lambda: {(r["p"], r["o"]): r["v"] for r in gb.records()}  # noqa: E731
    wait_until(lambda: all(got_b().get(k) == v for k, v in produced.items()),
               "every record delivered in group gb too")
    assert len(gb.owned()) == 6

    # the survivors commit everything: describe shows 2 members, lag 0 everywhere
    def caught_up() -> dict[str, Any] | None:
        d = describe(bs, "ga")
        rows = d["partitions"]
        ok = len(d["members"]) == 2 and len(rows) == 6 and all(r["lag"] == 0 for r in rows)
        return d if ok else None

    d = wait_until(caught_up, "group ga committed everything (lag 0)")
    assert victim_member[0] not in {m["member_id"] for m in d["members"]}
    assert sum(r["high_watermark"] for r in d["partitions"]) == len(produced)

    # the killed member (a zombie that missed its session) cannot commit any more
    async def zombie_commit() -> None:
        async with trio.open_nursery() as nursery:
            core = ClientCore(bs, client_id="zombie")
            core.open(nursery)
            try:
                await coordinator_request(core, "ga", ApiKey.OFFSET_COMMIT, {
                    "group_id": "ga", "member_id": victim_member[0], "member_epoch": victim_member[1],
                    "topics": [{"name": "orders", "partitions": [{"partition": 0, "offset": 0}]}]})
            finally:
                await core.aclose()
                nursery.cancel_scope.cancel()

    with pytest.raises(UnknownMemberIdError):
        try:
            trio.run(zombie_commit)
        except BaseExceptionGroup as eg:  # the nursery wraps it
            raise eg.exceptions[0] from None
    assert describe(bs, "ga")["partitions"][0]["committed"] > 0  # unchanged by the zombie


# --------------------------------------------------------------------------- failover + CLI


def _leader_of(bs: str, topic: str, partition: int) -> int:
    with Admin(bs) as admin:
        return next(p.leader for p in admin.describe_topic(topic).partitions if p.partition == partition)


def _controller(bs: str) -> int:
    with Admin(bs) as admin:
        return int(admin.describe_quorum()["leader_id"])


def test_offsets_survive_controller_and_coordinator_kill_and_cli(cluster3: LocalCluster, procs) -> None:
    bs = cluster3.bootstrap
    with Admin(bs) as admin:
        admin.create_topic("ledger", 3, 3)
    produced = produce(bs, "ledger", 0, 300, 3)

    # the blocking Consumer: iterate, commit() commits exactly what was yielded
    yielded: dict[int, int] = {}
    with Consumer("ledger", bootstrap_servers=bs, group_id="gc", auto_offset_reset="earliest",
                  enable_auto_commit=False, session_timeout_ms=SESSION_MS) as consumer:
        for n, rec in enumerate(consumer, 1):
            yielded[rec.partition] = rec.offset + 1
            if n == 120:
                break
        consumer.commit()  # the offsets after the records yielded, not after the fetched chunk
        for p, off in yielded.items():
            assert consumer.committed(TopicPartition("ledger", p)) == off
    yielded = {p: yielded.get(p, 0) for p in range(3)}

    # an Empty group with committed offsets: listed and described, with lag
    r = rafka("group", "list", bootstrap=bs)
    assert r.returncode == 0 and any(line.split("\t")[:2] == ["gc", "Empty"] for line in r.stdout.splitlines()), r
    d = describe(bs, "gc")
    assert d["state"] == "Empty" and d["members"] == []
    rows = {row["partition"]: row for row in d["partitions"]}
    assert {p: rows[p]["committed"] for p, off in yielded.items() if off} == \
        {p: off for p, off in yielded.items() if off}
    assert all(row["lag"] == 100 - row["committed"] for row in rows.values())

    # a real consumer process resumes exactly at the committed offsets
    c = procs(bs, "gc", "ledger")
    wait_until(lambda: len(c.owned()) == 3, "the member owns the 3 partitions")
    first = {}
    for rec in wait_until(lambda: len(c.records()) >= 300 - sum(yielded.values()) and c.records(),
                          "the member consumed the rest"):
        first.setdefault(rec["p"], rec["o"])
    assert first == {p: off for p, off in yielded.items() if off < 100}
    member_id = c.member()[0]

    r = rafka("group", "reset-offsets", "gc", "--to-earliest", bootstrap=bs)
    assert r.returncode == 1 and r.stderr.strip().startswith("error: NON_EMPTY_GROUP:"), r
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1

    def committed_all(total: int) -> bool:
        mine = c.committed()
        return sum(max(mine.get(p, 0), yielded[p]) for p in range(3)) == total

    wait_until(lambda: committed_all(300), "the member committed everything")

    # kill -9 the active controller: group state (membership) and offsets survive
    ctl = _controller(bs)
    cluster3.kill(ctl)
    produced.update(produce(bs, "ledger", 300, 60, 3))
    wait_until(lambda: committed_all(360), "commits go on after the controller failover")
    d = describe(bs, "gc")
    assert [m["member_id"] for m in d["members"]] == [member_id]
    cluster3.up()  # bring the killed node back

    # kill -9 the leader of gc's __consumer_offsets partition (the group's coordinator)
    with Admin(bs) as admin:
        n = len(admin.describe_topic(OFFSETS_TOPIC).partitions)
    coord = wait_until(lambda: _leader_of(bs, OFFSETS_TOPIC, offsets_partition("gc", n)) > 0 and
                       _leader_of(bs, OFFSETS_TOPIC, offsets_partition("gc", n)), "a coordinator")
    before = {row["partition"]: row["committed"] for row in describe(bs, "gc")["partitions"]}
    assert sum(before.values()) == 360
    cluster3.kill(coord)
    after = wait_until(lambda: _try_describe(bs, "gc"), "the new coordinator answers")
    assert {row["partition"]: row["committed"] for row in after["partitions"]} == before
    produced.update(produce(bs, "ledger", 360, 60, 3))
    wait_until(lambda: committed_all(420), "commits go on after the coordinator failover")
    cluster3.up()

    # no record skipped by the member across both failovers
    seen = {(r["p"], r["o"]): r["v"] for r in c.records()}
    for (p, o), v in produced.items():
        if o >= yielded[p]:
            assert seen.get((p, o)) == v, (p, o)

    # Ctrl-C: the member leaves; the group is Empty, offsets kept; reset, then delete
    c.interrupt()
    wait_until(lambda: describe(bs, "gc")["members"] == [], "the member left")
    r = rafka("group", "reset-offsets", "gc", "--to-earliest", "--json", "--execute",
              "--metadata", "replay from 0", bootstrap=bs)
    assert r.returncode == 0, r.stderr
    assert {e["partition"]: e["offset"] for e in json.loads(r.stdout)} == {0: 0, 1: 0, 2: 0}
    d = describe(bs, "gc")
    assert all(row["committed"] == 0 and row["lag"] == 140 for row in d["partitions"]), d
    assert {row["metadata"] for row in d["partitions"]} == {"replay from 0"}, d  # OffsetAndMetadata
    r = rafka("group", "reset-offsets", "gc", "--to-latest", "--json", "--execute", bootstrap=bs)
    assert r.returncode == 0 and {e["offset"] for e in json.loads(r.stdout)} == {140}, r
    assert {row["metadata"] for row in describe(bs, "gc")["partitions"]} == {""}
    r = rafka("group", "delete", "gc", bootstrap=bs)
    assert r.returncode == 0 and "deleted group gc" in r.stdout, r
    r = rafka("group", "describe", "gc", bootstrap=bs)
    assert r.returncode == 1 and r.stderr.strip() == "error: GROUP_ID_NOT_FOUND: no group 'gc'", r
    assert "gc" not in rafka("group", "list", bootstrap=bs).stdout.split()


def _try_describe(bs: str, group: str) -> dict[str, Any] | None:
    r = rafka("group", "describe", group, "--json", bootstrap=bs)
    return json.loads(r.stdout) if r.returncode == 0 else None
