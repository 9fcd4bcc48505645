"""The classic groups a broker coordinates (``groups.py``): members, generations, a bound.

Theory of operation: one ``Member`` per (group, member id) — its current native member epoch,
the classic generation it last joined, the partitions it was last answered (*given*), what
the client holds now (*owned*, claimed in its native heartbeats), the controller's latest
assignment for it, and when it was last heard from. One ``ClassicGroup`` per group id holds
the group's classic generation and its rebalance in progress: which members have rejoined,
by when the others must have, and an event that wakes the JoinGroups waiting at the barrier
whenever something changed (a join, a leave, a member dropped). ``ClassicGroups`` keeps at
most ``max_members`` members, least recently used out first; a member pushed out is answered
``UNKNOWN_MEMBER_ID`` on its next request and rejoins.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import trio

__all__ = ["Member", "ClassicGroup", "ClassicGroups", "MAX_MEMBERS"]

MAX_MEMBERS = 10_000

Parts = frozenset[tuple[str, int]]


@dataclass
class Member:
    epoch: int
    topics: list[str]
    session_timeout_ms: int
    given: Parts = frozenset()
    metadata_offset: int | None = None
    latest: Parts = field(default=frozenset())
    owned: Parts = frozenset()
    rebalance_timeout_ms: int = 0
    generation: int = -1
    joining: bool = False          # waiting at the JoinGroup barrier
    synced: bool = True            # False between its JoinGroup answer and its SyncGroup
    protocol: str = ""
    cooperative: bool = False
    last_seen: float = 0.0
    instance_id: str = ""          # group.instance.id (KIP-345); "" for a dynamic member
    # the JoinGroup's protocols as sent, (name, metadata bytes) each: a rejoin with the same
    # ones to a stable group changes nothing (groups.py, "unchanged rejoin")
    protocols: tuple[tuple[str, bytes], ...] = ()

    def expired(self, now: float) -> bool:
        """No request from the member for longer than its session timeout."""
        return now - self.last_seen > self.session_timeout_ms / 1000


@dataclass
class ClassicGroup:
    """One classic group: its generation and the rebalance in progress, if any."""

    generation: int = 0
    rebalancing: bool = False
    deadline: float = 0.0          # trio.current_time() by which every member must rejoin
    members: set[str] = field(default_factory=set)
    changed: trio.Event = field(default_factory=trio.Event)

    def poke(self) -> None:
        """Wake the JoinGroups waiting at the barrier (they re-check and wait again)."""
        self.changed.set()
        self.changed = trio.Event()

    def start_rebalance(self, now: float, timeout_ms: int) -> None:
        if not self.rebalancing:
            self.rebalancing = True
            self.deadline = now + timeout_ms / 1000
            self.poke()


class ClassicGroups:
    """The classic members this broker coordinates: (group, member id) → ``Member``, and
    group id → ``ClassicGroup``; static members also by (group, instance id)."""

    def __init__(self, max_members: int = MAX_MEMBERS) -> None:
        self.members: OrderedDict[tuple[str, str], Member] = OrderedDict()
        self.groups: dict[str, ClassicGroup] = {}
        self.instances: dict[tuple[str, str], str] = {}  # (group, instance id) → member id
        self.fenced: OrderedDict[tuple[str, str], str] = OrderedDict()  # → its instance id
        self.pending: OrderedDict[tuple[str, str], float] = OrderedDict()  # → until (KIP-394)
        self.max_members = max_members

    def group(self, group: str) -> ClassicGroup:
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = ClassicGroup()
        return g

    def get(self, group: str, member_id: str) -> Member | None:
        m = self.members.get((group, member_id))
        if m is not None:
            self.members.move_to_end((group, member_id))
        return m

    def put(self, group: str, member_id: str, m: Member) -> None:
        self.members[(group, member_id)] = m
        self.members.move_to_end((group, member_id))
        self.group(group).members.add(member_id)
        if m.instance_id:
            self.instances[(group, m.instance_id)] = member_id
        while len(self.members) > self.max_members:
            (g, mid), old = self.members.popitem(last=False)
            self._forget(g, mid, old)

    def drop(self, group: str, member_id: str) -> None:
        self._forget(group, member_id, self.members.pop((group, member_id), None))

    def holder(self, group: str, instance_id: str) -> str | None:
        """The member id holding static ``instance_id`` in ``group`` now, if any."""
        return self.instances.get((group, instance_id)) if instance_id else None

    def take_over(self, group: str, old_member_id: str, instance_id: str) -> None:
        """A newer process joined with ``instance_id``: the old member id is fenced."""
        self.drop(group, old_member_id)
        self.fenced[(group, old_member_id)] = instance_id
        self.fenced.move_to_end((group, old_member_id))
        while len(self.fenced) > self.max_members:
            self.fenced.popitem(last=False)

    def is_fenced(self, group: str, member_id: str, instance_id: str = "") -> bool:
        """Whether a request naming ``member_id`` (and ``instance_id``) comes from a static
        member a newer one replaced: its member id was fenced, or the instance id it names is
        held by another member id."""
        if member_id and (group, member_id) in self.fenced:
            return True
        holder = self.holder(group, instance_id)
        return bool(member_id) and holder is not None and holder != member_id

    def new_pending(self, group: str, session_timeout_ms: int) -> str:
        """A member id for a JoinGroup that came without one (KIP-394), valid for the
        session timeout."""
        member_id = uuid.uuid4().hex
        self.pending[(group, member_id)] = trio.current_time() + session_timeout_ms / 1000
        while len(self.pending) > self.max_members:
            self.pending.popitem(last=False)
        return member_id

    def take_pending(self, group: str, member_id: str) -> bool:
        """Whether ``member_id`` was handed out by ``new_pending`` and has not expired; it is
        no longer pending either way."""
        until = self.pending.pop((group, member_id), None)
        return until is not None and trio.current_time() <= until

    def _forget(self, group: str, member_id: str, m: Member | None) -> None:
        if m is not None and m.instance_id and self.instances.get((group, m.instance_id)) == member_id:
            del self.instances[(group, m.instance_id)]
        g = self.groups.get(group)
        if g is None:
            return
        g.members.discard(member_id)
        g.poke()
        if not g.members:  # bounded: an empty group is forgotten, a later join starts afresh
            del self.groups[group]
