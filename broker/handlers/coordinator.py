"""FIND_COORDINATOR: which broker coordinates a group id or a transactional id.

Theory of operation
-------------------
A group's coordinator is the leader of ``__consumer_offsets`` partition ``crc32(group) %
partitions`` (``broker/groups/offsets.py``); a transactional id's is the leader of
``__transaction_state`` partition ``crc32(id) % partitions`` (``broker/txn/coordinator.py``).
Clients used to work that out themselves from METADATA of those internal topics, which made
the internal topics' metadata something every principal had to see. FIND_COORDINATOR (Kafka's
api 10, batched as KIP-699; rafka's key is 12 because 10 is ALTER_CONFIGS here) answers it per
key instead, so the authorizer can check each key on its own resource — DESCRIBE on the group
or the transactional id, as Kafka does (``security/authz.py``) — and METADATA of the internal
topics can stay hidden from ordinary principals.

``find_coordinator(body, image)`` is a pure function of the request and the broker's image:
one entry per key, ``{key, node_id, host, port, error, message}`` — ``COORDINATOR_NOT_AVAILABLE``
(retriable) while the internal topic is missing, its partition has no leader, or the leader is
not a registered broker (a fenced leader is answered: it says NOT_COORDINATOR if it no longer
leads, and the client asks again). The node (``broker/handlers/__init__.py``) first has a missing internal
topic created as itself, as it does for a METADATA naming one, so the first lookup of a fresh
cluster usually answers a coordinator at once. On a secured listener ``host``/``port`` are
rewritten to the coordinator's secured listener (``security/listener.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from rafka.broker.groups.offsets import OFFSETS_TOPIC, offsets_partition
from rafka.broker.txn.coordinator import TXN_STATE_TOPIC, txn_partition
from rafka.metadata.image import MetadataImage
from rafka.wire.errors import ErrorCode, error_for

__all__ = ["KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION", "KEY_TYPES", "coordinator_topic",
           "find_coordinator"]

KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1
# key type -> (internal topic, partition of a key given the topic's partition count)
KEY_TYPES: Final = {KEY_TYPE_GROUP: (OFFSETS_TOPIC, offsets_partition),
                    KEY_TYPE_TRANSACTION: (TXN_STATE_TOPIC, txn_partition)}
MAX_KEYS: Final = 1000


def coordinator_topic(body: Mapping[str, Any]) -> str:
    """The internal topic whose leaders coordinate ``body``'s key type (INVALID_REQUEST if none)."""
    key_type = body.get("key_type")
    if key_type not in KEY_TYPES:
        raise error_for(ErrorCode.INVALID_REQUEST,
                        f"key_type must be {KEY_TYPE_GROUP} (group) or {KEY_TYPE_TRANSACTION} "
                        f"(transaction), got {key_type!r}")
    if len(body.get("keys") or ()) > MAX_KEYS:
        raise error_for(ErrorCode.INVALID_REQUEST, f"at most {MAX_KEYS} keys per request")
    return KEY_TYPES[key_type][0]


def find_coordinator(body: Mapping[str, Any], image: MetadataImage) -> dict[str, Any]:
    """One coordinator entry per key of ``body`` (see the module docstring)."""
    topic_name = coordinator_topic(body)
    partition_of = KEY_TYPES[body["key_type"]][1]
    topic = image.topics.by_name.get(topic_name)
    out = []
    for key in body["keys"]:
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": None, "port": None,
                                 "error": 0, "message": None}
        if topic is None or not topic.partitions:
            why = f"{topic_name} does not exist yet (being created)"
        else:
            index = partition_of(key, len(topic.partitions))
            reg = topic.partitions.get(index)
            broker = image.cluster.brokers.get(reg.leader) if reg is not None else None
            why = f"{topic_name}/{index} has no leader"
            if broker is not None:
                entry.update(node_id=broker.broker_id, host=broker.host, port=broker.port)
                why = ""
        if why:
            entry.update(error=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), message=why)
        out.append(entry)
    return {"error": 0, "coordinators": out}
