"""Consumer-group membership on the client: heartbeats, reconciliation, commits.

Theory of operation
-------------------
``GroupMembership`` is the ``Coordinator`` an :class:`~client.aio.consumer.AsyncConsumer` builds
when it has a ``group_id`` (importing this module sets ``AsyncConsumer.coordinator_factory``).
It runs two tasks in its own nursery, inside the consumer's:

* the **heartbeat loop** sends CONSUMER_GROUP_HEARTBEAT to any broker (brokers forward it to the
  active controller) every ``heartbeat_interval_ms`` the controller asks for — sooner while a
  rebalance is in flight — reporting the partitions it owns. The controller answers with the
  member's epoch and the partitions it may own now. **Reconciliation**: partitions no longer
  in the answer are *revoked* first (stop fetching them, commit their processed offsets when
  auto-commit is on, ``on_partitions_revoked``), then the next heartbeat — sent at once —
  acknowledges by not reporting them; the controller hands a partition to another member only
  after that acknowledgement (or after this member's session timed out). New partitions are
  *assigned* at once (``on_partitions_assigned``); their positions come from the committed
  offsets, else ``auto_offset_reset``.
* the **auto-commit loop** (``enable_auto_commit``) commits every ``auto_commit_interval_ms``
  the *processed* offsets: the positions as of the start of the latest ``poll()`` — records a
  poll returned count as processed once the application polls again (kafka-python's rule), so
  auto-commit never commits a record the application has not finished (at-least-once).

Errors: ``UNKNOWN_MEMBER_ID`` / ``FENCED_MEMBER_EPOCH`` (the session expired, or a newer epoch
exists) mean the partitions may already belong to someone else: they are *lost* — dropped
without committing (``on_partitions_lost``, default: ``on_partitions_revoked``) — and the member
rejoins with epoch 0 under a new member id (``_rejoin_as_new_member``: the old id could come
back with its old epoch and let a commit from before the loss through). Without a successful
heartbeat for ``session_timeout_ms`` the member drops its partitions the same way (it has
probably been removed: don't act as a zombie).

Static membership (``group_instance_id``, KIP-345): every heartbeat carries the instance id; a
process that restarts with the same id takes its predecessor's member place and partitions
back at once, without a rebalance (``kraft/groups/coordinator.py``). A static member does not
leave the group on close — its partitions wait for it until its session times out — and a
member whose instance id was taken over by a newer process is told ``FENCED_INSTANCE_ID``:
its partitions are lost and every later ``poll`` raises ``FencedInstanceIdError``.

``max_poll_interval_ms``: if the application does not call ``poll()`` within it, the member
*leaves* the group proactively (processed offsets committed, partitions revoked) so that the
others take over, and rejoins on the next ``poll()``. What to do when that happens: process
fewer records per poll (``max_poll_records``) or raise ``max_poll_interval_ms``; a member that
leaves on every batch makes the whole group rebalance on every batch.

Commits go to the group's coordinator: the leader of ``__consumer_offsets`` partition
``crc32(group) % partitions`` (``broker/groups/offsets.py``), which any broker names through
FIND_COORDINATOR (``client/aio/coordinator.py``; the broker creates the topic, as the node, when
it is missing). On a secured cluster that needs describe on the group, and a principal without it
gets ``GroupAuthorizationFailedError`` at once. The module also holds the small admin helpers
used by ``client/cli/group.py`` (list, describe with lag, delete, reset offsets).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import trio
from rafka.client.aio._core import ClientCore
from rafka.client.aio.consumer import AsyncConsumer
from rafka.client.aio.coordinator import KEY_TYPE_GROUP, coordinator_node, forget_coordinator
from rafka.client.aio.offsets import list_offsets
from rafka.client.errors import BootstrapTimeoutError, FencedInstanceIdError, UnresolvableHostError
from rafka.client.types import CommitOffsets, OffsetAndMetadata, TopicPartition, commit_offsets
from rafka.wire.connection import backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey

__all__ = [
    "GroupMembership",
    "alter_group_offsets",
    "coordinator_request",
    "delete_groups",
    "describe_group",
    "fetch_committed",
    "list_groups",
]

log = logging.getLogger("rafka.client.groups")
T = TypeVar("T")

_COORDINATOR_RETRY = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.NOT_CONTROLLER,
})
_MAX_ATTEMPTS = 20


# --------------------------------------------------------------------------- coordinator


async def coordinator_request(core: ClientCore, group_id: str, api_key: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
    """Send ``body`` to ``group_id``'s coordinator, following moves; raises the body's error."""
    last: RafkaError | None = None
    for attempt in range(_MAX_ATTEMPTS):
        try:
            node = await coordinator_node(core, KEY_TYPE_GROUP, group_id)
            resp = await core.request_node(node, api_key, body)
            resp.raise_for_error()
            return resp.body
        except RafkaError as exc:
            if exc.code not in _COORDINATOR_RETRY:
                raise
            last = exc
            forget_coordinator(core, KEY_TYPE_GROUP, group_id)
            core.invalidate()
            await trio.sleep(min(1.0, core.retry_backoff_ms / 1000 * (attempt + 1)))
    assert last is not None
    raise last


def offsets_body(entries: dict[TopicPartition, OffsetAndMetadata]) -> list[dict[str, Any]]:
    """The ``topics`` of an OFFSET_COMMIT / TXN_OFFSET_COMMIT body (metadata strings included)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, e in sorted(entries.items()):
        topics.setdefault(tp.topic, []).append({"partition": tp.partition, "offset": e.offset,
                                                "metadata": e.metadata})
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


def _tp_list(tps: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    by: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by.setdefault(tp.topic, []).append(tp.partition)
    return [{"name": t, "partitions": ps} for t, ps in by.items()]


def _from_tp_list(entries: Iterable[dict[str, Any]] | None) -> set[TopicPartition]:
    return {TopicPartition(e["name"], p) for e in entries or () for p in e["partitions"]}


async def fetch_committed(core: ClientCore, group_id: str, tps: Iterable[TopicPartition] | None,
                          *, require_stable: bool = False,
                          member: Mapping[str, Any] | None = None) -> dict[TopicPartition, int | None]:
    """The group's committed offsets (``fetch_committed_metadata`` for their metadata too)."""
    found = await fetch_committed_metadata(core, group_id, tps, require_stable=require_stable,
                                           member=member)
    return {tp: (None if e is None else e.offset) for tp, e in found.items()}


async def fetch_committed_metadata(core: ClientCore, group_id: str, tps: Iterable[TopicPartition] | None,
                                   *, require_stable: bool = False, member: Mapping[str, Any] | None = None
                                   ) -> dict[TopicPartition, OffsetAndMetadata | None]:
    """The group's committed offsets. ``require_stable`` (read_committed consumers, KIP-447):
    while a transaction holding offsets of a partition is open, wait for its outcome (the
    coordinator answers UNSTABLE_OFFSET_COMMIT) instead of taking the older offset, which would
    make a new owner re-process what the transaction is about to commit. ``member``: the
    asking member's ``member_id``, ``member_epoch`` and ``min_metadata_offset`` (as a commit
    carries them): the coordinator then answers only once its image has the member's
    assignment, after which the partitions' previous owner can no longer commit there."""
    request: dict[str, Any] = {"group_id": group_id, "topics": None if tps is None else _tp_list(tps)}
    if member is not None:
        request.update(member)
    if require_stable:
        request["require_stable"] = True
    deadline = trio.current_time() + core.request_timeout_ms / 1000
    attempt = 0
    while True:
        body = await coordinator_request(core, group_id, ApiKey.OFFSET_FETCH, request)
        unstable = [p for t in body.get("topics", ()) for p in t["partitions"]
                    if p.get("error") == ErrorCode.UNSTABLE_OFFSET_COMMIT]
        if not unstable:
            break
        if trio.current_time() >= deadline:
            raise error_for(ErrorCode.UNSTABLE_OFFSET_COMMIT,
                            f"group {group_id}: offsets still pending in an open transaction")
        await trio.sleep(backoff_ms(attempt, 20, 500) / 1000)
        attempt += 1
    return {
        TopicPartition(t["name"], p["partition"]):
            (OffsetAndMetadata(p["offset"], p.get("metadata") or "") if p["offset"] >= 0 else None)
        for t in body.get("topics", ()) for p in t["partitions"]
    }


async def _call(cb: Callable[[set[TopicPartition]], Any] | None, tps: set[TopicPartition], what: str) -> None:
    if cb is None or not tps:
        return
    try:
        res = cb(set(tps))
        if inspect.isawaitable(res):
            await res
    except Exception:
        log.exception("%s callback failed", what)


# --------------------------------------------------------------------------- membership


class GroupMembership:
    """The consumer's group member (see the module docstring). Options (consumer kwargs):
    ``session_timeout_ms`` (45000), ``rebalance_timeout_ms`` (300000), ``max_poll_interval_ms``
    (300000), ``on_partitions_revoked`` / ``on_partitions_assigned`` / ``on_partitions_lost``
    (callables taking a set of ``TopicPartition``; may be async), ``group_instance_id``
    (static membership: see the module docstring)."""

    def __init__(self, consumer: AsyncConsumer) -> None:
        opts = dict(consumer.group_options)
        self.consumer = consumer
        self.core: ClientCore = consumer._core
        assert consumer.group_id is not None
        self.group_id: str = consumer.group_id
        self.session_timeout_ms = int(opts.pop("session_timeout_ms", 45000))
        self.rebalance_timeout_ms = int(opts.pop("rebalance_timeout_ms", 300000))
        self.max_poll_interval_ms = int(opts.pop("max_poll_interval_ms", 300000))
        self.on_partitions_revoked = opts.pop("on_partitions_revoked", None)
        self.on_partitions_assigned = opts.pop("on_partitions_assigned", None)
        self.on_partitions_lost = opts.pop("on_partitions_lost", None) or self.on_partitions_revoked
        self.group_instance_id: str | None = opts.pop("group_instance_id", None) or None
        if opts:
            raise TypeError(f"unknown consumer options: {sorted(opts)}")
        self.member_id = ""
        self.member_epoch = 0
        self.metadata_offset = -1
        self.subscription: list[str] = []
        self._subscription_sent: list[str] | None = None
        self.owned: set[TopicPartition] = set()
        self.safe: dict[TopicPartition, int] = {}  # processed offsets (positions at poll start)
        self._committed_safe: dict[TopicPartition, int] = {}
        self._interval_s = 0.1
        self._wake = trio.Event()
        self._last_ok = time.monotonic()
        self._last_poll = time.monotonic()
        self._poll_hook = False
        self._left_for_poll = False
        self._lock = trio.Lock()  # one reconciliation / commit-on-revoke at a time
        self._nursery: trio.Nursery | None = None

    # -- Coordinator protocol ------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._heartbeat_loop)
            if self.consumer.enable_auto_commit:
                nursery.start_soon(self._auto_commit_loop)
            task_status.started()

    async def subscribe(self, topics: list[str]) -> None:
        self.subscription = sorted(set(topics))
        self._wake.set()

    async def committed(self, tps: list[TopicPartition], *, metadata: bool = False
                        ) -> dict[TopicPartition, Any]:
        """Committed offsets of ``tps`` (None: none); ``metadata``: as ``OffsetAndMetadata``."""
        fetch = fetch_committed_metadata if metadata else fetch_committed
        got: dict[TopicPartition, Any] = await self._as_member(lambda member: fetch(
            self.core, self.group_id, tps, require_stable=bool(self.consumer._isolation), member=member))
        return {tp: got.get(tp) for tp in tps}

    async def _as_member(self, request: Callable[[dict[str, Any] | None], Awaitable[T]]) -> T:
        """``request(member)`` with who asks (OFFSET_COMMIT, OFFSET_FETCH): ``member_id``,
        ``member_epoch`` and ``min_metadata_offset``, None from outside the group. Sent again
        (3 tries in all) when a heartbeat advanced our epoch while it was in flight."""
        for attempt in range(3):
            epoch = self.member_epoch
            member = None if epoch <= 0 else {"member_id": self.member_id, "member_epoch": epoch,
                                              "min_metadata_offset": self.metadata_offset}
            try:
                return await request(member)
            except RafkaError as exc:
                if exc.code != ErrorCode.FENCED_MEMBER_EPOCH or self.member_epoch in (epoch, 0) or attempt == 2:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def commit(self, offsets: CommitOffsets) -> None:
        """Commit as the current member (or from outside the group when not a member); an
        offset may be an ``OffsetAndMetadata`` (its metadata string is stored with it)."""
        entries = commit_offsets(offsets)
        if not entries:
            return
        topics = offsets_body(entries)
        resp = await self._as_member(lambda member: coordinator_request(
            self.core, self.group_id, ApiKey.OFFSET_COMMIT,
            {"group_id": self.group_id, "member_epoch": -1, **(member or {}), "topics": topics}))
        for t in resp.get("topics", ()):
            for p in t["partitions"]:
                if p.get("error"):
                    raise error_for(p["error"], p.get("message") or f"commit of {t['name']}-{p['partition']}")
        for tp, entry in entries.items():
            self._committed_safe[tp] = entry.offset

    async def close(self) -> None:
        """Commit what was consumed (auto-commit), then leave the group.

        A normal close counts every record the application was given as processed (the
        positions, less records the iterator took but did not yield), as Kafka's close does;
        a close after an exception (``async with`` / ``with`` left by a raise) commits only
        what earlier polls returned, so the record being processed is delivered again."""
        with trio.move_on_after(self.core.request_timeout_ms / 1000):
            if self.consumer.enable_auto_commit and self.member_epoch > 0:
                if not getattr(self.consumer, "exit_error", False):
                    self._mark_consumed()
                with contextlib.suppress(RafkaError):
                    await self._commit_safe(self.owned)
            if self.member_epoch > 0 and self.group_instance_id is None:  # static: no leave
                with contextlib.suppress(RafkaError):
                    await self._send({"member_epoch": -1})
        self.member_epoch = 0
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def on_poll(self) -> None:
        """Called by ``AsyncConsumer.poll`` on entry: what earlier polls returned is processed."""
        self._poll_hook = True
        self._last_poll = time.monotonic()
        for tp, st in self.consumer._states.items():
            if st.position is not None and tp in self.owned:
                self.safe[tp] = st.position
        if self._left_for_poll:
            self._left_for_poll = False
            self._wake.set()

    def _mark_consumed(self) -> None:
        """Every record handed to the application so far counts as processed."""
        for tp, off in self.consumer.consumed_positions().items():
            if tp in self.owned:
                self.safe[tp] = off

    # -- heartbeats ----------------------------------------------------------------------

    async def _send(self, fields: dict[str, Any]) -> dict[str, Any]:
        body = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "subscribed_topics": None,
            "owned_partitions": _tp_list(self.owned),
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "client_id": self.core.client_id,
            "instance_id": self.group_instance_id,
            **fields,
        }
        resp = await self.core.request_any(ApiKey.CONSUMER_GROUP_HEARTBEAT, body)
        return resp.body

    async def _heartbeat_loop(self) -> None:
        try:
            await self._heartbeat_forever()
        except (UnresolvableHostError, BootstrapTimeoutError, FencedInstanceIdError) as exc:
            self.consumer.fail(exc)  # the application's next poll raises it

    async def _heartbeat_forever(self) -> None:
        while True:
            self._wake = trio.Event()
            if self.subscription and not self._left_for_poll:
                await self._heartbeat_once()
                if self._poll_hook and self.owned and (time.monotonic() - self._last_poll) * 1000 > self.max_poll_interval_ms:
                    await self._leave_for_poll()
            with trio.move_on_after(self._interval_s):
                await self._wake.wait()

    async def _heartbeat_once(self) -> None:
        fields: dict[str, Any] = {}
        if self.member_epoch == 0 or self._subscription_sent != self.subscription:
            fields["subscribed_topics"] = list(self.subscription)
        try:
            body = await self._send(fields)
        except (UnresolvableHostError, BootstrapTimeoutError):
            raise  # no broker name resolves / was ever reached: the consumer fails with it
        except RafkaError as exc:
            body = {"error": int(exc.code), "message": exc.message}
        code = body.get("error", 0)
        if code == 0:
            self._last_ok = time.monotonic()
            self._subscription_sent = list(self.subscription)
            self.member_id = body["member_id"]
            self.member_epoch = body["member_epoch"]
            self.metadata_offset = max(self.metadata_offset, body.get("metadata_offset", -1))
            self._interval_s = max(0.02, body.get("heartbeat_interval_ms", 1000) / 1000)
            await self._reconcile(_from_tp_list(body.get("assignment")))
            return
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            log.warning("group %s: %s; partitions lost, rejoining", self.group_id, body.get("message"))
            await self._lose_all()
            self._rejoin_as_new_member()
            self._interval_s = 0.05
            return
        if code == ErrorCode.FENCED_INSTANCE_ID:  # a newer process has our instance id: fatal
            log.warning("group %s: %s", self.group_id, body.get("message"))
            await self._lose_all()
            self.member_epoch = 0
            raise FencedInstanceIdError(body.get("message") or self.group_id)
        if code in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED):
            raise error_for(code, body.get("message") or self.group_id)  # retrying cannot help
        log.info("group %s: heartbeat failed: %s %s", self.group_id, code, body.get("message"))
        self._interval_s = min(1.0, max(0.1, self.core.retry_backoff_ms / 1000))
        if (time.monotonic() - self._last_ok) * 1000 > self.session_timeout_ms and self.owned:
            log.warning("group %s: no heartbeat for %d ms; dropping partitions", self.group_id, self.session_timeout_ms)
            await self._lose_all()
            self._rejoin_as_new_member()

    def _rejoin_as_new_member(self) -> None:
        """After the partitions were lost: the next heartbeat joins under a member id the broker
        picks afresh, never the old one. A group whose only member was removed is deleted and
        starts again at epoch 1, so the old id would come back with the very epoch it had —
        and a commit carrying that (member id, epoch) from before the loss, e.g. the
        ``group_metadata()`` of a transaction still running in the application, would be
        accepted although this consumer has meanwhile re-read its committed offsets: the
        transaction's input is then processed twice (txn chaos seed 9 at ``f147594``). With a
        new id that commit gets ``UNKNOWN_MEMBER_ID`` and the transaction aborts. (Kafka's
        clients drop their member id on UNKNOWN_MEMBER_ID too.)"""
        self.member_id = ""
        self.member_epoch = 0

    async def _reconcile(self, assignment: set[TopicPartition]) -> None:
        async with self._lock:
            revoked = self.owned - assignment
            added = assignment - self.owned
            if revoked:
                keep = self.owned - revoked
                self.consumer._set_assignment(sorted(keep))  # stop fetching first
                if self.consumer.enable_auto_commit:
                    try:
                        await self._commit_safe(revoked)
                    except RafkaError as exc:
                        log.warning("group %s: commit on revoke failed: %s", self.group_id, exc)
                await _call(self.on_partitions_revoked, revoked, "on_partitions_revoked")
                self.owned = keep
                self._forget(revoked)
                self._wake.set()  # acknowledge at once
            if added:
                self.owned |= added
                self.consumer._set_assignment(sorted(self.owned))
                await _call(self.on_partitions_assigned, added, "on_partitions_assigned")

    async def _lose_all(self) -> None:
        async with self._lock:
            lost, self.owned = self.owned, set()
            self.consumer._set_assignment([])
            self._forget(lost)
            await _call(self.on_partitions_lost, lost, "on_partitions_lost")

    async def _leave_for_poll(self) -> None:
        log.warning("group %s: poll() not called within max_poll_interval_ms=%d; leaving the group "
                    "(lower max_poll_records or raise max_poll_interval_ms)", self.group_id, self.max_poll_interval_ms)
        await self._reconcile(set())
        with contextlib.suppress(RafkaError):
            await self._send({"member_epoch": -1})
        self.member_epoch = 0
        self._left_for_poll = True

    def _forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.safe.pop(tp, None)
            self._committed_safe.pop(tp, None)

    # -- auto-commit ---------------------------------------------------------------------

    async def _commit_safe(self, tps: Iterable[TopicPartition]) -> None:
        offsets = {tp: self.safe[tp] for tp in tps if tp in self.safe and self._committed_safe.get(tp) != self.safe[tp]}
        if offsets and self.member_epoch > 0:
            await self.commit(offsets)

    async def _auto_commit_loop(self) -> None:
        while True:
            await trio.sleep(self.consumer.auto_commit_interval_ms / 1000)
            if self.member_epoch > 0 and not self._lock.locked():
                try:
                    await self._commit_safe(set(self.owned))
                except RafkaError as exc:
                    log.info("group %s: auto-commit failed: %s", self.group_id, exc)


AsyncConsumer.coordinator_factory = GroupMembership


# --------------------------------------------------------------------------- admin helpers


async def list_groups(core: ClientCore) -> list[dict[str, Any]]:
    """Every group any broker knows (members in the image, or committed offsets it coordinates)."""
    meta = await core.refresh_metadata(all_topics=True)
    merged: dict[str, dict[str, Any]] = {}
    nodes = list(meta.brokers) or [None]
    for node in nodes:
        try:
            resp = await (core.request_any(ApiKey.LIST_GROUPS, {}) if node is None
                          else core.request_node(node, ApiKey.LIST_GROUPS, {}))
            resp.raise_for_error()
        except RafkaError as exc:
            log.info("LIST_GROUPS to broker %s failed: %s", node, exc)
            continue
        for g in resp.body.get("groups", ()):
            cur = merged.get(g["group_id"])
            if cur is None or g["members"] > cur["members"]:
                merged[g["group_id"]] = g
    return [merged[k] for k in sorted(merged)]


async def describe_group(core: ClientCore, group_id: str) -> dict[str, Any]:
    """DESCRIBE_GROUPS plus, per committed partition, the high watermark and the lag."""
    body = await coordinator_request(core, group_id, ApiKey.DESCRIBE_GROUPS, {"groups": [group_id]})
    g = body["groups"][0]
    if g.get("error"):
        raise error_for(g["error"], g.get("message") or group_id)
    committed = {TopicPartition(t["name"], p["partition"]): p for t in g.get("offsets", ()) for p in t["partitions"]}
    assigned = {TopicPartition(t["name"], p): m["member_id"] for m in g.get("members", ())
                for t in m["assignment"] for p in t["partitions"]}
    tps = sorted(set(committed) | set(assigned))
    ends: dict[TopicPartition, tuple[int, int]] = {}
    if tps:
        with contextlib.suppress(RafkaError):
            ends = await list_offsets(core, {tp: -1 for tp in tps}, attempts=3)
    rows = []
    for tp in tps:
        c = committed.get(tp)
        off = c["offset"] if c else -1
        hw = ends.get(tp, (-1, -1))[0]
        rows.append({"topic": tp.topic, "partition": tp.partition, "member_id": assigned.get(tp, ""),
                     "committed": off, "metadata": (c.get("metadata") or "") if c else "",
                     "high_watermark": hw,
                     "lag": (hw - off if off >= 0 else hw) if hw >= 0 else None})
    return {**g, "partitions": rows}


async def delete_groups(core: ClientCore, group_ids: Iterable[str]) -> dict[str, RafkaError | None]:
    out: dict[str, RafkaError | None] = {}
    for gid in group_ids:
        try:
            body = await coordinator_request(core, gid, ApiKey.DELETE_GROUPS, {"groups": [gid]})
            r = body["groups"][0]
            out[gid] = error_for(r["error"], r.get("message") or gid) if r.get("error") else None
        except RafkaError as exc:
            out[gid] = exc
    return out


async def alter_group_offsets(core: ClientCore, group_id: str,
                              offsets: Mapping[TopicPartition, int | OffsetAndMetadata], *,
                              force: bool = False) -> None:
    """Set committed offsets, each a plain offset or an ``OffsetAndMetadata`` whose metadata
    string is stored with it (the group must have no members: NON_EMPTY_GROUP otherwise, unless
    ``force`` — members keep their positions and may commit over the new offsets)."""
    def entry(tp: TopicPartition) -> dict[str, Any]:
        v = offsets[tp]
        if isinstance(v, OffsetAndMetadata):
            return {"partition": tp.partition, "offset": v.offset, "metadata": v.metadata or ""}
        return {"partition": tp.partition, "offset": v}

    body: dict[str, Any] = {"group_id": group_id, "force": force, "topics": [
        {"name": e["name"], "partitions": [entry(TopicPartition(e["name"], p)) for p in e["partitions"]]}
        for e in _tp_list(offsets)]}
    resp = await coordinator_request(core, group_id, ApiKey.ALTER_GROUP_OFFSETS, body)
    for t in resp.get("topics", ()):
        for p in t["partitions"]:
            if p.get("error"):
                raise error_for(p["error"], p.get("message") or "")
