"""Parked fetches: one ``trio.Event`` per fetch, registered with every partition it reads.

Theory of operation
-------------------
A fetch that finds fewer than ``min_bytes`` parks until one of its partitions changes: the
log end offset for a follower (``Partition.data_changed``), the high watermark for a consumer
(``Partition.hw_changed``). Each of those is a ``Signal``: the set of the events of the fetches
parked on it. ``fire()`` sets them all and forgets them; a fetch that wakes reads again and,
if it parks again, registers again. ``wait_any`` makes one event, adds it to every signal of
the fetch, waits once (bounded by the fetch's deadline) and takes it out of them all when it
returns, woken, timed out or cancelled.

Why not one shared ``trio.Event`` per partition, as before: a fetch of several partitions then
had to wait on several events, which trio can only do with a task per event in a nursery that
cancels the rest when one fires. A follower's fetch carries every partition that leader leads
for it, so a parked fetch of N partitions cost N task spawns, and each wake N task steps (one
woken, N - 1 cancelled) and N exits, all on the leader's trio thread, for every produce to any
of them. Now it costs N set insertions and N removals and no task (docs/performance.md,
"Parked fetches without a task per partition").

Signals are touched on the trio thread only, and nothing awaits between a fetch's read and
its registration, so no change can fall between them unseen.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

__all__ = ["Signal", "wait_any"]


class Signal:
    """The fetches parked on one kind of change of one partition."""

    __slots__ = ("_parked",)

    def __init__(self) -> None:
        self._parked: set[trio.Event] = set()

    def fire(self) -> None:
        """Wake every fetch parked here (each registers again if it parks again)."""
        if self._parked:
            parked, self._parked = self._parked, set()
            for ev in parked:
                ev.set()

    def __len__(self) -> int:
        return len(self._parked)


async def wait_any(signals: Sequence[Signal], deadline: float) -> None:
    """Until one of ``signals`` fires or trio's clock reaches ``deadline``."""
    ev = trio.Event()
    for s in signals:
        s._parked.add(ev)
    try:
        with trio.move_on_at(deadline):
            await ev.wait()
    finally:
        for s in signals:
            s._parked.discard(ev)
