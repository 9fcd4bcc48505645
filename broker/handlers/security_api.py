"""Security APIs a broker answers from its own metadata image (docs/security.md).

``describe_user_scram_credentials(body, image)``: which users have which SCRAM mechanisms and
iteration counts — never salts or keys. ``users`` None lists every user; a named user without
credentials is ``RESOURCE_NOT_FOUND`` in its entry.

``describe_acls(body, image)``: the access control entries matching ``filter`` (a None field
matches anything), sorted.

``describe_client_quotas(body, image, usage)``: the configured byte-rate quotas
(``metadata/quotas.py``; ``user`` / ``client_id`` filter exactly) and ``usage``, what this
broker measured (``security.throttle.ClientQuotas.usage``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rafka.metadata import MetadataImage
from rafka.wire.errors import ErrorCode

__all__ = ["describe_user_scram_credentials", "describe_acls", "describe_client_quotas"]


def describe_user_scram_credentials(body: dict[str, Any], image: MetadataImage) -> dict[str, Any]:
    users = image.scram.users
    names = body.get("users")
    out = []
    for name in (sorted(users) if names is None else names):
        mechs = users.get(name)
        if not mechs:
            out.append({"user": name, "error": int(ErrorCode.RESOURCE_NOT_FOUND),
                        "message": f"user {name!r} has no SCRAM credentials", "credentials": []})
            continue
        out.append({"user": name, "error": 0, "message": None,
                    "credentials": [{"mechanism": m, "iterations": e.iterations}
                                    for m, e in mechs.items()]})
    return {"error": 0, "users": out}


def describe_acls(body: dict[str, Any], image: MetadataImage) -> dict[str, Any]:
    from rafka.kraft.acl_admin import matches

    flt = body["filter"]
    return {"error": 0, "acls": [asdict(e) for e in sorted(image.acls.entries) if matches(e, flt)]}


def describe_client_quotas(body: dict[str, Any], image: MetadataImage,
                           usage: list[dict[str, Any]]) -> dict[str, Any]:
    from rafka.metadata.quotas import entity_parts

    want_user, want_client = body.get("user"), body.get("client_id")
    entries = []
    for ent, values in image.quotas.entities.items():
        user, client_id = entity_parts(ent)
        if (want_user is None or want_user == user) and (want_client is None or want_client == client_id):
            entries.append({"user": user, "client_id": client_id, "values": dict(values)})
    return {"error": 0, "entries": entries, "usage": usage}
