"""The controller's side of ``rafka quorum add-voter`` / ``remove-voter`` and of the empty-disk
startup guard (the rules are in :mod:`rafka.kraft.voters`).

Theory of operation
-------------------
ADD_RAFT_VOTER / REMOVE_RAFT_VOTER run on the active controller under its decision lock
(``ControllerService._guard``: one decision at a time, bounded by
``controller.propose.timeout.ms``), and the engine refuses a change while an earlier one has
not committed, so at most one membership change is ever in flight — the condition under which
Raft's single-server changes are safe (any majority of the old set meets any majority of the
new one). Each change is itself a Raft log entry (pysyncobj's membership command), applied
by every voter when appended and persisted with the Raft log and its snapshots.

* remove-voter ``--id N``: pysyncobj removes N's Raft address from the voter set (committed by
  a majority of the *new* set), then the registry forgets N's directory id. The active
  controller cannot remove itself (stop it first: another voter takes over).
* add-voter ``--id N --address HOST:RAFTPORT``: the registry records (N, address) without a
  directory, then pysyncobj adds the address. The new node catches up from the leader and
  registers its own directory id (``kraft/syncobj_engine.py``).

The checks are pure (``decide_add_raft_voter`` / ``decide_remove_raft_voter``: the request, the
engine's member set and registry in; a :class:`VoterChange` — what to write — out, or the
named error); the handlers (``HANDLERS``, against the service's narrow
:class:`~rafka.kraft.admin_context.AdminContext`) carry the change out in the order below.

Order of the two steps: the registry entry is the guard's evidence, so it is written before a
node can become a voter and erased only after it stopped being one. A step that fails halfway
leaves the conservative state (the guard still refuses a wiped node; the command can be run
again: each step is skipped when already done).

``prepare_data_dir`` runs before the Raft engine starts: a data directory with Raft state
keeps (or, from an older version, gets) its directory id and is checked once against the
voters that answer (``check_incarnation``); an empty one first asks the other voters until
enough answer (``decide_fresh_start``), then gets a new directory id.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from rafka.kraft.admin_context import AdminContext, HandlerTable, VoterSpec
from rafka.kraft.voters import (
    FreshStart,
    VoterRegistry,
    check_incarnation,
    decide_fresh_start,
    has_raft_state,
    load_identity,
    write_identity,
)
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey

if TYPE_CHECKING:
    from rafka.kraft.service import ControllerService

__all__ = ["HANDLERS", "VoterChange", "add_raft_voter", "decide_add_raft_voter",
           "decide_remove_raft_voter", "local_fields", "prepare_data_dir", "remove_raft_voter",
           "voter_rows"]

log = logging.getLogger("rafka.controller.voters")

_ASK_MAX_INTERVAL_S = 2.0


@dataclass(frozen=True, slots=True)
class VoterChange:
    """What a membership request writes: ``address`` joins or leaves the Raft member set
    (None: it is not a member, only the registry changes), after (add) or before (remove)
    the registry entry of ``voter_id`` is written, when ``write_registry``."""

    voter_id: int
    address: str | None
    write_registry: bool


def _engine(ctx: AdminContext) -> Any:
    q = ctx.require_quorum()
    if not hasattr(q, "change_membership"):
        raise error_for(ErrorCode.INVALID_REQUEST, "this quorum engine has a fixed voter set")
    return q


def _address(body: Mapping[str, Any]) -> str:
    addr = str(body.get("address") or "")
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise error_for(ErrorCode.INVALID_REQUEST, f"address must be HOST:RAFT_PORT, got {addr!r}")
    return addr


def decide_add_raft_voter(body: Mapping[str, Any], members: Mapping[str, int | None],
                          registry: VoterRegistry) -> VoterChange | None:
    """ADD_RAFT_VOTER ``{voter_id, address}``: None when it is done already (a retry)."""
    vid, addr = int(body["voter_id"]), _address(body)
    if addr in members:
        if members[addr] == vid:
            return None
        raise error_for(ErrorCode.DUPLICATE_VOTER, f"{addr} is already voter {members[addr]}")
    if vid in members.values():
        raise error_for(ErrorCode.DUPLICATE_VOTER, f"voter {vid} is already a member (at another "
                        "address): remove it first")
    entry = registry.entries.get(vid)
    return VoterChange(vid, addr, entry is None or entry.raft != addr or bool(entry.directory_id))


def decide_remove_raft_voter(body: Mapping[str, Any], members: Mapping[str, int | None],
                             registry: VoterRegistry, active_id: int) -> VoterChange:
    """REMOVE_RAFT_VOTER ``{voter_id}`` on the active controller ``active_id``."""
    vid = int(body["voter_id"])
    addr = next((a for a, i in members.items() if i == vid), None)
    if addr is None and vid not in registry.entries:
        raise error_for(ErrorCode.VOTER_NOT_FOUND, f"voter {vid} is not in the controller quorum")
    if vid == active_id:
        raise error_for(ErrorCode.INVALID_REQUEST, f"voter {vid} is the active controller: stop it "
                        "first (another voter takes over), then remove it")
    if addr is not None and len(members) <= 1:
        raise error_for(ErrorCode.INVALID_REQUEST, "cannot remove the last voter")
    return VoterChange(vid, addr, True)


async def add_raft_voter(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    q = _engine(ctx)
    change = decide_add_raft_voter(body, q.members(), q.registry)
    if change is not None:
        assert change.address is not None
        if change.write_registry:
            await q.update_registry(VoterRegistry.add(change.voter_id, change.address))
        await q.change_membership("add", change.address)
        log.warning("added voter %s at %s to the controller quorum", change.voter_id, change.address)
    return {"voters": voter_rows(ctx.voters, q)}


async def remove_raft_voter(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    q = _engine(ctx)
    change = decide_remove_raft_voter(body, q.members(), q.registry, ctx.node_id)
    if change.address is not None:
        await q.change_membership("remove", change.address)
        log.warning("removed voter %s at %s from the controller quorum", change.voter_id,
                    change.address)
    await q.update_registry(VoterRegistry.remove(change.voter_id))
    return {"voters": voter_rows(ctx.voters, q)}


HANDLERS: HandlerTable = {ApiKey.ADD_RAFT_VOTER: add_raft_voter,
                          ApiKey.REMOVE_RAFT_VOTER: remove_raft_voter}


def voter_rows(voters: Sequence[VoterSpec], q: Any) -> list[dict[str, Any]]:
    """The current voters (id, raft, rpc, directory id), from the engine's member set (the
    configured ``voters`` while there is no engine, or it has a fixed voter set)."""
    rpc = {vid: r for vid, _raft, r in voters}
    if q is None or not hasattr(q, "members"):
        return [{"id": vid, "raft": f"{raft[0]}:{raft[1]}", "rpc": f"{r[0]}:{r[1]}", "directory_id": None}
                for vid, raft, r in voters]
    reg = q.registry.entries
    rows = []
    for addr, vid in q.members().items():
        r = rpc.get(vid) if vid is not None else None
        rows.append({"id": vid, "raft": addr, "rpc": None if r is None else f"{r[0]}:{r[1]}",
                     "directory_id": (reg[vid].directory_id or None) if vid in reg else None})
    return sorted(rows, key=lambda row: (row["id"] is None, row["id"] or 0))


def local_fields(svc: ControllerService) -> dict[str, Any]:
    """What a voter adds to its DESCRIBE_QUORUM {local_only} answer for the guard."""
    q = svc.quorum
    if q is None:
        return {"fresh": svc.fresh_start_pending, "ready": False}
    if not hasattr(q, "members"):
        return {"fresh": False, "ready": False}
    ready = q.is_ready()
    out: dict[str, Any] = {"fresh": False, "ready": ready, "directory_id": q.directory_id or None}
    if ready:
        out["members"] = [[vid if vid is not None else -1, a] for a, vid in q.members().items()]
        out["incarnations"] = q.registry.to_wire()
    return out


async def _ask_once(svc: ControllerService) -> dict[int, dict[str, Any]]:
    """Every other voter's local DESCRIBE_QUORUM answer, asked concurrently; those that do not
    answer (bounded by the request's own timeout) are left out."""
    from rafka.kraft.membership import _describe_local

    answers: dict[int, dict[str, Any]] = {}

    async def ask(vid: int, rpc: tuple[str, int]) -> None:
        answer = await _describe_local(rpc, {"local_only": True})
        if answer is not None and not answer.get("error"):
            answers[vid] = answer

    async with trio.open_nursery() as nursery:
        for vid, _raft, rpc in svc.voters:
            if vid != svc.node_id:
                nursery.start_soon(ask, vid, rpc)
    return answers


async def _ask_voters(svc: ControllerService, own_raft: str) -> FreshStart:
    answers: dict[int, dict[str, Any]] = {}
    interval = 0.1
    while True:
        answers.update(await _ask_once(svc))
        decision = decide_fresh_start(svc.node_id, own_raft, len(svc.voters), answers)
        if decision is not None:
            return decision
        log.info("node %s: empty controller data dir; waiting for the other voters to answer",
                 svc.node_id)
        await trio.sleep(interval)
        interval = min(interval * 2, _ASK_MAX_INTERVAL_S)


async def prepare_data_dir(svc: ControllerService) -> tuple[str, FreshStart | None]:
    """(directory id, how to start): ``None`` for a data directory that already has Raft state."""
    from rafka.kraft.syncobj_engine import check_cluster_secret

    check_cluster_secret(len(svc.voters), svc.cluster_secret)  # config errors before any waiting
    data_dir = svc.data_dir
    dir_id = load_identity(data_dir, svc.node_id)
    if has_raft_state(data_dir):
        dir_id = dir_id or write_identity(data_dir, svc.node_id)
        check_incarnation(svc.node_id, dir_id, await _ask_once(svc))
        return dir_id, None
    own = next(f"{r[0]}:{r[1]}" for vid, r, _rpc in svc.voters if vid == svc.node_id)
    svc.fresh_start_pending = True
    try:
        decision = await _ask_voters(svc, own)
    finally:
        svc.fresh_start_pending = False
    if decision.mode == "join":
        log.warning("node %s: not a voter of the running quorum (voters %s); joining — run "
                    "`rafka quorum add-voter --id %s --address %s`", svc.node_id,
                    [m[0] for m in decision.members], svc.node_id, own)
    return dir_id or write_identity(data_dir, svc.node_id), decision
