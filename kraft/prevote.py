"""Pre-vote and leader stickiness for pysyncobj (Raft thesis §9.6 and §4.2.3; etcd raft's
``PreVote`` and ``CheckQuorum``).

Theory of operation
-------------------
pysyncobj 0.3.17 starts an election as soon as a follower's election deadline has passed
while it counts any peer connected: it raises its term and sends ``request_vote``. Any voter —
the healthy leader included — that receives a ``request_vote`` with a higher term adopts that
term and becomes a follower. So a follower that was paused (SIGSTOP, a long GC, an overloaded
box) deposes a healthy leader the moment it resumes: its first tick runs the election check
before it reads the leader's heartbeats waiting in its socket (measured: term 5 → 8 and a
leader change after a mere follower pause, issue 27).

:class:`PreVoteSyncObj` changes two things, and nothing else:

* **Pre-vote.** When the election deadline passes, the node first asks every peer
  ``pre_vote`` (the term it *would* campaign in, its last log index and term) without changing
  its own term or state, and pushes its deadline one election timeout further. A peer grants
  if that term is above its own, the candidate's log is at least as up to date as its own, and
  it is not in a leader's lease (below). Only when a majority (itself included) has granted
  does the node let pysyncobj's own election run, at its next tick. A node whose peers still
  hear from a leader therefore never raises its term.
* **Lease (leader stickiness).** A voter that heard from a current leader within
  ``raftMinTimeout``, or that is the leader, ignores ``request_vote`` messages of a higher term
  and refuses pre-votes. Check-quorum proper — a leader that has not heard from a majority
  steps down — is pysyncobj's ``leaderFallbackTimeout`` (rafka sets it to five heartbeat
  periods, at least 600 ms: between ``raftMinTimeout`` and ``raftMaxTimeout`` at the default
  timing; kraft/syncobj_engine.py), so a leader's lease is only as long as it can prove it
  still leads.

* **Term notice (etcd raft's answer to a lower-term leader).** The lease opens one race: a
  voter grants a pre-vote while it has no leader, then hears from one before the candidate's
  ``request_vote`` arrives and ignores it. The candidate now sits one term above a healthy
  leader, and neither side listens to the other — the leader and its follower drop its vote
  requests (lease) and refuse its pre-votes, it drops their lower-term appends (torture run C:
  stuck ≥ 25 s with every link up, one missed write when the leader then died). So a voter
  that receives ``append_entries`` of a lower term answers ``term_notice`` with its own term,
  and a voter that receives a notice of a higher term adopts it as a follower with no leader
  (a leader steps down: any Raft message of a higher term does that). A new election at a
  higher term then takes every voter in. pysyncobj's own messages other than ``request_vote``
  and ``append_entries`` carry no term, which is why this needs a message of its own.

* **Tie-break.** Two voters whose deadlines pass together — after a kill-all, the first two
  restarted voters, the third not up yet — each granted the other's pre-vote, both campaigned
  at term + 1 and voted for themselves: a split vote, one more election timeout, the leader at
  term + 2 (4 of 30 kill-all rounds, docs/quorum.md "Run E"). A follower that grants a
  pre-vote to a peer with a lower address (the ``host:port`` strings compared) now stands
  back: it voids its own pre-vote round, forgets a won one it has not used yet, and pushes its
  election deadline one timeout on. Of two such voters exactly one campaigns (the lower); a
  grant to a higher address changes nothing, so the lower one's own round still goes ahead.
  If the one it stood back for does not win, it campaigns itself after that timeout.

* **First deadline.** pysyncobj gives a voter that starts the same deadline as one that lost
  its leader: ``raftMinTimeout``–``raftMaxTimeout`` (700–2000 ms by default) ahead. After a kill-all the
  voter with the longest log — the one the others' pre-votes wait for — is often the second
  one up, and the election then waited out that whole fresh timeout (second engine open →
  active controller: 0.29–1.06 s, p50 0.60 s over 30 rounds, docs/quorum.md "Run E"). A
  started voter's first deadline is now 0.25–1.0 × ``raftMinTimeout`` ahead (``FIRST_DEADLINE``).
  Pre-vote makes the early try harmless where a leader lives: a restarted follower whose
  first deadline passes before the leader's first heartbeat reaches it asks, the voters in
  the lease refuse, and its deadline moves a whole timeout on, terms unchanged.

What is kept: a leadership transfer (pysyncobj's ``timeout_now``, not used by rafka) skips the
pre-vote on the target, but the other voters' lease would still ignore its ``request_vote``
while the old leader's heartbeats arrive (etcd marks such votes; we have no field for it).
A lone voter campaigns at once. Peers running a pysyncobj without this class ignore
``pre_vote`` messages (unknown type), so a mixed-version quorum elects only old-version
leaders — upgrade all voters together.

The override points are pysyncobj's tick (``_onTick``, run by its tick thread) and its message
handler (``_SyncObj__onMessageReceived``, the callback its transport was given at
construction); both run on the tick thread only, so the counters below need no lock.
"""

from __future__ import annotations

import random
from typing import Any

from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.syncobj import _RAFT_STATE

__all__ = ["PreVoteSyncObj", "FIRST_DEADLINE"]

_NEVER = float("-inf")
# a started voter's first election deadline, in fractions of raftMinTimeout (module docstring)
FIRST_DEADLINE = (0.25, 1.0)


def _address(node: Any) -> str:
    return str(getattr(node, "address", node))


class PreVoteSyncObj(SyncObj):  # type: ignore[misc]
    """A ``SyncObj`` with pre-vote and a leader lease; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # set before SyncObj.__init__: its tick thread may tick before it returns
        self._pv_round = 0
        self._pv_grants: set[Any] = set()
        self._pv_passed_term: int | None = None  # term in which a pre-vote was won, until used
        self._pv_leader_contact = _NEVER  # raft_clock() of the last heartbeat of a current leader
        self.prevote_rounds = 0  # pre-votes this node started
        self.prevotes_refused = 0  # pre-votes this node refused to another
        self.votes_ignored_in_lease = 0  # higher-term request_vote messages dropped
        self.term_notices_sent = 0  # lower-term appends answered with this node's term
        self.term_notices_adopted = 0  # higher terms learnt from a notice
        self.prevotes_deferred = 0  # pre-votes granted to a lower address, standing back
        super().__init__(*args, **kwargs)
        # the first election deadline after a start (module docstring, "First deadline")
        conf = self._SyncObj__conf
        self._SyncObj__raftElectionDeadline = raft_clock() + conf.raftMinTimeout * random.uniform(*FIRST_DEADLINE)

    # -- pysyncobj private state, read and written on the tick thread ----------------------

    def _pv_term(self) -> int:
        return int(self._SyncObj__raftCurrentTerm)

    def _pv_others(self) -> Any:
        return self._SyncObj__otherNodes

    def in_leader_lease(self, now: float) -> bool:
        """Leader, or heard from a current leader within ``raftMinTimeout``."""
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            return True
        return (self._SyncObj__raftLeader is not None
                and now - self._pv_leader_contact < self._SyncObj__conf.raftMinTimeout)

    def _pv_log_ok(self, last_index: int, last_term: int) -> bool:
        my_term = self._SyncObj__getCurrentLogTerm()
        return bool(last_term > my_term or (last_term == my_term and last_index >= self._SyncObj__getCurrentLogIndex()))

    # -- the tick: pre-vote before pysyncobj's election check ------------------------------

    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N802,N803 (pysyncobj's names)
        self._prevote_before_tick()
        super()._onTick(timeToWait)

    def _prevote_before_tick(self) -> None:
        if self._SyncObj__selfNode is None or self._SyncObj__raftState == _RAFT_STATE.LEADER:
            self._pv_passed_term = None
            return
        others = self._pv_others()
        if not others or self._SyncObj__transferInProgress:
            return  # a lone voter, or the leader asked us to campaign
        if self._pv_passed_term is not None:
            if self._pv_passed_term == self._pv_term():
                return  # won: pysyncobj campaigns in this tick (deadline set to 0)
            self._pv_passed_term = None  # it campaigned (or a new term came): pre-vote again
        now = raft_clock()
        if self._SyncObj__raftElectionDeadline >= now or not self._SyncObj__connectedToAnyone():
            return
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        self._pv_round += 1
        self._pv_grants = {self._SyncObj__selfNode}
        self.prevote_rounds += 1
        msg = {"type": "pre_vote", "term": self._pv_term(), "round": self._pv_round,
               "next_term": self._pv_term() + 1,
               "last_log_index": self._SyncObj__getCurrentLogIndex(),
               "last_log_term": self._SyncObj__getCurrentLogTerm()}
        transport = self._SyncObj__transport
        for node in others:
            transport.send(node, msg)

    # -- messages ----------------------------------------------------------------------

    def _SyncObj__onMessageReceived(self, node: Any, message: dict[str, Any]) -> None:  # noqa: N802
        kind = message.get("type")
        if kind == "pre_vote":
            self._on_pre_vote(node, message)
            return
        if kind == "pre_vote_response":
            self._on_pre_vote_response(node, message)
            return
        if kind == "term_notice":
            self._on_term_notice(message)
            return
        now = raft_clock()
        if (kind == "request_vote" and message.get("term", 0) > self._pv_term()
                and self._SyncObj__selfNode is not None and self.in_leader_lease(now)):
            self.votes_ignored_in_lease += 1
            return
        if kind == "append_entries" and self._SyncObj__selfNode is not None:
            if message.get("term", -1) >= self._pv_term():
                self._pv_leader_contact = now
                self._pv_passed_term = None  # a won pre-vote not yet used is void: a leader is back
            else:  # a leader behind this node's term: tell it (pysyncobj would just drop it)
                self.term_notices_sent += 1
                self._SyncObj__transport.send(node, {"type": "term_notice", "term": self._pv_term()})
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _on_term_notice(self, message: dict[str, Any]) -> None:
        term = int(message.get("term", -1))
        if self._SyncObj__selfNode is None or term <= self._pv_term():
            return
        self.term_notices_adopted += 1
        self._SyncObj__setCurrentTerm(term, None)
        self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
        if self._SyncObj__raftLeader is not None:
            self._SyncObj__onLeaderChanged()  # commands waiting on the old leader fail now
        self._SyncObj__raftLeader = None
        self._pv_passed_term = None
        self._pv_leader_contact = _NEVER

    def _on_pre_vote(self, node: Any, message: dict[str, Any]) -> None:
        now = raft_clock()
        granted = (self._SyncObj__selfNode is not None
                   and int(message.get("next_term", 0)) > self._pv_term()
                   and self._pv_log_ok(int(message.get("last_log_index", -1)), int(message.get("last_log_term", -1)))
                   and not self.in_leader_lease(now))
        if not granted:
            self.prevotes_refused += 1
        elif self._SyncObj__raftState == _RAFT_STATE.FOLLOWER and _address(node) < _address(self._SyncObj__selfNode):
            # stand back for a lower address (module docstring, "Tie-break"): void our own round
            # (its late grants are ignored), forget a won one not yet used, push our deadline
            self._pv_round += 1
            self._pv_grants = set()
            self._pv_passed_term = None
            self._SyncObj__raftElectionDeadline = max(
                self._SyncObj__raftElectionDeadline, now + self._SyncObj__generateRaftTimeout())
            self.prevotes_deferred += 1
        self._SyncObj__transport.send(node, {"type": "pre_vote_response", "term": self._pv_term(),
                                             "round": message.get("round"), "granted": granted})

    def _on_pre_vote_response(self, node: Any, message: dict[str, Any]) -> None:
        if (not message.get("granted") or message.get("round") != self._pv_round
                or self._SyncObj__raftState == _RAFT_STATE.LEADER or self._pv_passed_term is not None):
            return
        self._pv_grants.add(node)
        if len(self._pv_grants) > (len(self._pv_others()) + 1) / 2:
            self._pv_passed_term = self._pv_term()
            self._SyncObj__raftElectionDeadline = 0  # pysyncobj campaigns at its next tick
