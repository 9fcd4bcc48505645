"""Coordinator transcripts (join, leave, timeout, revoke-before-assign, stale epochs) and a
randomised simulation of clients that checks no partition is ever owned by two of them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.kraft.groups.coordinator import (
    GroupConfig,
    HeartbeatRequest,
    check_invariants,
    heartbeat,
    refresh_topics,
    remove_members,
)
from rafka.metadata.groups import GroupDeleted, GroupsDelta, GroupsImage, groups_to_records
from rafka.wire.errors import ErrorCode


class Sim:
    """The controller side: an image of groups and the partition counts of topics."""

    def __init__(self, counts=None):
        self.image = GroupsImage.EMPTY
        self.counts = dict(counts or {"t": 6})
        self.next_id = 0
        self.log = []

    def fold(self, records):
        d = GroupsDelta(self.image)
        for r in records:
            d.replay(r)
        self.image = d.apply()
        self.log.extend(records)
        g = self.image.get("g")
        if g is not None:
            check_invariants(g)

    def hb(self, member_id="", epoch=0, subs=("t",), owned=None, **kw):
        self.next_id += 1
        req = HeartbeatRequest(
            "g", member_id, epoch, subscribed_topics=subs, owned_partitions=owned, **kw
        )
        d = heartbeat(
            self.image.get("g"),
            req,
            partition_count=lambda t: self.counts.get(t, 0),
            new_member_id=f"m{self.next_id}",
            config=GroupConfig(heartbeat_interval_ms=1000),
        )
        self.fold(d.records)
        return d.response

    @property
    def group(self):
        return self.image.get("g")


def tps(resp):
    return tuple(sorted((a["name"], p) for a in resp["assignment"] or () for p in a["partitions"]))


class Client:
    """A well-behaved member: adds new partitions at once, revokes when told and acks."""

    def __init__(self, sim, subs=("t",)):
        self.sim, self.subs = sim, subs
        r = sim.hb(subs=subs)
        assert r["error"] == 0, r
        self.id, self.epoch, self.owned = r["member_id"], r["member_epoch"], tps(r)

    def beat(self):
        r = self.sim.hb(self.id, self.epoch, subs=None, owned=self.owned)
        assert r["error"] == 0, r
        self.epoch, self.owned = r["member_epoch"], tps(r)
        return r


def settle(clients, rounds=10):
    for _ in range(rounds):
        for c in clients:
            c.beat()


def test_three_members_get_two_each_and_converge():
    sim = Sim()
    cs = [Client(sim) for _ in range(3)]
    settle(cs)
    assert sorted(len(c.owned) for c in cs) == [2, 2, 2]
    g = sim.group
    assert g.state == "Stable" and g.group_epoch == 3
    assert all(c.epoch == g.assignment_epoch for c in cs)
    # a stable group's heartbeats write nothing
    n = len(sim.log)
    settle(cs, 2)
    assert len(sim.log) == n


def test_revoke_before_assign():
    sim = Sim()
    a = Client(sim)
    assert len(a.owned) == 6
    b = Client(sim)
    assert b.owned == ()  # a still holds everything
    g = sim.group
    assert g.members[b.id].target and not g.members[b.id].assigned
    # a heartbeats: three partitions move to pending revocation, its epoch stays
    r = sim.hb(a.id, a.epoch, subs=None, owned=a.owned)
    assert len(tps(r)) == 3 and r["member_epoch"] == a.epoch
    assert len(sim.group.members[a.id].pending_revocation) == 3
    # b still gets nothing while a has not acked
    b.beat()
    assert b.owned == ()
    # a acks by reporting owned without the revoked partitions -> advances its epoch
    a.owned = tps(r)
    a.beat()
    assert a.epoch == sim.group.assignment_epoch
    b.beat()
    assert len(b.owned) == 3 and not set(b.owned) & set(a.owned)


def test_leave_and_last_member_deletes_group():
    sim = Sim()
    a, b = Client(sim), Client(sim)
    settle([a, b])
    r = sim.hb(b.id, -1, subs=None)
    assert r["error"] == 0 and r["member_epoch"] == -1
    assert set(sim.group.members) == {a.id}
    a.beat()
    assert len(a.owned) == 6
    sim.hb(a.id, -1, subs=None)
    assert sim.group is None and isinstance(sim.log[-1], GroupDeleted)
    # leaving twice is harmless
    assert sim.hb(a.id, -1, subs=None)["error"] == 0


def test_session_timeout_frees_partitions():
    sim = Sim()
    a, b = Client(sim), Client(sim)
    settle([a, b])
    recs = remove_members(sim.group, [a.id], partition_count=lambda t: sim.counts.get(t, 0))
    sim.fold(recs)
    b.beat()
    assert len(b.owned) == 6
    r = sim.hb(a.id, a.epoch, subs=None, owned=a.owned)
    assert r["error"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_stale_epoch_is_fenced_but_previous_epoch_tolerated():
    sim = Sim()
    a = Client(sim)
    b = Client(sim)
    settle([a, b])
    g = sim.group
    ma = g.members[a.id]
    # the response that advanced a was "lost": previous epoch with owned ⊆ assigned is fine
    r = sim.hb(a.id, ma.previous_member_epoch, subs=None, owned=ma.assigned)
    assert r["error"] == 0 and r["member_epoch"] == ma.member_epoch
    # previous epoch while claiming a partition it does not hold: fenced
    r = sim.hb(
        a.id, ma.previous_member_epoch, subs=None, owned=(*ma.assigned, *g.members[b.id].assigned)
    )
    assert r["error"] == ErrorCode.FENCED_MEMBER_EPOCH
    r = sim.hb(a.id, ma.member_epoch + 5, subs=None, owned=())
    assert r["error"] == ErrorCode.FENCED_MEMBER_EPOCH
    # fenced member rejoins with epoch 0 under the same id
    r = sim.hb(a.id, 0, subs=("t",))
    assert r["error"] == 0 and r["member_id"] == a.id


def test_subscription_change_and_topic_growth_bump_epoch():
    sim = Sim({"t": 2, "u": 2})
    a = Client(sim)
    e = sim.group.group_epoch
    r = sim.hb(a.id, a.epoch, subs=("t", "u"), owned=a.owned)
    assert sim.group.group_epoch == e + 1 and len(tps(r)) == 4
    sim.counts["u"] = 4
    recs = refresh_topics(sim.group, partition_count=lambda t: sim.counts.get(t, 0))
    sim.fold(recs)
    assert sim.group.group_epoch == e + 2
    a.epoch = r["member_epoch"]
    a.owned = tps(r)
    a.beat()
    assert len(a.owned) == 6


def test_join_validation():
    sim = Sim()
    assert sim.hb(subs=())["error"] == ErrorCode.INVALID_REQUEST
    assert sim.hb(session_timeout_ms=10)["error"] == ErrorCode.INVALID_SESSION_TIMEOUT
    assert sim.hb("nobody", 3, subs=None)["error"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_snapshot_round_trip_of_a_live_group():
    sim = Sim({"t": 5, "u": 3})
    cs = [Client(sim, ("t",)), Client(sim, ("t", "u")), Client(sim, ("u",))]
    cs[0].beat()
    d = GroupsDelta(GroupsImage.EMPTY)
    for r in groups_to_records(sim.image):
        d.replay(r)
    assert d.apply() == sim.image
    # and from the wire form
    from rafka.metadata.groups import GROUP_RECORD_TYPES

    types = {c.record_type: c for c in GROUP_RECORD_TYPES}
    d = GroupsDelta(GroupsImage.EMPTY)
    for r in sim.log:
        d.replay(types[r.to_dict()["type"]].from_dict(r.to_dict()))
    assert d.apply() == sim.image


# --------------------------------------------------------------------------- simulation

ops = st.lists(
    st.tuples(
        st.sampled_from(["join", "beat", "ack", "leave", "expire", "grow", "resub"]),
        st.integers(0, 7),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_random_clients_never_share_a_partition_and_converge(steps):
    sim = Sim({"t": 6, "u": 3})
    clients: dict[str, dict] = {}  # id -> {epoch, owned, assignment, subs}

    def apply_response(c, r):
        c["epoch"] = r["member_epoch"]
        c["assignment"] = set(tps(r))
        c["owned"] |= c[
            "assignment"
        ]  # new partitions are taken at once; revocations wait for "ack"

    def check_exclusive():
        seen = {}
        for cid, c in clients.items():
            for tp in c["owned"]:
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {cid}"
                seen[tp] = cid

    for op, k in steps:
        ids = sorted(clients)
        c_id = ids[k % len(ids)] if ids else None
        if op == "join" or c_id is None:
            subs = ("t",) if k % 3 else ("t", "u")
            r = sim.hb(subs=subs)
            clients[r["member_id"]] = {
                "epoch": 0,
                "owned": set(),
                "assignment": set(),
                "subs": subs,
            }
            apply_response(clients[r["member_id"]], r)
        elif op in ("beat", "ack", "resub"):
            c = clients[c_id]
            if op == "ack":
                c["owned"] &= c["assignment"]
            subs = None
            if op == "resub":
                c["subs"] = ("u",) if c["subs"] != ("u",) else ("t", "u")
                subs = c["subs"]
            r = sim.hb(c_id, c["epoch"], subs=subs, owned=tuple(sorted(c["owned"])))
            assert r["error"] == 0, r
            apply_response(c, r)
        elif op == "leave":
            clients.pop(c_id)  # a leaving client has released everything first
            sim.hb(c_id, -1, subs=None)
        elif op == "expire":
            clients.pop(c_id)  # a dead process owns nothing any more
            sim.fold(
                remove_members(sim.group, [c_id], partition_count=lambda t: sim.counts.get(t, 0))
            )
        elif op == "grow":
            sim.counts["u"] = min(sim.counts["u"] + 1, 8)
            if sim.group is not None:
                sim.fold(refresh_topics(sim.group, partition_count=lambda t: sim.counts.get(t, 0)))
        check_exclusive()

    # liveness: well-behaved heartbeats converge every member to its target
    for _ in range(6):
        for cid in sorted(clients):
            c = clients[cid]
            c["owned"] &= c["assignment"]
            r = sim.hb(cid, c["epoch"], subs=None, owned=tuple(sorted(c["owned"])))
            assert r["error"] == 0
            apply_response(c, r)
            check_exclusive()
    g = sim.group
    if clients:
        assert g.state == "Stable", g
        wanted = (
            {("t", p) for p in range(6)}
            if any("t" in c["subs"] for c in clients.values())
            else set()
        )
        wanted |= (
            {("u", p) for p in range(sim.counts["u"])}
            if any("u" in c["subs"] for c in clients.values())
            else set()
        )
        assert set().union(*(c["owned"] for c in clients.values())) == wanted
    else:
        assert g is None


def test_heartbeat_interval_fits_the_members_session():
    """A member with a session shorter than 3 configured intervals is asked to beat faster."""
    sim = Sim()
    a = Client(sim)
    settle([a])
    assert a.beat()["heartbeat_interval_ms"] == 1000  # the configured interval
    r = sim.hb(session_timeout_ms=900)  # a second member with a short session
    assert r["error"] == 0 and r["heartbeat_interval_ms"] <= 300


# --------------------------------------------------------------------------- static membership


def test_a_static_member_rejoining_takes_its_assignment_back_without_a_rebalance():
    """Issue 25 (KIP-345): a restarted process with the same instance id gets its partitions
    at once; the group epoch does not move, the other member is not disturbed."""
    sim = Sim()
    a = sim.hb(instance_id="a")
    b = sim.hb(instance_id="b")
    ids = {"a": a["member_id"], "b": b["member_id"]}
    epochs = {"a": a["member_epoch"], "b": b["member_epoch"]}
    owned = {"a": tps(a), "b": tps(b)}
    for _ in range(6):  # settle: a gives up half, b takes it
        for k in ("a", "b"):
            r = sim.hb(ids[k], epochs[k], subs=None, owned=owned[k], instance_id=k)
            assert r["error"] == 0, r
            epochs[k], owned[k] = r["member_epoch"], tps(r)
    assert sim.group.state == "Stable" and len(owned["a"]) == 3 and len(owned["b"]) == 3
    group_epoch = sim.group.group_epoch
    log_before = len(sim.log)

    again = sim.hb(instance_id="a")  # a restarted: new process, no member id, owns nothing
    assert again["error"] == 0 and again["member_id"] != ids["a"]
    assert tps(again) == owned["a"] and again["member_epoch"] == epochs["a"]
    assert sim.group.group_epoch == group_epoch and sim.group.state == "Stable"
    assert ids["a"] not in sim.group.members
    assert sim.group.members[again["member_id"]].instance_id == "a"
    assert not any(type(r).__name__ == "GroupEpoch" for r in sim.log[log_before:])

    # the old process, still alive, is fenced for good
    old = sim.hb(ids["a"], epochs["a"], subs=None, owned=owned["a"], instance_id="a")
    assert old["error"] == ErrorCode.FENCED_INSTANCE_ID and "taken over" in old["message"]
    # b never noticed
    r = sim.hb(ids["b"], epochs["b"], subs=None, owned=owned["b"], instance_id="b")
    assert r["error"] == 0 and tps(r) == owned["b"] and r["member_epoch"] == epochs["b"]


def test_a_dynamic_member_never_matches_a_static_one():
    sim = Sim()
    a = sim.hb(instance_id="a")
    d = sim.hb()
    assert d["member_id"] != a["member_id"] and len(sim.group.members) == 2
    assert sim.group.members[d["member_id"]].instance_id == ""


def test_static_membership_survives_the_fold_and_snapshots():
    sim = Sim()
    sim.hb(instance_id="a")
    sim.hb(instance_id="a")  # replaced
    rebuilt = GroupsDelta(GroupsImage.EMPTY)
    for r in groups_to_records(sim.image):
        rebuilt.replay(r)
    assert rebuilt.apply() == sim.image
    assert [m.instance_id for m in sim.group.members.values()] == ["a"]
