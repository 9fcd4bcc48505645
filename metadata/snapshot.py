"""Snapshots: a :class:`MetadataImage` as a list of records, and back.

``image_to_records(image)`` lists records whose fold onto ``MetadataImage.EMPTY`` gives
back an image equal to ``image`` (``records_to_image(records, image.offset, image.epoch)``).
Broker epochs and fenced state are written explicitly in ``RegisterBroker`` (the epoch of a
live log's registration is the offset of its record, which a snapshot cannot reproduce).
The order is deterministic (by id / name), so two voters with equal images write equal
snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable

from rafka.metadata.delta import MetadataDelta
from rafka.metadata.groups import groups_to_records
from rafka.metadata.image import MetadataImage
from rafka.metadata.quotas import quotas_to_records
from rafka.metadata.records import (
    ConfigRecord,
    LeaderChange,
    MetadataRecord,
    Partition,
    ProducerIds,
    RegisterBroker,
    Topic,
)
from rafka.metadata.security import acls_to_records, scram_to_records

__all__ = ["image_to_records", "records_to_image"]


def image_to_records(image: MetadataImage) -> list[MetadataRecord]:
    out: list[MetadataRecord] = []
    if image.quorum.epoch >= 0:
        out.append(LeaderChange(leader_id=image.quorum.leader_id, epoch=image.quorum.epoch))
    for b in image.cluster.brokers.values():
        out.append(
            RegisterBroker(
                broker_id=b.broker_id,
                incarnation_id=b.incarnation_id,
                host=b.host,
                port=b.port,
                rack=b.rack,
                broker_epoch=b.epoch,
                fenced=b.fenced,
                secure_listener=b.secure_listener,
                decommissioning=b.decommissioning,
                kafka_listener=b.kafka_listener,
            )
        )
    for name, cfg in image.configs.brokers.items():
        for k, v in cfg.items():
            out.append(ConfigRecord("broker", name, k, v))
    for t in image.topics.by_id.values():
        out.append(Topic(name=t.name, topic_id=t.topic_id))
        for k, v in t.configs.items():
            out.append(ConfigRecord("topic", t.name, k, v))
        for p, reg in t.partitions.items():
            out.append(
                Partition(
                    topic_id=t.topic_id,
                    partition=p,
                    replicas=reg.replicas,
                    isr=reg.isr,
                    leader=reg.leader,
                    leader_epoch=reg.leader_epoch,
                    partition_epoch=reg.partition_epoch,
                    leader_recovery_state=reg.leader_recovery_state,
                    adding_replicas=reg.adding_replicas,
                    removing_replicas=reg.removing_replicas,
                    throttle_bytes_per_s=reg.throttle_bytes_per_s,
                )
            )
    if image.producer_ids.next_producer_id > 0:
        out.append(ProducerIds(-1, -1, image.producer_ids.next_producer_id))
    out.extend(groups_to_records(image.groups))
    out.extend(scram_to_records(image.scram))  # type: ignore[arg-type]
    out.extend(acls_to_records(image.acls))  # type: ignore[arg-type]
    out.extend(quotas_to_records(image.quotas))  # type: ignore[arg-type]
    return out


def records_to_image(
    records: Iterable[MetadataRecord], offset: int, epoch: int
) -> MetadataImage:
    """Fold snapshot ``records`` onto the empty image; stamp it with ``offset``/``epoch``.

    Records are replayed at synthetic offsets 0, 1, ...; only ``image.offset``/``image.epoch``
    are observable, and RegisterBroker records in snapshots carry explicit epochs."""
    delta = MetadataDelta(MetadataImage.EMPTY)
    for i, r in enumerate(records):
        delta.replay(r, i, epoch)
    delta.offset, delta.epoch = offset, epoch
    image = delta.apply()
    assert image.offset == offset
    return image
