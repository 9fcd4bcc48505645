"""Metadata record types — the vocabulary of the ``@metadata`` log.

Theory of operation
-------------------
Every decision of the active controller is a short list of records appended to the
``@metadata`` log (see ``kraft/``). Brokers and controllers fold those records, in offset
order, into a :class:`metadata.image.MetadataImage`. A record is a small frozen, slotted
dataclass; ``to_dict()`` turns it into a msgpack-able map tagged with ``"type"`` (the record
type name, e.g. ``"RegisterBroker"``) and :func:`record_from_dict` turns it back.

Conventions
-----------
* Sequences are tuples in Python and lists on the wire; :func:`record_from_dict` converts
  lists back to tuples (recursively) so that ``from_dict(r.to_dict()) == r``.
* Unknown keys in a dict are ignored (a newer writer may add fields); missing optional
  keys take the field default. An unknown ``type`` raises :class:`UnknownRecordType`.
* ``PartitionChange`` carries only changed fields; ``None`` means "unchanged". ``leader=-1``
  means "no leader". The fold bumps epochs as Kafka does: a leader change — or a replica
  leaving the replicas (reassignment) — bumps ``leader_epoch`` and ``partition_epoch``; any
  other change bumps ``partition_epoch``.
* Reassignment (KIP-455, ``kraft/reassign.py``): ``Partition``/``PartitionChange`` carry
  ``adding_replicas``/``removing_replicas``/``throttle_bytes_per_s`` (fields added later: a
  record without them reads as "no reassignment", an older reader ignores them).
* ``RegisterBroker.broker_epoch == -1`` means "the offset of this record" (the broker epoch
  of KIP-631); snapshots write the explicit epoch and fenced state.
* Group records (``GroupEpoch``, ``GroupMember``, ``GroupMemberRemoved``, ``GroupAssignment``,
  ``GroupDeleted``) are defined in :mod:`rafka.metadata.groups` with their image and fold; security
  records (``UserScramCredential``, ``UserScramCredentialRemoved``, ``AclCreated``,
  ``AclRemoved``) in :mod:`rafka.metadata.security`; ``ClientQuota`` in :mod:`rafka.metadata.quotas`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rafka.metadata._base import Record
from rafka.metadata.groups import (
    GroupAssignment,
    GroupDeleted,
    GroupEpoch,
    GroupMember,
    GroupMemberRemoved,
)
from rafka.metadata.quotas import ClientQuota
from rafka.metadata.security import (
    AclCreated,
    AclRemoved,
    UserScramCredential,
    UserScramCredentialRemoved,
)

__all__ = [
    "BrokerRegistrationChange",
    "ConfigRecord",
    "FenceBroker",
    "GroupAssignment",
    "GroupDeleted",
    "GroupEpoch",
    "GroupMember",
    "GroupMemberRemoved",
    "LeaderChange",
    "MetadataRecord",
    "NoOp",
    "Partition",
    "PartitionChange",
    "ProducerIds",
    "RECORD_TYPES",
    "RegisterBroker",
    "RemoveTopic",
    "Topic",
    "UnfenceBroker",
    "UnknownRecordType",
    "UnregisterBroker",
    "UserScramCredential",
    "UserScramCredentialRemoved",
    "AclCreated",
    "AclRemoved",
    "record_from_dict",
    "LEADER_RECOVERED",
    "LEADER_RECOVERING",
    "NO_LEADER",
]

NO_LEADER = -1
LEADER_RECOVERED = 0
LEADER_RECOVERING = 1


class UnknownRecordType(ValueError):
    """A dict carried a ``type`` tag no record class is registered for."""


_Record = Record  # the shared base: metadata/_base.py


# -- cluster ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBroker(_Record):
    record_type: ClassVar[str] = "RegisterBroker"
    broker_id: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    broker_epoch: int = -1  # -1: the offset of this record
    fenced: bool = True
    secure_listener: str | None = None  # "host:port" of its secured listener (docs/security.md)
    decommissioning: bool = False  # snapshots: see BrokerRegistrationChange
    kafka_listener: str | None = None  # "host:port" of its Kafka-protocol listener (docs/kafka-compat.md)


@dataclass(frozen=True, slots=True)
class UnregisterBroker(_Record):
    record_type: ClassVar[str] = "UnregisterBroker"
    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChange(_Record):
    """A change of a registered broker's state other than fencing (Kafka's
    BrokerRegistrationChangeRecord): ``decommissioning`` True — the controller places no new
    replicas on it and moves its replicas away (``rafka broker decommission``); False — back in
    service; None — unchanged. It survives the broker's re-registration; ``UnregisterBroker``
    ends it."""

    record_type: ClassVar[str] = "BrokerRegistrationChange"
    broker_id: int
    broker_epoch: int = -1  # -1: any epoch
    decommissioning: bool | None = None


@dataclass(frozen=True, slots=True)
class FenceBroker(_Record):
    record_type: ClassVar[str] = "FenceBroker"
    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class UnfenceBroker(_Record):
    record_type: ClassVar[str] = "UnfenceBroker"
    broker_id: int
    broker_epoch: int = -1


# -- topics ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Topic(_Record):
    record_type: ClassVar[str] = "Topic"
    name: str
    topic_id: str


@dataclass(frozen=True, slots=True)
class RemoveTopic(_Record):
    record_type: ClassVar[str] = "RemoveTopic"
    topic_id: str


@dataclass(frozen=True, slots=True)
class Partition(_Record):
    record_type: ClassVar[str] = "Partition"
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: int = LEADER_RECOVERED
    # a reassignment in progress (KIP-455; kraft/reassign.py): replicas being added / removed
    # (both within ``replicas``) and the byte-rate limit on the adding replicas' catch-up
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    throttle_bytes_per_s: int = 0  # 0: unthrottled


@dataclass(frozen=True, slots=True)
class PartitionChange(_Record):
    record_type: ClassVar[str] = "PartitionChange"
    topic_id: str
    partition: int
    leader: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    leader_recovery_state: int | None = None
    adding_replicas: tuple[int, ...] | None = None  # reassignment fields, as in ``Partition``
    removing_replicas: tuple[int, ...] | None = None
    throttle_bytes_per_s: int | None = None


@dataclass(frozen=True, slots=True)
class ConfigRecord(_Record):
    """A config entry; ``value=None`` deletes it. ``resource_type`` is "topic" or "broker"
    (``resource_name`` is then the topic name, or the broker id as a string, "" = cluster
    default)."""

    record_type: ClassVar[str] = "ConfigRecord"
    resource_type: str
    resource_name: str
    name: str
    value: str | None


# -- producer ids, quorum, misc ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerIds(_Record):
    """A block of producer ids was handed to ``broker_id``: the next free id is now
    ``next_producer_id`` (the end, exclusive, of the block)."""

    record_type: ClassVar[str] = "ProducerIds"
    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class LeaderChange(_Record):
    """Written by a newly elected active controller; ``epoch`` is its quorum epoch (term)."""

    record_type: ClassVar[str] = "LeaderChange"
    leader_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class NoOp(_Record):
    """Changes nothing when folded. With ``error_code`` set it marks a *refusal*: the
    controller answered an idempotent admin request (client ``request_id``) with that error and
    committed this record under the request's proposal id, so that every later attempt with the
    same id gets the same answer (``kraft/service.py``). Both fields are optional: a NoOp
    written before they existed reads as a plain one."""

    record_type: ClassVar[str] = "NoOp"
    error_code: int = 0  # 0: a plain NoOp
    message: str = ""


# -- groups: concrete types live in metadata/groups.py (the group coordinator's domain)


MetadataRecord = (
    RegisterBroker
    | UnregisterBroker
    | BrokerRegistrationChange
    | FenceBroker
    | UnfenceBroker
    | Topic
    | RemoveTopic
    | Partition
    | PartitionChange
    | ConfigRecord
    | ProducerIds
    | LeaderChange
    | NoOp
    | GroupEpoch
    | GroupMember
    | GroupMemberRemoved
    | GroupAssignment
    | GroupDeleted
    | UserScramCredential
    | UserScramCredentialRemoved
    | AclCreated
    | AclRemoved
    | ClientQuota
)

RECORD_TYPES: dict[str, type[_Record]] = {
    cls.record_type: cls
    for cls in (
        RegisterBroker,
        UnregisterBroker,
        BrokerRegistrationChange,
        FenceBroker,
        UnfenceBroker,
        Topic,
        RemoveTopic,
        Partition,
        PartitionChange,
        ConfigRecord,
        ProducerIds,
        LeaderChange,
        NoOp,
        GroupEpoch,
        GroupMember,
        GroupMemberRemoved,
        GroupAssignment,
        GroupDeleted,
        UserScramCredential,
        UserScramCredentialRemoved,
        AclCreated,
        AclRemoved,
        ClientQuota,
    )
}


def record_from_dict(d: dict[str, Any]) -> MetadataRecord:
    """Inverse of ``record.to_dict()``."""
    try:
        cls = RECORD_TYPES[d["type"]]
    except KeyError:
        raise UnknownRecordType(f"unknown metadata record type {d.get('type')!r}") from None
    return cls.from_dict(d)  # type: ignore[no-any-return]
