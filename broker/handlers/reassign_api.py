"""LIST_PARTITION_REASSIGNMENTS on a broker: the reassignments in its metadata image.

Theory of operation: any broker answers from its own image (``kraft.reassign.list_reassignments``:
partitions whose registration has adding or removing replicas). For the partitions this broker
*leads* it adds what only the leader knows — every replica's log end offset as of its last
fetch (``LeaderState.followers``) and its own — so a client that asks each leader can show the
adding replicas' catch-up lag (``client/aio/reassign_admin.py``); elsewhere it is None.
"""

from __future__ import annotations

from typing import Any

from rafka.broker.replica_manager import ReplicaManager
from rafka.kraft.reassign import list_reassignments
from rafka.metadata import MetadataImage, TopicPartition

__all__ = ["list_partition_reassignments"]


def _log_end_offsets(rm: ReplicaManager, topic: str, partition: int) -> dict[int, int] | None:
    p = rm.partitions.get(TopicPartition(topic, partition))
    st = None if p is None else p.leader_state
    if p is None or st is None:
        return None
    out = {r: f.log_end_offset for r, f in st.followers.items()}
    out[rm.broker_id] = p.log.log_end_offset
    return out


def list_partition_reassignments(body: dict[str, Any], image: MetadataImage,
                                 rm: ReplicaManager) -> dict[str, Any]:
    topics = body.get("topics")
    wanted = None if topics is None else [(t["name"], p) for t in topics for p in t["partitions"]]
    out = []
    for name, p, reg in list_reassignments(image, wanted):
        out.append({
            "topic": name, "partition": p, "replicas": list(reg.replicas),
            "adding_replicas": list(reg.adding_replicas),
            "removing_replicas": list(reg.removing_replicas),
            "isr": list(reg.isr), "leader": reg.leader,
            "throttle_bytes_per_s": reg.throttle_bytes_per_s,
            "log_end_offsets": _log_end_offsets(rm, name, p),
        })
    return {"error": 0, "reassignments": out}
