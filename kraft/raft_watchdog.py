"""A watchdog over the controller quorum's liveness: commit progress, the Raft listener, links.

Theory of operation
-------------------
Every ``interval_s`` the engine hands :meth:`RaftWatchdog.observe` one :class:`RaftSample` —
what pysyncobj shows of itself: is a leader known, the commit index, the last log index, whether
its Raft listener is bound (and the last bind error), and the state of every peer link. The
watchdog is a pure function of those samples and ``now`` (tests feed it by hand); it returns
the log lines to write and keeps :attr:`state`, which ``statistics()`` and the Prometheus
exporter (broker/metrics.py) read.

*Progress* means: a leader is known, a quorum counts connected and nothing is waiting to
commit (last log index ≤ commit index), or the commit index moved. (The quorum matters: a
voter cut off from every peer keeps naming its last leader in pysyncobj.) ``seconds_since_commit`` counts from the last sample that
showed progress, so an idle quorum reads 0 and a stalled one climbs: alert on it. When it
passes ``stall_after_s`` the watchdog logs every link's Raft state (then every
``log_every_s``), as a WARNING either way, worded "Raft stall" when a quorum of voters counts
connected (this voter plus its connected peers are a majority: the quorum *should* commit;
only this sets ``stalled``) and "Raft waits" when not (a partition or dead peers). A gap of
more than ``max_sample_gap_s`` between samples means this process itself did not run (it was
paused): the count starts again rather than blaming the quorum for our own pause.

The Raft listener: pysyncobj retries a failed bind every second, silently, and does nothing
else until it succeeds — it neither dials nor votes (issue 27: a Raft port in the kernel's
ephemeral range, taken as the source port of some outgoing connection, kept a voter out of the
quorum for 53 s with nothing in its log but ``listener_bound: False``). After
``bind_grace_s`` unbound the watchdog logs an ERROR naming the address and the error (then
every ``log_every_s``) and ``listener_bound`` reads False in the metrics; pysyncobj's own retry
goes on, so the node recovers as soon as the port frees.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RaftSample", "RaftWatchdog", "WatchdogState", "bind_error"]

log = logging.getLogger("rafka.kraft.watchdog")


@dataclass(frozen=True, slots=True)
class RaftSample:
    """What the engine sees of pysyncobj at one moment."""

    leader_known: bool
    commit_index: int
    last_index: int
    listener_bound: bool | None  # None: pysyncobj has no server (a read-only node)
    bind_error: str  # why the last bind failed ('' when bound or unknown)
    listen_address: str
    peers: dict[str, str]  # Raft address -> "connected" | "connecting" | "disconnected" | "none"
    raft_connected: int  # peers Raft counts connected
    voters: int  # this voter and its peers
    links: dict[str, Any] = field(default_factory=dict)  # the full view, for the log line only


@dataclass(slots=True)
class WatchdogState:
    seconds_since_commit: float = 0.0
    stalled: bool = False  # no progress for stall_after_s while a quorum counts connected
    listener_bound: bool | None = None
    peers: dict[str, str] = field(default_factory=dict)
    stall_reports: int = 0
    bind_reports: int = 0


class RaftWatchdog:
    def __init__(self, *, stall_after_s: float = 5.0, log_every_s: float = 10.0,
                 bind_grace_s: float = 2.0, max_sample_gap_s: float = 3.0) -> None:
        self.stall_after_s = stall_after_s
        self.log_every_s = log_every_s
        self.bind_grace_s = bind_grace_s
        self.max_sample_gap_s = max_sample_gap_s
        self.state = WatchdogState()
        self._progress_at: float | None = None
        self._commit_index = -1
        self._unbound_since: float | None = None
        self._last_stall_log = float("-inf")
        self._last_bind_log = float("-inf")
        self._last_sample: float | None = None

    def observe(self, sample: RaftSample, now: float) -> list[tuple[int, str]]:
        """Fold one sample in; returns ``(logging level, message)`` pairs to log."""
        out: list[tuple[int, str]] = []
        st = self.state
        st.peers = dict(sample.peers)
        st.listener_bound = sample.listener_bound
        out += self._watch_listener(sample, now)
        quorum_reachable = 1 + sample.raft_connected > sample.voters / 2
        if self._last_sample is not None and now - self._last_sample > self.max_sample_gap_s:
            self._progress_at = None  # this process did not run (SIGSTOP, a stalled box): no verdict
        self._last_sample = now
        # a follower cut off from every peer keeps naming its last leader: not idle, stuck
        idle = sample.leader_known and sample.last_index <= sample.commit_index and quorum_reachable
        if self._progress_at is None or idle or sample.commit_index != self._commit_index:
            self._progress_at = now
        self._commit_index = sample.commit_index
        st.seconds_since_commit = now - self._progress_at
        st.stalled = st.seconds_since_commit >= self.stall_after_s and quorum_reachable
        if st.seconds_since_commit >= self.stall_after_s and now - self._last_stall_log >= self.log_every_s:
            self._last_stall_log = now
            st.stall_reports += 1
            what = ("Raft stall: a quorum is connected" if quorum_reachable
                    else "Raft waits: no quorum of voters connected")
            out.append((logging.WARNING,
                        f"{what}, no commit progress for {st.seconds_since_commit:.0f} s (leader known: "
                        f"{sample.leader_known}, commit {sample.commit_index}, last {sample.last_index}): "
                        f"{sample.links}"))
        return out

    def _watch_listener(self, sample: RaftSample, now: float) -> list[tuple[int, str]]:
        if sample.listener_bound is not False:
            self._unbound_since = None
            return []
        self._unbound_since = now if self._unbound_since is None else self._unbound_since
        unbound_s = now - self._unbound_since
        if unbound_s < self.bind_grace_s or now - self._last_bind_log < self.log_every_s:
            return []
        self._last_bind_log = now
        self.state.bind_reports += 1
        return [(logging.ERROR,
                 f"Raft listener {sample.listen_address} not bound for {unbound_s:.0f} s "
                 f"({sample.bind_error or 'unknown error'}): this voter neither dials nor votes "
                 "until it binds; retrying every second. Another socket holds the port — if it lies "
                 "in the kernel's ephemeral range (net.ipv4.ip_local_port_range), any outgoing "
                 "connection can take it: move the Raft port below that range or reserve it "
                 "(net.ipv4.ip_local_reserved_ports)")]


def bind_error(host: str, port: int) -> str:
    """Why a listener cannot bind ``host:port`` now: one bind as pysyncobj's (SO_REUSEADDR),
    closed at once; '' if it succeeds. Only called while pysyncobj's listener is unbound; a
    bind of pysyncobj's that falls in this instant fails and is retried a second later."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return ""
