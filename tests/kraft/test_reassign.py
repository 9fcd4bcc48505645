"""Reassignment and decommission decisions (kraft/reassign.py) and their metadata fold."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.kraft import controller as ctl
from rafka.kraft import reassign
from rafka.kraft.reassign import ReassignItem
from rafka.metadata import (
    BrokerRegistrationChange,
    MetadataDelta,
    MetadataImage,
    Partition,
    PartitionChange,
    RegisterBroker,
    TopicPartition,
    image_to_records,
    record_from_dict,
    records_to_image,
)
from rafka.wire.errors import ErrorCode, RafkaError

from tests.kraft.test_controller import World
from tests.metadata.test_fold import BROKERS, TOPIC_IDS, fold
from tests.metadata.test_fold import records as base_records


def world(n: int = 4, rf: int = 3, partitions: int = 1, topic: str = "t") -> tuple[World, ctl.ControllerState]:
    w = World()
    st_ = w.brokers(*range(1, n + 1))
    # start 0, shift 0 over brokers [1..n]: partition 0 on (1, 2, 3)
    w.commit(ctl.create_topic(w.image, topic, partitions, rf, {}, f"id-{topic}", 0, 0))
    return w, st_


def snapshot_equal(image: MetadataImage) -> None:
    """The image survives snapshot records through msgpack: snapshot fold == delta fold."""
    snap = image_to_records(image)
    wire = msgpack.unpackb(msgpack.packb([r.to_dict() for r in snap]))
    assert records_to_image([record_from_dict(d) for d in wire], image.offset, image.epoch) == image


def isr_add(w: World, b: int, topic: str = "t", p: int = 0) -> None:
    reg = w.part(topic, p)
    leader = w.image.cluster.brokers[reg.leader]
    d, _ = ctl.alter_partition(w.image, reg.leader, leader.epoch, topic, p, reg.leader_epoch,
                               reg.partition_epoch, [*reg.isr, b])
    w.commit(d)


def test_reassign_adds_then_switches_when_in_sync_and_moves_the_leader():
    w, st_ = world()
    assert w.part().replicas == (1, 2, 3) and w.part().leader == 1
    before = w.part()
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (2, 3, 4))], 1000, st_))
    reg = w.part()
    assert reg.replicas == (2, 3, 4, 1) and reg.adding_replicas == (4,) and reg.removing_replicas == (1,)
    assert reg.throttle_bytes_per_s == 1000 and reg.leader == 1 and reg.isr == (2, 3, 1)
    assert reg.partition_epoch == before.partition_epoch + 1 and reg.leader_epoch == before.leader_epoch
    snapshot_equal(w.image)
    assert reassign.list_reassignments(w.image) == [("t", 0, reg)]
    assert not reassign.complete_reassignments(w.image, st_)  # 4 is not in sync yet
    isr_add(w, 4)
    d = reassign.complete_reassignments(w.image, st_)
    assert len(d.records) == 1
    w.commit(d)
    reg = w.part()
    assert reg.replicas == (2, 3, 4) and reg.isr == (2, 3, 4) and reg.leader == 2
    assert not reg.reassigning and reg.throttle_bytes_per_s == 0
    assert reg.leader_epoch == before.leader_epoch + 1  # the leader moved: epoch bumped
    snapshot_equal(w.image)
    assert reassign.replicas_of(w.image, 1) == []


def test_local_changes_new_replica_follows_removed_replica_deletes():
    w, st_ = world()
    img = w.image
    start = reassign.alter_reassignments(img, [ReassignItem("t", 0, (2, 3, 4))], 0, st_)
    delta = MetadataDelta(img)
    for i, r in enumerate(start.records):
        delta.replay(r, img.offset + 1 + i, 1)
    mid = delta.apply()
    assert TopicPartition("t", 0) in delta.topics.local_changes(4).followers
    assert not delta.topics.local_changes(1).deletes
    w.commit(start)
    isr_add(w, 4)
    img = w.image
    done = reassign.complete_reassignments(img, st_)
    delta = MetadataDelta(img)
    for i, r in enumerate(done.records):
        delta.replay(r, img.offset + 1 + i, 1)
    delta.apply()
    assert delta.topics.local_changes(1).deletes == {TopicPartition("t", 0)}
    assert TopicPartition("t", 0) in delta.topics.local_changes(2).leaders
    assert mid.topics.by_name["t"].partitions[0].adding_replicas == (4,)


def test_cancel_reverts_to_the_original_replicas():
    w, st_ = world()
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (2, 3, 4))], 500, st_))
    isr_add(w, 4)  # in sync but the switch has not happened yet
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, None)], 0, st_))
    reg = w.part()
    assert sorted(reg.replicas) == [1, 2, 3] and not reg.reassigning and reg.leader == 1
    assert 4 not in reg.isr and reg.throttle_bytes_per_s == 0
    with pytest.raises(RafkaError) as e:
        reassign.alter_reassignments(w.image, [ReassignItem("t", 0, None)], 0, st_)
    assert e.value.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_a_new_plan_replaces_the_one_in_progress():
    w, st_ = world(n=5)
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (2, 3, 4))], 0, st_))
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (2, 3, 5))], 0, st_))
    reg = w.part()
    assert reg.adding_replicas == (5,) and reg.removing_replicas == (1,) and 4 not in reg.replicas


def test_same_replicas_is_a_no_op_and_a_reorder_switches_at_once():
    w, st_ = world()
    assert not reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (1, 2, 3))], 0, st_)
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (3, 2, 1))], 0, st_))
    reg = w.part()
    assert reg.replicas == (3, 2, 1) and not reg.reassigning and reg.leader == 1


@pytest.mark.parametrize("items, code, words", [
    ([ReassignItem("t", 0, (2, 3, 9))], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "broker 9 is not registered"),
    ([ReassignItem("t", 0, (2, 2, 4))], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "listed twice"),
    ([ReassignItem("t", 0, (2, 4))], ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor 3"),
    ([ReassignItem("t", 0, ())], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "empty"),
    ([ReassignItem("nosuch", 0, (1, 2, 3))], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "nosuch"),
    ([ReassignItem("t", 7, (1, 2, 3))], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "t/7"),
    ([ReassignItem("t", 0, (2, 3, 4)), ReassignItem("t", 0, (1, 3, 4))],
     ErrorCode.INVALID_REPLICA_ASSIGNMENT, "twice"),
    # one good entry does not let a bad one through: all or nothing
    ([ReassignItem("t", 1, (2, 3, 4)), ReassignItem("t", 0, (2, 3, 9))],
     ErrorCode.INVALID_REPLICA_ASSIGNMENT, "broker 9"),
], ids=["unknown-broker", "duplicate", "rf-mismatch", "empty", "unknown-topic", "unknown-partition",
        "twice", "all-or-nothing"])
def test_bad_plan_is_a_named_error(items, code, words):
    w, st_ = world(partitions=2)
    with pytest.raises(RafkaError) as e:
        reassign.alter_reassignments(w.image, items, 0, st_)
    assert e.value.code == code and words in e.value.message


def test_fenced_target_broker_is_refused():
    w, st_ = world()
    w.commit(ctl.fence_broker(w.image, 4, st_))
    with pytest.raises(RafkaError) as e:
        reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (2, 3, 4))], 0, st_)
    assert e.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "fenced" in e.value.message


def test_decommission_moves_every_replica_keeps_rf_spreads_and_stops_placement():
    w, st_ = world(n=5, partitions=5)
    held = reassign.replicas_of(w.image, 1)
    assert held
    d, moved = reassign.decommission_broker(w.image, 1, 0, st_)
    w.commit(d)
    assert w.image.cluster.brokers[1].decommissioning
    assert sorted((it.topic, it.partition) for it in moved) == held
    for it in moved:
        assert 1 not in it.replicas and len(set(it.replicas)) == 3
    # spread: the replicas that moved went to more than one broker
    assert len({b for it in moved for b in it.replicas if b not in w.part("t", it.partition).original_replicas}) > 1
    # new topics avoid it
    w.commit(ctl.create_topic(w.image, "new", 8, 2, {}, "id-new", 0, 0))
    assert all(1 not in r.replicas for r in w.image.topics.by_name["new"].partitions.values())
    # in sync -> switched -> the broker holds nothing
    for it in moved:
        for b in w.part("t", it.partition).adding_replicas:
            isr_add(w, b, "t", it.partition)
    w.commit(reassign.complete_reassignments(w.image, st_))
    assert reassign.replicas_of(w.image, 1) == []
    snapshot_equal(w.image)
    # still registered (and decommissioning) until unregistered; a running broker is refused
    with pytest.raises(RafkaError) as e:
        reassign.unregister_broker(w.image, 1)
    assert "stop it first" in e.value.message
    w.commit(ctl.fence_broker(w.image, 1, st_))
    w.commit(reassign.unregister_broker(w.image, 1))
    assert 1 not in w.image.cluster.brokers


def test_decommission_refused_when_no_broker_can_take_the_replicas():
    w, st_ = world(n=3)
    with pytest.raises(RafkaError) as e:
        reassign.decommission_broker(w.image, 1, 0, st_)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert not w.image.cluster.brokers[1].decommissioning
    with pytest.raises(RafkaError) as e:
        reassign.decommission_broker(w.image, 42, 0, st_)
    assert e.value.code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_unregister_refused_while_holding_replicas():
    w, st_ = world()
    w.commit(ctl.fence_broker(w.image, 1, st_))
    with pytest.raises(RafkaError) as e:
        reassign.unregister_broker(w.image, 1)
    assert "still holds 1 replicas" in e.value.message


def test_decommission_outlives_a_re_registration_and_recommission_ends_it():
    w, st_ = world(n=5)
    d, _ = reassign.decommission_broker(w.image, 1, 0, st_)
    w.commit(d)
    w.commit(ctl.register_broker(w.image, 1, "new-incarnation", "h", 9001))
    assert w.image.cluster.brokers[1].decommissioning
    w.commit(reassign.recommission_broker(w.image, 1))
    assert not w.image.cluster.brokers[1].decommissioning
    assert 1 in ctl.placeable_brokers(w.image) or w.image.cluster.brokers[1].fenced


# -- the fold: batch splits and snapshots, with reassignment records in the mix -------------


@st.composite
def reassign_records(draw):
    kind = draw(st.integers(0, 3))
    tid = draw(st.sampled_from(TOPIC_IDS))
    p = draw(st.integers(0, 2))
    ids = st.lists(st.sampled_from(BROKERS), max_size=3, unique=True).map(tuple)
    if kind == 0:
        replicas = draw(st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True))
        return Partition(tid, p, tuple(replicas), tuple(replicas[:1]), replicas[0],
                         adding_replicas=tuple(draw(ids)), removing_replicas=tuple(draw(ids)),
                         throttle_bytes_per_s=draw(st.integers(0, 5000)))
    if kind == 1:
        return PartitionChange(tid, p, adding_replicas=draw(st.none() | ids),
                               removing_replicas=draw(st.none() | ids),
                               throttle_bytes_per_s=draw(st.none() | st.integers(0, 5000)))
    if kind == 2:
        return BrokerRegistrationChange(draw(st.sampled_from(BROKERS)),
                                        decommissioning=draw(st.none() | st.booleans()))
    return RegisterBroker(draw(st.sampled_from(BROKERS)), "again", "h", 1,
                          decommissioning=draw(st.booleans()))


mixed = st.lists(st.one_of(base_records(), reassign_records()), max_size=50)


@settings(max_examples=200, deadline=None)
@given(mixed, st.lists(st.integers(0, 50), max_size=8))
def test_reassignment_fold_is_split_invariant_and_snapshots_equal(recs, cuts):
    image = fold(recs, cuts)
    assert image == fold(recs, [])
    snapshot_equal(image)
    for t in image.topics.by_id.values():
        for reg in t.partitions.values():  # the fold keeps the fields within the replicas
            assert set(reg.adding_replicas) | set(reg.removing_replicas) <= set(reg.replicas)


def test_old_records_without_the_new_fields_still_read():
    d = Partition("t", 0, (1, 2), (1, 2), 1).to_dict()
    for k in ("adding_replicas", "removing_replicas", "throttle_bytes_per_s"):
        d.pop(k)
    r = record_from_dict(d)
    assert r.adding_replicas == () and r.throttle_bytes_per_s == 0
    d = RegisterBroker(1, "i", "h", 1).to_dict()
    d.pop("decommissioning")
    assert record_from_dict(d).decommissioning is False


def test_growing_a_topic_while_its_partition_0_moves_keeps_the_replication_factor():
    w, st_ = world(n=5)
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (2, 3, 4))], 0, st_))
    assert len(w.part().replicas) == 4  # target + the one being removed
    w.commit(ctl.create_partitions(w.image, "t", 3, 0, 0))
    assert [len(w.part(p=p).replicas) for p in (1, 2)] == [3, 3]


def test_unclean_election_never_picks_a_replica_still_being_added():
    w, st_ = world(n=4)
    w.commit(ctl.alter_configs(w.image, "t", {"unclean.leader.election.enable": "true"}))
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (4, 2, 3))], 0, st_))
    assert w.part().replicas[0] == 4 and w.part().adding_replicas == (4,)
    for b in (1, 2, 3):  # every in-sync replica dies
        w.commit(ctl.fence_broker(w.image, b, st_))
    assert w.part().leader == -1  # 4 is live but has not caught up: no leader rather than data loss


def test_removing_a_replica_bumps_the_leader_epoch_even_when_the_leader_stays():
    # A fetch the removed replica sent before it deleted its log is still long-polling at the
    # leader; with the same leader epoch, that broker added back later had the stale fetch's
    # offset counted for its new, empty log and joined the ISR at once (measured: a throttled
    # 8 MB catch-up "done" in 0.3 s). A new leader epoch fences the stale fetch.
    w, st_ = world(n=4)
    before = w.part()
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (1, 2, 4))], 0, st_))
    assert w.part().leader_epoch == before.leader_epoch  # adding only: no bump
    isr_add(w, 4)
    w.commit(reassign.complete_reassignments(w.image, st_))
    assert w.part().replicas == (1, 2, 4) and w.part().leader == 1
    assert w.part().leader_epoch == before.leader_epoch + 1
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, (1, 2, 3))], 0, st_))
    w.commit(reassign.alter_reassignments(w.image, [ReassignItem("t", 0, None)], 0, st_))  # cancel
    assert w.part().replicas == (1, 2, 4) and w.part().leader_epoch == before.leader_epoch + 2
