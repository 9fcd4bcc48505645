"""Admin APIs on a broker: forward to the active controller, then wait for our own metadata.

Theory of operation
-------------------
A broker does not decide anything about topics: CREATE_TOPICS, DELETE_TOPICS,
CREATE_PARTITIONS, ALTER_CONFIGS, ELECT_LEADERS and INIT_PRODUCER_ID (and the group APIs) are
forwarded through the ``ControllerChannel`` (which finds the active controller and follows
``NOT_CONTROLLER`` hints, bounded) with ``_forwarded: true`` in the body, so the receiving node
hands them to its controller role instead of forwarding again. The body goes as the client
sent it, ``request_id`` included (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS,
ALTER_CONFIGS): the channel's own retries (another voter after a connection error, a
``NOT_CONTROLLER`` hint) and the client's carry the same id, which the controller dedupes
(``kraft/service.py``) — a retry of a committed change whose answer was lost gets success.

For the APIs that change topics, the broker then waits — bounded by the request's
``timeout_ms`` — until its *own* metadata image has caught up with the controller: the offset
the controller reports in ``metadata_offset`` when it does, else the active controller's
committed offset fetched right after the answer (a ``METADATA_FETCH`` with ``max_wait_ms=0``).
So a client that created a topic through this broker can produce to it at once (its leader may
be another broker that is a few milliseconds behind; that is the retriable
``UNKNOWN_TOPIC_OR_PARTITION`` every Kafka client handles).

A forward that reaches its deadline logs where the time went (WARNING ``forwarding X: no
answer within N ms; …``): each controller attempt (voter, outcome, seconds; the last one
"no answer yet") or, once the controller had answered, the offset this broker's image was
stuck at. Issue 27 has one such case unexplained after a restart of every node.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import trio
from rafka.broker.controller_channel import (
    FORWARDED_KEY,
    Attempt,
    ControllerChannel,
    describe_trace,
)
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

__all__ = ["forward", "WAIT_FOR_METADATA"]

log = logging.getLogger("rafka.admin")

WAIT_FOR_METADATA = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
    ApiKey.ALTER_CONFIGS, ApiKey.ELECT_LEADERS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.DECOMMISSION_BROKER, ApiKey.UNREGISTER_BROKER,
})
_DEFAULT_TIMEOUT_MS = 30_000
FORWARD_ATTEMPT_TIMEOUT_S = 5.0
_ABANDONED_LOG_S = 1.0  # a forward cancelled after this long says where its time went


async def forward(channel: ControllerChannel, publisher: MetadataPublisher, api_key: int,
                  body: Mapping[str, Any], *, timeout_ms: int | None = None) -> dict[str, Any]:
    """The active controller's answer to ``body``; waits for local metadata where it matters."""
    limit_ms = body.get("timeout_ms") if isinstance(body.get("timeout_ms"), int) else None
    limit_ms = limit_ms if limit_ms and limit_ms > 0 else (timeout_ms or _DEFAULT_TIMEOUT_MS)
    deadline = trio.current_time() + limit_ms / 1000
    trace: list[Attempt] = []
    waiting_for: int | None = None  # the offset our own image must reach (after the answer)
    started = trio.current_time()
    # outermost: our own deadline's cancel stays inside move_on_at and is not "abandoned"
    with _log_if_abandoned(api_key, started, trace, publisher, lambda: waiting_for), \
            trio.move_on_at(deadline):
        try:
            # per attempt: a paused voter that still accepts connections must not eat the
            # whole deadline; retrying elsewhere is safe (client request ids dedupe the change)
            answer = await channel.request(api_key, {**body, FORWARDED_KEY: True},
                                           attempt_timeout_s=FORWARD_ATTEMPT_TIMEOUT_S, trace=trace)
        except RafkaError as exc:
            log.info("forwarding %s gave up: %s; controller attempts: %s", _name(api_key), exc,
                     describe_trace(trace, trio.current_time()))
            return {"error": int(exc.code), "message": f"forwarding to the controller: {exc.message}"}
        if api_key in WAIT_FOR_METADATA and not answer.get("error"):
            offset = answer.get("metadata_offset")
            waiting_for = offset if isinstance(offset, int) else -1
            await _wait_for_metadata(channel, publisher, answer)
        return answer
    # where the deadline went (issue 27: a create through a just-restarted node that went
    # unanswered for a whole client attempt): the controller attempts, or our own metadata
    where = (f"the controller answered; this broker's metadata stayed at offset "
             f"{publisher.image.offset}, waiting for {waiting_for}" if waiting_for is not None
             else f"controller attempts: {describe_trace(trace, trio.current_time())}")
    log.warning("forwarding %s: no answer within %d ms; %s", _name(api_key), limit_ms, where)
    return {"error": int(ErrorCode.REQUEST_TIMED_OUT),
            "message": f"the controller did not answer within {limit_ms} ms"}


@contextlib.contextmanager
def _log_if_abandoned(api_key: int, started: float, trace: list[Attempt], publisher: MetadataPublisher,
                      waiting_for: Callable[[], int | None]) -> Iterator[None]:
    """The same account when the forward is cancelled from outside after a while — the client
    hung up (its own timeout) before our deadline, which closes the connection and cancels this
    handler; a quick cancel (shutdown, a client that gave up at once) is not logged."""
    try:
        yield
    except trio.Cancelled:
        now = trio.current_time()
        if now - started >= _ABANDONED_LOG_S:
            offset = waiting_for()
            where = (f"the controller answered; this broker's metadata stayed at offset "
                     f"{publisher.image.offset}, waiting for {offset}" if offset is not None
                     else f"controller attempts: {describe_trace(trace, now)}")
            log.warning("forwarding %s: abandoned by the client after %.1f s; %s",
                        _name(api_key), now - started, where)
        raise


def _name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


async def _wait_for_metadata(channel: ControllerChannel, publisher: MetadataPublisher,
                             answer: Mapping[str, Any]) -> None:
    offset = answer.get("metadata_offset")
    if not isinstance(offset, int):
        try:
            probe = await channel.request(ApiKey.METADATA_FETCH, {
                "node_id": publisher.broker_id, "from_offset": 2**62, "max_records": 1,
                "max_wait_ms": 0})
            offset = probe.get("committed_offset")
        except RafkaError as exc:
            log.info("cannot learn the controller's committed offset: %s", exc)
            return
    if isinstance(offset, int) and offset >= 0:
        await publisher.wait_for_offset(offset)
