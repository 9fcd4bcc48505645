"""Controller quorum membership: voter incarnations, and the empty-disk startup guard.

Theory of operation
-------------------
The safety problem. A Raft voter's disk holds its vote (term, voted-for) and its log. A voter
that comes back under its old id with an *empty* disk has forgotten both: it can vote a second
time in a term it already voted in (two leaders in one term), and together with one lagging
peer it can form a majority that lacks an entry the old majority committed — committed
metadata is lost. KIP-853 answers with *directory ids* (every data directory has a random id;
a voter is the pair (id, directory id)) and explicit AddVoter / RemoveVoter; rafka does the
same on top of pysyncobj's single-server membership changes (``docs/operations.md``):

* Every controller data directory holds ``quorum.id`` (node id, a random ``directory_id``),
  written before the Raft engine first starts on it.
* The quorum replicates a small :class:`VoterRegistry` — voter id → (Raft address, directory
  id) — through its own ``@replicated`` command (``kraft/syncobj_engine.py``), in the Raft log
  and in its snapshots, so a restart keeps it. A voter registers its directory id itself
  (``register``) once it has caught up; ``add`` (``rafka quorum add-voter``) records the id and
  address with no directory yet; ``remove`` (``rafka quorum remove-voter``) forgets it.
* The guard (:func:`decide_fresh_start`): a controller whose data directory is empty asks the
  other voters before it starts Raft. If any of them has a directory id registered for this
  node's id, this node *was* that voter and lost its disk: it refuses to start
  (:class:`WipedVoterError`, exit code 2) — it must be removed and added again. If the voters
  no longer count its address as a member (it was removed), it starts as a *joining* node: its
  peers drop its connections until ``add-voter`` makes it a member, then it catches up from
  the leader (snapshot + log) like any follower. Otherwise (a new cluster, or a voter added
  before it first started) it starts normally.
* The other way round: a data directory *with* Raft state whose directory id is not the one
  the quorum has registered for its node id is an old disk of a replaced voter
  (:class:`StaleIncarnationError`, :func:`check_incarnation`). A restarting controller asks
  the other voters once, concurrently, before it starts Raft; voters that do not answer or are
  not caught up are not waited for (a restart must not depend on its peers), so this check is
  best effort — the voter's own registration (refused for another incarnation) stops it too,
  once it has caught up.

Why the guard needs more than one answer: a registration is committed on a majority M of the
N voters, and this node may itself be in M. The answers it collects must therefore come from
at least ``N - majority + 1`` *other* voters so that they meet M (:func:`answers_needed`).
A peer answers with its registry only once it has caught up with the leader since its own
start (``ready``); a peer that is itself starting on an empty disk answers ``fresh`` (it knows
nothing, so all-fresh means a brand-new cluster).

Known window (documented, not closed): a voter registers its directory id a moment after it
has caught up. A disk wiped inside that window (seconds after the voter's very first start) is
not recognised; the registry has no directory for it yet.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rafka.kraft.quorum import QuorumConfigError
from rafka.log.index import write_file_atomic

__all__ = [
    "FreshStart",
    "IDENTITY_FILE",
    "StaleIncarnationError",
    "VoterEntry",
    "VoterRegistry",
    "WipedVoterError",
    "answers_needed",
    "check_incarnation",
    "decide_fresh_start",
    "has_raft_state",
    "load_identity",
    "write_identity",
]

IDENTITY_FILE = "quorum.id"
_RAFT_FILES = ("raft.journal", "raft.dump", "metadata")


class StaleIncarnationError(QuorumConfigError):
    """This controller's data directory holds Raft state, but the quorum has another directory
    id registered for its node id: it is an old disk of a voter that was replaced."""


class WipedVoterError(QuorumConfigError):
    """This controller's data directory is empty, but the quorum has a directory id registered
    for its node id: it lost its disk and must not vote as that voter again."""


# -- the data directory's identity ----------------------------------------------------------


def has_raft_state(data_dir: Path) -> bool:
    """True when the directory holds any Raft or metadata-log state (not an empty disk)."""
    return any((data_dir / name).exists() for name in _RAFT_FILES)


def load_identity(data_dir: Path, node_id: int) -> str | None:
    """The directory id stored in ``data_dir`` (None if there is none). A file that names
    another node id is a configuration error: the directory belongs to another node."""
    path = data_dir / IDENTITY_FILE
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise QuorumConfigError(f"cannot read {path}: {exc}") from exc
    if obj.get("node_id") != node_id:
        raise QuorumConfigError(
            f"{path} belongs to node {obj.get('node_id')}, not node {node_id}: wrong data_dir?")
    return str(obj["directory_id"])


def write_identity(data_dir: Path, node_id: int) -> str:
    """Create ``quorum.id`` with a new random directory id (fsynced, atomically)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    dir_id = uuid.uuid4().hex
    write_file_atomic(data_dir / IDENTITY_FILE,
                      json.dumps({"node_id": node_id, "directory_id": dir_id}).encode(),
                      fsync=True, sync_dir=True)
    return dir_id


# -- the replicated registry ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoterEntry:
    raft: str  # "host:port"
    directory_id: str  # "" until the voter registers itself


class VoterRegistry:
    """Voter id → :class:`VoterEntry`. Mutated only by :meth:`apply` (deterministic: every
    voter applies the same commands in log order and computes the same registry)."""

    def __init__(self, entries: Mapping[int, VoterEntry] | None = None) -> None:
        self.entries: dict[int, VoterEntry] = dict(entries or {})

    # commands: ["register", id, raft, directory_id] | ["add", id, raft] | ["remove", id]
    @staticmethod
    def register(voter_id: int, raft: str, directory_id: str) -> list[Any]:
        return ["register", voter_id, raft, directory_id]

    @staticmethod
    def add(voter_id: int, raft: str) -> list[Any]:
        return ["add", voter_id, raft]

    @staticmethod
    def remove(voter_id: int) -> list[Any]:
        return ["remove", voter_id]

    def apply(self, command: Sequence[Any]) -> str | None:
        """Apply one command; returns None, or why it was refused (nothing changed)."""
        op, vid = command[0], int(command[1])
        cur = self.entries.get(vid)
        if op == "register":
            raft, dir_id = str(command[2]), str(command[3])
            if cur is not None and cur.directory_id not in ("", dir_id):
                return (f"voter {vid} is registered with directory {cur.directory_id}, not "
                        f"{dir_id}: this is another incarnation of the voter")
            self.entries[vid] = VoterEntry(raft, dir_id)
            return None
        if op == "add":
            if cur is not None and cur.directory_id:
                return f"voter {vid} is registered with directory {cur.directory_id}: remove it first"
            self.entries[vid] = VoterEntry(str(command[2]), "")
            return None
        if op == "remove":
            self.entries.pop(vid, None)
            return None
        return f"unknown voter registry command {op!r}"

    def id_of(self, raft: str) -> int | None:
        for vid, e in self.entries.items():
            if e.raft == raft:
                return vid
        return None

    def to_wire(self) -> dict[str, list[str]]:
        return {str(v): [e.raft, e.directory_id] for v, e in sorted(self.entries.items())}

    @classmethod
    def from_wire(cls, obj: Mapping[str, Sequence[str]] | None) -> VoterRegistry:
        return cls({int(k): VoterEntry(str(v[0]), str(v[1])) for k, v in (obj or {}).items()})


# -- the empty-disk startup guard ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FreshStart:
    """How a controller with an empty data directory starts: ``mode`` "normal" (Raft peers:
    the configured voters) or "join" (``members``: the quorum's current voters, as (id, raft
    "host:port"); it waits to be added)."""

    mode: str
    members: tuple[tuple[int, str], ...] = ()


def answers_needed(voter_count: int) -> int:
    """Answers from *other* voters that are sure to include one of any majority (see the
    module docstring)."""
    return voter_count - (voter_count // 2 + 1) + 1 if voter_count > 1 else 0


def decide_fresh_start(node_id: int, own_raft: str, voter_count: int,
                       answers: Mapping[int, Mapping[str, Any]]) -> FreshStart | None:
    """Pure decision over the other voters' ``DESCRIBE_QUORUM {local_only}`` answers
    (``fresh`` / ``ready`` / ``incarnations`` / ``members``). None: not enough informative
    answers yet (ask again). Raises :class:`WipedVoterError`."""
    useful = {vid: a for vid, a in answers.items() if a.get("fresh") or a.get("ready")}
    if len(useful) < answers_needed(voter_count):
        return None
    ready = {vid: a for vid, a in sorted(useful.items()) if a.get("ready")}
    for vid, a in ready.items():
        entry = (a.get("incarnations") or {}).get(str(node_id))
        if entry and entry[1]:
            raise WipedVoterError(
                f"node {node_id}'s controller data directory is empty, but voter {vid} has it "
                f"registered as voter {node_id} with directory {entry[1]}: this node lost its disk "
                "and would forget its Raft vote and log. Replace it: `rafka quorum remove-voter "
                f"--id {node_id}`, start this node again (it joins), then `rafka quorum add-voter "
                f"--id {node_id} --address {own_raft}` (docs/operations.md)")
    if not ready:
        return FreshStart("normal")  # every peer is new too: a new cluster
    # the leader's view if a leader answered, else any caught-up voter's
    view = next((a for vid, a in ready.items() if a.get("leader_id") == vid), next(iter(ready.values())))
    members = tuple((int(i), str(addr)) for i, addr in view.get("members") or ())
    if any(addr == own_raft for _, addr in members):
        return FreshStart("normal")  # a member that never registered: added before its first start
    return FreshStart("join", members)


def check_incarnation(node_id: int, directory_id: str, answers: Mapping[int, Mapping[str, Any]]) -> None:
    """Raises :class:`StaleIncarnationError` when a caught-up voter has another directory id
    registered for ``node_id`` than this data directory's."""
    for vid, a in sorted(answers.items()):
        entry = (a.get("incarnations") or {}).get(str(node_id)) if a.get("ready") else None
        if entry and entry[1] and entry[1] != directory_id:
            raise StaleIncarnationError(
                f"node {node_id}'s controller data directory has directory id {directory_id}, but "
                f"voter {vid} has voter {node_id} registered with directory {entry[1]}: this is an "
                "old disk of a voter that was replaced; it must not vote. Start the node on the "
                "current disk, or on an empty one and follow docs/operations.md")
