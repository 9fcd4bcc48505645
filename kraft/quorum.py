"""The narrow interface between the active controller and the Raft engine.

Theory of operation
-------------------
The controller never talks to Raft directly. It builds a :class:`Command` — a request id, the
proposer's quorum epoch and clock, *guards* and the records to append — and calls
``await quorum.propose(command)``. The engine orders commands (Raft), and every voter applies
each committed command with :class:`kraft.state_machine.ControllerStateMachine`, which

1. answers a request id it has already applied with the original result (dedup, bounded);
2. checks that the proposer is the current active controller (``command.epoch`` equals the
   epoch of the last ``LeaderChange`` in the image; a ``LeaderChange`` itself must carry a
   newer epoch) — a deposed leader that still believes it leads cannot write;
3. re-checks every guard against the image at that point of the log;
4. appends the records at consecutive offsets, stamped with the command's epoch.

Everything a command needs is inside it (ids, timestamps, epochs are chosen by the proposer),
so every voter computes the same log. ``propose`` returns once the command is applied *and*
fsynced in the local ``@metadata`` log, or raises the ``RafkaError`` a guard asked for (e.g.
``TopicAlreadyExistsError``) or ``NotControllerError`` (``details["leader_id"]``).

Implementations: :mod:`rafka.kraft.memory` (in-memory, deterministic, for tests) and
:mod:`rafka.kraft.syncobj_engine` (pysyncobj, real processes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import msgpack
import trio
from rafka.metadata import MetadataImage, MetadataRecord, record_from_dict
from rafka.wire.errors import ErrorCode, RafkaError, error_for

__all__ = [
    "Command",
    "Guard",
    "LeadershipEvent",
    "LogEntry",
    "MetadataQuorum",
    "OffsetOutOfRange",
    "ProposeResult",
    "QuorumConfigError",
    "Snapshot",
    "not_controller",
]


class LogEntry(NamedTuple):
    offset: int
    epoch: int
    record: MetadataRecord


class Snapshot(NamedTuple):
    offset: int  # the image includes every record up to and including this offset
    epoch: int
    records: list[MetadataRecord]


class ProposeResult(NamedTuple):
    base_offset: int  # offset of the first record written (-1 if the command had none)
    last_offset: int  # offset of the last record written (log end - 1 if none)
    epoch: int
    duplicate: bool = False  # the request id had been applied before: the original result


class LeadershipEvent(NamedTuple):
    leader_id: int | None  # None: no leader known
    epoch: int
    is_self: bool


class QuorumConfigError(ValueError):
    """The quorum cannot start with this configuration (the message says why and how);
    ``rafka server`` prints it as one line and exits with code 2."""


class OffsetOutOfRange(Exception):
    """``read(from_offset)`` below the log start: fetch the latest snapshot instead."""

    def __init__(self, from_offset: int, log_start_offset: int) -> None:
        super().__init__(f"offset {from_offset} is below the log start {log_start_offset}")
        self.from_offset = from_offset
        self.log_start_offset = log_start_offset


def not_controller(leader_id: int | None, message: str = "") -> RafkaError:
    return error_for(
        ErrorCode.NOT_CONTROLLER, message or "this node is not the active controller",
        leader_id=-1 if leader_id is None else leader_id,
    )


@dataclass(frozen=True, slots=True)
class Guard:
    """A precondition re-checked against the image when the command applies.

    ``kind`` is one of :data:`GUARD_KINDS`; ``args`` its arguments (msgpack-able scalars)."""

    kind: str
    args: tuple[Any, ...] = ()

    # -- constructors (the vocabulary) --
    @classmethod
    def topic_absent(cls, name: str) -> Guard:
        return cls("topic_absent", (name,))

    @classmethod
    def topic_is(cls, name: str, topic_id: str) -> Guard:
        return cls("topic_is", (name, topic_id))

    @classmethod
    def partition_count(cls, topic_id: str, count: int) -> Guard:
        return cls("partition_count", (topic_id, count))

    @classmethod
    def partition_epochs(
        cls, topic_id: str, partition: int, leader_epoch: int, partition_epoch: int
    ) -> Guard:
        return cls("partition_epochs", (topic_id, partition, leader_epoch, partition_epoch))

    @classmethod
    def broker_epoch(cls, broker_id: int, epoch: int) -> Guard:
        """The broker's registration has this epoch (-1: the broker is not registered)."""
        return cls("broker_epoch", (broker_id, epoch))

    @classmethod
    def next_producer_id(cls, next_id: int) -> Guard:
        return cls("next_producer_id", (next_id,))

    def check(self, image: MetadataImage) -> RafkaError | None:
        a = self.args
        if self.kind == "topic_absent":
            if a[0] in image.topics.by_name:
                return error_for(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {a[0]!r} already exists")
        elif self.kind == "topic_is":
            t = image.topics.by_name.get(a[0])
            if t is None or t.topic_id != a[1]:
                return error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {a[0]!r}")
        elif self.kind == "partition_count":
            t = image.topics.by_id.get(a[0])
            if t is None:
                return error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic id")
            if len(t.partitions) != a[1]:
                return error_for(ErrorCode.INVALID_PARTITIONS, "partition count changed")
        elif self.kind == "partition_epochs":
            t = image.topics.by_id.get(a[0])
            reg = None if t is None else t.partitions.get(a[1])
            if reg is None:
                return error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition")
            if reg.leader_epoch != a[2]:
                return error_for(ErrorCode.FENCED_LEADER_EPOCH, "stale leader epoch")
            if reg.partition_epoch != a[3]:
                return error_for(ErrorCode.STALE_PARTITION_EPOCH, "stale partition epoch")
        elif self.kind == "broker_epoch":
            b = image.cluster.brokers.get(a[0])
            if (-1 if b is None else b.epoch) != a[1]:
                return error_for(ErrorCode.STALE_BROKER_EPOCH, f"broker {a[0]}: stale epoch")
        elif self.kind == "next_producer_id":
            if image.producer_ids.next_producer_id != a[0]:
                return not_controller(None, "producer id block already taken")
        else:
            return error_for(ErrorCode.INVALID_REQUEST, f"unknown guard {self.kind!r}")
        return None


GUARD_KINDS = (
    "topic_absent",
    "topic_is",
    "partition_count",
    "partition_epochs",
    "broker_epoch",
    "next_producer_id",
)


@dataclass(frozen=True, slots=True)
class Command:
    request_id: str
    epoch: int  # the proposer's quorum epoch (must equal the image's LeaderChange epoch)
    timestamp_ms: int
    records: tuple[MetadataRecord, ...] = ()
    guards: tuple[Guard, ...] = field(default=())

    def to_bytes(self) -> bytes:
        return msgpack.packb(
            [
                self.request_id,
                self.epoch,
                self.timestamp_ms,
                [[g.kind, list(g.args)] for g in self.guards],
                [r.to_dict() for r in self.records],
            ],
            use_bin_type=True,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Command:
        rid, epoch, ts, guards, records = msgpack.unpackb(data, raw=False)
        return cls(
            request_id=rid,
            epoch=epoch,
            timestamp_ms=ts,
            guards=tuple(Guard(k, tuple(a)) for k, a in guards),
            records=tuple(record_from_dict(r) for r in records),
        )


class MetadataQuorum(Protocol):
    """docs/internals.md §5. ``image()`` is the state machine's current image (applied,
    possibly not yet fsynced) — what the active controller decides against."""

    node_id: int

    def leader_id(self) -> int | None: ...

    def epoch(self) -> int: ...

    def committed_offset(self) -> int: ...

    def log_start_offset(self) -> int: ...

    def image(self) -> MetadataImage: ...

    def applied_request(self, request_id: str) -> ProposeResult | None:
        """The state machine's dedup entry for ``request_id`` (``duplicate=True``), read with
        the same view as ``image()``; None if no command with that id has been applied (or
        it was evicted). The active controller asks it before deciding a client-idempotent
        admin request."""
        ...

    async def propose(self, command: Command) -> ProposeResult: ...

    def read(self, from_offset: int, max_records: int) -> list[LogEntry]: ...

    async def wait_for_offset(self, offset: int) -> None: ...

    def latest_snapshot(self) -> Snapshot | None: ...

    def leadership_events(self) -> trio.MemoryReceiveChannel[LeadershipEvent]: ...
