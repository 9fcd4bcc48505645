"""The records of ``__consumer_offsets`` and the coordinator's in-memory view of one partition.

Theory of operation
-------------------
A group's offsets all live in partition ``crc32(group_id) % partitions`` of the compacted
internal topic ``__consumer_offsets`` (:func:`offsets_partition`; :func:`offsets_topic_spec` is
its CREATE_TOPICS entry; both as for every internal topic, ``broker/internal_topic.py``).
Record format: key = msgpack ``[group, topic, partition]``; value =
msgpack ``[offset, metadata, commit_timestamp_ms, member_epoch]``, or ``None`` (a tombstone: the
group was deleted or its offsets expired).  Compaction keeps the last record per key.

:class:`OffsetsCache` is the latest committed value per key of one partition, as the
coordinator (``broker/groups/offsets.py``) sees it in one leader epoch.  ``apply`` keeps the value
with the highest log offset, so an append acknowledged late never overwrites a newer one.
Offsets committed in a transaction stay in ``pending`` per producer id until that producer's
marker: COMMIT applies them at the marker's offset, ABORT drops them.  ``load`` folds whole
batches read from the log under the same rules (markers included), so a cache rebuilt after a
failover equals the one its predecessor held.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgpack
from rafka.broker.internal_topic import internal_topic_spec, key_partition
from rafka.log.batch import CONTROL_COMMIT, control_type, decode_records, iter_batches

__all__ = [
    "DEFAULT_OFFSETS_PARTITIONS",
    "OFFSETS_TOPIC",
    "Key",
    "OffsetValue",
    "OffsetsCache",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "offsets_partition",
    "offsets_topic_spec",
]

log = logging.getLogger("rafka.groups.offsets")

OFFSETS_TOPIC: Final = "__consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS: Final = 10

Key = tuple[str, str, int]


# --------------------------------------------------------------------------- encoding


def offsets_partition(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition holding ``group_id``'s offsets (stable everywhere)."""
    return key_partition(group_id, num_partitions)


def offsets_topic_spec(
    live_brokers: int, num_partitions: int = DEFAULT_OFFSETS_PARTITIONS
) -> dict[str, Any]:
    """The CREATE_TOPICS entry for ``__consumer_offsets``."""
    return internal_topic_spec(OFFSETS_TOPIC, live_brokers, num_partitions)


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    member_epoch: int = -1
    leader_epoch: int = -1  # the committed record's leader epoch (Kafka's committed_leader_epoch)


def encode_key(group_id: str, topic: str, partition: int) -> bytes:
    return msgpack.packb([group_id, topic, partition], use_bin_type=True)


def decode_key(data: bytes) -> Key:
    g, t, p = msgpack.unpackb(data, raw=False)
    return str(g), str(t), int(p)


def encode_value(v: OffsetValue | None) -> bytes | None:
    if v is None:
        return None
    fields = [v.offset, v.metadata, v.commit_timestamp, v.member_epoch]
    if v.leader_epoch >= 0:  # a fifth field only when known: older values stay four long
        fields.append(v.leader_epoch)
    return msgpack.packb(fields, use_bin_type=True)


def decode_value(data: bytes | None) -> OffsetValue | None:
    if data is None:
        return None
    off, meta, ts, epoch, *rest = msgpack.unpackb(data, raw=False)
    return OffsetValue(int(off), str(meta or ""), int(ts), int(epoch),
                       int(rest[0]) if rest else -1)


# --------------------------------------------------------------------------- cache


class OffsetsCache:
    """The latest committed value per key of one offsets partition, as of ``leader_epoch``."""

    def __init__(self, leader_epoch: int) -> None:
        self.leader_epoch = leader_epoch
        self.values: dict[Key, tuple[OffsetValue, int]] = {}  # key -> (value, log offset)
        self.by_group: dict[str, set[Key]] = {}
        self.pending: dict[int, dict[Key, OffsetValue]] = {}  # producer id -> its txn offsets
        self.loaded_to = 0

    def apply(self, key: Key, value: OffsetValue | None, log_offset: int) -> None:
        cur = self.values.get(key)
        if cur is not None and cur[1] > log_offset:
            return  # an older append acknowledged late
        if value is None:
            self.values.pop(key, None)
            keys = self.by_group.get(key[0])
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_group[key[0]]
        else:
            self.values[key] = (value, log_offset)
            self.by_group.setdefault(key[0], set()).add(key)

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions with offsets pending in an open transaction (KIP-447)."""
        return {(t, p) for entries in self.pending.values() for (g, t, p) in entries if g == group_id}

    def add_pending(self, producer_id: int, entries: Iterable[tuple[Key, OffsetValue]]) -> None:
        """Offsets of an open transaction: kept aside until its marker."""
        self.pending.setdefault(producer_id, {}).update(entries)

    def end_txn(self, producer_id: int, commit: bool, marker_offset: int) -> int:
        """A marker of ``producer_id``: apply (commit) or drop its pending offsets; returns how many."""
        entries = self.pending.pop(producer_id, {})
        if commit:
            for k, v in entries.items():
                self.apply(k, v, marker_offset)
        return len(entries)

    def load(self, buf: bytes) -> int:
        """Fold whole batches of ``buf``; returns the next offset to read (0 if none whole)."""
        nxt = 0
        for pos, h in iter_batches(buf):
            nxt = h.last_offset + 1
            if h.is_control:
                try:
                    self.end_txn(h.producer_id, control_type(buf, pos) == CONTROL_COMMIT, h.base_offset)
                except Exception as exc:  # noqa: BLE001 - a bad marker must not stop the load
                    log.warning("skipping bad marker at %d: %s", h.base_offset, exc)
                continue
            for rec in decode_records(buf, pos):
                if rec.key is None:
                    continue
                try:
                    key, value = decode_key(rec.key), decode_value(rec.value)
                except Exception as exc:  # a foreign record must not break the coordinator
                    log.warning("skipping bad offsets record at %d: %s", rec.offset, exc)
                    continue
                if h.is_transactional and value is not None:
                    self.add_pending(h.producer_id, [(key, value)])
                else:
                    self.apply(key, value, rec.offset)
        return nxt

    def group(self, group_id: str) -> dict[tuple[str, int], OffsetValue]:
        return {(k[1], k[2]): self.values[k][0] for k in sorted(self.by_group.get(group_id, ()))}
