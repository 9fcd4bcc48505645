"""The controller's side of ALTER_USER_SCRAM_CREDENTIALS: decide, then write records.

Theory of operation
-------------------
``decide_scram(image, upsertions, deletions)`` is pure: it checks every entry (a known
mechanism, iterations within SCRAM's bounds, keys as long as the mechanism's hash, a user name
of 1-256 printable characters and not a node's ``node-<int>``, no (user, mechanism) twice in one request, a deletion of an
existing credential) and returns the per-entry results and the ``Decision`` holding
``UserScramCredential`` / ``UserScramCredentialRemoved`` records for the valid ones.
``alter_user_scram_credentials(service, body)`` runs it on the active controller's image under
the service's decision lock (``ControllerService._guard``) and proposes the records; the answer
carries ``metadata_offset`` so the forwarding broker waits for its own image
(``broker/handlers/admin.py``). The client derives the credential (``rafka.security.scram``): the
password never leaves the client.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rafka.kraft import controller as ctl
from rafka.metadata import MetadataImage
from rafka.metadata.security import UserScramCredential, UserScramCredentialRemoved
from rafka.security.listener import NODE_USER
from rafka.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from rafka.wire.errors import ErrorCode

if TYPE_CHECKING:
    from rafka.kraft.service import ControllerService

__all__ = ["decide_scram", "alter_user_scram_credentials"]

_MAX_USER = 256


def _result(user: str, mech: str, code: ErrorCode = ErrorCode.NONE, message: str | None = None
            ) -> dict[str, Any]:
    return {"user": user, "mechanism": mech, "error": int(code), "message": message}


def _check_upsert(u: dict[str, Any]) -> str | None:
    user, mech = u["user"], u["mechanism"]
    if not user or len(user) > _MAX_USER or not user.isprintable():
        return f"a user name is 1-{_MAX_USER} printable characters"
    if NODE_USER.fullmatch(user):  # a node's principal: only its certificate may claim it
        return f"{user!r} is reserved for the cluster's nodes (inter-broker security)"
    if mech not in MECHANISMS:
        return f"unknown mechanism {mech!r} (supported: {', '.join(MECHANISMS)})"
    if not MIN_ITERATIONS <= u["iterations"] <= MAX_ITERATIONS:
        return f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
    size = hashlib.new(MECHANISMS[mech]).digest_size
    if len(u["stored_key"]) != size or len(u["server_key"]) != size:
        return f"{mech} keys are {size} bytes"
    if not 8 <= len(u["salt"]) <= 128:
        return "the salt must be 8-128 bytes"
    return None


def decide_scram(image: MetadataImage, upsertions: Sequence[dict[str, Any]],
                 deletions: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], ctl.Decision]:
    results: list[dict[str, Any]] = []
    decision = ctl.Decision()
    seen: set[tuple[str, str]] = set()
    for kind, entries in (("upsert", upsertions), ("delete", deletions)):
        for e in entries:
            key = (e["user"], e["mechanism"])
            if key in seen:
                results.append(_result(*key, ErrorCode.INVALID_REQUEST,
                                       "the same user and mechanism twice in one request"))
                continue
            seen.add(key)
            if kind == "upsert":
                problem = _check_upsert(e)
                if problem:
                    results.append(_result(*key, ErrorCode.INVALID_REQUEST, problem))
                    continue
                decision.records.append(UserScramCredential(
                    e["user"], e["mechanism"], bytes(e["salt"]), e["iterations"],
                    bytes(e["stored_key"]), bytes(e["server_key"])))
            else:
                if image.scram.get(*key) is None:
                    results.append(_result(*key, ErrorCode.RESOURCE_NOT_FOUND,
                                           f"user {key[0]!r} has no {key[1]} credential"))
                    continue
                decision.records.append(UserScramCredentialRemoved(*key))
            results.append(_result(*key))
    return results, decision


async def alter_user_scram_credentials(service: ControllerService, body: dict[str, Any]
                                       ) -> dict[str, Any]:
    """The handler (wrapped by ``service._guard``: active controller, decision lock)."""
    results, decision = decide_scram(service._q().image(), body.get("upsertions") or [],
                                     body.get("deletions") or [])
    if decision:
        await service._propose(decision)
    return {"results": results, "metadata_offset": service._q().committed_offset()}
