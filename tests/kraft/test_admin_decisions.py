"""The controller's admin modules: their pure ``decide_*`` functions (no quorum, no service),
their handlers against a minimal :class:`~rafka.kraft.admin_context.AdminContext` (an
in-memory quorum, no ``ControllerService``), and the service's handler table as the merge of
the modules' tables."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
import trio
import trio.testing
from rafka.kraft import (
    acl_admin,
    quota_admin,
    reassign_admin,
    scram_admin,
    topic_admin,
    voter_admin,
)
from rafka.kraft import controller as ctl
from rafka.kraft.admin_context import AdminContext, decide_each
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.quorum import Command, MetadataQuorum, ProposeResult
from rafka.kraft.service import ADMIN_MODULES, ControllerService
from rafka.kraft.voters import VoterEntry, VoterRegistry
from rafka.metadata import LeaderChange, MetadataRecord, NoOp, RemoveTopic
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey

from tests.kraft.test_controller import World


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


def world(brokers: int = 3) -> tuple[World, ctl.ControllerState]:
    w = World()
    return w, w.brokers(*range(1, brokers + 1))


def code_of(exc_info: pytest.ExceptionInfo[RafkaError]) -> ErrorCode:
    return exc_info.value.code


# -- admin_context ---------------------------------------------------------------------


def test_decide_each_keeps_request_order_and_gathers_every_record():
    def one(n: int) -> tuple[dict[str, Any], list[MetadataRecord]]:
        return {"n": n}, [NoOp(error_code=0, message=str(n))] * n

    results, d = decide_each([2, 0, 1], one)
    assert results == [{"n": 2}, {"n": 0}, {"n": 1}]
    assert [r.message for r in d.records] == ["2", "2", "1"]  # type: ignore[union-attr]
    assert not decide_each([], one)[1]  # nothing to propose


# -- topic_admin -----------------------------------------------------------------------


def test_decide_create_topic_answers_from_its_own_records_and_applies_defaults():
    w, _ = world()
    t = {"name": "t", "num_partitions": -1, "replication_factor": -1, "configs": {"cleanup.policy": "compact"}}
    d, answer = topic_admin.decide_create_topic(w.image, t, "tid", 0, 0, default_partitions=2,
                                                default_replication_factor=3)
    assert answer == {"name": "t", "error": 0, "message": None, "topic_id": "tid",
                      "num_partitions": 2, "replication_factor": 3}
    w.commit(d)
    assert topic_admin.created_answer(w.image, "t") == answer  # a replay answers the same
    with pytest.raises(RafkaError) as e:
        topic_admin.decide_create_topic(w.image, t, "tid2", 0, 0)
    assert code_of(e) == ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(RafkaError) as e:
        topic_admin.decide_create_topic(w.image, {**t, "name": "bad name"}, "x", 0, 0)
    assert code_of(e) == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_created_answer_of_a_topic_deleted_since():
    w, _ = world()
    assert topic_admin.created_answer(w.image, "gone")["topic_id"] is None


def test_decide_delete_partitions_and_configs():
    w, _ = world()
    w.commit(topic_admin.decide_create_topic(
        w.image, {"name": "t", "num_partitions": 1, "replication_factor": 2}, "tid", 0, 0)[0])
    d, answer = topic_admin.decide_create_partitions(w.image, {"name": "t", "count": 3}, 0, 0)
    assert answer == topic_admin.ok("t") and len(d.records) == 2
    w.commit(d)
    with pytest.raises(RafkaError) as e:
        topic_admin.decide_create_partitions(w.image, {"name": "t", "count": 3}, 0, 0)
    assert code_of(e) == ErrorCode.INVALID_PARTITIONS

    d, _ = topic_admin.decide_alter_configs(w.image, {"name": "t", "configs": {"retention.ms": "10"}})
    w.commit(d)
    d, answer = topic_admin.decide_alter_configs(w.image, {"name": "t", "configs": {"retention.ms": "10"}})
    assert not d and answer == topic_admin.ok("t")  # already so: nothing to propose

    d, answer = topic_admin.decide_delete_topic(w.image, "t")
    assert d.records == [RemoveTopic("tid")] and answer == topic_admin.ok("t")
    with pytest.raises(RafkaError) as e:
        topic_admin.decide_delete_topic(w.image, "nope")
    assert code_of(e) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_decide_describe_configs_answers_each_topic():
    w, _ = world()
    w.commit(topic_admin.decide_create_topic(
        w.image, {"name": "t", "num_partitions": 1, "replication_factor": 1,
                  "configs": {"retention.ms": "5"}}, "tid", 0, 0)[0])
    answer = topic_admin.decide_describe_configs(w.image, {"topics": ["t", "nope"]})
    ok_, missing = answer["topics"]
    assert ok_ == {"name": "t", "error": 0, "message": None, "configs": {"retention.ms": "5"}}
    assert missing["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and missing["configs"] == {}


def test_decide_elect_leaders_and_its_answer():
    w, st = world()
    w.commit(topic_admin.decide_create_topic(
        w.image, {"name": "t", "num_partitions": 1, "replication_factor": 2}, "tid", 0, 0)[0])
    assert w.part().replicas == (1, 2)
    for b in (1, 2):  # both replicas fenced: leaderless, broker 2 the last in the ISR
        w.commit(ctl.fence_broker(w.image, b, st))
    assert w.part().leader == -1 and w.part().isr == (2,)
    body = {"election_type": 0, "topics": [{"name": "t", "partitions": [0, 7]}]}
    d, parts = topic_admin.decide_elect_leaders(w.image, body, st)
    assert parts == [("t", 0), ("t", 7)] and not d
    assert topic_admin.elect_leaders_answer(w.image, parts) == {"topics": [{"name": "t", "partitions": [
        {"partition": 0, "error": int(ErrorCode.LEADER_NOT_AVAILABLE), "message": "no eligible leader"},
        {"partition": 7, "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "message": None}]}]}
    # broker 1 is back, out of sync: only an unclean election (type 1) gives it the lead
    hb = ctl.heartbeat(w.image, st, 1, w.image.cluster.brokers[1].epoch, w.image.offset, False, False, 0)
    w.commit(hb.decision)
    assert w.part().leader == -1
    d, parts = topic_admin.decide_elect_leaders(w.image, {"election_type": 1}, st)
    assert parts is None and d
    w.commit(d)
    assert topic_admin.elect_leaders_answer(w.image, None) == {"topics": [{"name": "t", "partitions": [
        {"partition": 0, "error": 0, "message": None, "leader": 1}]}]}


# -- reassign_admin --------------------------------------------------------------------


def test_reassign_decisions_from_the_body():
    w, st = world(4)
    w.commit(topic_admin.decide_create_topic(
        w.image, {"name": "t", "num_partitions": 1, "replication_factor": 3}, "tid", 0, 0)[0])
    body = {"partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}],
            "throttle_bytes_per_s": 1000}
    d = reassign_admin.decide_alter_partition_reassignments(w.image, body, st)
    w.commit(d)
    assert w.part().adding_replicas == (4,) and w.part().throttle_bytes_per_s == 1000
    cancel = {"partitions": [{"topic": "t", "partition": 0, "replicas": None}]}
    w.commit(reassign_admin.decide_alter_partition_reassignments(w.image, cancel, st))
    assert not w.part().reassigning

    with pytest.raises(RafkaError) as e:  # still holds a replica
        reassign_admin.decide_unregister_broker(w.image, {"broker_id": 1})
    assert code_of(e) == ErrorCode.INVALID_REQUEST
    d, answer = reassign_admin.decide_decommission_broker(w.image, {"broker_id": 1}, st)
    target = [4 if r == 1 else r for r in w.part().replicas]  # the free broker, same position
    assert answer["error"] == 0 and answer["moved"] == [
        {"topic": "t", "partition": 0, "replicas": target}]
    w.commit(d)
    assert w.image.cluster.brokers[1].decommissioning
    d, answer = reassign_admin.decide_decommission_broker(w.image, {"broker_id": 1, "cancel": True}, st)
    assert answer["moved"] == [] and d
    w.commit(d)
    assert not w.image.cluster.brokers[1].decommissioning
    with pytest.raises(RafkaError) as e:
        reassign_admin.decide_decommission_broker(w.image, {"broker_id": 9}, st)
    assert code_of(e) == ErrorCode.BROKER_ID_NOT_REGISTERED


# -- voter_admin -----------------------------------------------------------------------


MEMBERS: dict[str, int | None] = {"h:1": 1, "h:2": 2, "h:3": 3}


def test_decide_add_raft_voter():
    reg = VoterRegistry({1: VoterEntry("h:1", "d1")})
    assert voter_admin.decide_add_raft_voter({"voter_id": 1, "address": "h:1"}, MEMBERS, reg) is None
    change = voter_admin.decide_add_raft_voter({"voter_id": 4, "address": "h:4"}, MEMBERS, reg)
    assert change == voter_admin.VoterChange(4, "h:4", True)
    # a registry entry from an earlier, interrupted attempt is not written again
    reg4 = VoterRegistry({4: VoterEntry("h:4", "")})
    assert not voter_admin.decide_add_raft_voter({"voter_id": 4, "address": "h:4"}, MEMBERS, reg4).write_registry
    # ... unless it names another address, or a directory (an old incarnation)
    assert voter_admin.decide_add_raft_voter(
        {"voter_id": 4, "address": "h:4"}, MEMBERS, VoterRegistry({4: VoterEntry("h:4", "old")})).write_registry
    for body, code in (({"voter_id": 4, "address": "h:1"}, ErrorCode.DUPLICATE_VOTER),
                       ({"voter_id": 2, "address": "h:9"}, ErrorCode.DUPLICATE_VOTER),
                       ({"voter_id": 4, "address": "h4"}, ErrorCode.INVALID_REQUEST),
                       ({"voter_id": 4, "address": "h:70000"}, ErrorCode.INVALID_REQUEST)):
        with pytest.raises(RafkaError) as e:
            voter_admin.decide_add_raft_voter(body, MEMBERS, reg)
        assert code_of(e) == code, body


def test_decide_remove_raft_voter():
    reg = VoterRegistry({2: VoterEntry("h:2", "d2"), 5: VoterEntry("h:5", "")})
    assert voter_admin.decide_remove_raft_voter({"voter_id": 2}, MEMBERS, reg, 1) == \
        voter_admin.VoterChange(2, "h:2", True)
    # registered but not a member (an add that failed halfway): only the registry entry goes
    assert voter_admin.decide_remove_raft_voter({"voter_id": 5}, MEMBERS, reg, 1) == \
        voter_admin.VoterChange(5, None, True)
    for body, members, code in (({"voter_id": 9}, MEMBERS, ErrorCode.VOTER_NOT_FOUND),
                                ({"voter_id": 1}, MEMBERS, ErrorCode.INVALID_REQUEST),
                                ({"voter_id": 2}, {"h:2": 2}, ErrorCode.INVALID_REQUEST)):
        with pytest.raises(RafkaError) as e:
            voter_admin.decide_remove_raft_voter(body, members, reg, 1)
        assert code_of(e) == code, body


# -- handlers against a minimal context ----------------------------------------------------


class Context:
    """Just :class:`AdminContext`: an in-memory quorum this node leads, a fixed placement."""

    node_id = 1
    voters = [(1, ("h", 1), ("h", 2))]

    def __init__(self, brokers: int = 3) -> None:
        self.cluster = MemoryQuorumCluster([1])
        self.epoch = self.cluster.elect(1)
        self.ids = itertools.count()
        self._commit(ctl.Decision([LeaderChange(1, self.epoch)]))
        self.state = ctl.ControllerState()
        self.doubt: set[str] = set()
        self.settings = {"num.partitions": 2}
        for b in range(1, brokers + 1):
            self._commit(ctl.register_broker(self.image, b, f"i{b}", "h", 9000 + b))
            hb = ctl.heartbeat(self.image, self.state, b, self.image.cluster.brokers[b].epoch,
                               self.image.offset, False, False, 0)
            self._commit(hb.decision)

    @property
    def image(self):
        return self.cluster.state_machine.image

    def _commit(self, d: ctl.Decision) -> None:
        a = self.cluster.state_machine.apply(
            Command(f"setup-{next(self.ids)}", self.epoch, 0, tuple(d.records), tuple(d.guards)))
        assert a.error is None
        self.cluster._append(a.entries)  # the log the handlers read refusals from

    def require_quorum(self) -> MetadataQuorum:
        return self.cluster.voters[1]

    def active_state(self) -> ctl.ControllerState:
        return self.state

    def in_doubt(self, request_id: str) -> bool:
        return request_id in self.doubt

    async def propose(self, decision: ctl.Decision, request_id: str | None = None) -> ProposeResult:
        cmd = Command(request_id or f"c-{next(self.ids)}", self.epoch, 0,
                      tuple(decision.records), tuple(decision.guards))
        return await self.require_quorum().propose(cmd)

    def placement(self) -> tuple[int, int]:
        return 0, 0

    def setting(self, name: str, default: Any) -> Any:
        return type(default)(self.settings.get(name, default))


async def test_topic_handlers_against_the_narrow_context():
    ctx = Context()
    _typed: AdminContext = ctx  # the fake is all a handler needs (checked by mypy)
    create = {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": 2},
                         {"name": "bad name", "num_partitions": 1, "replication_factor": 1}],
              "request_id": "r1"}
    r = await topic_admin.create_topics(ctx, create)
    good, bad = r["topics"]
    assert good["num_partitions"] == 2 and bad["error"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert r["metadata_offset"] == ctx.image.offset
    # the retry of the same request answers the same, and writes nothing
    proposals = ctx.cluster.proposals
    again = await topic_admin.create_topics(ctx, create)
    assert again["topics"] == r["topics"] and ctx.cluster.proposals == proposals
    # validate_only decides and writes nothing
    r = await topic_admin.create_topics(ctx, {"topics": [{"name": "u", "num_partitions": 1,
                                                          "replication_factor": 1}],
                                              "validate_only": True})
    assert r["topics"][0]["error"] == 0 and "u" not in ctx.image.topics.by_name
    assert ctx.cluster.proposals == proposals
    r = await topic_admin.delete_topics(ctx, {"topics": ["t"]})
    assert r["topics"] == [topic_admin.ok("t")] and "t" not in ctx.image.topics.by_name


async def test_an_in_doubt_request_is_not_refused():
    ctx = Context()
    ctx.doubt.add("delete:t:r2")
    r = await topic_admin.delete_topics(ctx, {"topics": ["t"], "request_id": "r2"})
    assert r["topics"][0]["error"] == ErrorCode.REQUEST_TIMED_OUT


async def test_item_handlers_against_the_narrow_context():
    ctx = Context()
    acl = {"principal": "User:a", "resource_type": "topic", "pattern_type": "literal",
           "resource_name": "t", "operation": "read", "permission": "allow", "host": "*"}
    r = await acl_admin.create_acls(ctx, {"acls": [acl, acl]})
    assert [x["error"] for x in r["results"]] == [0, 0] and len(ctx.image.acls.entries) == 1
    assert r["metadata_offset"] == ctx.image.offset
    quota = {"user": "User:a", "ops": [{"key": "producer_byte_rate", "value": 100.0}]}
    offset = ctx.image.offset
    r = await quota_admin.alter_client_quotas(ctx, {"entries": [quota], "validate_only": True})
    assert r == {"error": 0, "results": [{"error": 0, "message": None}], "metadata_offset": offset}
    r = await quota_admin.alter_client_quotas(ctx, {"entries": [quota]})
    assert r["metadata_offset"] > offset
    r = await scram_admin.alter_user_scram_credentials(
        ctx, {"deletions": [{"user": "a", "mechanism": "SCRAM-SHA-256"}]})
    assert r["results"][0]["error"] == ErrorCode.RESOURCE_NOT_FOUND
    r = await acl_admin.delete_acls(ctx, {"filters": [{"principal": "User:a"}]})
    assert r["results"][0]["deleted"] == [acl] and not ctx.image.acls.entries


# -- the service's table -------------------------------------------------------------------


def test_service_handlers_are_its_own_plus_every_admin_module_table():
    own = {ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.METADATA_FETCH,
           ApiKey.ALTER_PARTITION, ApiKey.INIT_PRODUCER_ID, ApiKey.DESCRIBE_QUORUM,
           ApiKey.CONSUMER_GROUP_HEARTBEAT}
    modules = [set(t) for t in ADMIN_MODULES]
    assert sum(len(m) for m in modules) == len(set().union(*modules))  # no key in two modules
    assert not own & set().union(*modules)
    svc = ControllerService(1, [(1, "h:1", "h:2")], None, "/nonexistent", None,
                            quorum=MemoryQuorumCluster([1]).voters[1], rng=random.Random(1))
    assert set(svc.handlers) == own | set().union(*modules)


async def test_admin_handler_through_the_service_needs_the_active_controller(autojump_clock):
    cluster = MemoryQuorumCluster([1])
    svc = ControllerService(1, [(1, "h:1", "h:2")], None, "/nonexistent", None,
                            quorum=cluster.voters[1], rng=random.Random(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        r = await svc.handlers[ApiKey.DELETE_ACLS]({"filters": []})
        assert r["error"] == ErrorCode.NOT_CONTROLLER
        cluster.elect(1)
        while not svc.is_active:
            await trio.sleep(0.01)
        r = await svc.handlers[ApiKey.DELETE_ACLS]({"filters": []})
        assert r == {"error": 0, "results": [], "metadata_offset": cluster.state_machine.image.offset}
        nursery.cancel_scope.cancel()

