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
``timeout_s``. A ``NONE`` answer carries the Ongoing transaction's number (``txn_seq``), which the
leader keeps in its verification guard to refuse late markers of earlier transactions
(``broker/handlers/txn_data.py``). Anything that keeps the coordinator from answering — unreachable, timed out, moved
(``NOT_COORDINATOR``), loading, busy — is ``COORDINATOR_NOT_AVAILABLE``: retriable for the
producer, and no transaction is opened. That includes a coordinator that cannot pass its read
barrier (``broker/read_barrier.py``): a deposed coordinator, which still holds the transaction as
Ongoing, answers ``NOT_COORDINATOR`` instead of verifying it.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from rafka.broker.txn.coordinator import TXN_STATE_TOPIC, TxnCoordinator, txn_partition
from rafka.broker.txn.state import Verdict
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

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

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     topic: str, partition: int) -> Verdict:
        tp = (topic, partition)
        if self.coordinator.leads(transactional_id):
            try:
                res, txn_seq = await self.coordinator.verify(transactional_id, producer_id,
                                                             producer_epoch, [tp])
            except RafkaError as exc:
                return Verdict(_mapped(exc.code))
            return Verdict(res[tp], txn_seq)
        body = {"transactional_id": transactional_id, "producer_id": producer_id,
                "producer_epoch": producer_epoch, "verify_only": True,
                "topics": [{"name": topic, "partitions": [partition]}]}
        answer = await self._remote(transactional_id, body)
        if answer is None:
            return Verdict(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if answer.get("error"):
            return Verdict(_mapped(answer["error"]))
        for t in answer.get("topics") or []:
            for pd in t.get("partitions") or []:
                if (t.get("name"), pd.get("partition")) == tp:
                    return Verdict(_mapped(pd.get("error", 0)), int(answer.get("txn_seq", -1)))
        return Verdict(ErrorCode.INVALID_TXN_STATE)

    async def _remote(self, transactional_id: str, body: dict[str, Any]) -> dict[str, Any] | None:
        image = self.coordinator.rm.image
        t = image.topics.by_name.get(TXN_STATE_TOPIC)
        if t is None or not t.partitions or self.pool is None:
            return None
        reg = t.partitions.get(txn_partition(transactional_id, len(t.partitions)))
        broker = image.cluster.brokers.get(reg.leader) if reg is not None else None
        if broker is None:
            return None
        with trio.move_on_after(self.timeout_s):
            try:
                resp = await self.pool.request(broker.host, broker.port,
                                               ApiKey.ADD_PARTITIONS_TO_TXN, body)
                return resp.body
            except (RafkaError, OSError, trio.BrokenResourceError) as exc:
                log.info("verifying %r with broker %d: %s", transactional_id, reg.leader, exc)
                self.pool.discard(broker.host, broker.port)
                return None
        self.pool.discard(broker.host, broker.port)
        return None
