"""What the coordinators of an internal topic share: placement, leadership, per-epoch state, replay.

Theory of operation
-------------------
Two broker-side coordinators keep their state in a compacted internal topic: the group offsets
manager (``__consumer_offsets``, ``broker/groups/offsets.py``) and the transaction coordinator
(``__transaction_state``, ``broker/txn/coordinator.py``). Both follow one pattern, written once
here:

* **placement** — a key (a group id, a transactional id) lives in partition
  ``crc32(key) % partitions`` (:func:`key_partition`, stable on every broker and client); the
  topic is compacted, replication factor ``min(3, live brokers)``, ``min.insync.replicas`` 2
  from three brokers on (:func:`internal_topic_spec`, the CREATE_TOPICS entry);
* **leadership** — the leader of a key's partition is the key's coordinator; on any other
  broker the lookup answers ``NOT_COORDINATOR`` (retriable: the client looks the coordinator up
  again) and the broker forgets whatever state it held for that partition
  (:meth:`InternalTopic.leader`);
* **per-epoch state** — the coordinator keeps one in-memory state per partition it leads, valid
  for one leader epoch (:meth:`InternalTopic.current`). A state of an older epoch is never
  reused: the partition may have been led elsewhere in between and taken writes this broker
  never saw, so the state is rebuilt by **replaying** the partition from its log start, one
  chunk of whole batches at a time (:func:`replay_chunk`), folding each record into the fresh
  state (compaction keeps the last record per key, so the replay reads about one record per
  live key);
* :meth:`InternalTopic.led` walks the partitions this broker leads now (background passes,
  listings, statistics).

What stays with each coordinator is what differs: what a state is and how it folds a chunk; how
the replay runs — the offsets manager replays in one go with no await (so no append can
interleave), the transaction coordinator yields between chunks and answers
``COORDINATOR_LOAD_IN_PROGRESS`` meanwhile; its writes; and its reads, which pass a read barrier
(``broker/read_barrier.py``) before they answer from memory.

Why a module of ``broker/`` rather than a part of either package: both coordinators use it, and
neither should import the other to get it (the transaction coordinator used to take the topic
spec from the offsets manager). It is a collaborator each coordinator owns (composition), not a
base class: the two keep their own state types and loading rules.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from rafka.wire.errors import ErrorCode, RafkaError, error_for

__all__ = [
    "READ_CHUNK_BYTES",
    "EpochState",
    "InternalTopic",
    "InternalTopicStatistics",
    "LedLog",
    "LedPartition",
    "internal_topic_spec",
    "key_partition",
    "replay_chunk",
]

READ_CHUNK_BYTES: Final = 1024 * 1024  # one read of a replay

# a lookup that raises one of these means "this broker does not lead the partition"
_NOT_LEADER: Final = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


class LedLog(Protocol):
    """What a coordinator reads of a partition's log."""

    log_start_offset: int
    log_end_offset: int

    def read_bytes(
        self, fetch_offset: int, max_bytes: int, max_offset: int | None = None
    ) -> bytes: ...


class LedPartition(Protocol):
    """What a coordinator needs of a partition this broker leads (``broker/partition.py``)."""

    topic: str
    partition: int
    leader_epoch: int
    high_watermark: int
    log: LedLog

    async def wait_produce(self, last_offset: int, acks: int) -> ErrorCode: ...


class EpochState(Protocol):
    """A coordinator's in-memory state of one partition, valid in one leader epoch."""

    leader_epoch: int


S = TypeVar("S", bound=EpochState)


@dataclass(frozen=True, slots=True)
class InternalTopicStatistics:
    """A snapshot of one coordinator's :class:`InternalTopic` (``statistics()``)."""

    topic: str
    partitions: int  # the topic's partitions in this broker's image (0: it does not exist yet)
    loaded: tuple[int, ...]  # partitions with a state in memory (led when last looked up)


def key_partition(key: str, num_partitions: int) -> int:
    """The partition of an internal topic with ``num_partitions`` that holds ``key``."""
    return zlib.crc32(key.encode()) % num_partitions


def internal_topic_spec(name: str, live_brokers: int, num_partitions: int) -> dict[str, Any]:
    """The CREATE_TOPICS entry of the internal topic ``name`` on a cluster of ``live_brokers``."""
    return {
        "name": name,
        "num_partitions": num_partitions,
        "replication_factor": max(1, min(3, live_brokers)),
        "configs": {
            "cleanup.policy": "compact",
            "min.insync.replicas": "1" if live_brokers < 3 else "2",
        },
    }


def replay_chunk(log: LedLog, offset: int, fold: Callable[[bytes], int]) -> int | None:
    """Fold the chunk of ``log`` read at ``offset``; returns the next offset to read, or None
    once the log is read to its end (or no whole batch starts at ``offset``).

    ``fold(buf)`` folds the whole batches of ``buf`` and returns the offset after the last one
    (0 when there is none)."""
    if offset >= log.log_end_offset:
        return None
    nxt = fold(log.read_bytes(offset, READ_CHUNK_BYTES))
    return nxt if nxt > offset else None


class InternalTopic(Generic[S]):
    """The partitions of ``topic`` as one coordinator sees them: which it leads, and its state
    of each (``states``: partition index → state, at most one leader epoch old).

    ``replica_manager`` needs ``image`` (the broker's metadata image) and
    ``get_leader(topic, partition)`` (a partition, or a raised wire error)."""

    def __init__(self, replica_manager: Any, topic: str) -> None:
        self.rm = replica_manager
        self.topic = topic
        self.states: dict[int, S] = {}

    def num_partitions(self) -> int:
        """How many partitions the topic has in this broker's image (0: it does not exist)."""
        t = self.rm.image.topics.by_name.get(self.topic)
        return len(t.partitions) if t is not None else 0

    def leader(self, index: int, who: str | None = None) -> LedPartition:
        """Partition ``index``, which this broker must lead; else ``NOT_COORDINATOR`` (of
        ``who``, by default the partition) and its state is forgotten."""
        try:
            p: LedPartition = self.rm.get_leader(self.topic, index)
        except RafkaError as exc:
            if exc.code in _NOT_LEADER:
                self.states.pop(index, None)
                raise error_for(ErrorCode.NOT_COORDINATOR,
                                f"not the coordinator of {who or f'{self.topic}/{index}'}: "
                                f"{exc.message}") from None
            raise
        return p

    def current(self, index: int, p: LedPartition) -> S | None:
        """The state of partition ``index`` if it is of ``p``'s leader epoch; None: (re)load it."""
        st = self.states.get(index)
        return st if st is not None and st.leader_epoch == p.leader_epoch else None

    def statistics(self) -> InternalTopicStatistics:
        return InternalTopicStatistics(self.topic, self.num_partitions(), tuple(sorted(self.states)))

    def led(self) -> Iterator[tuple[int, LedPartition]]:
        """``(index, partition)`` of every partition this broker leads, each looked up when the
        iteration reaches it (the caller may await in between)."""
        for index in range(self.num_partitions()):
            try:
                p = self.leader(index)
            except RafkaError:
                continue
            yield index, p
