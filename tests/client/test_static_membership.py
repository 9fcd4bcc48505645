"""Static group membership (issue 25, KIP-345) on a real one-node cluster.

A ``rafka consume --group g --instance-id i`` process is killed with SIGKILL; a new consumer
with the same instance id gets every partition back although the dead member's session (60 s)
has not expired — with a dynamic member it would wait that long. Then a second live consumer
with the same instance id fences the first: its ``poll`` raises ``FencedInstanceIdError``.
No wall-clock assertion: the waits are "until, with a deadline" shorter than the session.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from rafka.client import Admin, Consumer
from rafka.client.errors import FencedInstanceIdError  # type: ignore[attr-defined]
from rafka.client.types import TopicPartition

from .conftest import ROOT

SESSION_MS = 60_000


def _members(bootstrap: str, group: str) -> list[dict[str, Any]]:
    with Admin(bootstrap) as a:
        try:
            return list(a.describe_consumer_groups([group])[group].get("members") or [])
        except Exception:  # noqa: BLE001 - not there yet
            return []


def _wait_assigned(c: Consumer, n: int, deadline_s: float) -> set[TopicPartition]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        c.poll(timeout_ms=200)
        if len(c.assignment()) == n:
            return set(c.assignment())
    return set(c.assignment())


@pytest.mark.timeout(120)
def test_a_restarted_static_member_gets_its_partitions_back_at_once(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(4)
    group = f"static-{topic}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rafka.cli", "consume", topic, "--group", group,
         "--instance-id", "worker-1", "--bootstrap", bootstrap],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            ms = _members(bootstrap, group)
            if ms and sum(len(t["partitions"]) for t in ms[0]["assignment"]) == 4:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the CLI consumer never got its 4 partitions: {_members(bootstrap, group)}")
        assert ms[0]["instance_id"] == "worker-1"
        dead_member = ms[0]["member_id"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    opts = dict(bootstrap_servers=bootstrap, group_id=group, group_instance_id="worker-1",
                session_timeout_ms=SESSION_MS, enable_auto_commit=False)
    with Consumer(topic, **opts) as first:
        # the dead member's session has 60 s to go: only the instance id can give these back
        got = _wait_assigned(first, 4, deadline_s=20)
        assert got == {TopicPartition(topic, p) for p in range(4)}
        ms = _members(bootstrap, group)
        assert [m["instance_id"] for m in ms] == ["worker-1"] and ms[0]["member_id"] != dead_member

        with Consumer(topic, **opts) as second:
            assert _wait_assigned(second, 4, deadline_s=20) == got
            with pytest.raises(FencedInstanceIdError) as fenced:
                for _ in range(200):
                    first.poll(timeout_ms=100)
            assert "worker-1" in fenced.value.message
    # static members do not leave on close: the member is still there (until its session ends)
    assert [m["instance_id"] for m in _members(bootstrap, group)] == ["worker-1"]
