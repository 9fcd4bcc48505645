"""The Raft tick thread sleeps until its next deadline, not a fixed 50 ms (issue 26).

Theory of operation
-------------------
pysyncobj's tick thread runs ``_onTick(autoTickPeriod)`` in a loop: the Raft state machine,
then ``self._poller.poll(autoTickPeriod)``, which sleeps until a socket or the command pipe
(pysyncobj's ``PipeNotifier``, written by ``_applyCommand`` from any thread) has an event or the
period passes. At the default 50 ms that is 20 timer wake-ups a second per voter on top of the
message wake-ups, and each tick costs ~250-300 µs of CPU on this VM: an idle 3-voter cluster's
tick threads were ~28 of its ~40 ms/s (``bench/idle_threads.py``).

In steady state every event that needs the state machine arrives as a poll event anyway — a
message from a peer, a command through the pipe — and only two timers matter: a leader's next
heartbeat (``__newAppendEntriesTime``) and a follower's or candidate's election deadline
(``__raftElectionDeadline``, which pre-vote also uses). :class:`DeadlinePoller` wraps the poller
so that the poll sleeps until the earlier of that deadline and ``MAX_WAIT_S``. A follower then
wakes for its leader's heartbeats only; a leader for its heartbeat timer and the answers.

*Steady* is narrow on purpose; anything else polls with the configured period, exactly as
before:

* every peer's link is CONNECTED and no incoming connection is still unidentified — the
  transport's reconnect and bind retries, pysyncobj's connect timeout and the pre-auth
  deadline (kraft/raft_guard.py) run from the tick and need it;
* the transport is bound, the node has peers (a lone voter commits from its own ticks), no
  command waits in the queue (``_checkCommandsToApply`` stops after one append period), no
  committed entry waits to be applied, and the node is not being destroyed.

A connected peer that goes silent is still noticed: a follower's election deadline wakes it
(pre-vote then writes to the links, and a write checks pysyncobj's connection timeout), a
leader writes a heartbeat every append period. ``MAX_WAIT_S`` bounds the delay of any timer
not named here (time-based log compaction, 300 s).

Only the sleep changes, never the state machine: a deadline is met no later than before (it is
now met when it falls due, not at the next 50 ms tick).
"""

from __future__ import annotations

from typing import Any

from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.syncobj import _RAFT_STATE
from pysyncobj.tcp_connection import CONNECTION_STATE

__all__ = ["DeadlinePoller", "MAX_WAIT_S"]

# the longest sleep in steady state; bounds any timer this module does not know of
MAX_WAIT_S = 0.5


class DeadlinePoller:
    """Wraps a SyncObj's poller: ``poll(period)`` sleeps until the node's next Raft deadline
    when the node is steady (module docstring), ``period`` otherwise. Runs on the tick thread,
    which alone touches the state it reads."""

    def __init__(self, inner: Any, node: Any, until_deadline: bool = True) -> None:
        self._inner = inner
        self._node = node
        self.until_deadline = until_deadline  # False: always the period (counted, for A/Bs)
        self.steady_polls = 0  # polls that slept until a deadline
        self.period_polls = 0  # polls with the configured period

    def __getattr__(self, name: str) -> Any:  # subscribe / unsubscribe go to the real poller
        return getattr(self._inner, name)

    def poll(self, timeout: float) -> None:
        wait = self._steady_wait() if self.until_deadline else None
        if wait is None:
            self.period_polls += 1
            self._inner.poll(timeout)
        else:
            self.steady_polls += 1
            self._inner.poll(wait)

    def _steady_wait(self) -> float | None:
        """Seconds to the next deadline if the node is steady, else None."""
        n = self._node
        others = n._SyncObj__otherNodes
        if not others or n._SyncObj__destroying or n._SyncObj__selfNode is None:
            return None
        transport = n._SyncObj__transport
        if not getattr(transport, "_ready", False) or getattr(transport, "_unknownConnections", None):
            return None
        conns = transport._connections
        for node in others:
            conn = conns.get(node)
            if conn is None or conn.state != CONNECTION_STATE.CONNECTED:
                return None
        if n._SyncObj__commandsQueue._FastQueue__queue:
            return None
        if n._SyncObj__raftCommitIndex > n._SyncObj__raftLastApplied:
            return None
        if n._SyncObj__raftState == _RAFT_STATE.LEADER:
            deadline = n._SyncObj__newAppendEntriesTime
        else:
            deadline = n._SyncObj__raftElectionDeadline
        wait = deadline - raft_clock()
        if wait <= 0:
            return None  # due now (or held back, e.g. no peer connected): the old period
        return min(wait, MAX_WAIT_S)
