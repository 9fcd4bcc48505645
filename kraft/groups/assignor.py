"""Server-side partition assignment: a pure, sticky, balanced, deterministic function.

Theory of operation
-------------------
``assign(members, partition_counts, current)`` computes the *target assignment* of a consumer
group (KIP-848's "uniform" assignor, simplified). Inputs are plain values; the output depends only
on their content (never on dict order, time or randomness), so every controller that computes it
from the same image gets the same answer.

1. **Keep** every partition of ``current`` that is still valid: its member still exists, is still
   subscribed to its topic, the partition still exists, and no earlier (smaller member id) member
   already kept it.
2. **Place** the partitions nobody keeps (new partitions, partitions of departed members or of
   dropped subscriptions), most-constrained first (fewest eligible members), each on the eligible
   member that has the fewest partitions (ties: smallest member id).
3. **Balance**: while some partition's owner has at least two more partitions than another member
   subscribed to that partition's topic, move it there (from the most loaded member, to the least
   loaded eligible member). Each move strictly lowers the sum of squared counts, so this ends.

The result satisfies: every partition of every subscribed topic is assigned to exactly one member
subscribed to its topic; no partition can move to an eligible member with two fewer partitions —
so members with the same subscriptions differ by at most one partition; and partitions move only
when they have to (orphans) or to restore balance, which for members with equal subscriptions is
the minimal number of moves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["TP", "Assignment", "assign", "moved_partitions"]

TP = tuple[str, int]
Assignment = dict[str, tuple[TP, ...]]


def assign(
    members: Mapping[str, Iterable[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, Iterable[TP]] | None = None,
) -> Assignment:
    """The target assignment: member id → sorted tuple of ``(topic, partition)``.

    ``members``: member id → subscribed topic names. ``partition_counts``: topic → number of
    partitions (topics absent or with 0 partitions are ignored). ``current``: the previous target
    assignment (stickiness base); may mention departed members or stale partitions.
    """
    subs = {
        m: frozenset(t for t in topics if partition_counts.get(t, 0) > 0)
        for m, topics in members.items()
    }
    ids = sorted(subs)
    subscribers: dict[str, list[str]] = {}
    for m in ids:
        for t in subs[m]:
            subscribers.setdefault(t, []).append(m)
    owned: dict[str, set[TP]] = {m: set() for m in ids}
    owner: dict[TP, str] = {}

    # 1. keep what is still valid (smallest member id wins a duplicated claim)
    if current:
        for m in sorted(current):
            if m not in owned:
                continue
            for tp in sorted(current[m]):
                topic, partition = tp[0], tp[1]
                if topic in subs[m] and 0 <= partition < partition_counts[topic]:
                    key = (topic, partition)
                    if key not in owner:
                        owner[key] = m
                        owned[m].add(key)

    # 2. place orphans, most constrained first
    orphans = [
        (t, p)
        for t in sorted(subscribers)
        for p in range(partition_counts[t])
        if (t, p) not in owner
    ]
    orphans.sort(key=lambda tp: (len(subscribers[tp[0]]), tp))
    for tp in orphans:
        dst = min(subscribers[tp[0]], key=lambda m: (len(owned[m]), m))
        owner[tp] = dst
        owned[dst].add(tp)

    # 3. balance: move from the most loaded to the least loaded eligible member
    while _move_one(ids, owned, subscribers):
        pass
    return {m: tuple(sorted(owned[m])) for m in ids}


def _move_one(ids: list[str], owned: dict[str, set[TP]], subscribers: dict[str, list[str]]) -> bool:
    for src in sorted(ids, key=lambda m: (-len(owned[m]), m)):
        n_src = len(owned[src])
        if n_src < 2:
            return False
        # highest partitions move first, so low-numbered ones stay put (cosmetic, deterministic)
        for tp in sorted(owned[src], reverse=True):
            dst = min(subscribers[tp[0]], key=lambda m: (len(owned[m]), m))
            if n_src - len(owned[dst]) > 1:
                owned[src].remove(tp)
                owned[dst].add(tp)
                return True
    return False


def moved_partitions(before: Mapping[str, Iterable[TP]], after: Mapping[str, Iterable[TP]]) -> int:
    """How many partitions of ``after`` have an owner other than in ``before`` (new ones count)."""
    prev = {tuple(tp): m for m, tps in before.items() for tp in tps}
    return sum(1 for m, tps in after.items() for tp in tps if prev.get(tuple(tp)) != m)
