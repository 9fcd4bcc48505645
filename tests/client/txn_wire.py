"""Transactions over the wire protocol itself, for tests of the consumer side and the Spark
source that must not depend on the transactional producer: INIT_PRODUCER_ID with a
transactional id, ADD_PARTITIONS_TO_TXN, a transactional PRODUCE, END_TXN.

``write_txn_log`` leaves partition 0 of a one-partition topic holding (offsets 0-7, HW 8, LSO 7)::

    p0 | a1 a2 (aborted) | ABORT | b1 (committed) | COMMIT | p1 | c1 (left open)
"""

from __future__ import annotations

import time
from typing import Any

import trio
from rafka.client.aio._core import ClientCore
from rafka.log.batch import build_batch
from rafka.wire.errors import RafkaError, error_for
from rafka.wire.protocol import ApiKey

__all__ = ["write_txn_log"]


async def _call(core: ClientCore, api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` to the (only) broker; retries retriable errors, in the body or per partition."""
    deadline = time.monotonic() + 60
    while True:
        try:
            resp = await core.request_any(api, body)
            resp.raise_for_error()
            for t in resp.body.get("topics") or ():
                for p in t.get("partitions") or ():
                    if isinstance(p, dict) and p.get("error"):
                        raise error_for(p["error"], f"{api.name} {t.get('name')}-{p.get('partition')}")
            return resp.body
        except RafkaError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
        await trio.sleep(0.1)


async def _transaction(core: ClientCore, tid: str, topic: str, values: list[bytes],
                       end: bool | None) -> None:
    """One transaction of ``tid`` writing ``values`` to partition 0; ``end``: commit, abort or
    (None) leave it open."""
    init = await _call(core, ApiKey.INIT_PRODUCER_ID, {"transactional_id": tid,
                                                       "transaction_timeout_ms": 120_000})
    pid, epoch = init["producer_id"], init["producer_epoch"]
    ids = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch}
    await _call(core, ApiKey.ADD_PARTITIONS_TO_TXN, {**ids, "topics": [{"name": topic, "partitions": [0]}]})
    batch = build_batch([(None, v, [], 1_700_000_000_000) for v in values], producer_id=pid,
                        producer_epoch=epoch, base_sequence=0, transactional=True)
    await _call(core, ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 30_000, "transactional_id": tid,
                                       "topics": [{"name": topic, "partitions": [{"partition": 0,
                                                                                  "records": batch}]}]})
    if end is not None:
        await _call(core, ApiKey.END_TXN, {**ids, "commit": end})


async def _plain(core: ClientCore, topic: str, value: bytes) -> None:
    await _call(core, ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 30_000, "topics": [
        {"name": topic, "partitions": [{"partition": 0, "records": build_batch([(None, value, [], 1)])}]}]})


def write_txn_log(bootstrap: str, topic: str, tag: str) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            core = ClientCore(bootstrap, client_id="txn-test")
            core.open(nursery)
            try:
                await _plain(core, topic, b"p0")
                await _transaction(core, f"{tag}-a", topic, [b"a1", b"a2"], end=False)
                await _transaction(core, f"{tag}-b", topic, [b"b1"], end=True)
                await _plain(core, topic, b"p1")
                await _transaction(core, f"{tag}-c", topic, [b"c1"], end=None)
            finally:
                await core.aclose()
                nursery.cancel_scope.cancel()

    trio.run(main)
