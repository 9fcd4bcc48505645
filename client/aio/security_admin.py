"""SCRAM credential and ACL administration on the client (``rafka user``, ``AsyncAdmin.*_scram_*``).

Theory of operation
-------------------
``upsert_scram_credential`` derives the credential **on the client** (``rafka.security.scram``: a
fresh random salt, ``iterations``, StoredKey, ServerKey) and sends only that in
ALTER_USER_SCRAM_CREDENTIALS; the broker forwards it to the active controller, which writes a
``UserScramCredential`` record and answers once committed (the broker waits for its own image,
so a login through that broker works at once). The password never crosses the network.
``delete_scram_credential`` removes one mechanism's credential (``ResourceNotFoundError`` when
there is none); ``describe_scram_credentials`` lists users, mechanisms and iteration counts (any
broker, from its image; never salts or keys).

Each call goes through ``AsyncAdmin._request`` (any broker, retried on NOT_CONTROLLER and
unreachable brokers until ``request_timeout_ms``); a refused entry raises its named error.

ACLs the same way: ``create_acls`` (CREATE_ACLS, forwarded to the controller; adding an entry
that exists is a no-op), ``describe_acls`` and ``delete_acls`` with a filter whose missing
fields match anything (``rafka acl``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rafka.security.scram import DEFAULT_ITERATIONS, derive_credential
from rafka.wire.errors import error_for
from rafka.wire.protocol import ApiKey

if TYPE_CHECKING:
    from rafka.client.aio.admin import AsyncAdmin

__all__ = ["upsert_scram_credential", "delete_scram_credential", "describe_scram_credentials",
           "ACL_FIELDS", "create_acls", "describe_acls", "delete_acls"]


async def _alter(admin: AsyncAdmin, body: dict[str, Any]) -> None:
    resp = await admin._request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
    resp.raise_for_error()
    for r in resp.body.get("results") or []:
        if r.get("error"):
            raise error_for(r["error"], f"{r['user']} {r['mechanism']}: {r.get('message') or ''}")


async def upsert_scram_credential(admin: AsyncAdmin, user: str, password: str, *,
                                  mechanism: str = "SCRAM-SHA-256",
                                  iterations: int = DEFAULT_ITERATIONS) -> None:
    """Create or replace ``user``'s credential for ``mechanism``."""
    cred = derive_credential(mechanism, password, iterations=iterations)
    await _alter(admin, {"upsertions": [{
        "user": user, "mechanism": mechanism, "iterations": cred.iterations, "salt": cred.salt,
        "stored_key": cred.stored_key, "server_key": cred.server_key}]})


async def delete_scram_credential(admin: AsyncAdmin, user: str, *,
                                  mechanism: str = "SCRAM-SHA-256") -> None:
    await _alter(admin, {"deletions": [{"user": user, "mechanism": mechanism}]})


async def describe_scram_credentials(admin: AsyncAdmin, users: Iterable[str] | None = None
                                     ) -> dict[str, dict[str, int]]:
    """user -> {mechanism: iterations}; a named user without credentials raises."""
    body = {"users": None if users is None else list(users)}
    resp = await admin._request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body)
    resp.raise_for_error()
    out: dict[str, dict[str, int]] = {}
    for u in resp.body.get("users") or []:
        if u.get("error"):
            raise error_for(u["error"], u.get("message") or "")
        out[u["user"]] = {c["mechanism"]: c["iterations"] for c in u.get("credentials") or []}
    return out


# -- ACLs --------------------------------------------------------------------------------

ACL_FIELDS = ("principal", "resource_type", "pattern_type", "resource_name", "operation",
              "permission", "host")


async def create_acls(admin: AsyncAdmin, acls: Iterable[dict[str, str]]) -> None:
    """Add access control entries (each a dict of ``ACL_FIELDS``; ``host`` defaults to "*")."""
    body = {"acls": [{**{"host": "*"}, **a} for a in acls]}
    resp = await admin._request(ApiKey.CREATE_ACLS, body)
    resp.raise_for_error()
    for a, r in zip(body["acls"], resp.body.get("results") or [], strict=False):
        if r.get("error"):
            raise error_for(r["error"], f"{a}: {r.get('message') or ''}")


def _filter(flt: dict[str, str | None]) -> dict[str, str | None]:
    unknown = set(flt) - set(ACL_FIELDS)
    if unknown:
        raise ValueError(f"unknown ACL filter field(s): {', '.join(sorted(unknown))}")
    return {f: flt.get(f) for f in ACL_FIELDS}


async def describe_acls(admin: AsyncAdmin, **flt: str | None) -> list[dict[str, str]]:
    """The entries matching the filter (a missing field matches anything)."""
    resp = await admin._request(ApiKey.DESCRIBE_ACLS, {"filter": _filter(flt)})
    resp.raise_for_error()
    return list(resp.body.get("acls") or [])


async def delete_acls(admin: AsyncAdmin, **flt: str | None) -> list[dict[str, str]]:
    """Delete every entry matching the filter; returns the deleted entries."""
    resp = await admin._request(ApiKey.DELETE_ACLS, {"filters": [_filter(flt)]})
    resp.raise_for_error()
    out: list[dict[str, str]] = []
    for r in resp.body.get("results") or []:
        if r.get("error"):
            raise error_for(r["error"], r.get("message") or "")
        out += r.get("deleted") or []
    return out
