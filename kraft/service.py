"""ControllerService — the controller role of a node, as a trio service.

Theory of operation
-------------------
``ControllerService(...)`` owns a :class:`~kraft.quorum.MetadataQuorum` (pysyncobj by
default, built in ``run()`` on the trio main thread; tests pass ``quorum=`` a
:class:`~kraft.memory.MemoryQuorum`). ``await nursery.start(service.run)`` starts it;
``service.handlers[api_key](body) -> body`` serves the controller APIs and the admin APIs a
broker forwards (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DESCRIBE_CONFIGS,
ALTER_CONFIGS, INIT_PRODUCER_ID, ELECT_LEADERS, BROKER_REGISTRATION, BROKER_HEARTBEAT,
ALTER_PARTITION, DESCRIBE_QUORUM, METADATA_FETCH).

Active controller: when the quorum reports this node leader of epoch E, the service proposes
``LeaderChange(node, E)`` and becomes *active* only when it has applied — every earlier record
is then applied too. Its in-memory :class:`~kraft.controller.ControllerState` (heartbeat
times) starts fresh, with a full session of grace for every broker. Decisions are made one at
a time under a lock (pure functions of image + state + now in :mod:`rafka.kraft.controller`) and
proposed as guarded commands; the state machine rejects them if this node has been deposed
meanwhile (epoch check), so "I think I lead" is never trusted for correctness.

A non-active voter answers ``NOT_CONTROLLER`` with ``leader_id``/``leader_host``/
``leader_port`` (the leader's RPC address) so the caller can go there.

Admin answers (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, ALTER_CONFIGS, ELECT_LEADERS)
carry ``metadata_offset``: the controller's fsynced metadata offset once its decisions for the
request are committed (every record they wrote is at or below it). A forwarding broker waits
until its own image has reached that offset before answering its client
(``broker/handlers/admin.py``), without asking the controller again. ``METADATA_FETCH`` is
served by every voter from its own fsynced ``@metadata`` log (long-poll up to ``max_wait_ms``;
a fetcher below the log start gets the latest snapshot).

Idempotent admin requests: CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS and ALTER_CONFIGS
may carry ``request_id`` — one id per *logical* client call, the same on every retry
(``client/aio/admin.py``). Each topic of the request gets its own proposal id
``<op>:<topic>:<request_id>`` (op = create / delete / partitions / configs, so ids cannot
collide across operations or topics), written by the same command as the records, so the
state machine's dedup table remembers it atomically with the change. Before deciding, the
controller looks the id up (``MetadataQuorum.applied_request``): a hit means an earlier
attempt was committed and its answer lost (controller change during the proposal, a forward
timing out), and the topic is answered with success — for a create with the topic's *current*
id and partitions from the image — instead of being decided again (TOPIC_ALREADY_EXISTS,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, or an INVALID_REPLICATION_FACTOR because a
broker is fenced now). The id is looked up again after a refused decision (the engine applies
on another thread; it publishes the dedup entry before the image). Kafka-like idempotence
means the answer is about *this request*: if the topic was since deleted (and perhaps
recreated by someone else), the retry of the original create still answers success (with
``topic_id`` None / the new topic's id) and creates nothing. The table is bounded (FIFO,
``DEFAULT_DEDUP_CAPACITY`` commands): a retry that comes after that many other commands is
decided afresh, as before. Without ``request_id`` nothing changes.

Refusals are decided once too. Before a topic of an idempotent request is answered with a
refusal (any error but NOT_CONTROLLER and REQUEST_TIMED_OUT, which decide nothing), the
controller commits a command under the topic's proposal id whose only record is a
``NoOp(error_code, message)``; the dedup table then remembers the id (with a marker saying it
was a refusal, ``kraft/state_machine.py``), and an earlier attempt still on its way — a forward
stuck in TCP behind a partition, arriving after the heal when the refusal's reason (a fenced
broker) is gone — is answered as a duplicate: the same refusal, nothing created (txn chaos
campaign seed 3: topic-created-after-fail, where the client was told "failed" for a create
that then happened). A later attempt reads the refusal from the log entry at the dedup hit's
offset; if that entry has been snapshotted away, it gets the same error code with a message
saying an earlier attempt was refused. The NoOp changes nothing in the image; it costs one Raft
commit per refused idempotent request (a rare event). If that commit fails, the answer is
what the failure says (NOT_CONTROLLER, REQUEST_TIMED_OUT), never a refusal that was not
recorded.

Failure detection: a broker is fenced (its leaderships move away) when its session expires —
``broker.session.timeout.ms`` without a heartbeat — or earlier, when a *liveness probe* proves
it dead. The active controller probes a registered, unfenced broker that has been silent for
longer than ``broker.liveness.probe.after.ms`` (default: twice the heartbeat interval the
broker states in its registration and heartbeats, else a third of the session), and every unfenced broker
right after it becomes active (it has no heartbeat history, and the fresh session it grants
would otherwise keep a broker that died with the previous controller in place for a whole
session). A probe is a plain TCP connect to the broker's registered listener, bounded by
``PROBE_TIMEOUT_S``, closed at once. Only a refusal (ECONNREFUSED: nothing listens there)
fences, through the decision lock and re-checked (``kraft.controller.probe_fence``: not if the
broker re-registered or contacted us after the probe started). Why that is a proof: when a
broker process is killed (kill -9, crash, OOM) on a host that is up, the kernel closes its
listening socket and answers the next SYN with RST. A paused (SIGSTOP) or overloaded broker
still has its listen socket, and the kernel completes the handshake into the backlog, so the
probe connects and nothing happens; a dead host or a network partition that drops packets
times out, and an unreachable host or a failed name lookup errors — all of these change
nothing and the session timeout still applies. (A firewall that *rejects* with RST or ICMP
port-unreachable reads as a refusal too.) Fencing is always safe, only availability is at
stake: a live broker fenced by mistake — e.g. one whose advertised address is not reachable as
such from this controller — unfences with its next heartbeat (``kraft.controller.heartbeat``),
like a broker that registers; it loses its leaderships meanwhile. Probes run concurrently in
``_probe_loop``'s nursery, outside the decision lock, at most one per broker at a time.

Settings (Kafka-style names; unknown names are ignored here): ``broker.session.timeout.ms``
(3000), ``broker.liveness.probe.enable`` (true), ``broker.liveness.probe.after.ms`` (unset:
2 × the heartbeat interval the broker states, else a third of the session),
``metadata.snapshot.records`` / ``metadata.snapshot.min.records`` (10000),
``metadata.snapshot.interval.ms`` (3600000), ``leader.imbalance.check.interval.ms`` (300000),
``auto.leader.rebalance.enable`` (true), ``num.partitions`` (1), ``default.replication.factor``
(1), ``raft.min.timeout.ms`` (150), ``raft.max.timeout.ms`` (600),
``controller.propose.timeout.ms`` (10000), ``raft.compaction.min.entries`` (5000).
"""

from __future__ import annotations

import functools
import itertools
import logging
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import rafka.kraft.voter_admin as voter_admin  # (own line: shared import lines change often)
import trio
from rafka.broker.errors import ErrorCode, RafkaError, error_for
from rafka.broker.protocol import ApiKey
from rafka.kraft import acl_admin, quota_admin, reassign_admin, scram_admin
from rafka.kraft import controller as ctl
from rafka.kraft.groups.service import GroupsController, group_config_from_settings
from rafka.kraft.quorum import Command, MetadataQuorum, OffsetOutOfRange, ProposeResult
from rafka.kraft.state_machine import refusal_id
from rafka.metadata import LeaderChange, MetadataImage, NoOp

__all__ = ["ControllerService", "VoterSpec", "parse_voters"]

log = logging.getLogger("rafka.controller")

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
VoterSpec = tuple[int, tuple[str, int], tuple[str, int]]  # (id, raft addr, rpc addr)

# client request ids (``request_id`` of the idempotent admin APIs): no ':' so that the
# derived per-topic id ``<op>:<topic>:<request_id>`` is unambiguous (topic names have none)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

MAX_FETCH_RECORDS = 10_000
PROBE_TIMEOUT_S = 0.25  # a liveness probe's TCP connect (see the module docstring)
MAX_FETCH_WAIT_MS = 30_000


def _addr(a: Any) -> tuple[str, int]:
    if isinstance(a, str):
        host, _, port = a.rpartition(":")
        return host.strip("[]"), int(port)
    return str(a[0]), int(a[1])


async def probe_listener(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """TCP-connect to ``host:port`` and close at once: "refused" when every address the name
    resolves to answered ECONNREFUSED (nothing listens there: the process is gone), else
    "open" (some address accepted), "timeout" or "error" (name lookup, unreachable, ...)."""
    outcome = "timeout"
    with trio.move_on_after(timeout_s):
        try:
            infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
        except OSError:
            return "error"
        refused = 0
        for family, type_, proto, _canon, sockaddr in infos:
            try:
                sock = trio.socket.socket(family, type_, proto)
            except OSError:  # out of file descriptors, family not supported: no verdict
                continue
            try:
                await sock.connect(sockaddr)
                return "open"
            except ConnectionRefusedError:
                refused += 1
            except OSError:
                pass
            finally:
                sock.close()
        outcome = "refused" if infos and refused == len(infos) else "error"
    return outcome


def parse_voters(voters: Sequence[Any]) -> list[VoterSpec]:
    """Accepts (id, raft, rpc) tuples (addresses as "host:port" or (host, port)) or objects
    with ``.id``, ``.raft``, ``.rpc`` (broker.config.Voter)."""
    out = []
    for v in voters:
        if hasattr(v, "raft"):
            out.append((int(v.id), _addr(v.raft), _addr(v.rpc)))
        else:
            vid, raft, rpc = v
            out.append((int(vid), _addr(raft), _addr(rpc)))
    return sorted(out)


class _Active:
    def __init__(self, epoch: int, image: MetadataImage, now_ms: int,
                 groups: GroupsController | None = None) -> None:
        self.epoch = epoch
        self.state = ctl.ControllerState()
        self.state.touch_all(image, now_ms)
        self.groups = groups or GroupsController()  # consumer-group sessions (kraft/groups)
        self.groups.activate(image, now_ms)
        self.pid_next = 0
        self.pid_end = 0
        self.last_rebalance_ms = now_ms
        # request ids of this term's proposals whose wait was cut short (the guard's timeout):
        # their command may still commit, so a retry must not answer a fresh refusal. Nothing
        # proposed in an earlier term can apply after this term's LeaderChange (epoch fencing),
        # so the set starts empty with each activation.
        self.undecided: set[str] = set()


def _note_heartbeat_interval(active: _Active, broker_id: int, body: dict[str, Any]) -> None:
    """Registrations and heartbeats may say the broker's heartbeat interval (optional): its
    liveness-probe threshold is twice that. Sent with every heartbeat, so a controller that
    takes over learns it within one interval."""
    hb = body.get("heartbeat_interval_ms")
    if isinstance(hb, int) and hb > 0:
        active.state.heartbeat_interval_ms[broker_id] = hb


class ControllerService:
    def __init__(
        self,
        node_id: int,
        voters: Sequence[Any],
        raft_listener: Any,
        data_dir: str | Path,
        cluster_secret: str | None,
        settings: Mapping[str, Any] | None = None,
        *,
        quorum: MetadataQuorum | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        cluster_id: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.events: Any = None  # broker.events.EventLog (broker/node.py sets it): raft-leader events
        self.cluster_id = cluster_id
        self.voters = parse_voters(voters)
        self.raft_listener = _addr(raft_listener) if raft_listener else None
        self.data_dir = Path(data_dir)
        self.cluster_secret = cluster_secret
        self.settings = dict(settings or {})
        self.quorum: MetadataQuorum | None = quorum
        self._wall_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self._rng = rng or random.Random()
        self._active: _Active | None = None
        self._lock = trio.Lock()
        self._ids = itertools.count()
        self._observers: dict[int, int] = {}  # node id -> metadata offset seen in fetches
        self._active_changed = trio.Event()
        self.fresh_start_pending = False  # the empty-disk guard is asking the voters (kraft/voters.py)
        self._start: tuple[str, Any] = ("", None)  # (directory id, FreshStart | None)
        self.handlers: dict[int, Handler] = {
            ApiKey.ADD_RAFT_VOTER: self._guard(functools.partial(voter_admin.add_raft_voter, self)),
            ApiKey.REMOVE_RAFT_VOTER: self._guard(functools.partial(voter_admin.remove_raft_voter, self)),
            ApiKey.BROKER_REGISTRATION: self._guard(self.broker_registration),
            ApiKey.BROKER_HEARTBEAT: self._guard(self.broker_heartbeat),
            ApiKey.METADATA_FETCH: self._errors(self.metadata_fetch),
            ApiKey.CREATE_TOPICS: self._guard(self.create_topics),
            ApiKey.DELETE_TOPICS: self._guard(self.delete_topics),
            ApiKey.CREATE_PARTITIONS: self._guard(self.create_partitions),
            ApiKey.DESCRIBE_CONFIGS: self._guard(self.describe_configs),
            ApiKey.ALTER_CONFIGS: self._guard(self.alter_configs),
            ApiKey.ALTER_PARTITION: self._guard(self.alter_partition),
            ApiKey.INIT_PRODUCER_ID: self._guard(self.init_producer_id),
            ApiKey.ELECT_LEADERS: self._guard(self.elect_leaders),
            ApiKey.DESCRIBE_QUORUM: self._errors(self.describe_quorum),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._guard(self.consumer_group_heartbeat),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._guard(  # kraft/scram_admin.py
                functools.partial(scram_admin.alter_user_scram_credentials, self)),
            ApiKey.CREATE_ACLS: self._guard(functools.partial(acl_admin.create_acls, self)),
            ApiKey.DELETE_ACLS: self._guard(functools.partial(acl_admin.delete_acls, self)),
            ApiKey.ALTER_CLIENT_QUOTAS: self._guard(  # kraft/quota_admin.py
                functools.partial(quota_admin.alter_client_quotas, self)),
            **{key: self._guard(functools.partial(fn, self)) for key, fn in (  # kraft/reassign_admin.py
                (ApiKey.ALTER_PARTITION_REASSIGNMENTS, reassign_admin.alter_partition_reassignments),
                (ApiKey.DECOMMISSION_BROKER, reassign_admin.decommission_broker),
                (ApiKey.UNREGISTER_BROKER, reassign_admin.unregister_broker))},
        }

    # -- settings ---------------------------------------------------------------------

    def setting(self, name: str, default: Any) -> Any:
        v = self.settings.get(name, default)
        if isinstance(default, bool):
            return v if isinstance(v, bool) else str(v).lower() == "true"
        return type(default)(v)

    @property
    def session_timeout_ms(self) -> int:
        return self.setting("broker.session.timeout.ms", 3000)

    @property
    def is_active(self) -> bool:
        return self._active is not None

    def _now_ms(self) -> int:
        return int(trio.current_time() * 1000)

    # -- lifecycle --------------------------------------------------------------------

    def _build_quorum(self) -> MetadataQuorum:
        from rafka.kraft.syncobj_engine import SyncObjQuorum

        dir_id, fresh = self._start
        return SyncObjQuorum(
            node_id=self.node_id,
            voters=[(vid, raft) for vid, raft, _rpc in self.voters],
            data_dir=self.data_dir,
            cluster_secret=self.cluster_secret,
            settings=self.settings,
            bind_address=self.raft_listener,  # the node's raft_listener (may be a wildcard)
            directory_id=dir_id,
            join_members=fresh.members if fresh is not None and fresh.mode == "join" else None,
        )

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if self.quorum is None:
            self._start = await voter_admin.prepare_data_dir(self)  # the empty-disk guard
            self.quorum = self._build_quorum()  # on the trio (main) thread: see notes
        try:
            async with trio.open_nursery() as nursery:
                if hasattr(self.quorum, "run"):
                    await nursery.start(self.quorum.run)
                nursery.start_soon(self._leadership_loop)
                nursery.start_soon(self._periodic_loop)
                nursery.start_soon(self._probe_loop)
                task_status.started()
        finally:
            self._active = None

    async def _leadership_loop(self) -> None:
        assert self.quorum is not None
        events = self.quorum.leadership_events()
        activation: trio.CancelScope | None = None
        async with trio.open_nursery() as nursery:
            async for ev in events:
                if activation is not None:
                    activation.cancel()
                    activation = None
                self._set_active(None)
                if ev.is_self:
                    activation = trio.CancelScope()
                    nursery.start_soon(self._activate, ev.epoch, activation)

    def _set_active(self, active: _Active | None) -> None:
        if (self._active is None) != (active is None):
            log.info("node %s: active controller %s", self.node_id, active is not None)
        self._active = active
        self._active_changed.set()
        self._active_changed = trio.Event()

    async def _activate(self, epoch: int, scope: trio.CancelScope) -> None:
        assert self.quorum is not None
        with scope:
            cmd = Command(
                request_id=f"leader-{self.node_id}-{epoch}",
                epoch=epoch,
                timestamp_ms=self._wall_ms(),
                records=(LeaderChange(self.node_id, epoch),),
            )
            delay = 0.05
            while True:
                try:
                    await self.quorum.propose(cmd)
                    break
                except RafkaError as exc:
                    if self.quorum.epoch() != epoch or self.quorum.leader_id() != self.node_id:
                        return
                    log.warning("LeaderChange for epoch %s not applied yet: %s", epoch, exc)
                    await trio.sleep(delay)
                    delay = min(delay * 2, 1.0)
            if self.quorum.image().quorum.epoch == epoch:
                groups = GroupsController(group_config_from_settings(self.settings))
                self._set_active(_Active(epoch, self.quorum.image(), self._now_ms(), groups))
                if self.events is not None:  # chaos_tests/node_events.py: one leader per epoch
                    self.events.emit("raft-leader", epoch=epoch)

    async def _periodic_loop(self) -> None:
        period_s = max(0.02, min(0.25, self.session_timeout_ms / 4000))
        while True:
            await trio.sleep(period_s)
            if self._active is None:
                continue
            try:
                async with self._lock:
                    await self._periodic_once()
            except RafkaError as exc:
                log.info("periodic controller work failed: %s", exc)

    async def _periodic_once(self) -> None:
        active = self._require_active()
        now = self._now_ms()
        q = self._q()
        for bid in ctl.expired_brokers(q.image(), active.state, now, self.session_timeout_ms):
            log.info("fencing broker %s: no heartbeat for %s ms", bid, self.session_timeout_ms)
            await self._propose(ctl.fence_broker(q.image(), bid, active.state))
        d = ctl.leaderless_elections(q.image(), active.state)
        if d:
            await self._propose(d)
        for records in active.groups.periodic(q.image(), now):  # group session timeouts
            await self._propose(ctl.Decision(list(records)))
        interval = self.setting("leader.imbalance.check.interval.ms", 300_000)
        if self.setting("auto.leader.rebalance.enable", True) and now - active.last_rebalance_ms >= interval:
            active.last_rebalance_ms = now
            d = ctl.preferred_elections(q.image(), None, active.state)
            if d:
                await self._propose(d)
        await reassign_admin.complete_due(self)  # reassignments whose new replicas are in sync

    # -- liveness probes (see the module docstring) -----------------------------------

    def _probe_after_setting(self) -> int | None:
        v = self.settings.get("broker.liveness.probe.after.ms")
        return None if v is None else int(v)

    async def _probe_loop(self) -> None:
        """Starts the due probes (``kraft.controller.brokers_to_probe``) in its own nursery,
        each bounded by ``PROBE_TIMEOUT_S``; wakes at activation and every tick."""
        async with trio.open_nursery() as probes:
            while True:
                changed = self._active_changed
                after = self._probe_after_setting() or max(1, self.session_timeout_ms // 3)
                with trio.move_on_after(max(0.02, min(0.1, after / 4000))):
                    await changed.wait()
                active = self._active
                if active is None or self.quorum is None:
                    continue
                if not self.setting("broker.liveness.probe.enable", True):
                    active.state.probe_due.clear()
                    continue
                now = self._now_ms()
                image = self.quorum.image()
                for bid in ctl.brokers_to_probe(image, active.state, now, self.session_timeout_ms,
                                                self._probe_after_setting()):
                    reg = image.cluster.brokers[bid]
                    ctl.probe_started(active.state, bid, now)
                    probes.start_soon(self._probe_broker, active, bid, reg.epoch, reg.host, reg.port, now)

    async def _probe_broker(self, active: _Active, bid: int, epoch: int, host: str, port: int,
                            started_ms: int) -> None:
        try:
            outcome = await probe_listener(host, port)
            log.debug("liveness probe of broker %s at %s:%s: %s", bid, host, port, outcome)
            if outcome != "refused" or self._active is not active:
                return
            timeout_s = self.setting("controller.propose.timeout.ms", 10_000) / 1000
            with trio.move_on_after(timeout_s):
                async with self._lock:
                    if self._active is not active:
                        return
                    d = ctl.probe_fence(self._q().image(), active.state, bid, epoch, started_ms)
                    if d:
                        log.info("fencing broker %s: listener refused connection (%s:%s)", bid, host, port)
                        await self._propose(d)
        except RafkaError as exc:
            log.info("fencing broker %s after its probe failed: %s", bid, exc)
        finally:
            active.state.probing.discard(bid)

    # -- plumbing ---------------------------------------------------------------------

    def _q(self) -> MetadataQuorum:
        if self.quorum is None:  # run() has not started yet (e.g. the membership check waits)
            raise error_for(ErrorCode.BROKER_NOT_AVAILABLE, f"controller {self.node_id} is starting")
        return self.quorum

    def _leader_hint(self) -> dict[str, Any]:
        leader = self.quorum.leader_id() if self.quorum is not None else None
        if self._active is None and leader == self.node_id:
            leader = None  # elected but not active yet: no useful hint
        for vid, _raft, rpc in self.voters:
            if vid == leader:
                return {"leader_id": vid, "leader_host": rpc[0], "leader_port": rpc[1]}
        return {"leader_id": -1, "leader_host": None, "leader_port": None}

    def _require_active(self) -> _Active:
        if self._active is None:
            raise error_for(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} is not the active controller")
        return self._active

    def _errors(self, fn: Handler) -> Handler:
        async def handler(body: dict[str, Any]) -> dict[str, Any]:
            try:
                return {"error": 0, **await fn(body)}
            except RafkaError as exc:
                out: dict[str, Any] = {"error": int(exc.code), "message": exc.message}
                if exc.code == ErrorCode.NOT_CONTROLLER:
                    out.update(self._leader_hint())
                return out

        handler.__name__ = getattr(fn, "__name__", "handler")
        return handler

    def _guard(self, fn: Handler) -> Handler:
        """Active controller only; decisions serialized; bounded in time."""

        async def guarded(body: dict[str, Any]) -> dict[str, Any]:
            self._require_active()
            timeout_s = self.setting("controller.propose.timeout.ms", 10_000) / 1000
            with trio.move_on_after(timeout_s) as cs:
                async with self._lock:
                    return await fn(body)
            assert cs.cancelled_caught
            raise error_for(ErrorCode.REQUEST_TIMED_OUT, "the controller quorum did not decide in time")

        return self._errors(guarded)

    async def _propose(self, decision: ctl.Decision, request_id: str | None = None) -> ProposeResult:
        active = self._require_active()
        cmd = Command(
            request_id=request_id or f"c{self.node_id}-e{active.epoch}-{next(self._ids)}",
            epoch=active.epoch,
            timestamp_ms=self._wall_ms(),
            records=tuple(decision.records),
            guards=tuple(decision.guards),
        )
        try:
            return await self._q().propose(cmd)
        except RafkaError as exc:
            if exc.code == ErrorCode.NOT_CONTROLLER and self._active is active:
                self._set_active(None)  # deposed: the log says someone else leads
            if request_id and exc.code == ErrorCode.UNKNOWN_SERVER_ERROR:
                active.undecided.add(request_id)  # "command replayed, outcome unknown"
            raise
        except trio.Cancelled:
            if request_id:
                active.undecided.add(request_id)  # submitted; it may commit after we stop waiting
            raise

    def _placement(self) -> tuple[int, int]:
        n = max(1, len(self._q().image().cluster.brokers))
        return self._rng.randrange(n), self._rng.randrange(n)

    @staticmethod
    def _per_item(name: str, exc: RafkaError) -> dict[str, Any]:
        return {"name": name, "error": int(exc.code), "message": exc.message}

    # -- idempotent admin requests (see the module docstring) --------------------------

    @staticmethod
    def _client_request_id(body: Mapping[str, Any]) -> str | None:
        rid = body.get("request_id")
        if rid is None:
            return None
        if not isinstance(rid, str) or not _REQUEST_ID.match(rid):
            raise error_for(ErrorCode.INVALID_REQUEST,
                            "request_id must be 1-128 characters of [A-Za-z0-9._-]")
        return rid

    @staticmethod
    def _op_id(op: str, name: str, client_rid: str | None) -> str | None:
        """The proposal id of one topic of an idempotent request (None: not idempotent)."""
        return None if client_rid is None else f"{op}:{name}:{client_rid}"

    async def _applied(self, request_id: str | None) -> ProposeResult | None:
        """The original result if a command with this id was applied, once it is durable."""
        if request_id is None:
            return None
        hit = self._q().applied_request(request_id)
        if hit is not None:
            await self._q().wait_for_offset(hit.last_offset)
        return hit

    def _created(self, name: str) -> dict[str, Any]:
        """The success answer of a create, from the image (the topic as it is now)."""
        t = self._q().image().topics.by_name.get(name)
        if t is None:  # created by this request, deleted since
            return {"name": name, "error": 0, "message": "created by this request, since deleted",
                    "topic_id": None, "num_partitions": -1, "replication_factor": -1}
        first = t.partitions.get(0)
        return {"name": name, "error": 0, "message": None, "topic_id": t.topic_id,
                "num_partitions": len(t.partitions),
                "replication_factor": len(first.target_replicas) if first is not None else 0}

    @staticmethod
    def _ok(name: str) -> dict[str, Any]:
        return {"name": name, "error": 0, "message": None}

    async def _topic_once(
        self, op: str, name: str, client_rid: str | None,
        decide: Callable[[str | None], Awaitable[dict[str, Any]]],
        replay: Callable[[str], dict[str, Any]],
    ) -> dict[str, Any]:
        """One topic of an admin request: ``decide(rid)``'s answer (``rid``: the topic's
        proposal id, ``_op_id``) — or the outcome of a command with that id applied already,
        found before deciding or after a refusal (applied meanwhile; see the module
        docstring): ``replay(name)``, or the recorded refusal. A fresh refusal is recorded
        (``_refuse``) before it is answered; NOT_CONTROLLER fails the whole request."""
        rid = self._op_id(op, name, client_rid)
        try:
            hit = await self._applied(rid)
            if hit is None:
                answer = await decide(rid)
                # decide's proposal may have been a duplicate of an earlier attempt's recorded
                # refusal (that attempt's commit was still pending when this one looked)
                if rid is None or self._q().applied_request(refusal_id(rid)) is None:
                    return answer
                hit = await self._applied(rid)
                if hit is None:
                    return answer
        except RafkaError as exc:
            if exc.code == ErrorCode.NOT_CONTROLLER:
                raise
            hit = await self._applied(rid)
            if hit is None:
                if self._active is not None and rid in self._active.undecided:
                    # an earlier attempt's command may still commit: a refusal now could be
                    # contradicted by it (txn chaos campaign seed 3: topic-created-after-fail)
                    exc = error_for(ErrorCode.REQUEST_TIMED_OUT,
                                    "an earlier attempt of this request is still being decided")
                if rid is None or exc.code == ErrorCode.REQUEST_TIMED_OUT:
                    return self._per_item(name, exc)
                return await self._refuse(name, rid, exc, replay)
        assert rid is not None
        return self._outcome(name, rid, hit, replay)

    async def _refuse(
        self, name: str, rid: str, exc: RafkaError, replay: Callable[[str], dict[str, Any]],
    ) -> dict[str, Any]:
        """Answer ``exc`` for the topic once it is recorded under ``rid`` (a NoOp carrying it,
        see the module docstring), so that no other attempt of the request is decided
        otherwise. A failed commit answers its own error (NOT_CONTROLLER fails the request)."""
        marker = ctl.Decision([NoOp(error_code=int(exc.code), message=exc.message or "")])
        try:
            res = await self._propose(marker, request_id=rid)
        except RafkaError as err:
            if err.code == ErrorCode.NOT_CONTROLLER:
                raise
            hit = await self._applied(rid)
            if hit is not None:  # an attempt's command was applied meanwhile after all
                return self._outcome(name, rid, hit, replay)
            return self._per_item(name, error_for(
                ErrorCode.REQUEST_TIMED_OUT,
                f"the refusal of this request could not be recorded ({err.message}); retry"))
        if res.duplicate:  # another attempt's command came first: its outcome is the answer
            await self._q().wait_for_offset(res.last_offset)
            return self._outcome(name, rid, res, replay)
        return self._per_item(name, exc)

    def _outcome(
        self, name: str, rid: str, hit: ProposeResult, replay: Callable[[str], dict[str, Any]],
    ) -> dict[str, Any]:
        """The answer for a proposal id applied already (``hit``): ``replay(name)`` for an
        accepted command, the recorded refusal otherwise — read from the NoOp at the hit's
        offset, or named from the marker's code if that entry is below the log start."""
        marker = self._q().applied_request(refusal_id(rid))
        if marker is None:
            return replay(name)
        try:
            entries = self._q().read(hit.base_offset, 1)
        except OffsetOutOfRange:
            entries = []
        record = entries[0].record if entries else None
        if isinstance(record, NoOp) and record.error_code:
            return self._per_item(name, error_for(record.error_code, record.message))
        return self._per_item(name, error_for(
            marker.epoch,  # a marker's epoch slot holds the refusal's code (kraft/state_machine.py)
            "an earlier attempt of this request was refused (its message is no longer in the log)"))

    # -- consumer groups (decisions in kraft/groups) -----------------------------------

    async def consumer_group_heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        image = self._q().image()
        resp, records = active.groups.heartbeat(image, body, self._now_ms())
        resp["metadata_offset"] = image.offset
        if records:
            res = await self._propose(ctl.Decision(list(records)))
            resp["metadata_offset"] = res.last_offset
        return resp

    # -- brokers ----------------------------------------------------------------------

    async def broker_registration(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        bid = body["broker_id"]
        d = ctl.register_broker(
            self._q().image(), bid, body["incarnation_id"], body["host"], body["port"], body.get("rack"),
            secure_listener=body.get("secure_listener"),
        )
        if d:
            await self._propose(d)
        active.state.last_contact_ms[bid] = self._now_ms()
        active.state.shutting_down.discard(bid)
        _note_heartbeat_interval(active, bid, body)
        return {"broker_epoch": self._q().image().cluster.brokers[bid].epoch}

    async def broker_heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        _note_heartbeat_interval(active, body["broker_id"], body)
        out = ctl.heartbeat(
            self._q().image(), active.state, body["broker_id"], body["broker_epoch"],
            body["metadata_offset"], body["want_fence"], body["want_shutdown"], self._now_ms(),
        )
        if out.decision:
            await self._propose(out.decision)
        return {
            "is_caught_up": out.is_caught_up,
            "is_fenced": out.is_fenced,
            "should_shutdown": out.should_shutdown,
        }

    async def alter_partition(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        d, reg = ctl.alter_partition(
            self._q().image(), body["broker_id"], body["broker_epoch"], body["topic"],
            body["partition"], body["leader_epoch"], body["partition_epoch"], body["new_isr"],
            active.state.shutting_down,
        )
        if d:
            await self._propose(d)
        return {
            "leader": reg.leader,
            "leader_epoch": reg.leader_epoch,
            "partition_epoch": reg.partition_epoch,
            "isr": list(reg.isr),
        }

    # -- topics -----------------------------------------------------------------------

    async def create_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        validate_only = bool(body.get("validate_only"))
        client_rid = None if validate_only else self._client_request_id(body)

        async def create(t: dict[str, Any], rid: str | None) -> dict[str, Any]:
            name = t["name"]
            start, shift = self._placement()
            d = ctl.create_topic(
                self._q().image(), name, t["num_partitions"], t["replication_factor"],
                t.get("configs") or {}, uuid.uuid4().hex, start, shift,
                self.setting("num.partitions", 1), self.setting("default.replication.factor", 1),
            )
            if not validate_only:
                res = await self._propose(d, request_id=rid)
                if res.duplicate:  # an earlier attempt, still in flight above, won
                    return self._created(name)
            parts = [r for r in d.records if r.record_type == "Partition"]
            return {
                "name": name, "error": 0, "message": None, "topic_id": d.records[0].topic_id,  # type: ignore[union-attr]
                "num_partitions": len(parts),
                "replication_factor": len(parts[0].replicas) if parts else 0,  # type: ignore[union-attr]
            }

        results = [await self._topic_once("create", t["name"], client_rid,
                                          functools.partial(create, t), self._created)
                   for t in body["topics"]]
        return {"topics": results, "metadata_offset": self._q().committed_offset()}

    async def delete_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        client_rid = self._client_request_id(body)

        async def delete(name: str, rid: str | None) -> dict[str, Any]:
            await self._propose(ctl.delete_topic(self._q().image(), name), request_id=rid)
            return self._ok(name)

        results = [await self._topic_once("delete", name, client_rid,
                                          functools.partial(delete, name), self._ok)
                   for name in body["topics"]]
        return {"topics": results, "metadata_offset": self._q().committed_offset()}

    async def create_partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        client_rid = self._client_request_id(body)

        async def grow(t: dict[str, Any], rid: str | None) -> dict[str, Any]:
            start, shift = self._placement()
            d = ctl.create_partitions(self._q().image(), t["name"], t["count"], start, shift)
            await self._propose(d, request_id=rid)
            return self._ok(t["name"])

        results = [await self._topic_once("partitions", t["name"], client_rid,
                                          functools.partial(grow, t), self._ok)
                   for t in body["topics"]]
        return {"topics": results, "metadata_offset": self._q().committed_offset()}

    async def describe_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        results = []
        for name in body["topics"]:
            try:
                cfg = ctl.describe_configs(self._q().image(), name)
                results.append({"name": name, "error": 0, "message": None, "configs": cfg})
            except RafkaError as exc:
                results.append({**self._per_item(name, exc), "configs": {}})
        return {"topics": results}

    async def alter_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        client_rid = self._client_request_id(body)

        async def alter(t: dict[str, Any], rid: str | None) -> dict[str, Any]:
            d = ctl.alter_configs(self._q().image(), t["name"], t["configs"])
            if d:
                await self._propose(d, request_id=rid)
            return self._ok(t["name"])

        # deduped too: a retry must not undo a change someone made after the lost answer
        results = [await self._topic_once("configs", t["name"], client_rid,
                                          functools.partial(alter, t), self._ok)
                   for t in body["topics"]]
        return {"topics": results, "metadata_offset": self._q().committed_offset()}

    async def elect_leaders(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        topics = body.get("topics")
        parts = None
        if topics is not None:
            parts = [(t["name"], p) for t in topics for p in t["partitions"]]
        image = self._q().image()
        d = ctl.elect_leaders(image, body["election_type"], parts, active.state)
        if d:
            await self._propose(d)
        image = self._q().image()
        selected = parts if parts is not None else [
            (t.name, p) for t in image.topics.by_name.values() for p in t.partitions
        ]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, p in selected:
            reg = image.topics.partition(name, p)
            if reg is None:
                e = {"partition": p, "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "message": None}
            elif reg.leader == -1:
                e = {"partition": p, "error": int(ErrorCode.LEADER_NOT_AVAILABLE), "message": "no eligible leader"}
            else:
                e = {"partition": p, "error": 0, "message": None, "leader": reg.leader}
            by_topic.setdefault(name, []).append(e)
        return {"topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
                "metadata_offset": self._q().committed_offset()}

    async def init_producer_id(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        pid, pepoch = body.get("producer_id"), body.get("producer_epoch")
        if pid is not None and pid >= 0 and pepoch is not None and 0 <= pepoch < 32766:
            if pid < self._q().image().producer_ids.next_producer_id:
                return {"producer_id": pid, "producer_epoch": pepoch + 1}
        if active.pid_next >= active.pid_end:
            d, start = ctl.allocate_producer_ids(self._q().image(), self.node_id, active.epoch)
            await self._propose(d)
            active.pid_next, active.pid_end = start, start + ctl.PRODUCER_ID_BLOCK_SIZE
        pid = active.pid_next
        active.pid_next += 1
        return {"producer_id": pid, "producer_epoch": 0}

    # -- metadata log, quorum ---------------------------------------------------------

    async def metadata_fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        q = self._q()
        from_offset = body["from_offset"]
        max_records = max(1, min(body["max_records"], MAX_FETCH_RECORDS))
        wait_s = max(0, min(body["max_wait_ms"], MAX_FETCH_WAIT_MS)) / 1000
        node = body.get("node_id")
        if node is not None and node not in {v[0] for v in self.voters} and len(self._observers) < 10_000:
            self._observers[node] = from_offset - 1
        if from_offset > q.committed_offset() and wait_s > 0:
            with trio.move_on_after(wait_s):
                await q.wait_for_offset(from_offset)
        out: dict[str, Any] = {
            "leader_id": self._leader_hint()["leader_id"],
            "committed_offset": q.committed_offset(),
            "log_start_offset": q.log_start_offset(),
            "entries": [],
            "snapshot": None,
        }
        try:
            entries = q.read(from_offset, max_records)
            out["entries"] = [[e.offset, e.epoch, e.record.to_dict()] for e in entries]
        except OffsetOutOfRange:
            snap = q.latest_snapshot()
            if snap is None:
                raise error_for(ErrorCode.OFFSET_OUT_OF_RANGE, "below the log start and no snapshot") from None
            out["snapshot"] = {
                "offset": snap.offset, "epoch": snap.epoch, "records": [r.to_dict() for r in snap.records]
            }
        return out

    def _local_quorum_state(self) -> dict[str, Any]:
        q = self.quorum
        if q is None:
            return {"id": self.node_id, "metadata_offset": -1, "log_start_offset": -1, "snapshot_offset": -1}
        snap = q.latest_snapshot()
        return {"id": self.node_id, "metadata_offset": q.committed_offset(),
                "log_start_offset": q.log_start_offset(),
                "snapshot_offset": -1 if snap is None else snap.offset}

    async def describe_quorum(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("local_only"):  # also before run(): kraft/membership.py asks it first
            q0 = self.quorum
            out = {"leader_id": None if q0 is None else q0.leader_id(), "epoch": -1 if q0 is None else q0.epoch(),
                   "voters": [self._local_quorum_state()],
                   "node_id": self.node_id, "cluster_id": self.cluster_id,
                   "voter_ids": [vid for vid, _raft, _rpc in self.voters],
                   **voter_admin.local_fields(self)}
            nonce = body.get("nonce")
            if isinstance(nonce, str) and 0 < len(nonce) <= 256:  # kraft/membership.py
                from rafka.kraft.membership import secret_proof

                out["secret_proof"] = secret_proof(self.cluster_secret, nonce)
            return out
        q = self._q()
        self._require_active()
        hw = q.committed_offset()
        states: dict[int, dict[str, Any]] = {self.node_id: self._local_quorum_state()}

        async def ask(vid: int, rpc: tuple[str, int]) -> None:
            from rafka.client.connection import connect

            with trio.move_on_after(1.0):
                try:
                    async with connect(*rpc) as conn:
                        resp = await conn.request(ApiKey.DESCRIBE_QUORUM, {"local_only": True})
                        for v in resp.body.get("voters", []):
                            if v.get("id") == vid:
                                states[vid] = v
                except (OSError, RafkaError, trio.BrokenResourceError) as exc:
                    log.debug("describe quorum: voter %s unreachable: %s", vid, exc)

        rows = voter_admin.voter_rows(self)  # the live voter set (add-voter / remove-voter)
        raft_lag = q.raft_lag() if hasattr(q, "raft_lag") else {}
        async with trio.open_nursery() as n:
            for vid, _raft, rpc in self.voters:
                if vid != self.node_id and any(r["id"] == vid for r in rows):
                    n.start_soon(ask, vid, rpc)
        voters = []
        for row in rows:  # raft: the Raft transport; rpc: its client listener
            st = states.get(row["id"])
            voters.append({
                **row, "reachable": st is not None, "raft_lag": raft_lag.get(row["raft"], 0),
                "metadata_offset": -1 if st is None else st["metadata_offset"],
                "lag": None if st is None else hw - st["metadata_offset"],
                "log_start_offset": None if st is None else st.get("log_start_offset"),
                "snapshot_offset": None if st is None else st.get("snapshot_offset"),
            })
        active = self._active
        observers = []
        if active is not None:
            brokers = q.image().cluster.brokers
            seen = {**self._observers, **active.state.metadata_offsets}
            observers = [
                {"id": bid, "metadata_offset": off, "lag": max(0, hw - off),
                 "fenced": brokers[bid].fenced if bid in brokers else None}
                for bid, off in sorted(seen.items())
            ]
        return {
            "leader_id": self.node_id, "epoch": q.epoch(), "high_watermark": hw,
            "log_start_offset": q.log_start_offset(),
            "voters": voters, "observers": observers,
        }
