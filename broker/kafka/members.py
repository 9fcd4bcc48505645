"""The classic group members a broker coordinates (``groups.py``): a bounded table.

Theory of operation: one ``Member`` per (group, member id) — its current native member epoch,
the partitions it was last answered (*given*) and the controller's latest assignment for it,
and the metadata offset its commits must wait for. ``ClassicGroups`` keeps at most
``max_members`` of them, least recently used out first; a member pushed out is answered
``UNKNOWN_MEMBER_ID`` on its next request and rejoins.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

__all__ = ["Member", "ClassicGroups", "MAX_MEMBERS"]

MAX_MEMBERS = 10_000


@dataclass
class Member:
    epoch: int
    topics: list[str]
    session_timeout_ms: int
    given: frozenset[tuple[str, int]] = frozenset()
    metadata_offset: int | None = None
    latest: frozenset[tuple[str, int]] = field(default=frozenset())


class ClassicGroups:
    """The classic members this broker coordinates: (group, member id) → ``Member``."""

    def __init__(self, max_members: int = MAX_MEMBERS) -> None:
        self.members: OrderedDict[tuple[str, str], Member] = OrderedDict()
        self.max_members = max_members

    def get(self, group: str, member_id: str) -> Member | None:
        m = self.members.get((group, member_id))
        if m is not None:
            self.members.move_to_end((group, member_id))
        return m

    def put(self, group: str, member_id: str, m: Member) -> None:
        self.members[(group, member_id)] = m
        self.members.move_to_end((group, member_id))
        while len(self.members) > self.max_members:
            self.members.popitem(last=False)

    def drop(self, group: str, member_id: str) -> None:
        self.members.pop((group, member_id), None)
