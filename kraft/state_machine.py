"""The replicated state machine every voter runs: commands in, ``@metadata`` entries out.

Theory of operation
-------------------
``ControllerStateMachine.apply(command, raft_index)`` is deterministic: given the same state
and the same command it produces the same entries on every voter. State = the current
:class:`MetadataImage`, a bounded FIFO dedup table (request id → result; the oldest entry is
evicted first, so eviction is the same everywhere) and ``last_raft_index`` (the engine's log
index of the last command applied, used to skip commands replayed after a restart). The
dedup table is part of every snapshot.

A command is accepted when (1) the proposer is the current active controller: its epoch
equals the image's ``quorum.epoch``, or the command is a ``LeaderChange`` to a newer epoch;
(2) every guard holds. Then its records are folded at consecutive offsets after
``image.offset``. A rejected command appends nothing and is not remembered for dedup (a
rejected *command* may be retried once the reason is gone).

A *refusal* of an idempotent admin request is remembered, though: the active controller
commits it as a command of its own (the request's proposal id, one ``NoOp`` record carrying
the refusal's error code and message; ``kraft/service.py``), so the outcome of a request id is
decided once, refusals included, and an earlier attempt still on its way (a forward stuck in
TCP) is answered as a duplicate instead of creating the topic the client was told could not
be created (txn chaos campaign seed 3: topic-created-after-fail). The NoOp folds as nothing:
it changes the image's offset only. Applying such a command also remembers a *marker*,
``refusal_id(request_id)`` (inserted just before the id itself, so a reader that finds the id
finds the marker; evicted together with it), whose ``epoch`` slot holds the refusal's error
code: it tells a refusal from an accepted command once the NoOp entry has been snapshotted
away. A refused request thus costs one Raft commit and two slots of the table.

The active controller also reads the table *before* deciding (``applied``): an admin request
that carries a client request id (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS,
ALTER_CONFIGS; ``kraft/service.py`` derives one id per operation and topic) whose id is
already here was committed by an earlier attempt whose answer was lost, so it is answered
with the original outcome instead of being decided again (which would say e.g.
TOPIC_ALREADY_EXISTS for the caller's own topic). The id and the records are written by one
command, so they are remembered atomically.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from rafka.kraft.quorum import Command, LogEntry, ProposeResult, not_controller
from rafka.metadata import LeaderChange, MetadataDelta, MetadataImage, NoOp
from rafka.wire.errors import RafkaError

__all__ = ["Applied", "ControllerStateMachine", "DEFAULT_DEDUP_CAPACITY", "refusal_id"]

DEFAULT_DEDUP_CAPACITY = 4096

_REFUSAL_PREFIX = "refused:"  # no proposal id starts so (kraft/service.py's ids: "<op>:...")


def refusal_id(request_id: str) -> str:
    """The dedup key of the marker of a recorded refusal (see the module docstring)."""
    return _REFUSAL_PREFIX + request_id


def _refusal_code(command: Command) -> int:
    """The error code if ``command`` records a refusal (its only record a NoOp with one)."""
    if len(command.records) == 1 and isinstance(command.records[0], NoOp):
        return command.records[0].error_code
    return 0


@dataclass(slots=True)
class Applied:
    entries: list[LogEntry] = field(default_factory=list)
    result: ProposeResult | None = None
    error: RafkaError | None = None


class ControllerStateMachine:
    def __init__(
        self,
        image: MetadataImage = MetadataImage.EMPTY,
        dedup: list[tuple[str, int, int, int]] | None = None,
        last_raft_index: int = 0,
        dedup_capacity: int = DEFAULT_DEDUP_CAPACITY,
    ) -> None:
        self.image = image
        self.dedup_capacity = dedup_capacity
        self.dedup: OrderedDict[str, tuple[int, int, int]] = OrderedDict(
            (rid, (b, last, e)) for rid, b, last, e in (dedup or [])
        )
        self.last_raft_index = last_raft_index

    def dedup_state(self) -> list[tuple[str, int, int, int]]:
        return [(rid, b, last, e) for rid, (b, last, e) in self.dedup.items()]

    def applied(self, request_id: str) -> ProposeResult | None:
        """The original result of an applied command with this request id (None: not applied,
        rejected, or evicted from the bounded table)."""
        hit = self.dedup.get(request_id) if request_id else None
        return None if hit is None else ProposeResult(hit[0], hit[1], hit[2], duplicate=True)

    def remember(self, request_id: str, result: ProposeResult, refused: int = 0) -> None:
        """``refused``: the error code of a recorded refusal (0: an accepted command)."""
        if not request_id:
            return
        if refused:  # the marker first: whoever sees the id sees the marker too
            self.dedup[refusal_id(request_id)] = (result.base_offset, result.last_offset, refused)
        self.dedup[request_id] = (result.base_offset, result.last_offset, result.epoch)
        while len(self.dedup) > self.dedup_capacity:
            oldest, _ = self.dedup.popitem(last=False)
            if oldest.startswith(_REFUSAL_PREFIX):  # its id goes with it
                self.dedup.pop(oldest[len(_REFUSAL_PREFIX):], None)

    def check(self, command: Command) -> RafkaError | None:
        image = self.image
        leader_change = next((r for r in command.records if isinstance(r, LeaderChange)), None)
        if leader_change is not None:
            if leader_change.epoch <= image.quorum.epoch or command.epoch != leader_change.epoch:
                return not_controller(image.quorum.leader_id, "stale LeaderChange")
        elif command.epoch != image.quorum.epoch or image.quorum.epoch < 0:
            return not_controller(
                image.quorum.leader_id,
                f"proposer epoch {command.epoch} is not the active epoch {image.quorum.epoch}",
            )
        for guard in command.guards:
            err = guard.check(image)
            if err is not None:
                return err
        return None

    def apply(self, command: Command, raft_index: int = 0) -> Applied:
        if raft_index:
            self.last_raft_index = max(self.last_raft_index, raft_index)
        hit = self.applied(command.request_id)
        if hit is not None:
            return Applied(result=hit)
        err = self.check(command)
        if err is not None:
            return Applied(error=err)
        delta = MetadataDelta(self.image)
        entries: list[LogEntry] = []
        offset = self.image.offset
        for record in command.records:
            offset += 1
            delta.replay(record, offset, command.epoch)
            entries.append(LogEntry(offset, command.epoch, record))
        image = delta.apply() if entries else self.image
        base = entries[0].offset if entries else -1
        result = ProposeResult(base, image.offset, command.epoch)
        # remembered before the image is published: a reader on another thread (the active
        # controller, while the engine applies on its tick thread) that sees the new image
        # then finds the request id too (kraft/service.py re-checks it after a refusal)
        self.remember(command.request_id, result, _refusal_code(command))
        self.image = image
        return Applied(entries=entries, result=result)

    def snapshot_state(self) -> dict[str, Any]:
        """Everything but the image (which snapshots write as records)."""
        return {"dedup": self.dedup_state(), "last_raft_index": self.last_raft_index}
