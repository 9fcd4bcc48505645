"""The Raft timing defaults (issue 26): a heartbeat period that is a real liveness margin.

The AppendEntries heartbeat must stay well inside the election timeout — at most a 3.5th of
the minimum, and at least two of pysyncobj's 50 ms ticks (the leader sends only on a tick, so a
shorter period is rounded up to the tick anyway and only costs messages). Explicit settings
still win, e.g. the former 150–600 ms / 30 ms for a test that wants fast failover.
"""

from __future__ import annotations

import pytest
from rafka.broker.config import CONTROLLER_SETTINGS
from rafka.kraft.syncobj_engine import raft_conf_from_settings


def test_default_heartbeat_is_a_third_or_less_of_the_election_timeout_and_not_below_the_tick() -> None:
    conf = raft_conf_from_settings({})
    assert conf["appendEntriesPeriod"] <= conf["raftMinTimeout"] / 3
    assert conf["appendEntriesPeriod"] >= 2 * conf["autoTickPeriod"] - 1e-9
    assert (conf["raftMinTimeout"], conf["raftMaxTimeout"], conf["appendEntriesPeriod"]) == pytest.approx((0.7, 2.0, 0.2))
    assert conf["leaderFallbackTimeout"] >= 5 * conf["appendEntriesPeriod"]
    # the node's settings table says the same defaults as the engine
    assert CONTROLLER_SETTINGS["raft.min.timeout.ms"][1] == 700
    assert CONTROLLER_SETTINGS["raft.max.timeout.ms"][1] == 2000


def test_explicit_settings_win_and_the_heartbeat_is_clamped_to_the_minimum() -> None:
    old = raft_conf_from_settings({"raft.min.timeout.ms": 150, "raft.max.timeout.ms": 600,
                                   "raft.append.entries.period.ms": 30})
    assert (old["raftMinTimeout"], old["raftMaxTimeout"], old["appendEntriesPeriod"]) == (0.15, 0.6, 0.03)
    short = raft_conf_from_settings({"raft.min.timeout.ms": 150})
    assert short["appendEntriesPeriod"] <= 0.15 / 3.5
