"""ControllerService — the controller role of a node, as a trio service.

Theory of operation
-------------------
``ControllerService(...)`` owns a :class:`~kraft.quorum.MetadataQuorum` (pysyncobj by
default, built in ``run()`` on the trio main thread; tests pass ``quorum=`` a
:class:`~kraft.memory.MemoryQuorum`). ``await nursery.start(service.run)`` starts it;
``service.handlers[api_key](body) -> body`` serves the controller APIs and the admin APIs a
broker forwards (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DESCRIBE_CONFIGS,
ALTER_CONFIGS, INIT_PRODUCER_ID, ELECT_LEADERS, BROKER_REGISTRATION, BROKER_HEARTBEAT,
ALTER_PARTITION, DESCRIBE_QUORUM, METADATA_FETCH, and the ACL, quota, SCRAM, reassignment
and voter APIs).

Admin modules: the service serves the broker-lifecycle APIs itself (registration, heartbeat,
ALTER_PARTITION, producer ids, consumer-group heartbeats, the metadata log and DESCRIBE_QUORUM);
every other API is a ``kraft/*_admin.py`` module's. Each such module exports pure ``decide_*``
functions and a ``HANDLERS`` table ``{ApiKey: handler(ctx, body)}`` written against
:class:`~rafka.kraft.admin_context.AdminContext` — the few public methods of this class they
need (``require_quorum``, ``active_state``, ``in_doubt``, ``propose``, ``placement``,
``setting``). ``handlers`` is this class's own table merged with ``ADMIN_MODULES``' tables,
each handler bound to the service and wrapped in ``_guard``; a key served twice is a
programming error (asserted at construction).

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

Idempotent admin requests (``request_id``) and refusals decided once: ``kraft/topic_admin.py``.

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
``_probe_loop``'s nursery, outside the decision lock, at most one per broker at a time. The
loop sleeps until the earliest moment a probe can fall due (``kraft.controller.next_probe_ms``;
an ordinary heartbeat only pushes it later, and what can bring it sooner — activation, a
registration, a broker's first contact or a shorter stated interval — wakes it) and parks while this node is not the active controller, as does
``_periodic_loop``: an idle standby controller's trio thread does not wake for either.

Settings (Kafka-style names; unknown names are ignored here): ``broker.session.timeout.ms``
(3000), ``broker.liveness.probe.enable`` (true), ``broker.liveness.probe.after.ms`` (unset:
2 × the heartbeat interval the broker states, else a third of the session),
``metadata.snapshot.records`` / ``metadata.snapshot.min.records`` (10000),
``metadata.snapshot.interval.ms`` (3600000), ``leader.imbalance.check.interval.ms`` (300000),
``auto.leader.rebalance.enable`` (true), ``num.partitions`` (1), ``default.replication.factor``
(1), ``raft.min.timeout.ms`` (700), ``raft.max.timeout.ms`` (2000),
``controller.propose.timeout.ms`` (10000), ``raft.compaction.min.entries`` (5000).
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import rafka.kraft.voter_admin as voter_admin  # (own line: shared import lines change often)
import trio
from rafka.kraft import acl_admin, quota_admin, reassign_admin, scram_admin, topic_admin
from rafka.kraft import controller as ctl
from rafka.kraft.admin_context import HandlerTable, VoterSpec
from rafka.kraft.groups.service import GroupsController, group_config_from_settings
from rafka.kraft.quorum import Command, MetadataQuorum, OffsetOutOfRange, ProposeResult
from rafka.metadata import LeaderChange, MetadataImage
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.protocol import ApiKey
from rafka.wire.wakeups import sleep_on_grid

__all__ = ["ADMIN_MODULES", "ControllerService", "VoterSpec", "parse_voters"]

log = logging.getLogger("rafka.controller")

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

# the admin modules whose ``HANDLERS`` the service serves (module docstring)
ADMIN_MODULES: tuple[HandlerTable, ...] = (
    topic_admin.HANDLERS, acl_admin.HANDLERS, quota_admin.HANDLERS, scram_admin.HANDLERS,
    reassign_admin.HANDLERS, voter_admin.HANDLERS,
)

MAX_FETCH_RECORDS = 10_000
PROBE_TIMEOUT_S = 0.25  # a liveness probe's TCP connect (see the module docstring)
# _probe_loop sleeps until the next probe falls due (kraft.controller.next_probe_ms), at most
# this long (a change it is not told about: a registration, a finished probe) and at least
# the minimum (no spin); it was a fixed 100 ms tick, 10 wake-ups a second on every voter
PROBE_RECHECK_MAX_S = 1.0
PROBE_RECHECK_MIN_S = 0.01
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


def _note_heartbeat_interval(active: _Active, broker_id: int, body: dict[str, Any]) -> bool:
    """Registrations and heartbeats may say the broker's heartbeat interval (optional): its
    liveness-probe threshold is twice that. Sent with every heartbeat, so a controller that
    takes over learns it within one interval. True if it changed (a probe may be due sooner)."""
    hb = body.get("heartbeat_interval_ms")
    if isinstance(hb, int) and hb > 0 and active.state.heartbeat_interval_ms.get(broker_id) != hb:
        active.state.heartbeat_interval_ms[broker_id] = hb
        return True
    return False


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
        self.events: Any = None  # broker.events.EventLog (rafka/node.py sets it): raft-leader events
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
        self._probe_wake = trio.Event()  # _wake_probes: activation, a new contact, a shorter threshold
        # _reactivation_watch: set when this node stopped being (or failed to become) active
        # without a leadership event that would tell _leadership_loop to look again
        self._recheck = trio.Event()
        self._activation: trio.CancelScope | None = None  # the activation in progress, if any
        self.fresh_start_pending = False  # the empty-disk guard is asking the voters (kraft/voters.py)
        self._start: tuple[str, Any] = ("", None)  # (directory id, FreshStart | None)
        self.handlers: dict[ApiKey, Handler] = {
            ApiKey.BROKER_REGISTRATION: self._guard(self.broker_registration),
            ApiKey.BROKER_HEARTBEAT: self._guard(self.broker_heartbeat),
            ApiKey.METADATA_FETCH: self._errors(self.metadata_fetch),
            ApiKey.ALTER_PARTITION: self._guard(self.alter_partition),
            ApiKey.INIT_PRODUCER_ID: self._guard(self.init_producer_id),
            ApiKey.DESCRIBE_QUORUM: self._errors(self.describe_quorum),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._guard(self.consumer_group_heartbeat),
        }
        for table in ADMIN_MODULES:  # kraft/*_admin.py, against kraft/admin_context.py
            for key, fn in table.items():
                assert key not in self.handlers, f"{key!r} is served twice"
                self.handlers[key] = self._guard(functools.partial(fn, self))

    # -- settings ---------------------------------------------------------------------

    def setting(self, name: str, default: Any) -> Any:
        """A setting by its Kafka-style name, as the type of ``default``."""
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
            t0 = time.monotonic()
            self.quorum = self._build_quorum()  # on the trio (main) thread: see notes
            if self.events is not None:  # where a restart's time goes (bench/restart_phases.py)
                self.events.emit("controller-open", seconds=round(time.monotonic() - t0, 3))
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
        """Follow the engine's leadership events: a new leader or term cancels any activation
        and deactivates; an event naming this node starts ``_activate`` for its term.

        Events come only when (leader, term, is-self) changes. A controller can also stop being
        active *within* a term it still leads — a proposal answered NOT_CONTROLLER deposes it
        (``propose``), or its activation gives up — and then no event follows. It was left
        inactive for good while Raft, healthy, kept it leader (a fresh-clone run, session 23:
        two minutes with no active controller until the test gave up, every watchdog silent).
        ``_reactivation_watch`` covers that case."""
        assert self.quorum is not None
        events = self.quorum.leadership_events()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._reactivation_watch, nursery)
            async for ev in events:
                if self._activation is not None:
                    self._activation.cancel()
                    self._activation = None
                self._set_active(None)
                if ev.is_self:
                    self._start_activation(nursery, ev.epoch)

    def _start_activation(self, nursery: trio.Nursery, epoch: int) -> None:
        self._activation = scope = trio.CancelScope()
        nursery.start_soon(self._activate, epoch, scope)

    async def _reactivation_watch(self, nursery: trio.Nursery) -> None:
        """When ``_recheck`` is set: if the engine still names this node leader and nothing is
        active or activating, activate again for the current term. Its LeaderChange is usually
        committed already (the request id dedups it), so this costs one round trip. Backs off
        0.05 → 1 s while it keeps failing, so a refusal that persists costs little."""
        assert self.quorum is not None
        delay = 0.05
        while True:
            await self._recheck.wait()
            self._recheck = trio.Event()
            await trio.sleep(delay)
            if (self._active is None and self._activation is None
                    and self.quorum.leader_id() == self.node_id):
                log.warning("node %s: Raft leader in term %s but not the active controller: "
                            "activating again", self.node_id, self.quorum.epoch())
                self._start_activation(nursery, self.quorum.epoch())
                delay = min(delay * 2, 1.0)
            else:
                delay = 0.05

    def _set_active(self, active: _Active | None) -> None:
        if (self._active is None) != (active is None):
            log.info("node %s: active controller %s", self.node_id, active is not None)
        self._active = active
        self._active_changed.set()
        self._active_changed = trio.Event()
        self._wake_probes()

    def _wake_probes(self) -> None:
        """Make ``_probe_loop`` look at the brokers now rather than at its next due time."""
        self._probe_wake.set()
        self._probe_wake = trio.Event()

    async def _activate(self, epoch: int, scope: trio.CancelScope) -> None:
        assert self.quorum is not None
        try:
            await self._activate_once(epoch, scope)
        finally:
            if self._activation is scope:
                self._activation = None
                if self._active is None:
                    self._recheck.set()  # gave up without a new event: look again

    async def _activate_once(self, epoch: int, scope: trio.CancelScope) -> None:
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
                        log.info("activation for epoch %s given up: the engine is at epoch %s "
                                 "with leader %s (%s)", epoch, self.quorum.epoch(),
                                 self.quorum.leader_id(), exc)
                        return
                    log.warning("LeaderChange for epoch %s not applied yet: %s", epoch, exc)
                    await trio.sleep(delay)
                    delay = min(delay * 2, 1.0)
            if self.quorum.image().quorum.epoch == epoch:
                groups = GroupsController(group_config_from_settings(self.settings))
                self._set_active(_Active(epoch, self.quorum.image(), self._now_ms(), groups))
                if self.events is not None:  # chaos_tests/node_events.py: one leader per epoch
                    self.events.emit("raft-leader", epoch=epoch)
            else:  # a later LeaderChange was applied meanwhile: this term's is stale
                log.info("activation for epoch %s given up: the image's quorum epoch is %s",
                         epoch, self.quorum.image().quorum.epoch)

    async def _periodic_loop(self) -> None:
        period_s = max(0.02, min(0.25, self.session_timeout_ms / 4000))
        while True:
            if self._active is None:  # a standby controller has no periodic work: park
                await self._active_changed.wait()
                continue
            await sleep_on_grid(period_s)  # the node's 0.5 s / 1 s loops wake at these instants too
            if self._active is None:
                continue
            # bounded like every decision (``_guard``): a proposal the quorum does not commit
            # must not hold the decision lock, or every heartbeat waits behind it. Half the
            # requests' bound, so that one queued behind it still has its turn in time
            timeout_s = self.setting("controller.propose.timeout.ms", 10_000) / 2000
            try:
                with trio.move_on_after(timeout_s) as cs:
                    async with self._lock:
                        await self._periodic_once()
                if cs.cancelled_caught:
                    log.warning("periodic controller work not committed within %.1f s: retrying", timeout_s)
            except RafkaError as exc:
                log.info("periodic controller work failed: %s", exc)

    async def _periodic_once(self) -> None:
        active = self._require_active()
        now = self._now_ms()
        q = self.require_quorum()
        expired = ctl.expired_brokers(q.image(), active.state, now, self.session_timeout_ms)
        if expired:  # one decision for all of them (ctl.fence_brokers says why)
            log.info("fencing brokers %s: no heartbeat for %s ms", expired, self.session_timeout_ms)
            await self.propose(ctl.fence_brokers(q.image(), expired, active.state))
        d = ctl.leaderless_elections(q.image(), active.state)
        if d:
            await self.propose(d)
        for records in active.groups.periodic(q.image(), now):  # group session timeouts
            await self.propose(ctl.Decision(list(records)))
        interval = self.setting("leader.imbalance.check.interval.ms", 300_000)
        if self.setting("auto.leader.rebalance.enable", True) and now - active.last_rebalance_ms >= interval:
            active.last_rebalance_ms = now
            d = ctl.preferred_elections(q.image(), None, active.state)
            if d:
                await self.propose(d)
        await reassign_admin.complete_due(self)  # reassignments whose new replicas are in sync

    # -- liveness probes (see the module docstring) -----------------------------------

    def _probe_after_setting(self) -> int | None:
        v = self.settings.get("broker.liveness.probe.after.ms")
        return None if v is None else int(v)

    async def _probe_loop(self) -> None:
        """Starts the due probes (``kraft.controller.brokers_to_probe``) in its own nursery,
        each bounded by ``PROBE_TIMEOUT_S``; wakes at activation and every tick."""
        async with trio.open_nursery() as probes:
            wait_s = 0.0
            while True:
                changed = self._probe_wake
                with trio.move_on_after(wait_s):
                    await changed.wait()
                active = self._active
                if active is None or self.quorum is None:
                    wait_s = math.inf  # nothing to probe until this node is the active controller
                    continue
                wait_s = PROBE_RECHECK_MAX_S
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
                due = ctl.next_probe_ms(image, active.state, now, self.session_timeout_ms,
                                        self._probe_after_setting())
                if due is not None:  # heartbeats only move it later: sleep until it, then ask again
                    wait_s = min(wait_s, max(PROBE_RECHECK_MIN_S, (due - now) / 1000))

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
                    d = ctl.probe_fence(self.require_quorum().image(), active.state, bid, epoch, started_ms)
                    if d:
                        log.info("fencing broker %s: listener refused connection (%s:%s)", bid, host, port)
                        await self.propose(d)
        except RafkaError as exc:
            log.info("fencing broker %s after its probe failed: %s", bid, exc)
        finally:
            active.state.probing.discard(bid)

    # -- plumbing ---------------------------------------------------------------------

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

    # -- what the admin modules use (kraft/admin_context.py's AdminContext) --------------

    def require_quorum(self) -> MetadataQuorum:
        """The quorum engine; ``BROKER_NOT_AVAILABLE`` until ``run()`` has built it."""
        if self.quorum is None:  # run() has not started yet (e.g. the membership check waits)
            raise error_for(ErrorCode.BROKER_NOT_AVAILABLE, f"controller {self.node_id} is starting")
        return self.quorum

    def active_state(self) -> ctl.ControllerState:
        """The active term's in-memory state; ``NOT_CONTROLLER`` unless this node is active."""
        return self._require_active().state

    def in_doubt(self, request_id: str) -> bool:
        """A proposal of this term under ``request_id`` whose wait was cut short (``propose``):
        its command may still commit."""
        return self._active is not None and request_id in self._active.undecided

    async def propose(self, decision: ctl.Decision, request_id: str | None = None) -> ProposeResult:
        """``decision`` as one guarded command of this term (the proposer's id, epoch and
        clock inside it); returns once it is applied and fsynced, or raises the refusal. A
        request id whose outcome becomes unknown here is remembered (``in_doubt``)."""
        active = self._require_active()
        cmd = Command(
            request_id=request_id or f"c{self.node_id}-e{active.epoch}-{next(self._ids)}",
            epoch=active.epoch,
            timestamp_ms=self._wall_ms(),
            records=tuple(decision.records),
            guards=tuple(decision.guards),
        )
        try:
            return await self.require_quorum().propose(cmd)
        except RafkaError as exc:
            if exc.code == ErrorCode.NOT_CONTROLLER and self._active is active:
                log.warning("controller %d deposed in epoch %s by a refusal: %s",
                            self.node_id, active.epoch, exc)
                self._set_active(None)  # deposed: the log says someone else leads
                self._recheck.set()  # unless the engine still says we lead (_reactivation_watch)
            if request_id and exc.code == ErrorCode.UNKNOWN_SERVER_ERROR:
                active.undecided.add(request_id)  # "command replayed, outcome unknown"
            raise
        except trio.Cancelled:
            if request_id:
                active.undecided.add(request_id)  # submitted; it may commit after we stop waiting
            raise

    def placement(self) -> tuple[int, int]:
        """A random (start index, shift) over the registered brokers (``ctl.place_replicas``)."""
        n = max(1, len(self.require_quorum().image().cluster.brokers))
        return self._rng.randrange(n), self._rng.randrange(n)

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

    # -- consumer groups (decisions in kraft/groups) -----------------------------------

    async def consumer_group_heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        image = self.require_quorum().image()
        resp, records = active.groups.heartbeat(image, body, self._now_ms())
        resp["metadata_offset"] = image.offset
        if records:
            res = await self.propose(ctl.Decision(list(records)))
            resp["metadata_offset"] = res.last_offset
        return resp

    # -- brokers ----------------------------------------------------------------------

    async def broker_registration(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        bid = body["broker_id"]
        d = ctl.register_broker(
            self.require_quorum().image(), bid, body["incarnation_id"], body["host"], body["port"], body.get("rack"),
            secure_listener=body.get("secure_listener"),
            kafka_listener=body.get("kafka_listener"),
        )
        if d:
            await self.propose(d)
        active.state.last_contact_ms[bid] = self._now_ms()
        active.state.shutting_down.discard(bid)
        _note_heartbeat_interval(active, bid, body)
        self._wake_probes()  # a new contact: its first probe may fall due before the loop wakes
        return {"broker_epoch": self.require_quorum().image().cluster.brokers[bid].epoch}

    async def broker_heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        # a shorter threshold, a first contact or an (un)fence can make a probe due sooner than
        # the probe loop's sleep: wake it then (any other heartbeat only pushes it later)
        wake = _note_heartbeat_interval(active, body["broker_id"], body) or \
            body["broker_id"] not in active.state.last_contact_ms
        out = ctl.heartbeat(
            self.require_quorum().image(), active.state, body["broker_id"], body["broker_epoch"],
            body["metadata_offset"], body["want_fence"], body["want_shutdown"], self._now_ms(),
        )
        if out.decision:
            await self.propose(out.decision)
        if wake or out.decision:
            self._wake_probes()
        return {
            "is_caught_up": out.is_caught_up,
            "is_fenced": out.is_fenced,
            "should_shutdown": out.should_shutdown,
        }

    async def alter_partition(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        d, reg = ctl.alter_partition(
            self.require_quorum().image(), body["broker_id"], body["broker_epoch"], body["topic"],
            body["partition"], body["leader_epoch"], body["partition_epoch"], body["new_isr"],
            active.state.shutting_down,
        )
        if d:
            await self.propose(d)
        return {
            "leader": reg.leader,
            "leader_epoch": reg.leader_epoch,
            "partition_epoch": reg.partition_epoch,
            "isr": list(reg.isr),
        }

    async def init_producer_id(self, body: dict[str, Any]) -> dict[str, Any]:
        active = self._require_active()
        pid, pepoch = body.get("producer_id"), body.get("producer_epoch")
        if pid is not None and pid >= 0 and pepoch is not None and 0 <= pepoch < 32766:
            if pid < self.require_quorum().image().producer_ids.next_producer_id:
                return {"producer_id": pid, "producer_epoch": pepoch + 1}
        if active.pid_next >= active.pid_end:
            d, start = ctl.allocate_producer_ids(self.require_quorum().image(), self.node_id, active.epoch)
            await self.propose(d)
            active.pid_next, active.pid_end = start, start + ctl.PRODUCER_ID_BLOCK_SIZE
        pid = active.pid_next
        active.pid_next += 1
        return {"producer_id": pid, "producer_epoch": 0}

    # -- metadata log, quorum ---------------------------------------------------------

    async def metadata_fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        q = self.require_quorum()
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
                from rafka.kraft.membership import proof_fields

                out.update(proof_fields(self.cluster_secret, nonce, body.get("challenge"),
                                        body.get("caller_proof")))
            return out
        q = self.require_quorum()
        self._require_active()
        hw = q.committed_offset()
        states: dict[int, dict[str, Any]] = {self.node_id: self._local_quorum_state()}

        async def ask(vid: int, rpc: tuple[str, int]) -> None:
            from rafka.wire.connection import connect

            with trio.move_on_after(1.0):
                try:
                    async with connect(*rpc) as conn:
                        resp = await conn.request(ApiKey.DESCRIBE_QUORUM, {"local_only": True})
                        for v in resp.body.get("voters", []):
                            if v.get("id") == vid:
                                states[vid] = v
                except (OSError, RafkaError, trio.BrokenResourceError) as exc:
                    log.debug("describe quorum: voter %s unreachable: %s", vid, exc)

        rows = voter_admin.voter_rows(self.voters, self.quorum)  # the live voter set (add-voter / remove-voter)
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
