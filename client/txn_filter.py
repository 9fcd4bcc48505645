"""Which fetched batches a consumer must not show: control batches and aborted transactions.

Theory of operation (docs/transactions.md, "Why filter in the client")
----------------------------------------------------------------------
The broker serves whole batches and never decodes records, so a FETCH in ``read_committed``
isolation returns everything below the last stable offset — committed *and* aborted
transactional batches — plus, per partition, ``aborted_transactions: [[producer_id,
first_offset], …]`` for the served range. The decision is made per batch, from its header,
exactly as Kafka's consumer makes it:

* the aborted list is kept sorted by ``first_offset``; before a batch that has a producer id is
  judged, every aborted transaction that started at or before the batch's last offset moves
  into the set of *aborted producers*;
* a **control batch** (attributes bit ``0x20``) is never shown. If it is an ABORT marker, its
  producer leaves the aborted set (the transaction is over; that producer's next transaction
  may commit);
* a **transactional data batch** (bit ``0x10``) of a producer in the aborted set is skipped;
* every other batch is shown. Batches of non-transactional producers never reach this class:
  the callers test ``attributes & TXN_BITS`` first, so the read_uncommitted hot path and
  topics without transactions pay one integer test per batch and nothing per record.

A transaction that spans fetches is handled because each fetch's ``aborted_transactions``
repeats every aborted transaction whose ABORT marker is at or after the fetch offset. In
``read_uncommitted`` the list is empty: only control batches are hidden.

Callers move their position past a hidden batch (``base_offset + last_offset_delta + 1``), so a
partition whose tail is a marker does not look stuck. Used by ``rafka.client.aio.fetch`` and by the
Spark source (``rafka.spark_source.fetch``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Final

from rafka.log.batch import CONTROL_ABORT, CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader, control_type

__all__ = ["TXN_BITS", "READ_UNCOMMITTED", "READ_COMMITTED", "TxnBatchFilter", "isolation_level_code"]

TXN_BITS: Final = TRANSACTIONAL_BIT | CONTROL_BIT  # a batch with neither bit is always shown

READ_UNCOMMITTED: Final = "read_uncommitted"
READ_COMMITTED: Final = "read_committed"
_LEVELS: Final = {READ_UNCOMMITTED: 0, READ_COMMITTED: 1}


def isolation_level_code(level: str) -> int:
    """``"read_uncommitted"`` → 0, ``"read_committed"`` → 1 (the wire's ``isolation_level``);
    anything else → ``ValueError`` naming the accepted values."""
    code = _LEVELS.get(str(level).strip().lower()) if isinstance(level, str) else None
    if code is None:
        raise ValueError(f"isolation_level must be 'read_uncommitted' or 'read_committed', got {level!r}")
    return code


class TxnBatchFilter:
    """The per-partition filter of one fetch response (see the module docstring)."""

    __slots__ = ("_pending", "_next", "_aborted")

    def __init__(self, aborted_transactions: Iterable[Sequence[int]] | None = None) -> None:
        # (first_offset, producer_id), sorted; _next = index of the first not yet consumed
        self._pending = sorted((int(first), int(pid)) for pid, first in aborted_transactions or ())
        self._next = 0
        self._aborted: set[int] = set()

    @property
    def aborted_producers(self) -> frozenset[int]:
        """Producers whose batches are being skipped now (for tests and diagnosis)."""
        return frozenset(self._aborted)

    def skip(self, buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
        """Is the batch at ``pos`` (whose header is ``header``) to be hidden? Call it for every
        batch with ``header.attributes & TXN_BITS``, in log order."""
        pending = self._pending
        if self._next < len(pending):
            upto = bisect.bisect_right(pending, (header.last_offset, 1 << 63), self._next)
            for _, pid in pending[self._next:upto]:
                self._aborted.add(pid)
            self._next = upto
        if header.attributes & CONTROL_BIT:
            if control_type(buf, pos) == CONTROL_ABORT:
                self._aborted.discard(header.producer_id)
            return True
        return header.producer_id in self._aborted
