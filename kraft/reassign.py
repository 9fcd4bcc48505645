"""Partition reassignment and broker decommission — the active controller's decisions (KIP-455).

Theory of operation
-------------------
A reassignment is metadata. ``alter_reassignments(image, items, throttle)`` turns a plan —
target replica lists per partition (or ``None``: cancel) — into ``PartitionChange`` records;
every broker folds them like any other change (``metadata/delta.py``):

1. **start**: with original replicas O and target T the registration becomes
   ``replicas = T + (O - T)``, ``adding_replicas = T - O``, ``removing_replicas = O - T``, and
   ``throttle_bytes_per_s``. The adding brokers see themselves in the replicas and start
   fetching from the leader (``broker/replica_manager.py``); their follower fetcher limits
   that catch-up to the throttle (``broker/replication/fetcher.py``), normal followers are not
   throttled. The leader adds them to the ISR once caught up (``AlterPartition``), as any
   follower. A new plan for a partition already moving replaces the old target (relative to
   the original replicas); a plan equal to the current replicas changes nothing.
2. **switch** (``complete_reassignments``, run by the active controller on every periodic tick
   and right after a start): once every target replica is in the ISR the registration becomes
   ``replicas = T``, ``isr = ISR ∩ T``, the reassignment fields are cleared, and if the leader
   is being removed leadership moves to the first target replica that is live and in sync.
   The fold bumps the leader epoch whenever a replica leaves (``apply_partition_change``), even
   if the leader stays: a fetch a removed replica still has in flight is fenced, and cannot be
   counted for that broker's new, empty log if it is added back later. Removed brokers find the
   partition gone from their replicas and delete their local copy
   (``TopicsDelta.local_changes`` → ``deletes``).
3. **cancel** (target ``None``): back to the original replicas O (``replicas - adding``; the
   order is the in-progress one, as Kafka), ISR ∩ O, leader moved off an adding replica (a
   leader epoch bump too: the adding replicas leave).

Every change carries a ``partition_epochs`` guard, so a change decided against an image that
moved meanwhile (an ISR change, a fence) is rejected at apply and decided again next tick.

A plan is validated as a whole before anything is written: unknown topic or partition, an empty
or duplicate replica list, a broker that is not registered, fenced or being decommissioned, a
replica count that differs from the partition's replication factor, or a partition named twice
— the first problem is raised as its named error and nothing changes.

Decommission (``decommission_broker``): a ``BrokerRegistrationChange(decommissioning=True)``
— topic creation and partition growth no longer place replicas on it
(``kraft.controller.placeable_brokers``) — and a reassignment of every partition whose target
holds it: it is replaced, at the same position, by the placeable broker that is not yet a
replica of the partition and holds the fewest replicas so far (ties: lowest id), which keeps
the replication factor and spreads the load. Internal topics move the same way. When the
broker holds no replica any more it can be stopped, then unregistered (``unregister_broker``:
an ``UnregisterBroker`` record, refused while it still holds replicas or is unfenced — a
running broker would register again at its next heartbeat, as in Kafka).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rafka.kraft.controller import ControllerState, Decision, live_brokers, placeable_brokers
from rafka.kraft.quorum import Guard
from rafka.metadata import (
    NO_LEADER,
    BrokerRegistrationChange,
    MetadataImage,
    MetadataRecord,
    PartitionChange,
    PartitionRegistration,
    TopicImage,
    UnregisterBroker,
)
from rafka.metadata.delta import apply_partition_change
from rafka.wire.errors import ErrorCode, error_for

__all__ = [
    "ReassignItem",
    "alter_reassignments",
    "complete_reassignments",
    "decommission_broker",
    "list_reassignments",
    "recommission_broker",
    "replicas_of",
    "unregister_broker",
]

MAX_THROTTLE_BYTES_PER_S = 2**40


@dataclass(frozen=True, slots=True)
class ReassignItem:
    topic: str
    partition: int
    replicas: tuple[int, ...] | None  # None: cancel the partition's reassignment


def _invalid(message: str) -> Exception:
    return error_for(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def _validate(image: MetadataImage, item: ReassignItem, placeable: set[int]
              ) -> tuple[TopicImage, PartitionRegistration]:
    where = f"{item.topic}/{item.partition}"
    t = image.topics.by_name.get(item.topic)
    if t is None:
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {item.topic!r}")
    reg = t.partitions.get(item.partition)
    if reg is None:
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {where}")
    if item.replicas is None:
        if not reg.reassigning:
            raise error_for(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"{where} is not being reassigned")
        if not set(reg.original_replicas) & set(reg.isr):
            raise _invalid(f"{where}: no original replica is in sync; cancelling would leave it offline")
        return t, reg
    target = item.replicas
    if not target:
        raise _invalid(f"{where}: the replica list is empty")
    dup = sorted(r for r, n in Counter(target).items() if n > 1)
    if dup:
        raise _invalid(f"{where}: broker {dup[0]} is listed twice in {list(target)}")
    for r in target:
        b = image.cluster.brokers.get(r)
        if b is None:
            raise _invalid(f"{where}: broker {r} is not registered")
        if r not in placeable and r not in reg.original_replicas:
            why = "being decommissioned" if b.decommissioning else "fenced"
            raise _invalid(f"{where}: broker {r} is {why}")
    rf = len(reg.original_replicas)
    if len(target) != rf:
        raise error_for(ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"{where} has replication factor {rf}; the plan gives {len(target)} "
                        f"replicas {list(target)} (reassignment keeps the replication factor)")
    return t, reg


def _guard(t: TopicImage, p: int, reg: PartitionRegistration) -> Guard:
    return Guard.partition_epochs(t.topic_id, p, reg.leader_epoch, reg.partition_epoch)


def _leader_within(reg: PartitionRegistration, replicas: Sequence[int], isr: Sequence[int],
                   live: set[int]) -> int:
    if reg.leader in replicas and reg.leader in isr:
        return reg.leader
    return next((r for r in replicas if r in isr and r in live), NO_LEADER)


def _start(reg: PartitionRegistration, target: tuple[int, ...], throttle: int, live: set[int]
           ) -> PartitionChange:
    original = reg.original_replicas
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    if not adding and not removing:  # back to (or still at) the replicas: nothing moves
        replicas = target
    else:
        replicas = target + removing
    isr = tuple(r for r in replicas if r in reg.isr)
    if not isr:  # only a replaced plan's dropped adding replicas were in sync
        raise _invalid(f"the new plan {list(target)} keeps no in-sync replica of {list(reg.replicas)}")
    leader = _leader_within(reg, replicas, isr, live)
    if leader == NO_LEADER and reg.leader in replicas:
        leader = reg.leader
    return PartitionChange(
        "", -1, leader=None if leader == reg.leader else leader,
        isr=None if isr == reg.isr else isr,
        replicas=None if replicas == reg.replicas else replicas,
        adding_replicas=adding, removing_replicas=removing,
        throttle_bytes_per_s=throttle if adding else 0)


def _cancel(reg: PartitionRegistration, live: set[int]) -> PartitionChange:
    replicas = reg.original_replicas
    isr = tuple(r for r in replicas if r in reg.isr)
    leader = _leader_within(reg, replicas, isr, live)
    return PartitionChange(
        "", -1, leader=None if leader == reg.leader else leader, isr=isr, replicas=replicas,
        adding_replicas=(), removing_replicas=(), throttle_bytes_per_s=0)


def _completion(reg: PartitionRegistration, live: set[int]) -> PartitionChange | None:
    """The switch to the target, or None while an adding replica is not in sync yet."""
    if not reg.reassigning:
        return None
    target = reg.target_replicas
    if not set(target) <= set(reg.isr):
        return None
    leader = _leader_within(reg, target, target, live)
    if leader == NO_LEADER:
        return None  # no live target replica to lead: wait
    return PartitionChange(
        "", -1, leader=None if leader == reg.leader else leader,
        isr=tuple(r for r in target if r in reg.isr), replicas=target,
        adding_replicas=(), removing_replicas=(), throttle_bytes_per_s=0)


def _placed(change: PartitionChange, t: TopicImage, p: int) -> PartitionChange:
    return PartitionChange(t.topic_id, p, change.leader, change.isr, change.replicas, None,
                           change.adding_replicas, change.removing_replicas,
                           change.throttle_bytes_per_s)


def alter_reassignments(image: MetadataImage, items: Iterable[ReassignItem],
                        throttle_bytes_per_s: int = 0, state: ControllerState | None = None
                        ) -> Decision:
    """Start, replace or cancel reassignments (module docstring); all or nothing."""
    items = list(items)
    if not 0 <= throttle_bytes_per_s <= MAX_THROTTLE_BYTES_PER_S:
        raise error_for(ErrorCode.INVALID_REQUEST,
                        f"throttle must be 0 (none) .. {MAX_THROTTLE_BYTES_PER_S} bytes/s")
    seen: set[tuple[str, int]] = set()
    for it in items:
        if (it.topic, it.partition) in seen:
            raise _invalid(f"{it.topic}/{it.partition} appears twice in the plan")
        seen.add((it.topic, it.partition))
    placeable = set(placeable_brokers(image, state))
    live = live_brokers(image, state)
    checked = [(_validate(image, it, placeable), it) for it in items]
    d = Decision()
    for (t, reg), it in checked:
        if it.replicas is None:
            change = _cancel(reg, live)
        else:
            change = _start(reg, tuple(it.replicas), throttle_bytes_per_s, live)
        after = apply_partition_change(reg, change)
        if after is reg:
            continue
        d.records.append(_placed(change, t, it.partition))
        d.guards.append(_guard(t, it.partition, reg))
        done = _completion(after, live)  # nothing to add (a reorder, a shrink in sync): switch now
        if done is not None:
            d.records.append(_placed(done, t, it.partition))
    return d


def complete_reassignments(image: MetadataImage, state: ControllerState | None = None) -> Decision:
    """The switches that are due: every partition whose target replicas are all in sync."""
    live = live_brokers(image, state)
    d = Decision()
    for t in image.topics.by_id.values():
        for p, reg in t.partitions.items():
            change = _completion(reg, live)
            if change is not None:
                d.records.append(_placed(change, t, p))
                d.guards.append(_guard(t, p, reg))
    return d


def replicas_of(image: MetadataImage, broker_id: int) -> list[tuple[str, int]]:
    """(topic, partition) of every partition whose replicas include ``broker_id``."""
    return sorted((t.name, p) for t in image.topics.by_id.values()
                  for p, reg in t.partitions.items() if broker_id in reg.replicas)


def decommission_broker(image: MetadataImage, broker_id: int, throttle_bytes_per_s: int = 0,
                        state: ControllerState | None = None) -> tuple[Decision, list[ReassignItem]]:
    """Mark ``broker_id`` decommissioning and move every replica it holds (module docstring).
    Returns the decision and the reassignments it starts."""
    b = image.cluster.brokers.get(broker_id)
    if b is None:
        raise error_for(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
    candidates = sorted(set(placeable_brokers(image, state)) - {broker_id})
    load: Counter[int] = Counter({c: 0 for c in candidates})
    for t in image.topics.by_id.values():
        for reg in t.partitions.values():
            load.update(r for r in reg.target_replicas if r in load)
    items: list[ReassignItem] = []
    for t in sorted(image.topics.by_id.values(), key=lambda t: t.name):
        for p, reg in t.partitions.items():
            target = reg.target_replicas
            if broker_id not in target:
                continue
            free = [c for c in candidates if c not in target]
            if not free:
                raise error_for(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"{t.name}/{p} has replication factor {len(target)}: no other "
                                f"live broker can take broker {broker_id}'s replica "
                                f"(placeable: {candidates})")
            pick = min(free, key=lambda c: (load[c], c))
            load[pick] += 1
            items.append(ReassignItem(t.name, p, tuple(pick if r == broker_id else r for r in target)))
    mark: list[MetadataRecord] = []
    if not b.decommissioning:
        mark.append(BrokerRegistrationChange(broker_id, b.epoch, decommissioning=True))
    # validated against the image the decommission applies to: the broker is placeable no more
    d = alter_reassignments(image, items, throttle_bytes_per_s, state)
    return Decision(mark + d.records, [Guard.broker_epoch(broker_id, b.epoch), *d.guards]), items


def recommission_broker(image: MetadataImage, broker_id: int) -> Decision:
    """Back in service: new replicas may be placed on it again (moved replicas stay moved)."""
    b = image.cluster.brokers.get(broker_id)
    if b is None:
        raise error_for(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
    if not b.decommissioning:
        return Decision()
    return Decision([BrokerRegistrationChange(broker_id, b.epoch, decommissioning=False)],
                    [Guard.broker_epoch(broker_id, b.epoch)])


def unregister_broker(image: MetadataImage, broker_id: int) -> Decision:
    """Kafka's UNREGISTER_BROKER, for a stopped broker that holds no replica."""
    b = image.cluster.brokers.get(broker_id)
    if b is None:
        raise error_for(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
    held = replicas_of(image, broker_id)
    if held:
        names = ", ".join(f"{t}/{p}" for t, p in held[:5]) + (" ..." if len(held) > 5 else "")
        raise error_for(ErrorCode.INVALID_REQUEST,
                        f"broker {broker_id} still holds {len(held)} replicas ({names}): "
                        f"decommission it first")
    if not b.fenced:
        raise error_for(ErrorCode.INVALID_REQUEST,
                        f"broker {broker_id} is running (unfenced): stop it first, or it registers again")
    return Decision([UnregisterBroker(broker_id, b.epoch)], [Guard.broker_epoch(broker_id, b.epoch)])


def list_reassignments(image: MetadataImage, topics: Iterable[tuple[str, int]] | None = None
                       ) -> list[tuple[str, int, PartitionRegistration]]:
    """(topic, partition, registration) of every partition being reassigned, by name."""
    wanted = None if topics is None else set(topics)
    return [(t.name, p, reg) for t in sorted(image.topics.by_id.values(), key=lambda t: t.name)
            for p, reg in sorted(t.partitions.items())
            if reg.reassigning and (wanted is None or (t.name, p) in wanted)]
