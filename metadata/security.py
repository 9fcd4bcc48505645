"""Security metadata: SCRAM credentials as records, their image and their fold.

Theory of operation
-------------------
The active controller decides credential changes (``ALTER_USER_SCRAM_CREDENTIALS``,
``kraft/scram_admin.py``) and writes them as records to the ``@metadata`` log; every node folds
them into a ``ScramImage`` (a domain of ``MetadataImage``) and the SASL gate of a secured
listener looks users up there. Only what SCRAM needs is stored — salt, iterations, StoredKey,
ServerKey (``security/scram.py``) — never a password; someone who reads the metadata log can
impersonate the *server* to a client, not a client to the server.

* ``UserScramCredential`` — upsert of one (user, mechanism) credential.
* ``UserScramCredentialRemoved`` — the (user, mechanism) credential is gone.
* ``AclCreated`` / ``AclRemoved`` — one access control entry (``AclEntry``: principal, resource
  type and pattern, operation, allow/deny, host) is added / removed; the set of entries is the
  ``AclsImage`` the authorizer evaluates (``security/acl.py``). Adding an entry twice or removing
  one that is not there changes nothing.

``scram_to_records(image)`` / ``acls_to_records(image)`` list records whose fold onto the empty
image gives back an equal image (snapshots). Like ``rafka.metadata.groups`` this imports nothing from the rest of
``metadata`` but ``_base`` (the record base and the map helpers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from rafka.metadata._base import EMPTY_MAP, NestedMapDelta, Record, copy_fields

__all__ = [
    "ACL_RECORD_TYPES",
    "AclCreated",
    "AclEntry",
    "AclRemoved",
    "AclsDelta",
    "AclsImage",
    "acls_to_records",
    "SCRAM_RECORD_TYPES",
    "ScramEntry",
    "ScramImage",
    "ScramDelta",
    "UserScramCredential",
    "UserScramCredentialRemoved",
    "scram_to_records",
]


@dataclass(frozen=True, slots=True)
class UserScramCredential(Record):
    record_type: ClassVar[str] = "UserScramCredential"
    user: str
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True, slots=True)
class UserScramCredentialRemoved(Record):
    record_type: ClassVar[str] = "UserScramCredentialRemoved"
    user: str
    mechanism: str


SCRAM_RECORD_TYPES: tuple[type[Record], ...] = (UserScramCredential, UserScramCredentialRemoved)


@dataclass(frozen=True, slots=True)
class ScramEntry:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True, slots=True)
class ScramImage:
    """user -> mechanism -> ``ScramEntry``."""

    users: Mapping[str, Mapping[str, ScramEntry]] = field(default_factory=lambda: EMPTY_MAP)
    EMPTY: ClassVar[ScramImage]

    def get(self, user: str, mechanism: str) -> ScramEntry | None:
        return self.users.get(user, EMPTY_MAP).get(mechanism)


ScramImage.EMPTY = ScramImage()


class ScramDelta:
    def __init__(self, image: ScramImage) -> None:
        self.image = image
        self.users: NestedMapDelta[str, str, ScramEntry] = NestedMapDelta(image.users)

    def replay(self, record: Record) -> None:
        if isinstance(record, UserScramCredential):
            self.users.set(record.user, record.mechanism, ScramEntry(
                bytes(record.salt), record.iterations, bytes(record.stored_key),
                bytes(record.server_key)))
        elif isinstance(record, UserScramCredentialRemoved):
            self.users.set(record.user, record.mechanism, None)

    def apply(self) -> ScramImage:
        users = self.users.apply()
        return self.image if users is None else ScramImage(users)


def scram_to_records(image: ScramImage) -> list[Record]:
    return [UserScramCredential(user, mech, e.salt, e.iterations, e.stored_key, e.server_key)
            for user, mechs in image.users.items() for mech, e in mechs.items()]


# -- ACLs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    """One access control entry. ``resource_type``: topic, group, cluster, transactional_id;
    ``pattern_type``: literal (``resource_name`` "*" = every name) or prefixed; ``operation``:
    read, write, create, delete, alter, describe, describe_configs, alter_configs,
    cluster_action, idempotent_write or all; ``permission``: allow or deny; ``principal``
    "User:<name>" or "User:*"; ``host`` an IP address or "*"."""

    principal: str
    resource_type: str
    pattern_type: str
    resource_name: str
    operation: str
    permission: str
    host: str = "*"


@dataclass(frozen=True, slots=True)
class _AclRecord(Record):
    """The fields both ACL records carry: one access control entry."""

    principal: str
    resource_type: str
    pattern_type: str
    resource_name: str
    operation: str
    permission: str
    host: str = "*"

    def entry(self) -> AclEntry:
        return copy_fields(AclEntry, self)


@dataclass(frozen=True, slots=True)
class AclCreated(_AclRecord):
    record_type: ClassVar[str] = "AclCreated"


@dataclass(frozen=True, slots=True)
class AclRemoved(_AclRecord):
    record_type: ClassVar[str] = "AclRemoved"


ACL_RECORD_TYPES: tuple[type[Record], ...] = (AclCreated, AclRemoved)


@dataclass(frozen=True, slots=True)
class AclsImage:
    entries: frozenset[AclEntry] = frozenset()
    EMPTY: ClassVar[AclsImage]


AclsImage.EMPTY = AclsImage()


class AclsDelta:
    def __init__(self, image: AclsImage) -> None:
        self.image = image
        self.entries: set[AclEntry] | None = None

    def replay(self, record: Record) -> None:
        if isinstance(record, AclCreated | AclRemoved):
            if self.entries is None:
                self.entries = set(self.image.entries)
            if isinstance(record, AclCreated):
                self.entries.add(record.entry())
            else:
                self.entries.discard(record.entry())

    def apply(self) -> AclsImage:
        if self.entries is None or self.entries == self.image.entries:
            return self.image
        return AclsImage(frozenset(self.entries))


def acls_to_records(image: AclsImage) -> list[Record]:
    return [copy_fields(AclCreated, e) for e in sorted(image.entries)]
