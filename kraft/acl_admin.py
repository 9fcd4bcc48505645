"""The controller's side of CREATE_ACLS and DELETE_ACLS: decide, then write records.

Theory of operation
-------------------
``decide_create_acls(image, acls)`` checks each entry (``security.acl.validate_entry``) and
returns per-entry results and a ``Decision`` of ``AclCreated`` records for the valid ones that
are not there yet (creating an existing entry succeeds and writes nothing).
``decide_delete_acls(image, filters)`` matches each filter (a None field matches anything)
against the image's entries and returns, per filter, the entries it deletes, and a
``Decision`` of ``AclRemoved`` records (both walk the items with ``decide_each``). The
handlers (``HANDLERS``, against the service's narrow
:class:`~rafka.kraft.admin_context.AdminContext`) run under its decision lock and answer with
``metadata_offset`` so a forwarding broker waits for its own image
(``broker/handlers/admin.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from rafka.kraft import controller as ctl
from rafka.kraft.admin_context import AdminContext, HandlerTable, answer_with_offset, decide_each
from rafka.metadata import MetadataImage, MetadataRecord
from rafka.metadata.security import AclCreated, AclEntry, AclRemoved
from rafka.security.acl import validate_entry
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

__all__ = ["HANDLERS", "create_acls", "decide_create_acls", "decide_delete_acls", "delete_acls",
           "matches"]

_FIELDS = ("principal", "resource_type", "pattern_type", "resource_name", "operation",
           "permission", "host")


def matches(entry: AclEntry, flt: Mapping[str, Any]) -> bool:
    return all(flt.get(f) is None or flt[f] == getattr(entry, f) for f in _FIELDS)


def decide_create_acls(image: MetadataImage, acls: Sequence[Mapping[str, Any]]
                       ) -> tuple[list[dict[str, Any]], ctl.Decision]:
    """Per entry: INVALID_REQUEST naming the problem, or success (written unless present)."""
    new: set[AclEntry] = set()  # written by an earlier entry of the request

    def one(a: Mapping[str, Any]) -> tuple[dict[str, Any], list[MetadataRecord]]:
        entry = AclEntry(*(a[f] for f in _FIELDS))
        problem = validate_entry(entry)
        if problem:
            return {"error": int(ErrorCode.INVALID_REQUEST), "message": problem}, []
        fresh = entry not in image.acls.entries and entry not in new
        new.add(entry)
        return {"error": 0, "message": None}, [AclCreated(**asdict(entry))] if fresh else []

    return decide_each(acls, one)


def decide_delete_acls(image: MetadataImage, filters: Sequence[Mapping[str, Any]]
                       ) -> tuple[list[dict[str, Any]], ctl.Decision]:
    """Per filter: the entries it matches (each removed once, by the first filter naming it)."""
    gone: set[AclEntry] = set()  # removed by an earlier filter of the request

    def one(flt: Mapping[str, Any]) -> tuple[dict[str, Any], list[MetadataRecord]]:
        hit = sorted(e for e in image.acls.entries if matches(e, flt))
        removed: list[MetadataRecord] = [AclRemoved(**asdict(e)) for e in hit if e not in gone]
        gone.update(hit)
        return {"error": 0, "message": None, "deleted": [asdict(e) for e in hit]}, removed

    return decide_each(filters, one)


async def create_acls(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    results, decision = decide_create_acls(ctx.require_quorum().image(), body["acls"])
    return await answer_with_offset(ctx, decision, {"results": results})


async def delete_acls(ctx: AdminContext, body: dict[str, Any]) -> dict[str, Any]:
    results, decision = decide_delete_acls(ctx.require_quorum().image(), body["filters"])
    return await answer_with_offset(ctx, decision, {"results": results})


HANDLERS: HandlerTable = {ApiKey.CREATE_ACLS: create_acls, ApiKey.DELETE_ACLS: delete_acls}
