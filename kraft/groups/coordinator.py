"""The consumer-group state machine of the active controller: pure decisions, KIP-848 style.

Theory of operation
-------------------
``heartbeat(group, request, ...)`` takes the group's image (``None`` for an unknown group), one
CONSUMER_GROUP_HEARTBEAT request and the partition counts of the topics, and returns a
:class:`Decision`: the response body and the metadata records to append (possibly none). The
caller (``kraft/groups/service.py``) appends the records through Raft *before* answering, and
serialises decisions so that each one sees the image that includes the previous one. Nothing
here reads a clock, a random source or a socket: the proposer passes ``new_member_id`` (so every
voter folds the same id) and session timeouts are tracked outside (``SessionTracker``).

Epochs
    The **group epoch** bumps on every membership or subscription change, and when the
    partition count of a subscribed topic changes. When it is ahead of the **assignment epoch**
    the assignor (:mod:`rafka.kraft.groups.assignor`) computes a new *target* assignment from the
    members' subscriptions and the previous target (sticky), and the assignment epoch catches
    up. A **member epoch** is the assignment epoch the member last converged to; a request
    carrying an older epoch is fenced (``FENCED_MEMBER_EPOCH``), except the member's previous
    epoch (the response that advanced it may have been lost) when what it owns is still its own.

Reconciliation (per member, on its own heartbeat), as KIP-848's current-assignment machine:
    1. Partitions ``pending_revocation`` stay pending until the member reports
       ``owned_partitions`` without them (the client stops fetching, commits, calls
       ``on_partitions_revoked``, then acks).
    2. Otherwise, owned partitions that are no longer in its target move to
       ``pending_revocation``; the member keeps its epoch and must ack first.
    3. With nothing left to revoke the member advances to the assignment epoch and takes every
       partition of its target that no *other* member holds (``assigned ∪ pending_revocation``);
       the rest it gets on later heartbeats, once their owners have released them.

    Hence, invariant: the sets ``assigned ∪ pending_revocation`` of a group's members are
    pairwise disjoint — a partition is never owned by two members, and a partition moves only
    after its previous owner acknowledged (or was removed by the session timeout).

Heartbeat interval (what the response's ``heartbeat_interval_ms`` asks for)
    The configured interval (``group.consumer.heartbeat.interval.ms``, capped at a third of
    the member's session) for a converged member; ``RECONCILE_HEARTBEAT_MS`` while it is not
    converged (it waits for partitions others are releasing, or has just been told to revoke —
    the client acknowledges a revocation at once, without waiting). A member waiting for
    partitions other members hold (``Decision.awaits``) is asked back about when they will have
    released them: the controller knows when it told them to revoke and when their next
    heartbeat is due (``kraft/groups/service.py``). And while its *group* is settling: a member
    converged a moment ago cannot know that the group changed after its last heartbeat (members
    that start together join one after the other, and the first one holds every partition), so
    ``settling_interval`` asks every member to come back after as long as the group has been
    still — from ``RECONCILE_HEARTBEAT_MS``, doubling, up to the configured interval. The
    controller knows when the group epoch last moved; a group that has been still for a whole
    interval is answered exactly as before, so the steady-state heartbeat rate does not change:
    a membership change costs each member about log2(interval / 300 ms) ≈ 4 extra heartbeats.

Static membership (KIP-345)
    A member that joins with an ``instance_id`` another member of the group already has takes
    that member's place: the old member id is removed and the new one inherits its member
    epoch, target and partitions, without a group epoch bump — a restarted process gets its
    assignment back at once, no rebalance (the new process owns nothing yet, so partitions the
    old one was revoking count as released). The old member, if it is still alive, is answered
    ``FENCED_INSTANCE_ID`` on its next heartbeat (fatal for it, as in Kafka). Static members do
    not leave on close (client side): their partitions wait for them until the session timeout.

Leaving (epoch −1) removes a member at once; the last member's departure deletes the group's
*membership* metadata (``GroupDeleted``), not the group: its committed offsets stay in
``__consumer_offsets``, and a group exists — ``rafka group list`` / ``describe`` show it, in state
``Empty`` — while it has members **or** committed offsets (``broker/groups/offsets.py``); it goes
away on ``rafka group delete`` (offsets tombstoned). ``remove_members`` does the same for members
whose session (or rebalance) timed out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from rafka.kraft.groups.assignor import assign
from rafka.metadata.groups import (
    TP,
    GroupAssignment,
    GroupDeleted,
    GroupEpoch,
    GroupImage,
    GroupMemberImage,
    GroupMemberRemoved,
    GroupRecord,
    member_record,
)
from rafka.wire.errors import ErrorCode

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "MIN_HEARTBEAT_MS",
    "RECONCILE_HEARTBEAT_MS",
    "Decision",
    "GroupConfig",
    "HeartbeatRequest",
    "assignment_body",
    "check_invariants",
    "heartbeat",
    "refresh_topics",
    "remove_members",
    "settling_interval",
]

JOIN_EPOCH: Final = 0
LEAVE_EPOCH: Final = -1
# while a member is not converged it is asked to heartbeat at least this often
RECONCILE_HEARTBEAT_MS: Final = 300
MIN_HEARTBEAT_MS: Final = 50


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Controller-side limits (controller config ``group.consumer.*``)."""

    session_timeout_ms: int = 45000
    min_session_timeout_ms: int = 500
    max_session_timeout_ms: int = 300000
    heartbeat_interval_ms: int = 5000
    rebalance_timeout_ms: int = 300000
    max_group_size: int = 256
    max_subscribed_topics: int = 256
    max_group_id_len: int = 255


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    subscribed_topics: tuple[str, ...] | None = None  # None: unchanged
    owned_partitions: tuple[TP, ...] | None = None  # None: not reported
    session_timeout_ms: int | None = None
    rebalance_timeout_ms: int | None = None
    client_id: str = ""
    client_host: str = ""
    instance_id: str = ""  # group_instance_id (static membership); "" for a dynamic member

    @classmethod
    def from_body(
        cls, body: Mapping[str, Any], client_id: str = "", client_host: str = ""
    ) -> HeartbeatRequest:
        """From a validated CONSUMER_GROUP_HEARTBEAT body (see ``wire/protocol.py``)."""
        subs = body.get("subscribed_topics")
        owned = body.get("owned_partitions")
        return cls(
            group_id=body["group_id"],
            member_id=body.get("member_id") or "",
            member_epoch=body["member_epoch"],
            subscribed_topics=None if subs is None else tuple(sorted(set(subs))),
            owned_partitions=None
            if owned is None
            else tuple(sorted((t["name"], p) for t in owned for p in t["partitions"])),
            session_timeout_ms=body.get("session_timeout_ms"),
            rebalance_timeout_ms=body.get("rebalance_timeout_ms"),
            client_id=body.get("client_id") or client_id,
            client_host=body.get("client_host") or client_host,
            instance_id=body.get("instance_id") or "",
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """The response body (without ``metadata_offset``, which the caller adds once the records
    are committed) and the records to append atomically, in order."""

    response: dict[str, Any]
    records: tuple[GroupRecord, ...] = ()
    # the other members holding partitions of this member's target: it gets them once they
    # have revoked them (the controller times the member's next heartbeat by theirs)
    awaits: tuple[str, ...] = ()
    # the longest interval the member may be asked for (the configured one, within its session)
    max_interval_ms: int = 0


PartitionCount = Callable[[str], int]  # topic -> number of partitions (0: no such topic)


def assignment_body(tps: Iterable[TP]) -> list[dict[str, Any]]:
    """``[(t, p), ...]`` → ``[{"name": t, "partitions": [p, ...]}, ...]`` (sorted)."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


# --------------------------------------------------------------------------- working copy


class _Work:
    """A mutable copy of one group; ``records()`` diffs it against the original image."""

    def __init__(self, group: GroupImage | None, group_id: str) -> None:
        self.orig = group
        self.group_id = group_id
        self.group_epoch = group.group_epoch if group else 0
        self.assignment_epoch = group.assignment_epoch if group else 0
        self.topic_partitions = group.topic_partitions if group else ()
        self.members: dict[str, GroupMemberImage] = dict(group.members) if group else {}
        self._bumped = False

    def bump(self) -> None:
        if not self._bumped:
            self.group_epoch += 1
            self._bumped = True

    def remove(self, member_id: str) -> None:
        if self.members.pop(member_id, None) is not None:
            self.bump()

    def refresh(self, count: PartitionCount) -> None:
        """Bump the epoch if a subscribed topic's partition count changed since the target."""
        if self.members and self._topic_counts(count) != self.topic_partitions:
            self.bump()

    def _topic_counts(self, count: PartitionCount) -> tuple[tuple[str, int], ...]:
        topics = sorted({t for m in self.members.values() for t in m.subscribed_topics})
        return tuple((t, n) for t in topics if (n := count(t)) > 0)

    def compute_target(self, count: PartitionCount) -> None:
        if self.group_epoch <= self.assignment_epoch or not self.members:
            return
        self.assignment_epoch = self.group_epoch
        self.topic_partitions = self._topic_counts(count)
        target = assign(
            {m.member_id: m.subscribed_topics for m in self.members.values()},
            dict(self.topic_partitions),
            {m.member_id: m.target for m in self.members.values()},
        )
        for mid, tps in target.items():
            m = self.members[mid]
            if tps != m.target:
                self.members[mid] = replace(m, target=tps, target_epoch=self.assignment_epoch)

    def reconcile(self, member_id: str, owned: tuple[TP, ...] | None) -> None:
        m = self.members[member_id]
        pending = set(m.pending_revocation)
        if pending and owned is not None and not pending.intersection(owned):
            pending = set()  # revocation acknowledged
        if pending:
            self.members[member_id] = replace(m, pending_revocation=tuple(sorted(pending)))
            return
        target = set(m.target)
        revoke = set(m.assigned) - target
        if revoke:
            self.members[member_id] = replace(
                m,
                assigned=tuple(sorted(set(m.assigned) & target)),
                pending_revocation=tuple(sorted(revoke)),
            )
            return
        taken = {
            tp
            for other in self.members.values()
            if other.member_id != member_id
            for tp in (*other.assigned, *other.pending_revocation)
        }
        assigned = set(m.assigned) | (target - taken)
        epoch, prev = m.member_epoch, m.previous_member_epoch
        if epoch != self.assignment_epoch:
            epoch, prev = self.assignment_epoch, m.member_epoch
        self.members[member_id] = replace(
            m,
            assigned=tuple(sorted(assigned)),
            pending_revocation=(),
            member_epoch=epoch,
            previous_member_epoch=prev,
        )

    def records(self) -> tuple[GroupRecord, ...]:
        orig_members = self.orig.members if self.orig else {}
        out: list[GroupRecord] = []
        removed = [
            GroupMemberRemoved(self.group_id, mid)
            for mid in orig_members
            if mid not in self.members
        ]
        if not self.members:
            return (*removed, GroupDeleted(self.group_id)) if self.orig else ()
        o = self.orig
        if o is None or (o.group_epoch, o.assignment_epoch, o.topic_partitions) != (
            self.group_epoch,
            self.assignment_epoch,
            self.topic_partitions,
        ):
            out.append(
                GroupEpoch(
                    self.group_id, self.group_epoch, self.assignment_epoch, self.topic_partitions
                )
            )
        out.extend(removed)
        targets: list[GroupRecord] = []
        for mid, m in sorted(self.members.items()):
            before = orig_members.get(mid)
            if before is None or member_record(self.group_id, before) != member_record(
                self.group_id, m
            ):
                out.append(member_record(self.group_id, m))
            if before is None or (before.target, before.target_epoch) != (m.target, m.target_epoch):
                targets.append(GroupAssignment(self.group_id, mid, m.target_epoch, m.target))
        return (*out, *targets)


# --------------------------------------------------------------------------- decisions


def _error(req: HeartbeatRequest, code: ErrorCode, message: str) -> Decision:
    return Decision(
        {
            "error": int(code),
            "message": message,
            "member_id": req.member_id,
            "member_epoch": -1,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }
    )


def _validate_join(req: HeartbeatRequest, work: _Work, config: GroupConfig) -> Decision | None:
    if not req.subscribed_topics:
        return _error(
            req, ErrorCode.INVALID_REQUEST, "a joining member must subscribe to at least one topic"
        )
    if len(req.subscribed_topics) > config.max_subscribed_topics:
        return _error(
            req, ErrorCode.INVALID_REQUEST, f"more than {config.max_subscribed_topics} topics"
        )
    st = req.session_timeout_ms
    if st is not None and not config.min_session_timeout_ms <= st <= config.max_session_timeout_ms:
        return _error(
            req,
            ErrorCode.INVALID_SESSION_TIMEOUT,
            f"session_timeout_ms must be in [{config.min_session_timeout_ms}, {config.max_session_timeout_ms}]",
        )
    if (req.member_id not in work.members and _static_member(work, req.instance_id) is None
            and len(work.members) >= config.max_group_size):
        return _error(
            req, ErrorCode.INVALID_REQUEST, f"group is full ({config.max_group_size} members)"
        )
    return None


def _static_member(work: _Work, instance_id: str) -> GroupMemberImage | None:
    """The member holding ``instance_id`` ("" — a dynamic member — matches none)."""
    if not instance_id:
        return None
    return next((m for m in work.members.values() if m.instance_id == instance_id), None)


def _join(work: _Work, req: HeartbeatRequest, member_id: str, config: GroupConfig) -> None:
    """Add the joining member — in a static predecessor's place when its instance id is known."""
    joined = GroupMemberImage(
        member_id=member_id,
        member_epoch=0,
        client_id=req.client_id,
        client_host=req.client_host,
        subscribed_topics=req.subscribed_topics or (),
        session_timeout_ms=req.session_timeout_ms or config.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms or config.rebalance_timeout_ms,
        instance_id=req.instance_id,
    )
    old = _static_member(work, req.instance_id)
    if old is None or old.member_id == member_id:
        work.members[member_id] = joined
        work.bump()
        return
    del work.members[old.member_id]  # fenced: its next heartbeat gets FENCED_INSTANCE_ID
    work.members[member_id] = replace(
        old, member_id=member_id, client_id=joined.client_id, client_host=joined.client_host,
        subscribed_topics=joined.subscribed_topics, session_timeout_ms=joined.session_timeout_ms,
        rebalance_timeout_ms=joined.rebalance_timeout_ms,
    )
    if joined.subscribed_topics != old.subscribed_topics:
        work.bump()


def heartbeat(
    group: GroupImage | None,
    req: HeartbeatRequest,
    *,
    partition_count: PartitionCount,
    new_member_id: str,
    config: GroupConfig = GroupConfig(),
) -> Decision:
    """One CONSUMER_GROUP_HEARTBEAT: join (epoch 0), leave (−1) or heartbeat (> 0)."""
    if not req.group_id or len(req.group_id) > config.max_group_id_len:
        return _error(req, ErrorCode.INVALID_REQUEST, "group_id must be 1..255 characters")
    work = _Work(group, req.group_id)
    interval = config.heartbeat_interval_ms

    if req.member_epoch == LEAVE_EPOCH:
        work.remove(req.member_id)
        work.compute_target(partition_count)
        return Decision(
            {
                "error": 0,
                "message": "",
                "member_id": req.member_id,
                "member_epoch": LEAVE_EPOCH,
                "heartbeat_interval_ms": 0,
                "assignment": None,
            },
            work.records(),
        )

    if req.member_epoch == JOIN_EPOCH:
        member_id = req.member_id or new_member_id
        err = _validate_join(replace(req, member_id=member_id), work, config)
        if err is not None:
            return err
        _join(work, req, member_id, config)
        owned: tuple[TP, ...] | None = ()
    else:
        member_id = req.member_id
        m = work.members.get(member_id)
        successor = _static_member(work, req.instance_id)
        if m is None and successor is not None:
            return _error(
                req,
                ErrorCode.FENCED_INSTANCE_ID,
                f"instance {req.instance_id!r} of group {req.group_id!r} was taken over by a newer "
                f"member ({successor.member_id}); this consumer is fenced",
            )
        if m is None:
            return _error(
                req,
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member {member_id!r} is not in group {req.group_id!r}",
            )
        owned = req.owned_partitions
        if req.member_epoch != m.member_epoch:
            holds = set(m.assigned) | set(m.pending_revocation)
            if not (
                req.member_epoch == m.previous_member_epoch
                and owned is not None
                and holds.issuperset(owned)
            ):
                return _error(
                    req,
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"member epoch {req.member_epoch} is stale (current {m.member_epoch}); rejoin",
                )
        if req.subscribed_topics is not None and req.subscribed_topics != m.subscribed_topics:
            if (
                not req.subscribed_topics
                or len(req.subscribed_topics) > config.max_subscribed_topics
            ):
                return _error(
                    req, ErrorCode.INVALID_REQUEST, "subscribed_topics must name 1..256 topics"
                )
            work.members[member_id] = replace(m, subscribed_topics=req.subscribed_topics)
            work.bump()

    work.refresh(partition_count)
    work.compute_target(partition_count)
    work.reconcile(member_id, owned)
    m = work.members[member_id]
    # a member whose session is shorter than the configured interval must heartbeat often enough
    # to keep it (3 heartbeats per session, as Kafka's classic rule)
    interval = min(interval, max(MIN_HEARTBEAT_MS, m.session_timeout_ms // 3))
    converged = (
        m.member_epoch == work.assignment_epoch
        and m.assigned == m.target
        and not m.pending_revocation
    )
    wanted = set(m.target) - set(m.assigned)
    holders = tuple(
        sorted(
            o.member_id
            for o in work.members.values()
            if o.member_id != member_id
            and wanted.intersection((*o.assigned, *o.pending_revocation))
        )
    )
    return Decision(
        {
            "error": 0,
            "message": "",
            "member_id": member_id,
            "member_epoch": m.member_epoch,
            "heartbeat_interval_ms": interval
            if converged
            else min(interval, RECONCILE_HEARTBEAT_MS),
            "assignment": assignment_body(m.assigned),
        },
        work.records(),
        holders,
        interval,
    )


def settling_interval(interval_ms: int, still_ms: int | None) -> int:
    """The interval to answer while the group has been still for ``still_ms`` (``None``: not
    known to have changed): as long as it has been still, between ``RECONCILE_HEARTBEAT_MS``
    and ``interval_ms`` (which is returned unchanged when it is shorter, or 0 for a leave)."""
    if still_ms is None or interval_ms <= RECONCILE_HEARTBEAT_MS:
        return interval_ms
    return min(interval_ms, max(RECONCILE_HEARTBEAT_MS, still_ms))


def remove_members(
    group: GroupImage, member_ids: Iterable[str], *, partition_count: PartitionCount
) -> tuple[GroupRecord, ...]:
    """Records that remove ``member_ids`` (session or rebalance timeout) and re-target the rest."""
    work = _Work(group, group.group_id)
    for mid in member_ids:
        work.remove(mid)
    work.compute_target(partition_count)
    return work.records()


def refresh_topics(
    group: GroupImage, *, partition_count: PartitionCount
) -> tuple[GroupRecord, ...]:
    """Records that re-target the group if a subscribed topic appeared, vanished or grew."""
    work = _Work(group, group.group_id)
    work.refresh(partition_count)
    work.compute_target(partition_count)
    return work.records()


def check_invariants(group: GroupImage) -> None:
    """Assert that no partition is held by two members and epochs are ordered."""
    seen: dict[TP, str] = {}
    for m in group.members.values():
        assert m.member_epoch <= group.assignment_epoch <= group.group_epoch, (m, group)
        assert not set(m.assigned) & set(m.pending_revocation), m
        for tp in (*m.assigned, *m.pending_revocation):
            assert tp not in seen, f"{tp} held by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id
