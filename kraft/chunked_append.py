"""Receiving a Raft log entry larger than one append: pysyncobj's chunking, made whole.

Theory of operation
-------------------
pysyncobj 0.3.17 sends a log entry of ``appendEntriesBatchSizeBytes`` (64 KiB) or more in
pieces: it pickles the entry and sends ``append_entries`` messages marked ``transmission``
``start``, ``process`` … and ``finish``; the follower concatenates them and unpickles on
``finish``. The sender decides which piece is the last by comparing the offset with the length
of the *command* (``entries[0][0]``), not of the pickled entry it is cutting. The two differ by
far more than the tuple's few bytes: pysyncobj pickles with protocol 2, which stores ``bytes``
as a latin-1 text and so writes every byte above 0x7f as two — rafka's msgpack commands grow
~1.5x. Any entry whose pickle outgrows the command by a piece boundary therefore gets a
``finish`` one piece early (and another for the true last piece). On that early ``finish`` the
follower's unpickling raises (``pickle data was truncated`` / ``EOFError``), out of the tick:
the rest of that tick is lost, the messages behind it in the socket wait for the next read, and
the entry lands only when the second ``finish`` happens to complete the buffer.

Such entries are ordinary here: a broker's fencing or unfencing moves the leadership of every
partition it leads in one command (3,000 single-partition topics at replication factor 3: 13
to 22 tracebacks per node over 12 kill-all rounds, issue 27).

:class:`ChunkedAppendSyncObj` fixes the receiving side, which is all a follower controls:

* a ``finish`` whose concatenated bytes do not unpickle yet is handled as a ``process`` piece
  (a strict prefix of a pickle never unpickles: the STOP opcode is its last byte), so the true
  last piece completes the entry and nothing raises. Only a full-size piece can be an early
  ``finish`` (the pickle goes on after it); a shorter one is the pickle's last slice, so it is
  not test-unpickled (pysyncobj unpickles it once anyway);
* a ``process`` or ``finish`` piece that arrives with no ``start`` before it (the connection
  was re-made mid-entry) is dropped: appending it to nothing would corrupt the next entry. The
  follower's log is unchanged, so the leader's next append finds it behind and resends.

Everything runs on pysyncobj's tick thread; the library's private fields are used by their
mangled names (pysyncobj 0.3.17, pinned).
"""

from __future__ import annotations

import pickle
from typing import Any

from pysyncobj import SyncObj

__all__ = ["ChunkedAppendSyncObj"]


def _unpickles(data: bytes) -> bool:
    try:
        pickle.loads(data)
    except Exception:  # noqa: BLE001 (truncated pickles raise several types)
        return False
    return True


class ChunkedAppendSyncObj(SyncObj):
    """``SyncObj`` whose follower side tolerates pysyncobj's early ``finish`` piece."""

    chunk_pieces_deferred = 0  # early "finish" pieces handled as "process" (per instance once set)
    chunk_pieces_dropped = 0  # pieces with no "start" before them

    def _SyncObj__onMessageReceived(self, node: Any, message: dict[str, Any]) -> None:  # noqa: N802
        piece = message.get("transmission") if message.get("type") == "append_entries" else None
        if piece in ("process", "finish"):
            held = self._SyncObj__recvTransmission
            if not isinstance(held, bytes):  # '' until a "start": nothing to append to
                self.chunk_pieces_dropped += 1
                return
            full = len(message["data"]) >= self._SyncObj__conf.appendEntriesBatchSizeBytes
            if piece == "finish" and full and not _unpickles(held + message["data"]):
                self.chunk_pieces_deferred += 1
                message = {**message, "transmission": "process"}
        super()._SyncObj__onMessageReceived(node, message)
