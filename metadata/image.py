"""Immutable metadata images — what a node knows after folding the ``@metadata`` log.

Theory of operation
-------------------
A :class:`MetadataImage` is the fold of every record up to ``image.offset``. It is made of
per-domain images (cluster, topics, configs, producer ids, groups, quorum), each immutable
and each with an ``EMPTY``. Mappings are read-only views (``MappingProxyType``); nobody
mutates an image. :class:`metadata.delta.MetadataDelta` builds the next image from a batch
of records and reuses every part that the batch did not touch (unchanged ``TopicImage``
objects, or a whole domain, are shared between consecutive images).

Images compare by value (dataclass equality), which is what the fold tests rely on: any
split of the same record sequence into batches must give an equal image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple

from rafka.metadata._base import EMPTY_MAP
from rafka.metadata.groups import GroupImage, GroupMemberImage, GroupsImage
from rafka.metadata.quotas import QuotasImage
from rafka.metadata.records import LEADER_RECOVERED, NO_LEADER
from rafka.metadata.security import AclsImage, ScramImage

__all__ = [
    "BrokerRegistration",
    "ClusterImage",
    "ConfigsImage",
    "GroupImage",
    "GroupMemberImage",
    "GroupsImage",
    "MetadataImage",
    "PartitionRegistration",
    "ProducerIdsImage",
    "QuorumImage",
    "TopicImage",
    "TopicPartition",
    "TopicsImage",
    "frozen_map",
]


def frozen_map(d: dict[Any, Any] | None = None) -> Mapping[Any, Any]:
    """A read-only view over ``d`` (the caller must not keep mutating ``d``)."""
    return MappingProxyType(d) if d else EMPTY_MAP


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    fenced: bool = True
    secure_listener: str | None = None  # "host:port" (docs/security.md)
    decommissioning: bool = False  # no new replicas; its replicas move away (kraft/reassign.py)
    kafka_listener: str | None = None  # "host:port" of its Kafka listener (docs/kafka-compat.md)

    @property
    def id(self) -> int:
        return self.broker_id


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: int = LEADER_RECOVERED
    # a reassignment in progress (KIP-455, kraft/reassign.py): both within ``replicas``
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    throttle_bytes_per_s: int = 0  # the adding replicas' catch-up limit (0: none)

    def __post_init__(self) -> None:
        assert set(self.isr) <= set(self.replicas), (self.isr, self.replicas)
        assert set(self.adding_replicas) <= set(self.replicas), (self.adding_replicas, self.replicas)
        assert set(self.removing_replicas) <= set(self.replicas), (self.removing_replicas, self.replicas)

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where a reassignment goes (the replicas themselves when none is in progress)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """What a cancelled reassignment goes back to."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: str
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: EMPTY_MAP)
    configs: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)


@dataclass(frozen=True, slots=True)
class TopicsImage:
    by_id: Mapping[str, TopicImage] = field(default_factory=lambda: EMPTY_MAP)
    by_name: Mapping[str, TopicImage] = field(default_factory=lambda: EMPTY_MAP)
    EMPTY: ClassVar[TopicsImage]

    def get(self, name: str) -> TopicImage | None:
        return self.by_name.get(name)

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        t = self.by_name.get(topic)
        return None if t is None else t.partitions.get(partition)


@dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: EMPTY_MAP)
    EMPTY: ClassVar[ClusterImage]

    def unfenced_ids(self) -> list[int]:
        return sorted(b for b, reg in self.brokers.items() if not reg.fenced)

    def decommissioning_ids(self) -> list[int]:
        return sorted(b for b, reg in self.brokers.items() if reg.decommissioning)


@dataclass(frozen=True, slots=True)
class ConfigsImage:
    """Broker-level configs: ``brokers["<id>"]`` or ``brokers[""]`` (cluster default).
    Topic configs live in ``TopicImage.configs``."""

    brokers: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: EMPTY_MAP)
    EMPTY: ClassVar[ConfigsImage]


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    next_producer_id: int = 0
    EMPTY: ClassVar[ProducerIdsImage]


@dataclass(frozen=True, slots=True)
class QuorumImage:
    """The last ``LeaderChange``: who was active controller, in which epoch."""

    leader_id: int = -1
    epoch: int = -1
    EMPTY: ClassVar[QuorumImage]


TopicsImage.EMPTY = TopicsImage()
ClusterImage.EMPTY = ClusterImage()
ConfigsImage.EMPTY = ConfigsImage()
ProducerIdsImage.EMPTY = ProducerIdsImage()
QuorumImage.EMPTY = QuorumImage()


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int = -1  # offset of the last record folded in (-1: none)
    epoch: int = -1  # epoch of that record
    cluster: ClusterImage = ClusterImage.EMPTY
    topics: TopicsImage = TopicsImage.EMPTY
    configs: ConfigsImage = ConfigsImage.EMPTY
    producer_ids: ProducerIdsImage = ProducerIdsImage.EMPTY
    groups: GroupsImage = GroupsImage.EMPTY
    quorum: QuorumImage = QuorumImage.EMPTY
    scram: ScramImage = ScramImage.EMPTY  # SCRAM credentials (metadata/security.py)
    acls: AclsImage = AclsImage.EMPTY  # access control entries (metadata/security.py)
    quotas: QuotasImage = QuotasImage.EMPTY  # client byte-rate quotas (metadata/quotas.py)
    EMPTY: ClassVar[MetadataImage]

    def is_empty(self) -> bool:
        return self == MetadataImage.EMPTY


MetadataImage.EMPTY = MetadataImage()
