"""Consumer-group metadata: the group records, the ``GroupsImage`` and their fold.

Theory of operation
-------------------
The active controller decides group membership and assignment (``kraft/groups``) and writes each
decision as records to the ``@metadata`` log, so a controller failover keeps group state. Every
node folds them into a :class:`GroupsImage` (a domain of :class:`metadata.image.MetadataImage`).
The state follows KIP-848:

* ``GroupEpoch`` — the group's epoch (bumped on every membership, subscription or subscribed-topic
  metadata change), the epoch of its current *target* assignment, and the partition counts of the
  subscribed topics the target was computed from. Creates the group when absent.
* ``GroupMember`` — one member's whole current state (upsert): subscription, member epoch (and the
  previous one), the partitions it currently owns (``assigned``) and those it must give up
  (``pending_revocation``). Creates the group when absent.
* ``GroupAssignment`` — one member's *target* partitions (as computed by the assignor at
  ``assignment_epoch``). Ignored for an unknown member.
  A static member (``instance_id`` set, KIP-345) that rejoins under a new member id takes its
  predecessor's place: ``GroupMemberRemoved`` of the old id, then ``GroupMember`` of the new one
  with the same epoch and partitions (no group epoch bump: no rebalance).
* ``GroupMemberRemoved`` — a member left, was fenced or timed out. The group stays (possibly
  empty).
* ``GroupDeleted`` — the group's membership state is gone (written when its last member leaves).
  The group itself, as users see it, lives on while it has committed offsets in
  ``__consumer_offsets`` (state ``Empty``; see ``broker/groups/offsets.py``).

Invariant the coordinator keeps (tested there): the sets ``assigned ∪ pending_revocation`` of the
members of a group are pairwise disjoint, so no partition is ever owned by two members.

``groups_to_records(image)`` lists records whose fold onto ``GroupsImage.EMPTY`` gives back an
equal image (snapshots). This module imports nothing from the rest of ``metadata`` but
``_base`` (the record base and the map helpers), so that ``records.py``, ``image.py``,
``delta.py`` and ``snapshot.py`` can all import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from rafka.metadata._base import EMPTY_MAP, Record, apply_changes, copy_fields, sorted_map

__all__ = [
    "GROUP_RECORD_TYPES",
    "GroupAssignment",
    "GroupDeleted",
    "GroupEpoch",
    "GroupImage",
    "GroupMember",
    "GroupMemberImage",
    "GroupMemberRemoved",
    "GroupRecord",
    "GroupsDelta",
    "GroupsImage",
    "TP",
    "groups_to_records",
    "member_record",
]

TP = tuple[str, int]


_GroupRecord = Record  # the shared base: metadata/_base.py


@dataclass(frozen=True, slots=True)
class GroupEpoch(_GroupRecord):
    record_type: ClassVar[str] = "GroupEpoch"
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    topic_partitions: tuple[tuple[str, int], ...] = ()  # (topic, partition count) of the target


@dataclass(frozen=True, slots=True)
class GroupMember(_GroupRecord):
    record_type: ClassVar[str] = "GroupMember"
    group_id: str
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topics: tuple[str, ...] = ()
    session_timeout_ms: int = 45000
    rebalance_timeout_ms: int = 300000
    assigned: tuple[TP, ...] = ()
    pending_revocation: tuple[TP, ...] = ()
    instance_id: str = ""  # static membership (KIP-345): "" for a dynamic member


@dataclass(frozen=True, slots=True)
class GroupMemberRemoved(_GroupRecord):
    record_type: ClassVar[str] = "GroupMemberRemoved"
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class GroupAssignment(_GroupRecord):
    """Target assignment of one member, computed at ``assignment_epoch``."""

    record_type: ClassVar[str] = "GroupAssignment"
    group_id: str
    member_id: str
    assignment_epoch: int = 0
    partitions: tuple[TP, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupDeleted(_GroupRecord):
    record_type: ClassVar[str] = "GroupDeleted"
    group_id: str


GroupRecord = GroupEpoch | GroupMember | GroupMemberRemoved | GroupAssignment | GroupDeleted
GROUP_RECORD_TYPES: tuple[type[_GroupRecord], ...] = (
    GroupEpoch,
    GroupMember,
    GroupMemberRemoved,
    GroupAssignment,
    GroupDeleted,
)


# --------------------------------------------------------------------------- image


@dataclass(frozen=True, slots=True)
class GroupMemberImage:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topics: tuple[str, ...] = ()
    session_timeout_ms: int = 45000
    rebalance_timeout_ms: int = 300000
    assigned: tuple[TP, ...] = ()
    pending_revocation: tuple[TP, ...] = ()
    target: tuple[TP, ...] = ()
    target_epoch: int = 0
    instance_id: str = ""  # static membership (KIP-345): "" for a dynamic member

    def owns(self, topic: str, partition: int) -> bool:
        """May this member hold (fetch, commit) the partition right now?"""
        tp = (topic, partition)
        return tp in self.assigned or tp in self.pending_revocation


@dataclass(frozen=True, slots=True)
class GroupImage:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    topic_partitions: tuple[tuple[str, int], ...] = ()
    members: Mapping[str, GroupMemberImage] = field(default_factory=lambda: EMPTY_MAP)

    @property
    def state(self) -> str:
        """Empty / Assigning (target not yet computed) / Reconciling / Stable, as KIP-848."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        for m in self.members.values():
            if (
                m.member_epoch != self.assignment_epoch
                or m.pending_revocation
                or m.assigned != m.target
            ):
                return "Reconciling"
        return "Stable"


@dataclass(frozen=True, slots=True)
class GroupsImage:
    groups: Mapping[str, GroupImage] = field(default_factory=lambda: EMPTY_MAP)
    EMPTY: ClassVar[GroupsImage]

    def get(self, group_id: str) -> GroupImage | None:
        return self.groups.get(group_id)


GroupsImage.EMPTY = GroupsImage()


# --------------------------------------------------------------------------- fold


class GroupsDelta:
    """Copy-on-first-write fold of group records; ``apply()`` shares untouched groups."""

    def __init__(self, image: GroupsImage) -> None:
        self.image = image
        # group id -> [GroupImage fields dict, members dict] or None (deleted)
        self.changed: dict[str, tuple[dict[str, Any], dict[str, GroupMemberImage]] | None] = {}

    def _group(
        self, group_id: str, create: bool
    ) -> tuple[dict[str, Any], dict[str, GroupMemberImage]] | None:
        if group_id in self.changed:
            g = self.changed[group_id]
            if g is None and create:
                g = self.changed[group_id] = ({}, {})
            return g
        base = self.image.groups.get(group_id)
        if base is None and not create:
            return None
        if base is None:
            g = ({}, {})
        else:
            g = (
                {
                    "group_epoch": base.group_epoch,
                    "assignment_epoch": base.assignment_epoch,
                    "topic_partitions": base.topic_partitions,
                },
                dict(base.members),
            )
        self.changed[group_id] = g
        return g

    def replay(self, record: GroupRecord) -> None:
        if isinstance(record, GroupEpoch):
            g = self._group(record.group_id, create=True)
            assert g is not None
            g[0].update(
                group_epoch=record.group_epoch,
                assignment_epoch=record.assignment_epoch,
                topic_partitions=tuple(tuple(x) for x in record.topic_partitions),
            )
        elif isinstance(record, GroupMember):
            g = self._group(record.group_id, create=True)
            assert g is not None
            prev = g[1].get(record.member_id)
            g[1][record.member_id] = copy_fields(
                GroupMemberImage, record,
                subscribed_topics=tuple(record.subscribed_topics),
                assigned=_tps(record.assigned),
                pending_revocation=_tps(record.pending_revocation),
                target=prev.target if prev else (),
                target_epoch=prev.target_epoch if prev else 0,
            )
        elif isinstance(record, GroupAssignment):
            g = self._group(record.group_id, create=False)
            if g is not None and record.member_id in g[1]:
                g[1][record.member_id] = replace(
                    g[1][record.member_id],
                    target=_tps(record.partitions),
                    target_epoch=record.assignment_epoch,
                )
        elif isinstance(record, GroupMemberRemoved):
            g = self._group(record.group_id, create=False)
            if g is not None:
                g[1].pop(record.member_id, None)
        elif isinstance(record, GroupDeleted):
            if record.group_id in self.image.groups or record.group_id in self.changed:
                self.changed[record.group_id] = None

    def apply(self) -> GroupsImage:
        if not self.changed:
            return self.image
        changes = {gid: None if g is None else GroupImage(gid, members=sorted_map(g[1]), **g[0])
                   for gid, g in self.changed.items()}
        return GroupsImage(groups=apply_changes(self.image.groups, changes))


def _tps(value: Iterable[Any]) -> tuple[TP, ...]:
    return tuple(sorted((str(t), int(p)) for t, p in value))


def groups_to_records(image: GroupsImage) -> list[GroupRecord]:
    """Records that rebuild ``image`` from ``GroupsImage.EMPTY`` (deterministic order)."""
    out: list[GroupRecord] = []
    for g in image.groups.values():
        out.append(GroupEpoch(g.group_id, g.group_epoch, g.assignment_epoch, g.topic_partitions))
        for m in g.members.values():
            out.append(member_record(g.group_id, m))
            if m.target or m.target_epoch:
                out.append(GroupAssignment(g.group_id, m.member_id, m.target_epoch, m.target))
    return out


def member_record(group_id: str, m: GroupMemberImage) -> GroupMember:
    """The ``GroupMember`` record that sets ``m``'s current state."""
    return copy_fields(GroupMember, m, group_id=group_id)
