"""The partition leader's transaction APIs: WRITE_TXN_MARKERS and DESCRIBE_PRODUCERS.

Theory of operation
-------------------
WRITE_TXN_MARKERS (inter-broker, from transaction coordinators; docs/transactions.md): for
every marker and each of its partitions this broker must lead, ``ReplicaManager.append_marker``
appends the COMMIT/ABORT control batch through the ordinary leader append path (group-commit
flush, replication, HW), synchronously for all partitions first; then the handler waits for each
one's ``acks=all`` outcome exactly as PRODUCE does (``data.wait_outcomes``), bounded by
``timeout_ms`` (default 30 s). Two checks refuse a marker that is *late* — one its coordinator
sent, gave up on when the attempt timed out, and retried on a new connection, and that reaches
this leader only now (a partitioned link's retransmission, a paused leader), after the
transaction ended and the producer opened its next one here with the same producer id and epoch,
which the late marker would otherwise close with the old transaction's outcome (txn chaos,
fresh-clone CI at ``a8381c5``: an intended abort's record read as committed):

* each partition carries the leader epoch the coordinator addressed (``leader_epochs``): another
  epoch is ``FENCED_LEADER_EPOCH`` / ``UNKNOWN_LEADER_EPOCH`` (retriable, as for PRODUCE);
* each marker carries its transaction's number (``txn_seq``, ``broker/txn/state.py``): when the
  producer's open transaction here was verified in this leader epoch as a *later* number (its
  ``VerificationGuard``), the marker is for an ended transaction: ``INVALID_TXN_STATE``, nothing
  appended. Within one leader epoch every opening is verified here, so the guard exists; across
  epochs the first check already refused the late request.

An operator's abort (``rafka transactions abort``) carries neither and is not checked.
Each partition answers its own error: ``NONE`` once the marker is
below the HW, ``UNKNOWN_TOPIC_OR_PARTITION`` for a partition that no longer exists (the
coordinator counts a deleted partition as done), ``NOT_LEADER_OR_FOLLOWER`` /
``REQUEST_TIMED_OUT`` / ``NOT_ENOUGH_REPLICAS`` for it to retry (a repeated marker is harmless:
with no open transaction it changes nothing but the log). Only after a marker is acknowledged
are the replica manager's ``marker_listeners`` told ``(topic, partition, producer_id, commit,
marker_offset)``, so the offsets manager applies a transaction's offsets only once its COMMIT
is as durable as any acknowledged record.

DESCRIBE_PRODUCERS: per partition this broker leads, the producers its log's producer state
knows (epoch, last sequence, last timestamp, first offset of the open transaction or -1).

The verification that records a transaction's number before it opens on a partition (the
``TxnVerifier`` seam, KIP-890 part 1) is ``broker/txn/opening.py``, used by PRODUCE and
TXN_OFFSET_COMMIT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
from rafka.broker.handlers.data import fail_entry, wait_outcomes
from rafka.broker.partition import Partition
from rafka.broker.replica_manager import ReplicaManager

__all__ = ["write_txn_markers", "describe_producers",
           "DEFAULT_MARKER_TIMEOUT_MS"]

DEFAULT_MARKER_TIMEOUT_MS = 30_000


async def write_txn_markers(rm: ReplicaManager, body: Mapping[str, Any]) -> dict[str, Any]:
    timeout_ms = body.get("timeout_ms")
    deadline = trio.current_time() + max(
        0, DEFAULT_MARKER_TIMEOUT_MS if timeout_ms is None else timeout_ms) / 1000
    out: list[dict[str, Any]] = []
    waits: list[tuple[dict[str, Any], Partition, int, int]] = []
    acked: list[tuple[dict[str, Any], Partition, int, bool, int]] = []
    for m in body["markers"]:
        pid, commit = m["producer_id"], m["commit"]
        txn_seq = m.get("txn_seq")
        topics: list[dict[str, Any]] = []
        out.append({"producer_id": pid, "topics": topics})
        for t in m["topics"]:
            parts: list[dict[str, Any]] = []
            topics.append({"name": t["name"], "partitions": parts})
            epochs = t.get("leader_epochs") or []
            for i, index in enumerate(t["partitions"]):
                entry: dict[str, Any] = {"partition": index, "error": 0, "message": None}
                parts.append(entry)
                try:
                    p = rm.get_leader(t["name"], index, epochs[i] if i < len(epochs) else None)
                    epoch = p.leader_epoch
                    info = rm.append_marker(p, pid, m["producer_epoch"], commit,
                                            m["coordinator_epoch"],
                                            -1 if txn_seq is None else txn_seq)
                except Exception as exc:  # noqa: BLE001 - mapped per partition
                    fail_entry(entry, exc)
                    continue
                waits.append((entry, p, info.last_offset, epoch))
                acked.append((entry, p, pid, commit, info.last_offset))
    await wait_outcomes(waits, -1, deadline)
    for entry, p, pid, commit, offset in acked:
        if not entry["error"]:
            rm.marker_acknowledged(p, pid, commit, offset)
    return {"error": 0, "markers": out}


def describe_producers(rm: ReplicaManager, body: Mapping[str, Any]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for t in body["topics"]:
        parts: list[dict[str, Any]] = []
        out.append({"name": t["name"], "partitions": parts})
        for index in t["partitions"]:
            entry: dict[str, Any] = {"partition": index, "error": 0, "message": None,
                                     "producers": []}
            parts.append(entry)
            try:
                p = rm.get_leader(t["name"], index)
                entry["producers"] = [
                    {"producer_id": info.producer_id, "producer_epoch": info.producer_epoch,
                     "last_sequence": info.last_sequence, "last_timestamp": info.last_timestamp,
                     "txn_first_offset": info.txn_first_offset}
                    for info in p.log.describe_producers()]
            except Exception as exc:  # noqa: BLE001 - mapped per partition
                fail_entry(entry, exc)
    return {"error": 0, "topics": out}
