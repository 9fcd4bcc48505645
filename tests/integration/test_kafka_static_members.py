"""Static membership (KIP-345, ``group.instance.id``) through the Kafka listener
(broker/kafka/groups.py): confluent-kafka consumers as real processes against a real node.

A static member that restarts within its session timeout gets its old partitions back and the
other members see no rebalance; a second live process with the same instance id takes over and
the first is told FENCED_INSTANCE_ID (fatal in librdkafka); LeaveGroup v3+ removes a static
member by its instance id, and its partitions move to the others at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rafka.client import Admin

from tests.integration.conftest import LocalCluster
from tests.integration.test_kafka_clients import _RawMember, create, kafka_bootstrap


@pytest.fixture(scope="module")
def cluster1(module_cluster1: LocalCluster) -> LocalCluster:
    return module_cluster1


# A static group member as a process: "A p p..." on each assignment (its partitions then),
# "R" on a revocation, "E code text" for an error poll() returns (it stops after a fatal one).
_STATIC_MEMBER = r"""
import sys
from confluent_kafka import Consumer, KafkaError
bootstrap, group, topic, instance, out = sys.argv[1:6]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
              "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "session.timeout.ms": 45000, "heartbeat.interval.ms": 500})
f = open(out, "a")


def on_assign(consumer, partitions):
    f.write("A " + " ".join(str(p.partition) for p in partitions) + "\n")
    f.flush()


def on_revoke(consumer, partitions):
    f.write("R\n")
    f.flush()


c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
while True:
    m = c.poll(0.2)
    if m is not None and m.error():
        e = m.error()
        f.write(f"E {e.code()} {e.str()}\n")
        f.flush()
        if e.code() == KafkaError._FATAL:
            break
"""


class _Member:
    def __init__(self, kb: str, group: str, topic: str, instance: str, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, "-c", _STATIC_MEMBER, kb, group, topic,
                                      instance, str(out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines() if self.out.exists() else []

    def assigned(self) -> set[int] | None:
        got = [ln for ln in self.lines() if ln.startswith("A")]
        return {int(x) for x in got[-1][1:].split()} if got else None

    def rebalances(self) -> int:
        return sum(1 for ln in self.lines() if ln[:1] in ("A", "R"))

    def errors(self) -> list[str]:
        return [ln for ln in self.lines() if ln.startswith("E")]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def _until(cond: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
        cluster1: LocalCluster, tmp_path: Path) -> None:
    kb = kafka_bootstrap(cluster1)
    create(cluster1, "static", partitions=4)
    a = _Member(kb, "stg", "static", "ia", tmp_path / "a.txt")
    b = _Member(kb, "stg", "static", "ib", tmp_path / "b.txt")
    members = [a, b]
    try:
        def settled() -> bool:
            pa, pb = a.assigned(), b.assigned()
            return pa is not None and pb is not None and len(pa) == len(pb) == 2 and not pa & pb

        _until(settled, "a and b never settled on two partitions each")
        with Admin(bootstrap_servers=cluster1.bootstrap) as admin:
            described = admin.describe_consumer_groups(["stg"])["stg"]
        assert len(described["members"]) == 2
        a_parts, b_seen = a.assigned(), b.rebalances()

        # a restarts (killed: a static member sends no LeaveGroup anyway) within its session
        a.kill()
        a2 = _Member(kb, "stg", "static", "ia", tmp_path / "a2.txt")
        members.append(a2)
        _until(lambda: a2.assigned() is not None, "the restarted member got no assignment")
        assert a2.assigned() == a_parts  # its old partitions back
        assert b.rebalances() == b_seen  # and the other member never rebalanced
        assert b.errors() == []

        # a second live process with the same instance id: the newer one takes over, the
        # older one is fenced (librdkafka: a fatal FENCED_INSTANCE_ID)
        a3 = _Member(kb, "stg", "static", "ia", tmp_path / "a3.txt")
        members.append(a3)
        _until(lambda: a3.assigned() is not None, "the newest member got no assignment")
        assert a3.assigned() == a_parts
        _until(lambda: a2.errors() != [], "the fenced member was never told")
        from confluent_kafka import KafkaError

        fatal = a2.errors()[-1]  # librdkafka's _FATAL, naming FENCED_INSTANCE_ID's text
        assert fatal.startswith(f"E {KafkaError._FATAL} ") and "group.instance.id" in fatal, fatal
        assert b.rebalances() == b_seen
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": kb})  # kept: a dropped handle ends its calls
        desc = admin.describe_consumer_groups(["stg"])["stg"].result(30)
        assert sorted(m.group_instance_id for m in desc.members) == ["ia", "ib"]
    finally:
        for m in members:
            m.proc.kill()
            m.proc.wait(10)


def test_leave_group_by_instance_id(cluster1: LocalCluster, tmp_path: Path) -> None:
    """LeaveGroup v3+ naming a static member by its instance id removes it at once (an
    admin's removeMembersFromConsumerGroup); a member id that does not hold the instance id
    is FENCED_INSTANCE_ID, an instance id nobody holds UNKNOWN_MEMBER_ID."""
    kb = kafka_bootstrap(cluster1)
    create(cluster1, "static-leave", partitions=2)
    a = _Member(kb, "stl", "static-leave", "la", tmp_path / "a.txt")
    b = _Member(kb, "stl", "static-leave", "lb", tmp_path / "b.txt")
    try:
        _until(lambda: a.assigned() is not None and b.assigned() is not None
               and len(a.assigned() or ()) == len(b.assigned() or ()) == 1,
               "a and b never settled on one partition each")
        b.kill()  # static: its partition waits for it (45 s session) unless removed
        host, port = kb.split(",")[0].split(":")
        raw = _RawMember((host, int(port)), "stl", "static-leave")
        try:
            resp = raw.call(13, 4, {"group_id": "stl", "members": [
                {"member_id": "not-its-id", "group_instance_id": "lb"},
                {"member_id": "", "group_instance_id": "nobody"}]})
            assert [int(m.error_code) for m in resp.members] == [82, 25]
            with Admin(bootstrap_servers=cluster1.bootstrap) as admin:
                assert len(admin.describe_consumer_groups(["stl"])["stl"]["members"]) == 2  # nothing removed
            resp = raw.call(13, 4, {"group_id": "stl", "members": [
                {"member_id": "", "group_instance_id": "lb"}]})
            assert int(resp.error_code) == 0 and [int(m.error_code) for m in resp.members] == [0]
            assert resp.members[0].group_instance_id == "lb"
            with Admin(bootstrap_servers=cluster1.bootstrap) as admin:
                left = admin.describe_consumer_groups(["stl"])["stl"]["members"]
            assert [m.get("instance_id") for m in left] == ["la"]  # removed at once
        finally:
            raw.close()
        _until(lambda: a.assigned() == {0, 1}, "a never took over b's partition")
    finally:
        for m in (a, b):
            m.proc.kill()
            m.proc.wait(10)

