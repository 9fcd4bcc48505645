"""MetadataDelta — fold a batch of records into the next :class:`MetadataImage`.

Theory of operation
-------------------
``delta = MetadataDelta(image)``; ``delta.replay(record, offset, epoch)`` for each record of
a batch, in offset order; ``delta.apply()`` returns the new image. Each domain has its own
delta that copies only what a record touches (copy-on-first-write per topic / per broker),
so ``apply()`` shares every untouched ``TopicImage`` and every untouched domain with the old
image.

``replay`` is total: a record that refers to something unknown (a partition of a topic that
does not exist, a broker that never registered) is ignored rather than raised, so a broker
never dies folding the log. The active controller validates commands before writing them,
so such records do not occur in practice.

After ``apply()``, ``delta.topics.local_changes(broker_id)`` tells a broker what it must do
(as Kafka's ``TopicsDelta.localChanges``): partitions it now leads, partitions it now follows
(new or changed registration), and partitions it must stop serving and delete (topic removed
or broker removed from the replicas). Keys are ``TopicPartition(topic, partition)``. A topic
deleted and re-created under the same name within one delta shows up in ``deletes`` *and* in
``leaders``/``followers``: process deletes first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from rafka.metadata.groups import GROUP_RECORD_TYPES, GroupsDelta
from rafka.metadata.image import (
    BrokerRegistration,
    ClusterImage,
    ConfigsImage,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    QuorumImage,
    TopicImage,
    TopicPartition,
    TopicsImage,
    frozen_map,
)
from rafka.metadata.quotas import QUOTA_RECORD_TYPES, QuotasDelta
from rafka.metadata.records import (
    BrokerRegistrationChange,
    ConfigRecord,
    FenceBroker,
    LeaderChange,
    MetadataRecord,
    NoOp,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    UnregisterBroker,
)
from rafka.metadata.security import ACL_RECORD_TYPES, SCRAM_RECORD_TYPES, AclsDelta, ScramDelta

__all__ = [
    "ClusterDelta",
    "LocalChanges",
    "MetadataDelta",
    "TopicsDelta",
    "apply_partition_change",
]


@dataclass(slots=True)
class LocalChanges:
    leaders: dict[TopicPartition, PartitionRegistration] = field(default_factory=dict)
    followers: dict[TopicPartition, PartitionRegistration] = field(default_factory=dict)
    deletes: set[TopicPartition] = field(default_factory=set)


def apply_partition_change(
    reg: PartitionRegistration, change: PartitionChange
) -> PartitionRegistration:
    """The registration after ``change`` (epochs bumped as Kafka does)."""
    leader = reg.leader if change.leader is None else change.leader
    isr = reg.isr if change.isr is None else tuple(change.isr)
    replicas = reg.replicas if change.replicas is None else tuple(change.replicas)
    recovery = (
        reg.leader_recovery_state
        if change.leader_recovery_state is None
        else change.leader_recovery_state
    )
    # reassignment fields stay within the replicas (a change of the replicas alone trims them)
    adding = reg.adding_replicas if change.adding_replicas is None else tuple(change.adding_replicas)
    removing = reg.removing_replicas if change.removing_replicas is None else tuple(change.removing_replicas)
    adding = tuple(r for r in adding if r in replicas)
    removing = tuple(r for r in removing if r in replicas)
    throttle = reg.throttle_bytes_per_s if change.throttle_bytes_per_s is None else change.throttle_bytes_per_s
    leader_changed = leader != reg.leader
    # a replica leaving the replicas (a reassignment's switch or cancel) bumps the leader epoch
    # too, as KRaft does: a fetch the removed replica sent before it deleted its log must be
    # fenced, or — when the same broker is added back — counted for its new, empty log
    replica_removed = not set(reg.replicas) <= set(replicas)
    bump = leader_changed or replica_removed
    changed = leader_changed or isr != reg.isr or replicas != reg.replicas
    changed = changed or recovery != reg.leader_recovery_state
    changed = changed or (adding, removing, throttle) != (
        reg.adding_replicas, reg.removing_replicas, reg.throttle_bytes_per_s)
    if not changed:
        return reg
    return PartitionRegistration(
        replicas=replicas,
        isr=isr,
        leader=leader,
        leader_epoch=reg.leader_epoch + 1 if bump else reg.leader_epoch,
        partition_epoch=reg.partition_epoch + 1,
        leader_recovery_state=recovery,
        adding_replicas=adding,
        removing_replicas=removing,
        throttle_bytes_per_s=throttle,
    )


class ClusterDelta:
    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.changed: dict[int, BrokerRegistration | None] = {}

    def _get(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self.changed:
            return self.changed[broker_id]
        return self.image.brokers.get(broker_id)

    def replay(self, record: MetadataRecord, offset: int) -> None:
        if isinstance(record, RegisterBroker):
            epoch = offset if record.broker_epoch < 0 else record.broker_epoch
            cur = self._get(record.broker_id)  # a decommission outlives a re-registration
            decommissioning = record.decommissioning or (cur is not None and cur.decommissioning)
            self.changed[record.broker_id] = BrokerRegistration(
                broker_id=record.broker_id,
                epoch=epoch,
                incarnation_id=record.incarnation_id,
                host=record.host,
                port=record.port,
                rack=record.rack,
                fenced=record.fenced,
                secure_listener=record.secure_listener,
                decommissioning=decommissioning,
                kafka_listener=record.kafka_listener,
            )
        elif isinstance(record, BrokerRegistrationChange):
            cur = self._get(record.broker_id)
            if (cur is not None and record.broker_epoch in (-1, cur.epoch)
                    and record.decommissioning is not None):
                self.changed[record.broker_id] = replace(cur, decommissioning=record.decommissioning)
        elif isinstance(record, UnregisterBroker):
            cur = self._get(record.broker_id)
            if cur is not None and record.broker_epoch in (-1, cur.epoch):
                self.changed[record.broker_id] = None
        elif isinstance(record, FenceBroker | UnfenceBroker):
            cur = self._get(record.broker_id)
            if cur is not None and record.broker_epoch in (-1, cur.epoch):
                self.changed[record.broker_id] = replace(
                    cur, fenced=isinstance(record, FenceBroker)
                )

    def apply(self) -> ClusterImage:
        if not self.changed:
            return self.image
        brokers = dict(self.image.brokers)
        for bid, reg in self.changed.items():
            if reg is None:
                brokers.pop(bid, None)
            else:
                brokers[bid] = reg
        return ClusterImage(brokers=frozen_map(dict(sorted(brokers.items()))))


class _TopicDraft:
    """Copy-on-write working state of one topic inside a delta."""

    __slots__ = ("name", "topic_id", "partitions", "configs", "created", "changed_partitions")

    def __init__(self, base: TopicImage | None, name: str, topic_id: str) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions: dict[int, PartitionRegistration] = dict(base.partitions) if base else {}
        self.configs: dict[str, str] = dict(base.configs) if base else {}
        self.created = base is None
        self.changed_partitions: set[int] = set()

    def build(self) -> TopicImage:
        return TopicImage(
            name=self.name,
            topic_id=self.topic_id,
            partitions=frozen_map(dict(sorted(self.partitions.items()))),
            configs=frozen_map(dict(sorted(self.configs.items()))),
        )


class TopicsDelta:
    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        self.drafts: dict[str, _TopicDraft] = {}  # topic_id -> draft
        self.deleted: dict[str, TopicImage] = {}  # topic_id -> image before this delta

    def _draft(self, topic_id: str) -> _TopicDraft | None:
        d = self.drafts.get(topic_id)
        if d is not None:
            return d
        base = self.image.by_id.get(topic_id)
        if base is None or topic_id in self.deleted:
            return None  # unknown, or removed earlier in this delta: records for it are void
        d = _TopicDraft(base, base.name, base.topic_id)
        self.drafts[topic_id] = d
        return d

    def _draft_by_name(self, name: str) -> _TopicDraft | None:
        for d in self.drafts.values():
            if d.name == name:
                return d
        base = self.image.by_name.get(name)
        return None if base is None else self._draft(base.topic_id)

    def replay(self, record: MetadataRecord) -> None:
        if isinstance(record, Topic):
            if record.topic_id in self.drafts or self._draft_by_name(record.name) is not None:
                return  # duplicate id or name: ignore
            if record.topic_id in self.image.by_id and record.topic_id not in self.deleted:
                return
            self.drafts[record.topic_id] = _TopicDraft(None, record.name, record.topic_id)
        elif isinstance(record, RemoveTopic):
            d = self._draft(record.topic_id)
            if d is None:
                return
            del self.drafts[record.topic_id]
            base = self.image.by_id.get(record.topic_id)
            if base is not None:
                self.deleted[record.topic_id] = base
        elif isinstance(record, Partition):
            d = self._draft(record.topic_id)
            if d is None:
                return
            replicas = tuple(record.replicas)
            d.partitions[record.partition] = PartitionRegistration(
                replicas=replicas,
                isr=tuple(record.isr),
                leader=record.leader,
                leader_epoch=record.leader_epoch,
                partition_epoch=record.partition_epoch,
                leader_recovery_state=record.leader_recovery_state,
                adding_replicas=tuple(r for r in record.adding_replicas if r in replicas),
                removing_replicas=tuple(r for r in record.removing_replicas if r in replicas),
                throttle_bytes_per_s=record.throttle_bytes_per_s,
            )
            d.changed_partitions.add(record.partition)
        elif isinstance(record, PartitionChange):
            d = self._draft(record.topic_id)
            if d is None or record.partition not in d.partitions:
                return
            old = d.partitions[record.partition]
            new = apply_partition_change(old, record)
            if new is not old:
                d.partitions[record.partition] = new
                d.changed_partitions.add(record.partition)
        elif isinstance(record, ConfigRecord) and record.resource_type == "topic":
            d = self._draft_by_name(record.resource_name)
            if d is None:
                return
            if record.value is None:
                d.configs.pop(record.name, None)
            else:
                d.configs[record.name] = record.value

    def apply(self) -> TopicsImage:
        if not self.drafts and not self.deleted:
            return self.image
        by_id = dict(self.image.by_id)
        for tid in self.deleted:
            by_id.pop(tid, None)
        for tid, d in self.drafts.items():
            by_id[tid] = d.build()
        by_id = dict(sorted(by_id.items()))
        by_name = {t.name: t for t in sorted(by_id.values(), key=lambda t: t.name)}
        return TopicsImage(by_id=frozen_map(by_id), by_name=frozen_map(by_name))

    def local_changes(self, broker_id: int) -> LocalChanges:
        out = LocalChanges()
        for base in self.deleted.values():
            for p, reg in base.partitions.items():
                if broker_id in reg.replicas:
                    out.deletes.add(TopicPartition(base.name, p))
        for d in self.drafts.values():
            base = None if d.created else self.image.by_id.get(d.topic_id)
            for p in sorted(d.changed_partitions):
                reg = d.partitions[p]
                tp = TopicPartition(d.name, p)
                if broker_id in reg.replicas:
                    if reg.leader == broker_id:
                        out.leaders[tp] = reg
                    else:
                        out.followers[tp] = reg
                elif base is not None:
                    prev = base.partitions.get(p)
                    if prev is not None and broker_id in prev.replicas:
                        out.deletes.add(tp)
        return out


class _ConfigsDelta:
    def __init__(self, image: ConfigsImage) -> None:
        self.image = image
        self.changed: dict[str, dict[str, str]] = {}

    def replay(self, record: ConfigRecord) -> None:
        if record.resource_type != "broker":
            return
        name = record.resource_name
        cur = self.changed.get(name)
        if cur is None:
            cur = dict(self.image.brokers.get(name, {}))
            self.changed[name] = cur
        if record.value is None:
            cur.pop(record.name, None)
        else:
            cur[record.name] = record.value

    def apply(self) -> ConfigsImage:
        if not self.changed:
            return self.image
        brokers: dict[str, Any] = dict(self.image.brokers)
        for name, cfg in self.changed.items():
            if cfg:
                brokers[name] = frozen_map(dict(sorted(cfg.items())))
            else:
                brokers.pop(name, None)
        return ConfigsImage(brokers=frozen_map(dict(sorted(brokers.items()))))


class MetadataDelta:
    """Records folded on top of ``image``; ``apply()`` gives the next image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.cluster = ClusterDelta(image.cluster)
        self.topics = TopicsDelta(image.topics)
        self.configs = _ConfigsDelta(image.configs)
        self.groups = GroupsDelta(image.groups)
        self.scram = ScramDelta(image.scram)
        self.acls = AclsDelta(image.acls)
        self.quotas = QuotasDelta(image.quotas)
        self.producer_ids: ProducerIdsImage | None = None
        self.quorum: QuorumImage | None = None
        self.offset = image.offset
        self.epoch = image.epoch
        self.record_count = 0

    def replay(self, record: MetadataRecord, offset: int, epoch: int) -> None:
        if offset <= self.offset:
            raise ValueError(f"offset {offset} not after {self.offset}")
        self.offset, self.epoch = offset, epoch
        self.record_count += 1
        if isinstance(record, RegisterBroker | UnregisterBroker | FenceBroker | UnfenceBroker
                      | BrokerRegistrationChange):
            self.cluster.replay(record, offset)
        elif isinstance(record, ConfigRecord):
            if record.resource_type == "topic":
                self.topics.replay(record)
            else:
                self.configs.replay(record)
        elif isinstance(record, Topic | RemoveTopic | Partition | PartitionChange):
            self.topics.replay(record)
        elif isinstance(record, ProducerIds):
            cur = self.producer_ids or self.image.producer_ids
            if record.next_producer_id > cur.next_producer_id:
                self.producer_ids = ProducerIdsImage(record.next_producer_id)
        elif isinstance(record, LeaderChange):
            self.quorum = QuorumImage(leader_id=record.leader_id, epoch=record.epoch)
        elif isinstance(record, GROUP_RECORD_TYPES):
            self.groups.replay(record)  # type: ignore[arg-type]
        elif isinstance(record, SCRAM_RECORD_TYPES):
            self.scram.replay(record)
        elif isinstance(record, ACL_RECORD_TYPES):
            self.acls.replay(record)
        elif isinstance(record, QUOTA_RECORD_TYPES):
            self.quotas.replay(record)
        elif isinstance(record, NoOp):
            pass

    def apply(self) -> MetadataImage:
        return MetadataImage(
            offset=self.offset,
            epoch=self.epoch,
            cluster=self.cluster.apply(),
            topics=self.topics.apply(),
            configs=self.configs.apply(),
            producer_ids=self.producer_ids or self.image.producer_ids,
            groups=self.groups.apply(),
            quorum=self.quorum or self.image.quorum,
            scram=self.scram.apply(),
            acls=self.acls.apply(),
            quotas=self.quotas.apply(),
        )
