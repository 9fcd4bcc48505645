"""The controller's side of ALTER_USER_SCRAM_CREDENTIALS: decide, then write records.

Theory of operation
-------------------
``decide_scram(image, upsertions, deletions)`` is pure: it checks every entry (a known
mechanism, iterations within SCRAM's bounds, keys as long as the mechanism's hash, a user name
of 1-256 printable characters and not a node's ``node-<int>``, no (user, mechanism) twice in one request, a deletion of an
existing credential) and returns the per-entry results and the ``Decision`` holding
``UserScramCredential`` / ``UserScramCredentialRemoved`` records for the valid ones.
``alter_user_scram_credentials(ctx, body)`` (``HANDLERS``, against the service's narrow
:class:`~rafka.kraft.admin_context.AdminContext`) runs it on the active controller's image
under the service's decision lock and proposes the records; the answer carries
``metadata_offset`` so the forwarding broker waits for its own image
(``broker/handlers/admin.py``). The client derives the credential (``rafka.security.scram``): the
password never leaves the client.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from rafka.kraft import controller as ctl
from rafka.kraft.admin_context import AdminContext, HandlerTable, answer_with_offset, decide_each
from rafka.metadata import MetadataImage, MetadataRecord
from rafka.metadata.security import UserScramCredential, UserScramCredentialRemoved
from rafka.security.listener import NODE_USER
from rafka.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

__all__ = ["HANDLERS", "alter_user_scram_credentials", "decide_scram"]

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
    """Per entry, upsertions first: INVALID_REQUEST / RESOURCE_NOT_FOUND naming the problem,
    or success (its record written)."""
    seen: set[tuple[str, str]] = set()  # (user, mechanism) of the earlier entries

    def one(kind_entry: tuple[str, dict[str, Any]]) -> tuple[dict[str, Any], list[MetadataRecord]]:
        kind, e = kind_entry
        key = (e["user"], e["mechanism"])
        if key in seen:
            return _result(*key, ErrorCode.INVALID_REQUEST,
                           "the same user and mechanism twice in one request"), []
        seen.add(key)
        if kind == "upsert":
            problem = _check_upsert(e)
            if problem:
                return _result(*key, ErrorCode.INVALID_REQUEST, problem), []
            return _result(*key), [UserScramCredential(
                e["user"], e["mechanism"], bytes(e["salt"]), e["iterations"],
                bytes(e["stored_key"]), bytes(e["server_key"]))]
        if image.scram.get(*key) is None:
            return _result(*key, ErrorCode.RESOURCE_NOT_FOUND,
                           f"user {key[0]!r} has no {key[1]} credential"), []
        return _result(*key), [UserScramCredentialRemoved(*key)]

    return decide_each([("upsert", u) for u in upsertions] + [("delete", d) for d in deletions],
                       one)


async def alter_user_scram_credentials(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    results, decision = decide_scram(ctx.require_quorum().image(), body.get("upsertions") or [],
                                     body.get("deletions") or [])
    return await answer_with_offset(ctx, decision, {"results": results})


HANDLERS: HandlerTable = {ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials}
