"""The controller's side of ALTER_CLIENT_QUOTAS: decide, then write ``ClientQuota`` records.

Theory of operation
-------------------
``decide_alter_client_quotas(image, entries)`` checks each entry — an entity naming a user
principal ("User:<name>"), a client id, or both (either may be "<default>"), and operations on
the keys ``producer_byte_rate`` / ``consumer_byte_rate`` with a positive finite value or None
(remove) — and returns per-entry results and a ``Decision`` of ``ClientQuota`` records for the
valid entries' values that differ from the image (setting a value that is already there, or
removing one that is not, writes nothing). An invalid entry is refused as a whole with
``INVALID_REQUEST`` naming the problem; the others are applied. ``validate_only`` decides and
writes nothing. The handler runs under the service's decision lock (``ControllerService._guard``)
and answers with ``metadata_offset`` so a forwarding broker waits for its own image
(``broker/handlers/admin.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rafka.kraft import controller as ctl
from rafka.metadata import MetadataImage
from rafka.metadata.quotas import DEFAULT, QUOTA_KEYS, ClientQuota, entity_key
from rafka.wire.errors import ErrorCode

if TYPE_CHECKING:
    from rafka.kraft.service import ControllerService

__all__ = ["decide_alter_client_quotas", "alter_client_quotas", "entry_problem"]

_MAX_NAME = 255


def entry_problem(entry: Mapping[str, Any]) -> str | None:
    """Why ``entry`` cannot be applied, or None."""
    user, client_id = entry.get("user"), entry.get("client_id")
    if user is None and client_id is None:
        return "a quota entity names a user, a client id or both"
    if user is not None and user != DEFAULT and (
            not user.startswith("User:") or len(user) <= len("User:")):
        return f"user {user!r}: expected User:<name> or {DEFAULT}"
    for what, name in (("user", user), ("client id", client_id)):
        if name is not None and not 0 < len(name) <= _MAX_NAME:
            return f"{what} must be 1-{_MAX_NAME} characters"
    keys = [op["key"] for op in entry["ops"]]
    if not keys:
        return "no quota operations"
    if len(set(keys)) != len(keys):
        return "a key appears twice"
    for op in entry["ops"]:
        if op["key"] not in QUOTA_KEYS:
            return f"unknown quota key {op['key']!r} (known: {', '.join(QUOTA_KEYS)})"
        v = op.get("value")
        if v is not None and not (math.isfinite(v) and v > 0):
            return f"{op['key']}: the byte rate must be a positive number, got {v!r}"
    return None


def decide_alter_client_quotas(image: MetadataImage, entries: Sequence[Mapping[str, Any]]
                               ) -> tuple[list[dict[str, Any]], ctl.Decision]:
    results: list[dict[str, Any]] = []
    decision = ctl.Decision()
    pending: dict[tuple[tuple[str, ...], str], float | None] = {}
    for entry in entries:
        problem = entry_problem(entry)
        if problem:
            results.append({"error": int(ErrorCode.INVALID_REQUEST), "message": problem})
            continue
        user, client_id = entry.get("user"), entry.get("client_id")
        ent = entity_key(user, client_id)
        for op in entry["ops"]:
            key, value = op["key"], op.get("value")
            value = None if value is None else float(value)
            current = pending.get((ent, key), image.quotas.get(ent, key))
            if current != value:
                pending[(ent, key)] = value
                decision.records.append(ClientQuota(user, client_id, key, value))
        results.append({"error": 0, "message": None})
    return results, decision


async def alter_client_quotas(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    results, decision = decide_alter_client_quotas(service._q().image(), body["entries"])
    if decision and not body.get("validate_only"):
        await service._propose(decision)
    return {"error": 0, "results": results, "metadata_offset": service._q().committed_offset()}
