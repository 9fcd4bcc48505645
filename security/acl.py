"""ACL evaluation, pure: may this principal, from this host, do this to this resource?

Theory of operation
-------------------
``Authorizer(entries, super_users)`` answers ``authorize(principal, host, operation,
resource_type, name)`` from a set of ``metadata.security.AclEntry`` (the ``AclsImage``), the
way Kafka's ``StandardAuthorizer`` does:

1. a super user (``super.users``, e.g. ``User:admin``) may do everything;
2. an entry *matches* when its principal is the caller's or ``User:*``, its host is the
   caller's or ``*``, its resource type is the resource's, and its name matches — literal:
   equal, or ``*`` (every name); prefixed: the resource's name starts with it — and its
   operation is the one asked or ``all``;
3. **deny wins**: any matching deny entry refuses; otherwise any matching allow entry grants;
   otherwise the answer is no (default deny once an authorizer is on);
4. an allow of read, write, delete or alter implies describe; an allow of alter_configs
   implies describe_configs (as in Kafka). Deny entries imply nothing.

``has_any_allow(principal, host, operation, resource_type)``: whether some allow entry of
that kind exists (an idempotent producer needs WRITE on *some* topic or IDEMPOTENT_WRITE on
the cluster, as in Kafka).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from rafka.metadata.security import AclEntry

__all__ = ["RESOURCE_TYPES", "PATTERN_TYPES", "OPERATIONS", "PERMISSIONS", "CLUSTER_NAME",
           "Authorizer", "validate_entry"]

RESOURCE_TYPES: Final = ("topic", "group", "cluster", "transactional_id")
PATTERN_TYPES: Final = ("literal", "prefixed")
OPERATIONS: Final = ("all", "read", "write", "create", "delete", "alter", "describe",
                     "describe_configs", "alter_configs", "cluster_action", "idempotent_write")
PERMISSIONS: Final = ("allow", "deny")
CLUSTER_NAME: Final = "rafka-cluster"  # the one cluster resource (Kafka's "kafka-cluster")

# operation asked -> allowed operations that also grant it
_IMPLIED: Final = {"describe": ("read", "write", "delete", "alter"),
                   "describe_configs": ("alter_configs",)}


def validate_entry(e: AclEntry) -> str | None:
    """A reason ``e`` is not a valid entry, or None."""
    if not e.principal.startswith("User:") or len(e.principal) < 6:
        return f"principal must be User:<name> or User:*, got {e.principal!r}"
    for value, allowed, what in ((e.resource_type, RESOURCE_TYPES, "resource type"),
                                 (e.pattern_type, PATTERN_TYPES, "pattern type"),
                                 (e.operation, OPERATIONS, "operation"),
                                 (e.permission, PERMISSIONS, "permission")):
        if value not in allowed:
            return f"{what} must be one of {', '.join(allowed)}, got {value!r}"
    if not e.resource_name or not e.host:
        return "resource name and host must not be empty"
    if e.pattern_type == "prefixed" and e.resource_name == "*":
        return "a prefixed pattern cannot be '*' (use literal '*' for every name)"
    return None


def _name_matches(e: AclEntry, name: str) -> bool:
    if e.pattern_type == "prefixed":
        return name.startswith(e.resource_name)
    return e.resource_name in ("*", name)


class Authorizer:
    def __init__(self, entries: Iterable[AclEntry], super_users: Iterable[str] = ()) -> None:
        self.super_users = frozenset(super_users)
        self._by_type: dict[str, list[AclEntry]] = {}
        for e in entries:
            self._by_type.setdefault(e.resource_type, []).append(e)

    def _candidates(self, principal: str, host: str, resource_type: str) -> Iterable[AclEntry]:
        for e in self._by_type.get(resource_type, ()):
            if e.principal in (principal, "User:*") and e.host in (host, "*"):
                yield e

    def authorize(self, principal: str | None, host: str, operation: str, resource_type: str,
                  name: str) -> bool:
        if principal is None:
            return False
        if principal in self.super_users:
            return True
        granting = (operation, "all", *_IMPLIED.get(operation, ()))
        allowed = False
        for e in self._candidates(principal, host, resource_type):
            if not _name_matches(e, name):
                continue
            if e.permission == "deny" and e.operation in (operation, "all"):
                return False  # deny wins
            if e.permission == "allow" and e.operation in granting:
                allowed = True
        return allowed

    def has_any_allow(self, principal: str | None, host: str, operation: str,
                      resource_type: str) -> bool:
        if principal is None:
            return False
        if principal in self.super_users:
            return True
        return any(e.permission == "allow" and e.operation in (operation, "all")
                   for e in self._candidates(principal, host, resource_type))
