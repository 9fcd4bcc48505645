"""The active controller's decisions, as pure functions.

Theory of operation
-------------------
Every function here takes the current :class:`MetadataImage` (plus, where needed, the
in-memory :class:`ControllerState` — heartbeat contact times, which are *not* in the log —
and ``now_ms``) and returns either the records to write together with the guards that must
still hold when they apply (a :class:`Decision`), or raises the ``RafkaError`` to answer.
No I/O, no clock, no randomness: the caller injects ``now_ms`` and the placement
``start_index``/``shift``. :mod:`rafka.kraft.service` wraps a decision into a ``Command``.

Kafka semantics followed here:

* broker epoch = offset of its ``RegisterBroker`` record; a broker is registered fenced and
  unfenced once a heartbeat reports a metadata offset ≥ its registration offset; fenced again
  after ``broker.session.timeout.ms`` without a heartbeat (time in which the controller itself
  was paused or starved does not count: ``expired_brokers``) — or earlier, when a liveness
  probe of its listener was refused (``brokers_to_probe`` / ``probe_fence``, the TCP connect
  itself is done by :mod:`rafka.kraft.service`);
* fencing (or controlled shutdown) moves leadership away: new leader = first replica that is
  in the ISR and live; the fenced broker leaves the ISR unless it is the last member (then the
  partition is leaderless, ``leader=-1``, ISR keeps it; brokers fenced in one decision that
  are the whole ISR all stay in it: ``fence_brokers``); an out-of-sync replica is chosen only
  when the topic sets ``unclean.leader.election.enable=true``;
* ``AlterPartition`` is guarded by leader epoch and partition epoch; the new ISR must be a
  subset of the replicas, contain the leader and hold only unfenced brokers;
* replica placement is Kafka's rack-unaware round robin with a start index and a shift, over
  the live brokers not being decommissioned (``placeable_brokers``; kraft/reassign.py);
* preferred-leader election moves leadership back to ``replicas[0]`` when it is in the ISR
  and live.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rafka.kraft.quorum import Guard
from rafka.metadata import (
    NO_LEADER,
    ConfigRecord,
    FenceBroker,
    MetadataImage,
    MetadataRecord,
    Partition,
    PartitionChange,
    PartitionRegistration,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    TopicImage,
    UnfenceBroker,
)
from rafka.wire.errors import ErrorCode, error_for

__all__ = [
    "ControllerState",
    "Decision",
    "PRODUCER_ID_BLOCK_SIZE",
    "alter_configs",
    "alter_partition",
    "create_partitions",
    "create_topic",
    "describe_configs",
    "HeartbeatOutcome",
    "delete_topic",
    "elect_leaders",
    "elect_partition_leader",
    "expired_brokers",
    "fence_broker",
    "fence_brokers",
    "heartbeat",
    "leaderless_elections",
    "live_brokers",
    "place_replicas",
    "placeable_brokers",
    "probe_fence",
    "brokers_to_probe",
    "preferred_elections",
    "allocate_producer_ids",
    "register_broker",
    "validate_topic_configs",
]

PRODUCER_ID_BLOCK_SIZE = 1000
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


@dataclass(slots=True)
class Decision:
    records: list[MetadataRecord] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.records)


@dataclass(slots=True)
class ControllerState:
    """The active controller's memory (lost on failover; rebuilt with a grace period)."""

    last_contact_ms: dict[int, int] = field(default_factory=dict)  # broker id -> ms
    metadata_offsets: dict[int, int] = field(default_factory=dict)  # broker id -> offset
    shutting_down: set[int] = field(default_factory=set)
    last_check_ms: int | None = None  # the previous ``expired_brokers`` check
    # liveness probes (``brokers_to_probe``): brokers to probe at once (set on activation,
    # when this controller has no heartbeat history), probes in flight, last probe start
    probe_due: set[int] = field(default_factory=set)
    probing: set[int] = field(default_factory=set)
    last_probe_ms: dict[int, int] = field(default_factory=dict)
    heartbeat_interval_ms: dict[int, int] = field(default_factory=dict)  # if a broker said

    def touch_all(self, image: MetadataImage, now_ms: int) -> None:
        """On activation: every registered broker gets a fresh session (grace period), and
        every unfenced one is due for a liveness probe (the grace would otherwise keep a
        broker that died with the previous controller in place for a whole session)."""
        for bid, reg in image.cluster.brokers.items():
            self.last_contact_ms[bid] = now_ms
            if not reg.fenced:
                self.probe_due.add(bid)


# -- helpers -----------------------------------------------------------------------------


def _live(image: MetadataImage, state: ControllerState | None = None) -> set[int]:
    down = state.shutting_down if state else set()
    return {b for b, r in image.cluster.brokers.items() if not r.fenced and b not in down}


live_brokers = _live  # public name (kraft/reassign.py)


def placeable_brokers(image: MetadataImage, state: ControllerState | None = None) -> list[int]:
    """Live brokers new replicas may go to: not those being decommissioned (kraft/reassign.py)."""
    return sorted(b for b in _live(image, state) if not image.cluster.brokers[b].decommissioning)


def _unclean_ok(topic: TopicImage) -> bool:
    return topic.configs.get("unclean.leader.election.enable", "false").lower() == "true"


def elect_partition_leader(
    reg: PartitionRegistration, live: set[int], removed: Iterable[int] = (), unclean: bool = False
) -> PartitionChange | None:
    """The change (without topic id/partition filled in: see callers) that keeps ``reg``
    led by a live in-sync replica after ``removed`` brokers leave; None if nothing changes."""
    removed = set(removed)
    isr = [r for r in reg.isr if r not in removed]
    if not isr and reg.isr:
        # never shrink to empty (ELR-less Kafka). When the whole ISR leaves in this one
        # decision, keep all of it, not an arbitrary last member: each holds every committed
        # record and nothing can be written while the partition has no leader, so whichever
        # of them comes back first may lead again (``fence_brokers``)
        isr = list(reg.isr)
    leader = reg.leader
    if leader not in live or leader not in isr or leader in removed:
        leader = next((r for r in reg.replicas if r in isr and r in live), NO_LEADER)
        if leader != NO_LEADER:  # a new leader's ISR holds no fenced broker (those kept
            isr = [r for r in isr if r in live]  # above leave now, as their fences would have)
    if leader == NO_LEADER and unclean:
        # never a replica a reassignment is still adding: it may hold nothing yet
        candidate = next((r for r in reg.replicas if r in live and r not in reg.adding_replicas),
                         NO_LEADER)
        if candidate != NO_LEADER:
            leader, isr = candidate, [candidate]
    new_isr = tuple(isr)
    if leader == reg.leader and new_isr == reg.isr:
        return None
    return PartitionChange(
        "", -1, leader=None if leader == reg.leader else leader,
        isr=None if new_isr == reg.isr else new_isr,
    )


def _changes_for(
    image: MetadataImage, live: set[int], removed: set[int], only_leaderless: bool = False
) -> list[MetadataRecord]:
    out: list[MetadataRecord] = []
    for t in image.topics.by_id.values():
        unclean = _unclean_ok(t)
        for p, reg in t.partitions.items():
            if only_leaderless and reg.leader != NO_LEADER:
                continue
            if not only_leaderless and not (
                removed & set(reg.isr) or reg.leader in removed or reg.leader not in live
            ):
                continue
            ch = elect_partition_leader(reg, live, removed, unclean)
            if ch is not None:
                out.append(PartitionChange(t.topic_id, p, ch.leader, ch.isr))
    return out


# -- brokers -----------------------------------------------------------------------------


def register_broker(
    image: MetadataImage,
    broker_id: int,
    incarnation_id: str,
    host: str,
    port: int,
    rack: str | None = None,
    *,
    secure_listener: str | None = None,
    kafka_listener: str | None = None,
) -> Decision:
    """Empty decision if this very incarnation is already registered (idempotent).
    ``secure_listener``: "host:port" of the broker's secured client listener (docs/security.md)."""
    cur = image.cluster.brokers.get(broker_id)
    if cur is not None and cur.incarnation_id == incarnation_id:
        return Decision()
    records: list[MetadataRecord] = [RegisterBroker(broker_id, incarnation_id, host, port, rack,
                                                    secure_listener=secure_listener,
                                                    kafka_listener=kafka_listener)]
    if cur is not None:
        # a new incarnation: the old one is gone; move its leaderships away now
        live = _live(image) - {broker_id}
        records += _changes_for(image, live, {broker_id})
    return Decision(records, [Guard.broker_epoch(broker_id, -1 if cur is None else cur.epoch)])


def fence_broker(image: MetadataImage, broker_id: int, state: ControllerState | None = None) -> Decision:
    return fence_brokers(image, [broker_id], state)


def fence_brokers(image: MetadataImage, broker_ids: Iterable[int],
                  state: ControllerState | None = None) -> Decision:
    """Fence these brokers in ONE decision (e.g. every session that expired at the same
    check). One at a time, each fence shrinks the ISRs before the next one is decided, so
    fencing {1, 2, 3} in that order left every partition with the ISR {3} — an arbitrary last
    member — and when 3 was the dead one and 1 and 2 only late (a new active controller's
    grace ended before they found it: docs/chaos-results.md, the stale-coordinator sighting),
    no partition could get a leader until 3 came back. Together, a partition whose whole ISR
    leaves keeps it whole (``elect_partition_leader``), so the first of them to heartbeat
    again is unfenced and elected."""
    regs = {b: image.cluster.brokers[b] for b in sorted(set(broker_ids)) if b in image.cluster.brokers}
    if not regs:
        return Decision()
    gone = set(regs)
    records: list[MetadataRecord] = [FenceBroker(b, r.epoch) for b, r in regs.items() if not r.fenced]
    records += _changes_for(image, _live(image, state) - gone, gone)
    if not records:
        return Decision()
    return Decision(records, [Guard.broker_epoch(b, r.epoch) for b, r in regs.items()])


def expired_brokers(
    image: MetadataImage, state: ControllerState, now_ms: int, session_timeout_ms: int
) -> list[int]:
    """Unfenced brokers whose session expired. A session runs only while this controller
    watches: a gap between two checks beyond a quarter session (the controller's process was
    paused or starved, or its decisions waited for the quorum) is added to every broker's last
    contact, because the heartbeats that arrived meanwhile are not processed yet. Without it a
    controller resuming from a pause fenced every broker at once, itself included, one after
    the other — each fence shrinking the ISR — until a partition was left leaderless with the
    ISR {a dead broker} although the other replicas were alive and in sync."""
    last_check, state.last_check_ms = state.last_check_ms, now_ms
    if last_check is not None:
        unwatched = now_ms - last_check - session_timeout_ms // 4
        if unwatched > 0:
            for bid, t in state.last_contact_ms.items():
                state.last_contact_ms[bid] = min(now_ms, t + unwatched)
    out = []
    for bid, reg in image.cluster.brokers.items():
        if reg.fenced:
            continue
        last = state.last_contact_ms.get(bid)
        if last is None:
            state.last_contact_ms[bid] = now_ms
        elif now_ms - last > session_timeout_ms:
            out.append(bid)
    return out


def probe_after_ms(state: ControllerState, broker_id: int, session_timeout_ms: int,
                   setting_ms: int | None = None) -> int:
    """Silence after which a broker's listener is probed: the setting if given, else twice
    the heartbeat interval the broker registered with, else a third of the session."""
    if setting_ms is not None and setting_ms > 0:
        return setting_ms
    hb = state.heartbeat_interval_ms.get(broker_id)
    if hb:
        return min(2 * hb, session_timeout_ms)
    return max(1, session_timeout_ms // 3)


def _silence_probe_at(state: ControllerState, broker_id: int, session_timeout_ms: int,
                      setting_ms: int | None) -> int | None:
    """The first ms at which the broker has been silent for longer than ``probe_after_ms`` and
    its last probe is at least that old; None before its first contact. The one rule behind
    both ``brokers_to_probe`` (due now?) and ``next_probe_ms`` (due when?)."""
    last = state.last_contact_ms.get(broker_id)
    if last is None:
        return None
    after = probe_after_ms(state, broker_id, session_timeout_ms, setting_ms)
    probed = state.last_probe_ms.get(broker_id)
    return last + after + 1 if probed is None else max(last + after + 1, probed + after)


def brokers_to_probe(
    image: MetadataImage, state: ControllerState, now_ms: int, session_timeout_ms: int,
    setting_ms: int | None = None,
) -> list[int]:
    """Unfenced brokers whose listener should be probed now: those due since activation, and
    those silent for longer than ``probe_after_ms`` whose last probe is at least that old. At
    most one probe per broker is in flight (``state.probing``); the caller marks the ones it
    starts (``probe_started``)."""
    out = []
    for bid, reg in image.cluster.brokers.items():
        if reg.fenced or bid in state.probing:
            continue
        if bid in state.probe_due:
            out.append(bid)
            continue
        at = _silence_probe_at(state, bid, session_timeout_ms, setting_ms)
        if at is not None and now_ms >= at:
            out.append(bid)
    return out


def next_probe_ms(
    image: MetadataImage, state: ControllerState, now_ms: int, session_timeout_ms: int,
    setting_ms: int | None = None,
) -> int | None:
    """The earliest time at which ``brokers_to_probe`` returns a broker if nothing else happens
    (no heartbeat, no registration): ``now_ms`` if one is due already, ``None`` if none ever
    will be. A heartbeat only moves a deadline later, so a caller that sleeps until then and
    asks again misses nothing but wakes far less often than a fixed tick (issue 26)."""
    due: int | None = None
    for bid, reg in image.cluster.brokers.items():
        if reg.fenced:
            continue
        if bid in state.probe_due and bid not in state.probing:
            return now_ms
        at = _silence_probe_at(state, bid, session_timeout_ms, setting_ms)
        if at is not None:
            due = at if due is None else min(due, at)
    return None if due is None else max(now_ms, due)


def probe_started(state: ControllerState, broker_id: int, now_ms: int) -> None:
    state.probe_due.discard(broker_id)
    state.probing.add(broker_id)
    state.last_probe_ms[broker_id] = now_ms


def probe_fence(
    image: MetadataImage, state: ControllerState, broker_id: int, broker_epoch: int, started_ms: int
) -> Decision:
    """The fence after a probe started at ``started_ms`` found nothing listening at the
    broker's address (connection refused) — re-checked against what happened since: nothing
    if the broker re-registered (new epoch), is fenced already, or contacted this controller
    after the probe started (a heartbeat is newer evidence than the probe)."""
    reg = image.cluster.brokers.get(broker_id)
    if reg is None or reg.epoch != broker_epoch or reg.fenced:
        return Decision()
    last = state.last_contact_ms.get(broker_id)
    if last is not None and last > started_ms:
        return Decision()
    return fence_broker(image, broker_id, state)


@dataclass(slots=True)
class HeartbeatOutcome:
    decision: Decision
    is_caught_up: bool
    is_fenced: bool  # after the decision applies
    should_shutdown: bool


def heartbeat(
    image: MetadataImage,
    state: ControllerState,
    broker_id: int,
    broker_epoch: int,
    metadata_offset: int,
    want_fence: bool,
    want_shutdown: bool,
    now_ms: int,
) -> HeartbeatOutcome:
    reg = image.cluster.brokers.get(broker_id)
    if reg is None or reg.epoch != broker_epoch:
        raise error_for(ErrorCode.STALE_BROKER_EPOCH, f"broker {broker_id} epoch {broker_epoch}")
    state.last_contact_ms[broker_id] = now_ms
    state.metadata_offsets[broker_id] = metadata_offset
    caught_up = metadata_offset >= reg.epoch
    guards = [Guard.broker_epoch(broker_id, reg.epoch)]
    if want_shutdown:
        state.shutting_down.add(broker_id)
        # controlled shutdown: move leadership and ISR membership away, then fence
        live = _live(image, state)
        moves = _changes_for(image, live, {broker_id})
        if moves:
            return HeartbeatOutcome(Decision(moves, guards), caught_up, reg.fenced, False)
        leads = any(
            p.leader == broker_id for t in image.topics.by_id.values() for p in t.partitions.values()
        )
        if not reg.fenced:
            return HeartbeatOutcome(
                Decision([FenceBroker(broker_id, reg.epoch)], guards), caught_up, True, not leads
            )
        return HeartbeatOutcome(Decision(), caught_up, True, not leads)
    state.shutting_down.discard(broker_id)
    if want_fence and not reg.fenced:
        d = fence_broker(image, broker_id, state)
        return HeartbeatOutcome(d, caught_up, True, False)
    if reg.fenced and caught_up and not want_fence:
        live = _live(image, state) | {broker_id}
        records: list[MetadataRecord] = [UnfenceBroker(broker_id, reg.epoch)]
        records += _changes_for(image, live, set(), only_leaderless=True)
        return HeartbeatOutcome(Decision(records, guards), caught_up, False, False)
    return HeartbeatOutcome(Decision(), caught_up, reg.fenced, False)


def leaderless_elections(image: MetadataImage, state: ControllerState | None = None) -> Decision:
    """Give a leader to leaderless partitions that can have one (periodic safety net)."""
    return Decision(_changes_for(image, _live(image, state), set(), only_leaderless=True))


# -- topics ------------------------------------------------------------------------------


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    try:
        from rafka.log.config import LogConfig
    except ImportError:  # pragma: no cover - log/ always ships with rafka
        return
    try:
        LogConfig.from_dict({k: v for k, v in configs.items() if v is not None})
    except Exception as exc:
        raise error_for(ErrorCode.INVALID_CONFIG, str(exc)) from None
    known = LogConfig.from_dict({}).to_dict()
    for k, v in configs.items():
        if v is None and k not in known:
            raise error_for(ErrorCode.INVALID_CONFIG, f"unknown topic config {k!r}")


def place_replicas(
    brokers: list[int], num_partitions: int, replication_factor: int, start_index: int,
    shift: int, first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware assignment: partition p's first replica is
    brokers[(start + p) % n]; the others follow with a shift that grows every n partitions."""
    n = len(brokers)
    if replication_factor > n or n == 0:
        raise error_for(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} > {n} available brokers",
        )
    brokers = sorted(brokers)
    out = []
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (start_index + p) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out.append(tuple(replicas))
    return out


def create_topic(
    image: MetadataImage,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None,
    topic_id: str,
    start_index: int,
    shift: int,
    default_partitions: int = 1,
    default_replication_factor: int = 1,
) -> Decision:
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise error_for(ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name {name!r}")
    if name in image.topics.by_name:
        raise error_for(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    num_partitions = default_partitions if num_partitions == -1 else num_partitions
    if replication_factor == -1:
        replication_factor = default_replication_factor
    if num_partitions < 1:
        raise error_for(ErrorCode.INVALID_PARTITIONS, "partitions must be >= 1")
    if replication_factor < 1:
        raise error_for(ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be >= 1")
    configs = dict(configs or {})
    validate_topic_configs(configs)
    assignment = place_replicas(placeable_brokers(image), num_partitions, replication_factor,
                                start_index, shift)
    records: list[MetadataRecord] = [Topic(name, topic_id)]
    records += [ConfigRecord("topic", name, k, v) for k, v in sorted(configs.items())]
    for p, replicas in enumerate(assignment):
        records.append(Partition(topic_id, p, replicas, replicas, replicas[0]))
    return Decision(records, [Guard.topic_absent(name)])


def delete_topic(image: MetadataImage, name: str) -> Decision:
    t = image.topics.by_name.get(name)
    if t is None:
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return Decision([RemoveTopic(t.topic_id)], [Guard.topic_is(name, t.topic_id)])


def create_partitions(
    image: MetadataImage, name: str, count: int, start_index: int, shift: int
) -> Decision:
    t = image.topics.by_name.get(name)
    if t is None:
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    cur = len(t.partitions)
    if count <= cur:
        raise error_for(
            ErrorCode.INVALID_PARTITIONS, f"topic {name!r} has {cur} partitions; {count} is not more"
        )
    rf = len(t.partitions[0].target_replicas) if t.partitions else 1  # not those being removed
    assignment = place_replicas(placeable_brokers(image), count - cur, rf, start_index, shift, cur)
    records: list[MetadataRecord] = [
        Partition(t.topic_id, cur + i, r, r, r[0]) for i, r in enumerate(assignment)
    ]
    return Decision(records, [Guard.partition_count(t.topic_id, cur)])


def alter_configs(image: MetadataImage, name: str, configs: Mapping[str, str | None]) -> Decision:
    t = image.topics.by_name.get(name)
    if t is None:
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    validate_topic_configs(configs)
    merged = {**t.configs, **{k: v for k, v in configs.items() if v is not None}}
    for k, v in configs.items():
        if v is None:
            merged.pop(k, None)
    validate_topic_configs(merged)
    records: list[MetadataRecord] = [
        ConfigRecord("topic", name, k, v) for k, v in sorted(configs.items())
        if t.configs.get(k) != v
    ]
    return Decision(records, [Guard.topic_is(name, t.topic_id)])


# -- partitions --------------------------------------------------------------------------


def alter_partition(
    image: MetadataImage,
    broker_id: int,
    broker_epoch: int,
    topic: str,
    partition: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: list[int],
    shutting_down: set[int] | frozenset[int] = frozenset(),
) -> tuple[Decision, PartitionRegistration]:
    """Returns the decision and the registration it will produce.

    ``shutting_down``: brokers in controlled shutdown (``ControllerState.shutting_down``). The
    ISR may not *gain* one (KIP-841, ``INELIGIBLE_REPLICA``): its controlled shutdown takes it
    out of every ISR, and a leader that re-added it at the next fetch would undo that at each
    heartbeat, so the shutdown never reached its fence and waited out its whole timeout."""
    b = image.cluster.brokers.get(broker_id)
    if b is None or b.epoch != broker_epoch:
        raise error_for(ErrorCode.STALE_BROKER_EPOCH, f"broker {broker_id} epoch {broker_epoch}")
    t = image.topics.by_name.get(topic)
    reg = None if t is None else t.partitions.get(partition)
    if t is None or reg is None:
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
    if reg.leader != broker_id:
        raise error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {broker_id} does not lead")
    if leader_epoch != reg.leader_epoch:
        raise error_for(
            ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} != {reg.leader_epoch}"
        )
    if partition_epoch != reg.partition_epoch:
        raise error_for(
            ErrorCode.STALE_PARTITION_EPOCH,
            f"partition epoch {partition_epoch} != {reg.partition_epoch}",
        )
    isr = tuple(dict.fromkeys(new_isr))
    if not set(isr) <= set(reg.replicas) or broker_id not in isr:
        raise error_for(ErrorCode.INVALID_REQUEST, f"ISR {list(isr)} must be ⊆ replicas and hold the leader")
    fenced = [r for r in isr if r not in _live(image) and r != broker_id]
    if fenced:  # KIP-841's code: the leader's image is behind (it saw the broker unfenced)
        raise error_for(ErrorCode.INELIGIBLE_REPLICA, f"brokers {fenced} are fenced: they may not join the ISR")
    leaving = [r for r in isr if r in shutting_down and r not in reg.isr]
    if leaving:
        raise error_for(ErrorCode.INELIGIBLE_REPLICA,
                        f"brokers {leaving} are in controlled shutdown: they may not join the ISR")
    isr = tuple(r for r in reg.replicas if r in isr)  # replica order: deterministic
    if isr == reg.isr:
        return Decision(), reg
    new = PartitionRegistration(
        reg.replicas, isr, reg.leader, reg.leader_epoch, reg.partition_epoch + 1,
        reg.leader_recovery_state,
    )
    d = Decision(
        [PartitionChange(t.topic_id, partition, isr=isr)],
        [Guard.partition_epochs(t.topic_id, partition, leader_epoch, partition_epoch),
         Guard.broker_epoch(broker_id, broker_epoch)],
    )
    return d, new


def preferred_elections(
    image: MetadataImage, partitions: Iterable[tuple[str, int]] | None = None,
    state: ControllerState | None = None,
) -> Decision:
    live = _live(image, state)
    records: list[MetadataRecord] = []
    guards: list[Guard] = []
    for t, p, reg in _select(image, partitions):
        pref = reg.preferred_leader
        if pref != reg.leader and pref in reg.isr and pref in live:
            records.append(PartitionChange(t.topic_id, p, leader=pref))
            guards.append(Guard.partition_epochs(t.topic_id, p, reg.leader_epoch, reg.partition_epoch))
    return Decision(records, guards)


def elect_leaders(
    image: MetadataImage, election_type: int,
    partitions: Iterable[tuple[str, int]] | None = None, state: ControllerState | None = None,
) -> Decision:
    """ELECT_LEADERS: type 0 preferred, 1 unclean (leaderless partitions take any live replica)."""
    if election_type == 0:
        return preferred_elections(image, partitions, state)
    live = _live(image, state)
    records: list[MetadataRecord] = []
    guards: list[Guard] = []
    for t, p, reg in _select(image, partitions):
        if reg.leader != NO_LEADER:
            continue
        ch = elect_partition_leader(reg, live, (), unclean=True)
        if ch is not None:
            records.append(PartitionChange(t.topic_id, p, ch.leader, ch.isr))
            guards.append(Guard.partition_epochs(t.topic_id, p, reg.leader_epoch, reg.partition_epoch))
    return Decision(records, guards)


def _select(
    image: MetadataImage, partitions: Iterable[tuple[str, int]] | None
) -> list[tuple[TopicImage, int, PartitionRegistration]]:
    if partitions is None:
        return [(t, p, r) for t in image.topics.by_id.values() for p, r in t.partitions.items()]
    out = []
    for name, p in partitions:
        t = image.topics.by_name.get(name)
        if t is not None and p in t.partitions:
            out.append((t, p, t.partitions[p]))
    return out


# -- producer ids ------------------------------------------------------------------------


def allocate_producer_ids(
    image: MetadataImage, broker_id: int = -1, broker_epoch: int = -1,
    block_size: int = PRODUCER_ID_BLOCK_SIZE,
) -> tuple[Decision, int]:
    """A new block [start, start + block_size) — returns the decision and ``start``."""
    start = image.producer_ids.next_producer_id
    return (
        Decision(
            [ProducerIds(broker_id, broker_epoch, start + block_size)],
            [Guard.next_producer_id(start)],
        ),
        start,
    )


def describe_configs(image: MetadataImage, name: str) -> dict[str, str]:
    t = image.topics.by_name.get(name)
    if t is None:
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return dict(t.configs)

