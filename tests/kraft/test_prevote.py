"""Pre-vote and the leader lease (kraft/prevote.py): a follower that resumes after a pause
longer than the election timeout must not depose a healthy leader, and a dead leader is still
replaced.

Three pysyncobj voters in this process on loopback, ticked by hand (``autoTick=False``,
``doTick``) from one thread: a "paused" voter is simply not ticked, so its socket fills with
the leader's heartbeats exactly as under SIGSTOP. Before the fix (plain ``SyncObj``), the
resumed follower's first tick runs the election check before it reads those heartbeats, it
campaigns at term + 1, and the leader steps down on its ``request_vote`` — measured here:
``test_resumed_follower_keeps_leader_and_term[plain]`` fails every run (term 1 → 2, a new
election), which is why the plain class is kept as an expected failure.
"""

from __future__ import annotations

import time

import pytest
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.syncobj import _RAFT_STATE
from rafka.kraft.prevote import PreVoteSyncObj

from tests.kraft.handticked import CONF, free_ports, tick, wait_leader

pytestmark = pytest.mark.timeout(60)

_PAUSE_S = 2.0  # > raftMaxTimeout and > leaderFallbackTimeout, < connectionTimeout


@pytest.mark.parametrize("cls", [
    PreVoteSyncObj,
    pytest.param(SyncObj, id="plain", marks=pytest.mark.xfail(strict=True, reason="the defect")),
])
def test_resumed_follower_keeps_leader_and_term(make_nodes, cls) -> None:
    nodes = make_nodes(cls)
    leader, term = wait_leader(nodes)
    follower = next(n for n in nodes if n is not leader)
    tick([n for n in nodes if n is not follower], _PAUSE_S)  # the follower is "paused"
    assert leader._isLeader() and leader.raftCurrentTerm == term  # two of three: still leads
    tick(nodes, 2.0)  # resumed
    assert leader._isLeader(), "the resumed follower deposed the leader"
    assert [n.raftCurrentTerm for n in nodes] == [term] * 3
    assert all(n._getLeader() == leader.selfNode for n in nodes)
    if cls is PreVoteSyncObj:
        assert follower.prevote_rounds >= 1  # it did ask, and was refused
        assert sum(n.prevotes_refused for n in nodes) >= 1


def test_dead_leader_is_replaced(make_nodes) -> None:
    nodes = make_nodes(PreVoteSyncObj)
    leader, term = wait_leader(nodes)
    rest = [n for n in nodes if n is not leader]
    end = time.monotonic() + 10
    while time.monotonic() < end:  # the leader is "paused" for good
        tick(rest, 0.1)
        if any(n._isLeader() for n in rest):
            break
    new = [n for n in rest if n._isLeader()]
    assert len(new) == 1 and new[0].raftCurrentTerm > term
    assert time.monotonic() < end


def test_candidate_stuck_above_the_leaders_term_rejoins(make_nodes) -> None:
    """Issue 27, torture run C rounds 28 and 329: a voter left as a candidate one term above
    a healthy leader, every link up. It got there by a race the lease opens: its pre-vote was
    granted by a voter that had no leader at that moment, which then heard from the leader
    before the ``request_vote`` arrived and ignored it. From then on the leader and its follower
    drop its higher-term vote requests (lease) and refuse its pre-votes, and it drops their
    lower-term appends — stuck for good (≥ 25 s in the run). The race is set up here directly:
    one follower is put into that candidate state at term + 1. The fix (etcd raft's answer to a
    lower-term leader message) makes it tell the leader its term; the leader steps down and a
    new election at a higher term takes all three in.
    """
    nodes = make_nodes(PreVoteSyncObj)
    leader, term = wait_leader(nodes)
    stuck = next(n for n in nodes if n is not leader)
    stuck._SyncObj__setCurrentTerm(term + 1, stuck.selfNode.id)  # voted for itself at term + 1
    stuck._SyncObj__setState(_RAFT_STATE.CANDIDATE)
    stuck._SyncObj__raftLeader = None
    leader_obj, new_term = wait_leader(nodes)
    assert new_term > term + 1 or (new_term == term + 1 and leader_obj is stuck)
    assert [n.raftCurrentTerm for n in nodes] == [new_term] * 3
    assert sum(n.term_notices_sent for n in nodes) >= 1


def test_two_voters_whose_deadlines_pass_together_elect_without_a_split(make_nodes) -> None:
    """Issue 27, kill-all: two restarted voters (the third not up yet) whose election deadlines
    pass in the same moment both asked for pre-votes, both were granted by the other, both
    campaigned at term + 1, each voted for itself — a split vote, one more election timeout and
    the leader at term + 2 (4 of 30 kill-all rounds, docs/quorum.md "Run E"). A voter that
    grants a pre-vote to a peer with a lower address now stands back (its own round void, its
    deadline pushed), so exactly one campaigns. Ten trials, each on fresh voters."""
    splits = []
    for _trial in range(10):
        addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
        conf = SyncObjConf(**CONF)
        nodes = [PreVoteSyncObj(a, [b for b in addrs if b != a], conf) for a in addrs[:2]]
        try:
            for n in nodes:  # not before we say so
                n._SyncObj__raftElectionDeadline = float("inf")
            tick(nodes, 0.5)  # connected, no deadline reached
            assert all(n.raftCurrentTerm == 0 and not n._isLeader() for n in nodes)
            for n in nodes:
                n._SyncObj__raftElectionDeadline = 0  # both pass in the same tick
            end = time.monotonic() + 10
            while time.monotonic() < end and not any(n._isLeader() for n in nodes):
                tick(nodes, 0.01)
            leaders = [n for n in nodes if n._isLeader()]
            assert len(leaders) == 1
            splits.append(leaders[0].raftCurrentTerm > 1)
        finally:
            for n in nodes:
                n.destroy()
    assert not any(splits), f"{sum(splits)} of {len(splits)} elections needed a second term"


def test_a_started_voter_has_a_short_first_deadline(make_nodes) -> None:
    """Issue 27, kill-all: a voter that starts waits at most raftMinTimeout (not up to
    raftMaxTimeout) before its first pre-vote; after that the usual timeouts apply."""
    from pysyncobj.monotonic import monotonic as raft_clock
    from rafka.kraft.prevote import FIRST_DEADLINE

    nodes = make_nodes(PreVoteSyncObj)
    now = raft_clock()
    conf = SyncObjConf(**CONF)
    for n in nodes:
        ahead = n._SyncObj__raftElectionDeadline - now
        assert ahead <= conf.raftMinTimeout * FIRST_DEADLINE[1]
    leader, term = wait_leader(nodes)  # and the cluster elects as before, at the first term
    # elected at the first term, and no voter's term moved. A refused pre-vote is allowed: a
    # voter whose short first deadline passes before the new leader's first heartbeat reaches
    # it asks, and the lease refuses it without a term change (prevote.py, "First deadline";
    # a fresh-clone CI run met one such refusal)
    assert term == 1 and [n.raftCurrentTerm for n in nodes] == [1, 1, 1]
