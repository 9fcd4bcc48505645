"""``rafka group reset-offsets`` at parity with kafka-consumer-groups (issue 25): the pure
planner (``client/reset_plan.py``), then the CLI on a real one-node cluster — a dry run by
default, ``--execute``, ``--shift-by``, ``--to-current``, ``--by-duration``, ``--from-file`` /
``--export``, ``--topic t:0,1`` and a refusal while the group has a live member."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from rafka.client import Consumer, Producer, TopicPartition
from rafka.client.reset_plan import (
    PlanRow,
    Strategy,
    format_plan,
    parse_duration,
    parse_topic_selection,
    plan,
    read_plan_file,
)

from .conftest import ROOT, rafka

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_strategies_and_clamping() -> None:
    old, starts, ends = {T0: 5, T1: None}, {T0: 2, T1: 0}, {T0: 10, T1: 4}
    rows, notes = plan(Strategy("shift", -4), [T0, T1], old, starts, ends)
    assert rows == [PlanRow(T0, 5, 2), PlanRow(T1, None, 0)]  # 1 clamped up; no commit: from the end
    assert notes == ["offset 1 is before the log start 2 of t-0: reset to 2"]
    assert [r.new for r in plan(Strategy("current"), [T0, T1], old, starts, ends)[0]] == [5, 4]
    assert [r.new for r in plan(Strategy("earliest"), [T0, T1], old, starts, ends)[0]] == [2, 0]
    assert [r.new for r in plan(Strategy("latest"), [T0, T1], old, starts, ends)[0]] == [10, 4]
    assert [r.new for r in plan(Strategy("time", 123), [T0, T1], old, starts, ends, {T0: 7, T1: -1})[0]] == [7, 4]
    assert [r.new for r in plan(Strategy("file"), [T0], old, starts, ends, from_file={T0: 99})[0]] == [10]


def test_parsers() -> None:
    assert parse_topic_selection("t") == ("t", None)
    assert parse_topic_selection("t:1,0") == ("t", [0, 1])
    for bad in ("t:", "t:x", ":1"):
        with pytest.raises(ValueError):
            parse_topic_selection(bad)
    assert parse_duration("PT1H30M") == timedelta(hours=1, minutes=30)
    assert parse_duration("P1DT2S") == timedelta(days=1, seconds=2)
    assert parse_duration("90") == timedelta(seconds=90)
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_duration("1 hour")
    assert read_plan_file("# x\nt,0,5\n\ng,t,1,7\n") == {T0: 5, T1: 7}
    with pytest.raises(ValueError, match="line 1"):
        read_plan_file("t;0;5")
    assert format_plan("g", [PlanRow(T0, None, 3)])[1].split() == ["g", "t", "0", "-", "->", "3"]


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    r = rafka("group", "describe", group, "--json", "--bootstrap", bootstrap)
    return {row["partition"]: row["committed"] for row in json.loads(r.stdout)["partitions"]}


@pytest.mark.timeout(120)
def test_reset_offsets_cli_is_a_dry_run_until_execute(bootstrap: str, make_topic, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Producer(bootstrap, linger_ms=1) as p:
        for i in range(10):
            p.send(topic, f"v{i}".encode(), partition=i % 2).result(timeout=30)
    with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False) as c:
        c.commit({TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 5})

    def reset(*args: str) -> subprocess.CompletedProcess[bytes]:
        return rafka("group", "reset-offsets", group, *args, "--bootstrap", bootstrap)

    r = reset("--topic", f"{topic}:0", "--shift-by", "-3")
    out = r.stdout.decode()
    assert r.returncode == 0 and "OLD-OFFSET" in out and "NEW-OFFSET" in out, r
    assert out.splitlines()[1].split() == [group, topic, "0", "5", "->", "2"]
    assert "dry run: nothing changed" in out + r.stderr.decode()
    assert _committed(bootstrap, group) == {0: 5, 1: 5}  # nothing changed

    assert reset("--topic", f"{topic}:0", "--shift-by", "-3", "--execute").returncode == 0
    assert _committed(bootstrap, group) == {0: 2, 1: 5}
    assert reset("--all-topics", "--to-current", "--execute").returncode == 0
    assert _committed(bootstrap, group) == {0: 2, 1: 5}
    r = reset("--all-topics", "--by-duration", "PT1H", "--export")  # every record is younger
    assert r.stdout.decode().split() == [f"{topic},0,0", f"{topic},1,0"]
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(f"{topic},1,4\n")
    assert reset("--from-file", str(plan_file), "--execute").returncode == 0
    assert _committed(bootstrap, group) == {0: 2, 1: 4}
    # the cluster view of lag: 5 records per partition, committed 2 and 4
    lag = json.loads(rafka("group", "lag", "--json", "--bootstrap", bootstrap).stdout)
    assert {"group": group, "state": "Empty", "members": 0, "lag": 4, "partitions": 2} in lag

    member = subprocess.Popen([sys.executable, "-m", "rafka.cli", "consume", topic, "--group", group,
                               "--bootstrap", bootstrap], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            r = reset("--all-topics", "--to-earliest")
            if r.returncode != 0:
                break
            time.sleep(0.2)
        err = r.stderr.decode()
        assert r.returncode == 1 and "NON_EMPTY_GROUP" in err and "has 1 active member" in err, err
    finally:
        member.terminate()
        member.wait(timeout=30)
