"""The active controller's group glue: session tracking and the decisions to propose.

Theory of operation
-------------------
:class:`GroupsController` is the in-memory part of group coordination. It lives only on the
*active* controller (``kraft/service.py`` makes a fresh one on activation, like its broker
heartbeat times) and holds, per member, the time of its last heartbeat and since when it has
been holding partitions pending revocation, and per group when its epoch last moved (a join, a
leave, an expiry, a subscription or partition-count change): while a group is settling, every
member's heartbeat is answered with a short interval that doubles back to the configured one
(``coordinator.settling_interval``), so a member converged before the others joined learns of
them within about as long as they took to arrive; a member waiting for partitions that others
hold is asked back about when they will have released them: a holder told to revoke
acknowledges at once (back after as long as the revocation has been pending, from
``MIN_HEARTBEAT_MS`` doubling up to ``RECONCILE_HEARTBEAT_MS`` while it is slow); one not told
yet will be at its next heartbeat, whose due time (``due_ms``: now + the interval it was
answered) is known here. A group still for a whole interval is answered as before, so the
steady-state heartbeat rate is unchanged.

Nothing in it is durable: membership, epochs and assignments are metadata records; after a
failover every member in the image gets a fresh session (one full session timeout of grace), as
KIP-848 does, and no settling hints until its group next changes.

It performs no I/O. ``ControllerService`` calls, under its decision lock (so every decision sees
the image that includes the previous one):

* ``heartbeat(image, body, now_ms)`` → ``(response, records)`` for CONSUMER_GROUP_HEARTBEAT;
  the service appends ``records`` (if any) as one command and sets
  ``response["metadata_offset"]`` to the offset of the last one (else ``image.offset``);
* ``periodic(image, now_ms)`` → a list of record lists (one command each): members whose
  session or rebalance timeout passed are removed, groups whose subscribed topics changed
  partition count are re-targeted.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from rafka.kraft.groups.coordinator import (
    LEAVE_EPOCH,
    MIN_HEARTBEAT_MS,
    RECONCILE_HEARTBEAT_MS,
    Decision,
    GroupConfig,
    HeartbeatRequest,
    heartbeat,
    refresh_topics,
    remove_members,
    settling_interval,
)
from rafka.metadata.groups import (
    GroupDeleted,
    GroupEpoch,
    GroupMember,
    GroupMemberRemoved,
    GroupRecord,
)
from rafka.metadata.image import MetadataImage

__all__ = ["GroupsController", "group_config_from_settings"]

log = logging.getLogger("rafka.groups")


def group_config_from_settings(settings: Mapping[str, Any]) -> GroupConfig:
    """``group.consumer.session.timeout.ms`` etc. (controller settings, Kafka-style names)."""
    d = GroupConfig()

    def get(name: str, default: int) -> int:
        return int(settings.get(name, default))

    return GroupConfig(
        session_timeout_ms=get("group.consumer.session.timeout.ms", d.session_timeout_ms),
        min_session_timeout_ms=get(
            "group.consumer.min.session.timeout.ms", d.min_session_timeout_ms
        ),
        max_session_timeout_ms=get(
            "group.consumer.max.session.timeout.ms", d.max_session_timeout_ms
        ),
        heartbeat_interval_ms=get("group.consumer.heartbeat.interval.ms", d.heartbeat_interval_ms),
        rebalance_timeout_ms=get("group.consumer.rebalance.timeout.ms", d.rebalance_timeout_ms),
        max_group_size=get("group.consumer.max.size", d.max_group_size),
    )


def partition_counter(image: MetadataImage) -> Callable[[str], int]:
    def count(topic: str) -> int:
        t = image.topics.by_name.get(topic)
        return 0 if t is None else len(t.partitions)

    return count


class GroupsController:
    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        new_member_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.config = config or GroupConfig()
        self.new_member_id = new_member_id
        self.last_seen_ms: dict[tuple[str, str], int] = {}
        self.revoking_since_ms: dict[tuple[str, str], int] = {}
        self.changed_ms: dict[str, int] = {}  # group id -> when its group epoch last moved
        self.due_ms: dict[tuple[str, str], int] = {}  # when a member's next heartbeat is due

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        """A fresh session for every member in the image (grace after a failover)."""
        self.last_seen_ms.clear()
        self.revoking_since_ms.clear()
        self.changed_ms.clear()
        self.due_ms.clear()
        for g in image.groups.groups.values():
            for mid in g.members:
                self.last_seen_ms[(g.group_id, mid)] = now_ms

    def heartbeat(
        self, image: MetadataImage, body: Mapping[str, Any], now_ms: int, client_id: str = ""
    ) -> tuple[dict[str, Any], tuple[GroupRecord, ...]]:
        req = HeartbeatRequest.from_body(body, client_id=client_id)
        d = heartbeat(
            image.groups.get(req.group_id),
            req,
            partition_count=partition_counter(image),
            new_member_id=self.new_member_id(),
            config=self.config,
        )
        resp = dict(d.response)
        mid = resp.get("member_id", "")
        key = (req.group_id, mid)
        if resp["error"] == 0 and resp["member_epoch"] != LEAVE_EPOCH:
            self.last_seen_ms[key] = now_ms
            self._track_revocation(key, image, d.records, now_ms)
        elif resp["error"] == 0:
            self._forget(key)
        self._note_change(image, d.records, now_ms)
        for r in d.records:  # a static member's predecessor, replaced by this join
            if isinstance(r, GroupMemberRemoved) and r.member_id != mid:
                self._forget((r.group_id, r.member_id))
        if resp["error"] == 0:
            resp["heartbeat_interval_ms"] = self._interval(
                req.group_id, resp["heartbeat_interval_ms"], d, now_ms
            )
            if resp["member_epoch"] != LEAVE_EPOCH:
                self.due_ms[key] = now_ms + resp["heartbeat_interval_ms"]
        return resp, d.records

    def _forget(self, key: tuple[str, str]) -> None:
        self.last_seen_ms.pop(key, None)
        self.revoking_since_ms.pop(key, None)
        self.due_ms.pop(key, None)

    def _interval(self, group_id: str, interval_ms: int, d: Decision, now_ms: int) -> int:
        """The coordinator's interval, shortened while the group settles, and timed by the
        holders' releases when the member waits for partitions (module docstring)."""
        since = self.changed_ms.get(group_id)
        still = None if since is None else now_ms - since
        interval = settling_interval(interval_ms, still)
        if not d.awaits or interval <= 0:
            return interval
        releases = []  # when each holder will probably have released (acknowledged)
        for h in d.awaits:
            told = self.revoking_since_ms.get((group_id, h))
            due = self.due_ms.get((group_id, h))
            if told is not None:  # acknowledges at once: back after as long as it has been told
                wait = min(RECONCILE_HEARTBEAT_MS, max(MIN_HEARTBEAT_MS, now_ms - told))
                releases.append(now_ms + wait)
            elif due is not None and due > now_ms:  # told at its next heartbeat, then acks
                releases.append(due + MIN_HEARTBEAT_MS)
        if not releases:
            return interval
        return max(MIN_HEARTBEAT_MS, min(d.max_interval_ms, min(releases) - now_ms))

    def _note_change(
        self, image: MetadataImage, records: tuple[GroupRecord, ...], now_ms: int
    ) -> None:
        """Remember when a group's epoch moved (records about to be committed)."""
        for r in records:
            if isinstance(r, GroupDeleted):
                self.changed_ms.pop(r.group_id, None)
            elif isinstance(r, GroupEpoch):
                g = image.groups.get(r.group_id)
                if g is None or r.group_epoch != g.group_epoch:
                    self.changed_ms[r.group_id] = now_ms

    def _track_revocation(
        self,
        key: tuple[str, str],
        image: MetadataImage,
        records: tuple[GroupRecord, ...],
        now_ms: int,
    ) -> None:
        pending: bool | None = None
        for r in records:
            if isinstance(r, GroupMember) and r.member_id == key[1]:
                pending = bool(r.pending_revocation)
        if pending is None:  # unchanged: look at the image
            g = image.groups.get(key[0])
            m = g.members.get(key[1]) if g else None
            pending = bool(m and m.pending_revocation)
        if pending:
            self.revoking_since_ms.setdefault(key, now_ms)
        else:
            self.revoking_since_ms.pop(key, None)

    def expired(self, image: MetadataImage, now_ms: int) -> dict[str, list[str]]:
        """group id → members whose session (or rebalance) timeout has passed."""
        out: dict[str, list[str]] = {}
        for g in image.groups.groups.values():
            for mid, m in g.members.items():
                key = (g.group_id, mid)
                seen = self.last_seen_ms.setdefault(key, now_ms)  # unknown here: fresh session
                since = self.revoking_since_ms.get(key)
                if now_ms - seen > m.session_timeout_ms:
                    log.info(
                        "group %s: member %s missed its session (%d ms)",
                        g.group_id,
                        mid,
                        m.session_timeout_ms,
                    )
                    out.setdefault(g.group_id, []).append(mid)
                elif since is not None and now_ms - since > m.rebalance_timeout_ms:
                    log.info(
                        "group %s: member %s did not revoke within %d ms",
                        g.group_id,
                        mid,
                        m.rebalance_timeout_ms,
                    )
                    out.setdefault(g.group_id, []).append(mid)
        return out

    def periodic(self, image: MetadataImage, now_ms: int) -> list[tuple[GroupRecord, ...]]:
        """Commands to propose: expirations, then re-targeting after topic changes."""
        count = partition_counter(image)
        out: list[tuple[GroupRecord, ...]] = []
        expired = self.expired(image, now_ms)
        for gid, mids in expired.items():
            out.append(remove_members(image.groups.groups[gid], mids, partition_count=count))
            self._note_change(image, out[-1], now_ms)
            for mid in mids:
                self._forget((gid, mid))
        for gid, g in image.groups.groups.items():
            if gid not in expired:
                recs = refresh_topics(g, partition_count=count)
                if recs:
                    out.append(recs)
                    self._note_change(image, recs, now_ms)
        for gid in [g for g in self.changed_ms if g not in image.groups.groups]:
            if now_ms - self.changed_ms[gid] > self.config.heartbeat_interval_ms:
                del self.changed_ms[gid]  # e.g. its only member's join was never committed
        return [r for r in out if r]
