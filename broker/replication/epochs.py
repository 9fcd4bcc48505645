"""Leader-epoch arithmetic of KIP-101 / KIP-279, pure: who diverged, and where to truncate.

Theory of operation
-------------------
Every batch carries the leader epoch it was appended in; each log keeps a leader-epoch cache,
the ascending list of ``(epoch, start_offset)``. Two logs that hold the same epoch at the same
offset hold the same records up to there (only one leader per epoch ever appends, and a
follower copies its prefix). So a follower proves its log is a prefix of the leader's by naming
the epoch of its last batch (``last_fetched_epoch``) and its log end offset (``fetch_offset``):

* **Leader** (``find_divergence``): look up ``end_offset_for(last_fetched_epoch)`` — the largest
  epoch ``E ≤ last_fetched_epoch`` the leader has and the offset where ``E`` ends in the leader's
  log. If ``E < last_fetched_epoch`` (the leader never had the follower's epoch) or that end
  offset is below ``fetch_offset`` (the follower has records of ``E`` the leader does not), the
  logs diverge: answer ``diverging_epoch = (E, end)`` and no records. Otherwise serve records.
  A follower epoch *newer* than anything in the leader's cache (the leader has not appended in
  its own epoch yet, and the follower was a later leader of an epoch that never reached it) is
  answered with the leader's latest epoch and its log end offset, which is what that lookup
  means; the log's cache reports ``(-1, -1)`` there, which would leave the follower with nothing
  to go on.
* **Follower** (``truncation_offset``): given the leader's ``(E, end)``, find its own largest
  epoch ``F ≤ E`` and where ``F`` ends locally. If ``F == E`` the logs agree up to
  ``min(end, local end of E)``: truncate there, done. If ``F < E`` the follower never had ``E``:
  truncate to the end of ``F`` and ask again (the next fetch names ``F``) — the iteration of
  KIP-279 that makes skipped epochs safe. Never truncate "to the high watermark" (the pre-KIP-101
  rule that loses acknowledged records or keeps divergent ones).

``verify_follower_fetch`` is the leader's whole decision on one follower fetch, the only way a
follower position reaches the high watermark (``LeaderState.on_follower_fetch``): a position is
counted only when the leader has just checked it against its own epoch history. A fetch that
names no ``last_fetched_epoch`` claims a log holding no batch (every batch carries an epoch), so
only an offset at the leader's log start can be taken as it is. Any other such fetch is
*refused* (``INVALID_REQUEST``: nothing counted, nothing served, nothing for the follower to
truncate) — not served, because records appended after an unverified prefix would make the next
fetch's epoch check pass over a divergence below it; and not answered with a diverging epoch,
because no answer can say where an unverifiable log stops agreeing (cutting it to the log start
would throw away committed records an ISR member holds). rafka's fetcher always names its last
epoch when its log holds a batch, so this only ever meets a broken or foreign follower. A fetch
past the leader's end with an epoch diverges (``find_divergence``). Issue 28 ("acks=all: an
acknowledged offset truncated on an in-sync replica") is why this is one function with an
exhaustive test (tests/replication/test_fetch_verification.py).

``resolve_truncation`` runs that dialogue to the end against a leader in memory (for tests and
simulations); the fetcher runs it one fetch at a time over the wire.

``EpochTable`` is an immutable epoch cache with the same lookup as ``rafka.log.epoch_cache`` (used by
the tests and by anything that wants the arithmetic without files).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "EpochLookup",
    "EpochEndOffset",
    "EpochTable",
    "Truncation",
    "leader_end_offset_for",
    "find_divergence",
    "FollowerFetchVerdict",
    "verify_follower_fetch",
    "truncation_offset",
    "resolve_truncation",
]

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochLookup(Protocol):
    """What we need of a leader-epoch cache (``log.epoch_cache.LeaderEpochCache`` fits)."""

    @property
    def latest_epoch(self) -> int | None: ...

    def end_offset_for(self, epoch: int) -> tuple[int, int]: ...


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """``diverging_epoch`` on the wire: the leader's largest epoch ≤ the asked one, and its end."""

    epoch: int
    end_offset: int

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "end_offset": self.end_offset}

    @classmethod
    def from_dict(cls, d: dict[str, int]) -> EpochEndOffset:
        return cls(int(d["epoch"]), int(d["end_offset"]))


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where a follower truncates; ``complete`` False means "then fetch again and re-check"."""

    offset: int
    complete: bool


@dataclass(frozen=True, slots=True)
class EpochTable:
    """An immutable leader-epoch cache: ascending ``(epoch, start_offset)`` and the log end."""

    entries: tuple[tuple[int, int], ...] = ()
    log_end_offset: int = 0

    def __post_init__(self) -> None:
        for (e1, o1), (e2, o2) in zip(self.entries, self.entries[1:], strict=False):
            assert e1 < e2 and o1 < o2, self.entries
        assert not self.entries or self.entries[-1][1] <= self.log_end_offset, self

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """Same answers as ``LeaderEpochCache.end_offset_for`` (KIP-279)."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.entries[-1][0]:
            return epoch, self.log_end_offset
        epochs = [e for e, _ in self.entries]
        i = bisect_right(epochs, epoch)
        if i == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if i == 0:
            return epoch, self.entries[0][1]
        return epochs[i - 1], self.entries[i][1]

    def appended(self, epoch: int, base_offset: int, new_log_end_offset: int) -> EpochTable:
        """The table after appending a batch of ``epoch`` at ``base_offset``."""
        entries = self.entries
        if not entries or entries[-1][0] < epoch:
            entries = entries + ((epoch, base_offset),)
        else:
            assert entries[-1][0] == epoch, (entries, epoch)
        return EpochTable(entries, new_log_end_offset)

    def truncated(self, offset: int) -> EpochTable:
        """The table after truncating the log to end at ``offset``."""
        assert offset <= self.log_end_offset
        return EpochTable(tuple(e for e in self.entries if e[1] < offset), offset)


def _as_entries(x: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple((int(e), int(o)) for e, o in x)


def leader_end_offset_for(epochs: EpochLookup, log_end_offset: int, epoch: int) -> EpochEndOffset:
    """The leader's answer for a follower's ``epoch`` (see the module docstring)."""
    latest = epochs.latest_epoch
    if latest is None:
        # Nothing known (empty log, or one written without epochs): all we can say is where
        # our log ends; the follower keeps at most that much.
        return EpochEndOffset(UNDEFINED_EPOCH, log_end_offset)
    if epoch > latest:
        return EpochEndOffset(latest, log_end_offset)
    e, end = epochs.end_offset_for(epoch)
    return EpochEndOffset(e, end)


def find_divergence(epochs: EpochLookup, log_end_offset: int, fetch_offset: int,
                    last_fetched_epoch: int | None) -> EpochEndOffset | None:
    """Leader side: the ``diverging_epoch`` to answer, or None when the fetch is consistent."""
    if last_fetched_epoch is None or last_fetched_epoch < 0:
        return None
    answer = leader_end_offset_for(epochs, log_end_offset, last_fetched_epoch)
    if answer.epoch < last_fetched_epoch or answer.end_offset < fetch_offset:
        return answer
    return None


@dataclass(frozen=True, slots=True)
class FollowerFetchVerdict:
    """The leader's decision on one follower fetch: ``refused`` (why; answer an error),
    ``diverging`` (answer it instead of records), else ``position`` — the follower's verified
    log end offset, the only value the high watermark may count for it (None: count nothing)."""

    diverging: EpochEndOffset | None = None
    position: int | None = None
    refused: str | None = None


def verify_follower_fetch(epochs: EpochLookup, log_start_offset: int, log_end_offset: int,
                          fetch_offset: int, last_fetched_epoch: int | None
                          ) -> FollowerFetchVerdict:
    """Leader side: check a follower's ``(fetch_offset, last_fetched_epoch)`` against this log
    (module docstring). ``fetch_offset`` below the log start is left to the read (it answers
    OFFSET_OUT_OF_RANGE and the follower starts over at the log start): not counted."""
    if fetch_offset < log_start_offset:
        return FollowerFetchVerdict()
    if last_fetched_epoch is None or last_fetched_epoch < 0:
        if fetch_offset == log_start_offset:
            return FollowerFetchVerdict(position=fetch_offset)
        return FollowerFetchVerdict(refused=(
            f"a follower fetch at offset {fetch_offset}, above the log start "
            f"{log_start_offset}, must name its last fetched epoch"))
    div = find_divergence(epochs, log_end_offset, fetch_offset, last_fetched_epoch)
    if div is not None:
        return FollowerFetchVerdict(diverging=div)
    assert fetch_offset <= log_end_offset, (fetch_offset, log_end_offset, last_fetched_epoch)
    return FollowerFetchVerdict(position=fetch_offset)


def _local_floor(epochs: EpochLookup, log_end_offset: int, epoch: int) -> tuple[int, int]:
    latest = epochs.latest_epoch
    if latest is None:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if epoch > latest:
        return latest, log_end_offset
    return epochs.end_offset_for(epoch)


def truncation_offset(local_epochs: EpochLookup, local_log_end_offset: int,
                      leader_answer: EpochEndOffset) -> Truncation:
    """Follower side (KIP-279): where to truncate given the leader's ``diverging_epoch``.

    Raises ``ValueError`` for an answer without an end offset: a rafka leader always knows its
    log end, and guessing (e.g. the high watermark) is how records get lost.
    """
    if leader_answer.end_offset < 0:
        raise ValueError(f"diverging epoch {leader_answer} carries no end offset")
    if leader_answer.epoch == UNDEFINED_EPOCH:
        return Truncation(min(leader_answer.end_offset, local_log_end_offset), True)
    f_epoch, f_end = _local_floor(local_epochs, local_log_end_offset, leader_answer.epoch)
    if f_epoch == UNDEFINED_EPOCH:
        # We track no epoch ≤ the leader's: keep no more than the leader has.
        return Truncation(min(leader_answer.end_offset, local_log_end_offset), True)
    if f_epoch != leader_answer.epoch:
        # We never had the leader's epoch: cut to the end of our last epoch before it and ask
        # again about that one (KIP-279's iteration).
        return Truncation(min(f_end, local_log_end_offset), False)
    return Truncation(min(f_end, leader_answer.end_offset, local_log_end_offset), True)


def resolve_truncation(local: EpochTable, leader: EpochTable, *, max_rounds: int = 64) -> int:
    """Run the fetch/diverging-epoch dialogue to the end; the offset the follower keeps."""
    for _ in range(max_rounds):
        div = find_divergence(leader, leader.log_end_offset, local.log_end_offset,
                              local.latest_epoch)
        if div is None:
            return local.log_end_offset
        t = truncation_offset(local, local.log_end_offset, div)
        assert t.offset <= local.log_end_offset
        # Even a cut at the log end matters: it drops epochs that start there (an epoch a
        # leader assigned on election but never appended in).
        local = local.truncated(t.offset)
    raise AssertionError(f"truncation did not converge in {max_rounds} rounds")
