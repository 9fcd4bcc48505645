"""Controller decisions as pure functions of (image, state, now_ms)."""

from __future__ import annotations

import pytest
from rafka.kraft import controller as ctl
from rafka.kraft.quorum import Command
from rafka.kraft.state_machine import ControllerStateMachine
from rafka.metadata import LeaderChange, MetadataImage
from rafka.wire.errors import ErrorCode, RafkaError


class World:
    """A state machine driven by decisions, as the active controller would."""

    def __init__(self) -> None:
        self.sm = ControllerStateMachine()
        self.n = 0
        self.commit(ctl.Decision([LeaderChange(1, 1)]))

    def commit(self, d: ctl.Decision):
        self.n += 1
        a = self.sm.apply(Command(f"r{self.n}", 1, 0, tuple(d.records), tuple(d.guards)))
        if a.error:
            raise a.error
        return a.result

    @property
    def image(self) -> MetadataImage:
        return self.sm.image

    def brokers(self, *ids, state=None):
        state = state or ctl.ControllerState()
        for b in ids:
            r = self.commit(ctl.register_broker(self.image, b, f"i{b}", "h", 9000 + b))
            assert self.image.cluster.brokers[b].epoch == r.base_offset  # epoch = record offset
            hb = ctl.heartbeat(self.image, state, b, r.base_offset, self.image.offset, False, False, 0)
            self.commit(hb.decision)
        return state

    def shutdown_heartbeat(self, state, b):
        """Broker ``b`` heartbeats wanting a controlled shutdown; the decision is committed."""
        hb = ctl.heartbeat(self.image, state, b, self.image.cluster.brokers[b].epoch, self.image.offset,
                           False, True, 0)
        self.commit(hb.decision)
        return hb

    def part(self, topic="t", p=0):
        return self.image.topics.by_name[topic].partitions[p]


def test_registration_unfence_only_when_caught_up():
    w = World()
    r = w.commit(ctl.register_broker(w.image, 1, "inc", "h", 1))
    st = ctl.ControllerState()
    assert w.image.cluster.brokers[1].fenced
    hb = ctl.heartbeat(w.image, st, 1, r.base_offset, r.base_offset - 1, False, False, 0)
    assert not hb.decision and hb.is_fenced and not hb.is_caught_up
    hb = ctl.heartbeat(w.image, st, 1, r.base_offset, r.base_offset, False, False, 0)
    w.commit(hb.decision)
    assert not w.image.cluster.brokers[1].fenced
    assert not ctl.register_broker(w.image, 1, "inc", "h", 1)  # same incarnation: idempotent
    with pytest.raises(RafkaError) as e:
        ctl.heartbeat(w.image, st, 1, 12345, 0, False, False, 0)
    assert e.value.code == ErrorCode.STALE_BROKER_EPOCH


def test_session_timeout_fences_and_moves_leadership_from_isr():
    w = World()
    st = w.brokers(1, 2, 3)
    w.commit(ctl.create_topic(w.image, "t", 3, 3, {}, "tid", 0, 0))
    assert [w.part(p=p).leader for p in range(3)] == [1, 2, 3]
    for b in (1, 2, 3):
        st.last_contact_ms[b] = 0
    st.last_contact_ms[1] = 2000
    st.last_contact_ms[2] = 2000
    assert ctl.expired_brokers(w.image, st, 3000, 3000) == []
    assert ctl.expired_brokers(w.image, st, 3001, 3000) == [3]
    w.commit(ctl.fence_broker(w.image, 3, st))
    assert w.image.cluster.brokers[3].fenced
    for p in range(3):
        reg = w.part(p=p)
        assert 3 not in reg.isr and reg.leader in reg.isr
    assert w.part(p=2).leader_epoch == 1


def test_brokers_fenced_together_keep_the_whole_isr_so_any_of_them_can_lead_again():
    """Session expiry found 1, 2 and 3 silent at once (a new controller's grace ended before
    they found it): one decision keeps each ISR whole; the first to heartbeat leads. One fence
    at a time would leave the ISR {last fenced} and 1 or 2 could not lead."""
    w = World()
    st = w.brokers(1, 2, 3)
    w.commit(ctl.create_topic(w.image, "t", 3, 3, {}, "tid", 0, 0))
    isrs = [w.part(p=p).isr for p in range(3)]
    w.commit(ctl.fence_brokers(w.image, [3, 1, 2], st))
    assert all(w.image.cluster.brokers[b].fenced for b in (1, 2, 3))
    assert [(w.part(p=p).leader, w.part(p=p).isr) for p in range(3)] == [(-1, i) for i in isrs]
    hb = ctl.heartbeat(w.image, st, 2, w.image.cluster.brokers[2].epoch, w.image.offset, False, False, 0)
    w.commit(hb.decision)  # the new leader's ISR: the live members only
    assert [(w.part(p=p).leader, w.part(p=p).isr) for p in range(3)] == [(2, (2,))] * 3
    # two of three together: the third, live, keeps leading with the ISR {3}
    w2 = World()
    st2 = w2.brokers(1, 2, 3)
    w2.commit(ctl.create_topic(w2.image, "t", 3, 3, {}, "tid", 0, 0))
    w2.commit(ctl.fence_brokers(w2.image, [1, 2], st2))
    assert [(w2.part(p=p).leader, w2.part(p=p).isr) for p in range(3)] == [(3, (3,))] * 3
    assert not ctl.fence_brokers(w2.image, [1, 2, 99], st2)  # nothing left to change


def test_last_isr_member_fenced_leaves_partition_leaderless_unless_unclean():
    w = World()
    st = w.brokers(1, 2)
    w.commit(ctl.create_topic(w.image, "t", 1, 2, {}, "tid", 0, 0))
    w.commit(ctl.create_topic(w.image, "u", 1, 2, {"unclean.leader.election.enable": "true"}, "uid", 0, 0))
    # broker 2 leaves the ISR of both (AlterPartition by leader 1)
    for name in ("t", "u"):
        reg = w.part(name)
        d, _ = ctl.alter_partition(w.image, 1, w.image.cluster.brokers[1].epoch, name, 0,
                                   reg.leader_epoch, reg.partition_epoch, [1])
        w.commit(d)
    w.commit(ctl.fence_broker(w.image, 1, st))
    t, u = w.part("t"), w.part("u")
    assert (t.leader, t.isr) == (-1, (1,))  # ISR keeps the last member; out-of-sync 2 not elected
    assert (u.leader, u.isr) == (2, (2,))  # unclean election allowed for u
    # broker 1 comes back and catches up: t gets its leader back
    hb = ctl.heartbeat(w.image, st, 1, w.image.cluster.brokers[1].epoch, w.image.offset, False, False, 1)
    w.commit(hb.decision)
    assert w.part("t").leader == 1


def test_alter_partition_guards():
    w = World()
    st = w.brokers(1, 2, 3)
    w.commit(ctl.create_topic(w.image, "t", 1, 3, {}, "tid", 0, 0))
    reg = w.part()
    e1 = w.image.cluster.brokers[1].epoch
    d, new = ctl.alter_partition(w.image, 1, e1, "t", 0, reg.leader_epoch, reg.partition_epoch, [1, 2])
    stale = Command("stale", 1, 0, tuple(d.records), tuple(d.guards))
    w.commit(d)
    assert w.part() == new and new.partition_epoch == reg.partition_epoch + 1
    # the same request built on the old epochs is rejected at apply time (guard)
    assert w.sm.apply(stale).error.code == ErrorCode.STALE_PARTITION_EPOCH
    for args, code in [
        ((1, e1, "t", 0, reg.leader_epoch, reg.partition_epoch, [1]), ErrorCode.STALE_PARTITION_EPOCH),
        ((1, e1, "t", 0, reg.leader_epoch + 5, new.partition_epoch, [1]), ErrorCode.FENCED_LEADER_EPOCH),
        ((2, w.image.cluster.brokers[2].epoch, "t", 0, 0, new.partition_epoch, [2]), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        ((1, e1, "t", 0, 0, new.partition_epoch, [1, 7]), ErrorCode.INVALID_REQUEST),
        ((1, e1 + 1, "t", 0, 0, new.partition_epoch, [1]), ErrorCode.STALE_BROKER_EPOCH),
    ]:
        with pytest.raises(RafkaError) as e:
            ctl.alter_partition(w.image, *args)
        assert e.value.code == code, args
    w.commit(ctl.fence_broker(w.image, 3, st))
    with pytest.raises(RafkaError) as e:  # ISR may not gain a fenced broker (KIP-841)
        ctl.alter_partition(w.image, 1, e1, "t", 0, 0, w.part().partition_epoch, [1, 2, 3])
    assert e.value.code == ErrorCode.INELIGIBLE_REPLICA


def test_placement_round_robin_and_validation():
    assert ctl.place_replicas([1, 2, 3], 3, 2, 0, 0) == [(1, 2), (2, 3), (3, 1)]
    got = ctl.place_replicas([1, 2, 3, 4], 8, 3, 1, 0)
    assert [r[0] for r in got] == [2, 3, 4, 1, 2, 3, 4, 1]
    assert all(len(set(r)) == 3 for r in got)
    with pytest.raises(RafkaError) as e:
        ctl.place_replicas([1, 2], 1, 3, 0, 0)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    w = World()
    w.brokers(1, 2, 3)
    with pytest.raises(RafkaError) as e:
        ctl.create_topic(w.image, "t", 1, 1, {"no.such.config": "1"}, "x", 0, 0)
    assert e.value.code == ErrorCode.INVALID_CONFIG
    w.commit(ctl.create_topic(w.image, "t", 2, 2, {"retention.ms": "1000"}, "tid", 0, 0))
    assert w.image.topics.by_name["t"].configs == {"retention.ms": "1000"}
    w.commit(ctl.create_partitions(w.image, "t", 4, 0, 0))
    assert len(w.image.topics.by_name["t"].partitions) == 4
    with pytest.raises(RafkaError):
        ctl.create_partitions(w.image, "t", 4, 0, 0)
    w.commit(ctl.alter_configs(w.image, "t", {"retention.ms": None, "cleanup.policy": "compact"}))
    assert w.image.topics.by_name["t"].configs == {"cleanup.policy": "compact"}
    w.commit(ctl.delete_topic(w.image, "t"))
    assert "t" not in w.image.topics.by_name


def test_preferred_leader_election_and_controlled_shutdown():
    w = World()
    st = w.brokers(1, 2, 3)
    w.commit(ctl.create_topic(w.image, "t", 3, 3, {}, "tid", 0, 0))
    # controlled shutdown of broker 1: leadership moves first, then it is fenced
    assert not w.shutdown_heartbeat(st, 1).should_shutdown
    assert all(w.part(p=p).leader != 1 for p in range(3))
    hb = w.shutdown_heartbeat(st, 1)
    assert hb.should_shutdown and w.image.cluster.brokers[1].fenced
    # broker 1 restarts (new incarnation), catches up, and preferred election gives it back
    r = w.commit(ctl.register_broker(w.image, 1, "i1-b", "h", 9001))
    st2 = ctl.ControllerState()
    w.commit(ctl.heartbeat(w.image, st2, 1, r.base_offset, w.image.offset, False, False, 0).decision)
    # broker 1 is not in the ISR yet: no preferred election for it
    assert not ctl.preferred_elections(w.image)
    reg = w.part(p=0)
    leader = reg.leader
    d, _ = ctl.alter_partition(w.image, leader, w.image.cluster.brokers[leader].epoch, "t", 0,
                               reg.leader_epoch, reg.partition_epoch, [1, 2, 3])
    w.commit(d)
    d = ctl.preferred_elections(w.image)
    assert [(c.partition, c.leader) for c in d.records] == [(0, 1)]
    w.commit(d)
    assert w.part(p=0).leader == 1


def test_producer_id_blocks():
    w = World()
    d, start = ctl.allocate_producer_ids(w.image, 1, 0)
    w.commit(d)
    d2, start2 = ctl.allocate_producer_ids(w.image, 1, 0)
    assert (start, start2) == (0, ctl.PRODUCER_ID_BLOCK_SIZE)
    # a second controller working from a stale image cannot hand out the same block
    assert w.sm.apply(Command("dup-block", 1, 0, tuple(d.records), tuple(d.guards))).error
    w.commit(d2)
    assert w.image.producer_ids.next_producer_id == 2 * ctl.PRODUCER_ID_BLOCK_SIZE


def test_deposed_controller_cannot_write():
    sm = ControllerStateMachine()
    assert sm.apply(Command("l1", 1, 0, (LeaderChange(1, 1),))).error is None
    assert sm.apply(Command("l2", 2, 0, (LeaderChange(2, 2),))).error is None
    d, _ = ctl.allocate_producer_ids(sm.image)
    stale = sm.apply(Command("old", 1, 0, tuple(d.records), tuple(d.guards)))
    assert stale.error.code == ErrorCode.NOT_CONTROLLER
    assert sm.apply(Command("l1b", 1, 0, (LeaderChange(1, 1),))).error.code == ErrorCode.NOT_CONTROLLER
    assert sm.apply(Command("new", 2, 0, tuple(d.records), tuple(d.guards))).error is None


def test_a_broker_in_controlled_shutdown_may_not_rejoin_the_isr():
    """KIP-841. Found in the compose cluster's rolling restart: leaders re-added the stopping
    broker at its next fetch, the heartbeat took it out again, and its controlled shutdown never
    reached the fence (it waited out controlled.shutdown.timeout.ms every time)."""
    w = World()
    st = w.brokers(1, 2, 3)
    w.commit(ctl.create_topic(w.image, "t", 1, 3, {}, "tid", 0, 0))
    assert not w.shutdown_heartbeat(st, 3).should_shutdown
    reg = w.part()
    assert 3 not in reg.isr and reg.leader != 3
    leader = reg.leader
    el = w.image.cluster.brokers[leader].epoch
    # the leader sees broker 3 fetching, caught up, and proposes it back: refused
    with pytest.raises(RafkaError) as e:
        ctl.alter_partition(w.image, leader, el, "t", 0, reg.leader_epoch, reg.partition_epoch,
                            [1, 2, 3], st.shutting_down)
    assert e.value.code == ErrorCode.INELIGIBLE_REPLICA
    # a change that does not add it is still taken (a shrink of another member)
    other = next(r for r in reg.isr if r != leader)
    d, _ = ctl.alter_partition(w.image, leader, el, "t", 0, reg.leader_epoch, reg.partition_epoch,
                               [leader], st.shutting_down)
    w.commit(d)
    # so the next heartbeat has nothing left to move: fenced, and told to stop
    hb = w.shutdown_heartbeat(st, 3)
    assert hb.should_shutdown and w.image.cluster.brokers[3].fenced
    # once it is back (a new incarnation, no shutdown wanted) it may join again
    r = w.commit(ctl.register_broker(w.image, 3, "i3-b", "h", 9003))
    w.commit(ctl.heartbeat(w.image, st, 3, r.base_offset, w.image.offset, False, False, 0).decision)
    assert 3 not in st.shutting_down
    reg = w.part()
    d, new = ctl.alter_partition(w.image, leader, el, "t", 0, reg.leader_epoch, reg.partition_epoch,
                                 [leader, other, 3], st.shutting_down)
    w.commit(d)
    assert set(w.part().isr) == {leader, other, 3}
