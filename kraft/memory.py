"""An in-memory, deterministic :class:`~kraft.quorum.MetadataQuorum` for tests.

Theory of operation
-------------------
``MemoryQuorumCluster(voter_ids)`` holds ONE log and ONE state machine shared by several
in-process "voters" (``cluster.voters[id]``, each a :class:`MemoryQuorum`). The test decides
who leads: ``cluster.elect(node_id)`` bumps the epoch and sends a ``LeadershipEvent`` to
every voter, exactly as the real engine does on an election; ``cluster.elect(None)`` leaves
the quorum leaderless. Only the current leader may ``propose``; a proposal applies
immediately (there is no replication to wait for), through the same
:class:`~kraft.state_machine.ControllerStateMachine` the real engine uses, so guards, epochs
and dedup behave the same. ``snapshot()`` writes a snapshot of the current image and trims
the log before it, so tests can exercise the "behind the log start" path; ``stall()`` holds
every proposal until ``resume()`` (a quorum without a majority). No clock, no
threads, no randomness: trio's ``MockClock`` drives everything above it.
"""

from __future__ import annotations

import trio
from rafka.kraft.quorum import (
    Command,
    LeadershipEvent,
    LogEntry,
    OffsetOutOfRange,
    ProposeResult,
    Snapshot,
    not_controller,
)
from rafka.kraft.state_machine import ControllerStateMachine
from rafka.metadata import MetadataImage, image_to_records

__all__ = ["MemoryQuorum", "MemoryQuorumCluster"]

_EVENTS_BUFFER = 64


class MemoryQuorumCluster:
    def __init__(self, voter_ids: list[int]) -> None:
        self.state_machine = ControllerStateMachine()
        self.entries: list[LogEntry] = []  # entries[i].offset == log_start + i
        self.log_start = 0
        self.snapshot_: Snapshot | None = None
        self.leader: int | None = None
        self.epoch = 0
        self._advanced = trio.Event()
        self.voters = {vid: MemoryQuorum(self, vid) for vid in voter_ids}
        self.proposals = 0
        self._stalled: trio.Event | None = None  # set by stall(): proposals wait for resume()

    def stall(self) -> None:
        """Proposals wait (commit nothing) until ``resume()``: a quorum that lost its majority."""
        if self._stalled is None:
            self._stalled = trio.Event()

    def resume(self) -> None:
        if self._stalled is not None:
            self._stalled.set()
            self._stalled = None

    def elect(self, node_id: int | None) -> int:
        """Make ``node_id`` the leader (None: nobody) in a new epoch; returns the epoch."""
        assert node_id is None or node_id in self.voters
        self.epoch += 1
        self.leader = node_id
        for v in self.voters.values():
            v._emit(LeadershipEvent(node_id, self.epoch, node_id == v.node_id))
        return self.epoch

    def snapshot(self) -> Snapshot:
        image = self.state_machine.image
        snap = Snapshot(image.offset, image.epoch, image_to_records(image))
        self.snapshot_ = snap
        drop = image.offset + 1 - self.log_start
        self.entries = self.entries[drop:]
        self.log_start = image.offset + 1
        return snap

    def _append(self, entries: list[LogEntry]) -> None:
        if entries:
            self.entries.extend(entries)
            self._advanced.set()
            self._advanced = trio.Event()


class MemoryQuorum:
    def __init__(self, cluster: MemoryQuorumCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self._send, self._recv = trio.open_memory_channel[LeadershipEvent](_EVENTS_BUFFER)

    def _emit(self, event: LeadershipEvent) -> None:
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:  # nobody listens: keep the newest, drop the oldest
            self._recv.receive_nowait()
            self._send.send_nowait(event)

    def leader_id(self) -> int | None:
        return self.cluster.leader

    def epoch(self) -> int:
        return self.cluster.epoch

    def committed_offset(self) -> int:
        return self.cluster.state_machine.image.offset

    def log_start_offset(self) -> int:
        return self.cluster.log_start

    def image(self) -> MetadataImage:
        return self.cluster.state_machine.image

    def applied_request(self, request_id: str) -> ProposeResult | None:
        return self.cluster.state_machine.applied(request_id)

    async def propose(self, command: Command) -> ProposeResult:
        await trio.lowlevel.checkpoint()
        c = self.cluster
        while c._stalled is not None:
            await c._stalled.wait()
        if c.leader != self.node_id:
            raise not_controller(c.leader)
        c.proposals += 1
        # round-trip the wire form, as the real engine does
        applied = c.state_machine.apply(Command.from_bytes(command.to_bytes()))
        c._append(applied.entries)
        if applied.error is not None:
            raise applied.error
        assert applied.result is not None
        return applied.result

    def read(self, from_offset: int, max_records: int) -> list[LogEntry]:
        c = self.cluster
        if from_offset < c.log_start:
            raise OffsetOutOfRange(from_offset, c.log_start)
        i = from_offset - c.log_start
        return c.entries[i : i + max_records]

    async def wait_for_offset(self, offset: int) -> None:
        while self.committed_offset() < offset:
            await self.cluster._advanced.wait()

    def latest_snapshot(self) -> Snapshot | None:
        return self.cluster.snapshot_

    def leadership_events(self) -> trio.MemoryReceiveChannel[LeadershipEvent]:
        return self._recv
