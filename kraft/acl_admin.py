"""The controller's side of CREATE_ACLS and DELETE_ACLS: decide, then write records.

Theory of operation
-------------------
``decide_create_acls(image, acls)`` checks each entry (``security.acl.validate_entry``) and
returns per-entry results and a ``Decision`` of ``AclCreated`` records for the valid ones that
are not there yet (creating an existing entry succeeds and writes nothing).
``decide_delete_acls(image, filters)`` matches each filter (a None field matches anything)
against the image's entries and returns, per filter, the entries it deletes, and a
``Decision`` of ``AclRemoved`` records. The handlers run under the service's decision lock
(``ControllerService._guard``) and answer with ``metadata_offset`` so a forwarding broker
waits for its own image (``broker/handlers/admin.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rafka.kraft import controller as ctl
from rafka.metadata import MetadataImage
from rafka.metadata.security import AclCreated, AclEntry, AclRemoved
from rafka.security.acl import validate_entry
from rafka.wire.errors import ErrorCode

if TYPE_CHECKING:
    from rafka.kraft.service import ControllerService

__all__ = ["decide_create_acls", "decide_delete_acls", "matches", "create_acls", "delete_acls"]

_FIELDS = ("principal", "resource_type", "pattern_type", "resource_name", "operation",
           "permission", "host")


def matches(entry: AclEntry, flt: Mapping[str, Any]) -> bool:
    return all(flt.get(f) is None or flt[f] == getattr(entry, f) for f in _FIELDS)


def decide_create_acls(image: MetadataImage, acls: Sequence[Mapping[str, Any]]
                       ) -> tuple[list[dict[str, Any]], ctl.Decision]:
    results: list[dict[str, Any]] = []
    decision = ctl.Decision()
    new: set[AclEntry] = set()
    for a in acls:
        entry = AclEntry(*(a[f] for f in _FIELDS))
        problem = validate_entry(entry)
        if problem:
            results.append({"error": int(ErrorCode.INVALID_REQUEST), "message": problem})
            continue
        if entry not in image.acls.entries and entry not in new:
            new.add(entry)
            decision.records.append(AclCreated(**asdict(entry)))
        results.append({"error": 0, "message": None})
    return results, decision


def decide_delete_acls(image: MetadataImage, filters: Sequence[Mapping[str, Any]]
                       ) -> tuple[list[dict[str, Any]], ctl.Decision]:
    results: list[dict[str, Any]] = []
    decision = ctl.Decision()
    gone: set[AclEntry] = set()
    for flt in filters:
        hit = sorted(e for e in image.acls.entries if matches(e, flt))
        for e in hit:
            if e not in gone:
                gone.add(e)
                decision.records.append(AclRemoved(**asdict(e)))
        results.append({"error": 0, "message": None, "deleted": [asdict(e) for e in hit]})
    return results, decision


async def create_acls(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    results, decision = decide_create_acls(service._q().image(), body["acls"])
    if decision:
        await service._propose(decision)
    return {"results": results, "metadata_offset": service._q().committed_offset()}


async def delete_acls(service: ControllerService, body: dict[str, Any]) -> dict[str, Any]:
    results, decision = decide_delete_acls(service._q().image(), body["filters"])
    if decision:
        await service._propose(decision)
    return {"results": results, "metadata_offset": service._q().committed_offset()}
