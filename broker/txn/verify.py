"""The partition leader's question to the coordinator: may this producer open a transaction here?

Theory of operation
-------------------
Before a transactional batch *opens* a transaction on a partition (its producer has none open
there), PRODUCE asks :meth:`CoordinatorVerifier.verify` (the broker's ``TxnVerifier``, KIP-890
part 1). The answer is ``NONE`` only when the id's coordinator has an Ongoing transaction of
exactly this (producer id, epoch) that holds the partition; ``INVALID_TXN_STATE`` otherwise.

When this broker coordinates the id, the question is a local call (no request); otherwise it is an
``ADD_PARTITIONS_TO_TXN`` with ``verify_only`` to the leader of the id's ``__transaction_state``
partition (found in this broker's metadata image) over the node's ``ConnectionPool``, bounded by
``timeout_s``. The questions about the ids of one ``__transaction_state`` partition go through
that partition's channel (``broker/txn/channel.py``): one request out at a time, and the
questions of every transaction that arrive meanwhile leave together in the next one — a lone
question as the plain request, two or more as one request with a ``transactions`` list
(``transactional_id`` ""; the coordinator answers each entry as its own request), so concurrent
transactions share the request. Per partition, not per coordinator broker: the coordinator
answers a question only after an append to that partition made after it arrived (its read
barrier), so a question queued behind one in flight for the *same* partition would have waited
for a later append anyway, while the partitions of one coordinator do not wait for each other. Anything that keeps the coordinator from answering — unreachable, timed out, moved
(``NOT_COORDINATOR``), loading, busy — is ``COORDINATOR_NOT_AVAILABLE``: retriable for the
producer, and no transaction is opened. That includes a coordinator that cannot pass its read
barrier (``broker/read_barrier.py``): a deposed coordinator, which still holds the transaction as
Ongoing, answers ``NOT_COORDINATOR`` instead of verifying it.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from rafka.broker.errors import ErrorCode, RafkaError
from rafka.broker.protocol import ApiKey
from rafka.broker.txn.channel import BatchingChannels
from rafka.broker.txn.coordinator import TXN_STATE_TOPIC, TxnCoordinator, txn_partition

__all__ = ["CoordinatorVerifier"]

log = logging.getLogger("rafka.txn.verify")

# the coordinator answers these when it cannot decide now: the producer retries later
_UNAVAILABLE = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.REQUEST_TIMED_OUT,
})


def _mapped(code: int) -> ErrorCode:
    c = ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if c in _UNAVAILABLE else c


class CoordinatorVerifier:
    """A ``TxnVerifier``: ``await verify(tid, producer_id, producer_epoch, topic, partition)``."""

    def __init__(self, coordinator: TxnCoordinator, pool: Any, *, timeout_s: float = 5.0) -> None:
        self.coordinator = coordinator
        self.pool = pool
        self.timeout_s = timeout_s
        self.channels = BatchingChannels(self._send, "ADD_PARTITIONS_TO_TXN verify_only")

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     topic: str, partition: int) -> ErrorCode:
        tp = (topic, partition)
        if self.coordinator.leads(transactional_id):
            try:
                res = await self.coordinator.verify(transactional_id, producer_id, producer_epoch, [tp])
            except RafkaError as exc:
                return _mapped(exc.code)
            return res[tp]
        index = self._state_partition(transactional_id)
        if index is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        entry = {"transactional_id": transactional_id, "producer_id": producer_id,
                 "producer_epoch": producer_epoch,
                 "topics": [{"name": topic, "partitions": [partition]}]}
        answer = None
        with trio.move_on_after(self.timeout_s):
            answer = await self.channels.exchange(index, entry)
        if answer is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if answer.get("error"):
            return _mapped(answer["error"])
        for t in answer.get("topics") or []:
            for pd in t.get("partitions") or []:
                if (t.get("name"), pd.get("partition")) == tp:
                    return _mapped(pd.get("error", 0))
        return ErrorCode.INVALID_TXN_STATE

    def _state_partition(self, transactional_id: str) -> int | None:
        t = self.coordinator.rm.image.topics.by_name.get(TXN_STATE_TOPIC)
        if t is None or not t.partitions or self.pool is None:
            return None
        return txn_partition(transactional_id, len(t.partitions))

    async def _send(self, index: int, entries: list[dict[str, Any]]) -> list[Any] | None:
        """One request to the leader of ``__transaction_state`` partition ``index`` (the
        coordinator of ``entries``' ids) now; their answers in order (None: failed)."""
        t = self.coordinator.rm.image.topics.by_name.get(TXN_STATE_TOPIC)
        reg = t.partitions.get(index) if t is not None else None
        if reg is None or reg.leader < 0:
            return None
        dest = reg.leader
        if len(entries) == 1:
            answer = await self._request(dest, {**entries[0], "verify_only": True})
            return None if answer is None else [answer]
        answer = await self._request(dest, {
            "transactional_id": "", "producer_id": -1, "producer_epoch": -1, "topics": [],
            "verify_only": True, "transactions": entries})
        if answer is None:
            return None
        if answer.get("error") and not answer.get("transactions"):
            log.info("verifications at broker %d refused: %s", dest, answer.get("message") or answer["error"])
        return list(answer.get("transactions") or [])

    async def _request(self, dest: int, body: dict[str, Any]) -> dict[str, Any] | None:
        broker = self.coordinator.rm.image.cluster.brokers.get(dest)
        if broker is None or self.pool is None:
            return None
        try:
            resp = await self.pool.request(broker.host, broker.port, ApiKey.ADD_PARTITIONS_TO_TXN, body)
        except BaseException as exc:  # a cancelled or failed exchange leaves the connection unusable
            self.pool.discard(broker.host, broker.port)
            if isinstance(exc, (RafkaError, OSError, trio.BrokenResourceError)):
                log.info("verifying at broker %d: %s", dest, exc)
                return None
            raise
        return resp.body
