"""Pure tests of the controller membership rules (kraft/voters.py): the replicated voter
registry and the empty-disk startup guard's decision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rafka.kraft.quorum import QuorumConfigError
from rafka.kraft.voters import (
    FreshStart,
    StaleIncarnationError,
    VoterEntry,
    VoterRegistry,
    WipedVoterError,
    answers_needed,
    check_incarnation,
    decide_fresh_start,
    has_raft_state,
    load_identity,
    write_identity,
)

A1, A2, A3 = "127.0.0.1:19091", "127.0.0.1:19092", "127.0.0.1:19093"


# -- registry -----------------------------------------------------------------------------


def test_registry_register_add_remove_and_refusals() -> None:
    r = VoterRegistry()
    assert r.apply(VoterRegistry.register(1, A1, "d1")) is None
    assert r.apply(VoterRegistry.register(1, A1, "d1")) is None  # idempotent
    refused = r.apply(VoterRegistry.register(1, A1, "other"))  # another incarnation of voter 1
    assert refused is not None and "another incarnation" in refused
    assert r.entries[1] == VoterEntry(A1, "d1")
    assert r.apply(VoterRegistry.add(1, A1)) is not None  # still registered: remove first
    assert r.apply(VoterRegistry.remove(1)) is None
    assert r.apply(VoterRegistry.add(1, A1)) is None  # re-added, no directory yet
    assert r.entries[1] == VoterEntry(A1, "")
    assert r.apply(VoterRegistry.register(1, A1, "d1-new")) is None  # the new node registers
    assert r.entries[1].directory_id == "d1-new"
    assert r.id_of(A1) == 1 and r.id_of(A2) is None
    assert r.apply(["bogus", 1]) is not None


def test_registry_is_deterministic_and_round_trips() -> None:
    cmds = [VoterRegistry.register(1, A1, "a"), VoterRegistry.register(2, A2, "b"),
            VoterRegistry.register(3, A3, "c"), VoterRegistry.remove(3), VoterRegistry.add(3, A3),
            VoterRegistry.register(3, A3, "c2"), VoterRegistry.register(2, A2, "x")]
    r1, r2 = VoterRegistry(), VoterRegistry()
    out1 = [r1.apply(c) for c in cmds]
    out2 = [r2.apply(c) for c in cmds]
    assert out1 == out2 and r1.entries == r2.entries
    assert VoterRegistry.from_wire(r1.to_wire()).entries == r1.entries
    assert r1.to_wire() == {"1": [A1, "a"], "2": [A2, "b"], "3": [A3, "c2"]}


# -- identity file ------------------------------------------------------------------------------


def test_identity_file(tmp_path: Path) -> None:
    d = tmp_path / "controller"
    assert load_identity(d, 1) is None and not has_raft_state(d)
    dir_id = write_identity(d, 1)
    assert load_identity(d, 1) == dir_id
    assert not has_raft_state(d)  # quorum.id alone is not Raft state
    (d / "raft.journal").write_bytes(b"x")
    assert has_raft_state(d)
    with pytest.raises(QuorumConfigError, match="belongs to node 1"):
        load_identity(d, 2)
    assert write_identity(tmp_path / "other", 1) != dir_id


# -- the guard --------------------------------------------------------------------------------------


def ready(leader: int | None, members: list[tuple[int, str]], incarnations: dict[str, list[str]]) -> dict[str, Any]:
    return {"ready": True, "fresh": False, "leader_id": leader,
            "members": [list(m) for m in members], "incarnations": incarnations}


MEMBERS = [(1, A1), (2, A2), (3, A3)]
REGISTERED = {"1": [A1, "d1"], "2": [A2, "d2"], "3": [A3, "d3"]}


def test_answers_needed_meets_every_majority() -> None:
    assert [answers_needed(n) for n in (1, 2, 3, 4, 5)] == [0, 1, 2, 2, 3]
    for n in range(2, 8):  # answers from k others + any majority that may include us: they meet
        majority = n // 2 + 1
        assert answers_needed(n) + (majority - 1) > n - 1


def test_wiped_voter_is_refused() -> None:
    answers = {1: ready(1, MEMBERS, REGISTERED), 2: ready(1, MEMBERS, REGISTERED)}
    with pytest.raises(WipedVoterError, match="remove-voter --id 3"):
        decide_fresh_start(3, A3, 3, answers)


def test_one_peer_that_lags_is_not_enough() -> None:
    # voter 2 has not applied voter 3's registration (it lagged): alone it would let a wiped 3 in
    lagging = {"1": [A1, "d1"], "2": [A2, "d2"]}
    assert decide_fresh_start(3, A3, 3, {2: ready(1, MEMBERS, lagging)}) is None  # ask on
    with pytest.raises(WipedVoterError):
        decide_fresh_start(3, A3, 3, {2: ready(1, MEMBERS, lagging), 1: ready(1, MEMBERS, REGISTERED)})


def test_not_ready_peers_do_not_count() -> None:
    not_ready = {"ready": False, "fresh": False}
    assert decide_fresh_start(3, A3, 3, {1: not_ready, 2: ready(1, MEMBERS, REGISTERED)}) is None


def test_removed_voter_joins_with_the_current_members() -> None:
    members = [(1, A1), (2, A2)]
    reg = {"1": [A1, "d1"], "2": [A2, "d2"]}
    got = decide_fresh_start(3, A3, 3, {1: ready(2, members, reg), 2: ready(2, members, reg)})
    assert got == FreshStart("join", ((1, A1), (2, A2)))


def test_new_cluster_and_added_but_unregistered_voter_start_normally() -> None:
    fresh = {"fresh": True, "ready": False}
    assert decide_fresh_start(3, A3, 3, {1: fresh, 2: fresh}) == FreshStart("normal")
    assert decide_fresh_start(1, A1, 1, {}) == FreshStart("normal")  # a single voter asks no one
    added = {"1": [A1, "d1"], "2": [A2, "d2"], "3": [A3, ""]}  # add-voter ran before it started
    assert decide_fresh_start(3, A3, 3, {1: ready(1, MEMBERS, added), 2: ready(1, MEMBERS, added)}) \
        == FreshStart("normal")
    # a late starter of a new cluster: the others run, it never registered
    late = {"1": [A1, "d1"], "2": [A2, "d2"]}
    assert decide_fresh_start(3, A3, 3, {1: ready(1, MEMBERS, late), 2: ready(1, MEMBERS, late)}) \
        == FreshStart("normal")


def test_the_leaders_view_wins() -> None:
    # voter 2 has not seen the removal yet; the leader (1) has: join with the leader's set
    after = [(1, A1), (2, A2)]
    reg = {"1": [A1, "d1"], "2": [A2, "d2"]}
    got = decide_fresh_start(3, A3, 3, {2: ready(1, MEMBERS, reg), 1: ready(1, after, reg)})
    assert got == FreshStart("join", tuple(after))


def test_an_old_disk_of_a_replaced_voter_is_refused() -> None:
    replaced = {"1": [A1, "d1"], "2": [A2, "d2"], "3": [A3, "d3-new"]}
    with pytest.raises(StaleIncarnationError, match="old disk"):
        check_incarnation(3, "d3-old", {2: ready(1, MEMBERS, replaced)})
    check_incarnation(3, "d3-new", {1: ready(1, MEMBERS, replaced)})  # the current disk
    check_incarnation(3, "d3-old", {})  # nobody answered: best effort, it starts
    check_incarnation(3, "d3-old", {1: {"ready": False, "incarnations": replaced}})  # not caught up
    check_incarnation(3, "d3-old", {1: ready(1, MEMBERS, {"3": [A3, ""]})})  # added, unregistered
