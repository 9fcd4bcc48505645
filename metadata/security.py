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

``scram_to_records(image)`` lists records whose fold onto ``ScramImage.EMPTY`` gives back an
equal image (snapshots). Like ``metadata.groups`` this imports nothing from the rest of
``metadata`` but the record base.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from metadata._base import Record

__all__ = [
    "SCRAM_RECORD_TYPES",
    "ScramEntry",
    "ScramImage",
    "ScramDelta",
    "UserScramCredential",
    "UserScramCredentialRemoved",
    "scram_to_records",
]

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


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

    users: Mapping[str, Mapping[str, ScramEntry]] = field(default_factory=lambda: _EMPTY)
    EMPTY: ClassVar[ScramImage]

    def get(self, user: str, mechanism: str) -> ScramEntry | None:
        return self.users.get(user, _EMPTY).get(mechanism)


ScramImage.EMPTY = ScramImage()


class ScramDelta:
    def __init__(self, image: ScramImage) -> None:
        self.image = image
        self.changed: dict[str, dict[str, ScramEntry]] = {}

    def replay(self, record: Record) -> None:
        if isinstance(record, UserScramCredential | UserScramCredentialRemoved):
            cur = self.changed.get(record.user)
            if cur is None:
                cur = dict(self.image.users.get(record.user, {}))
                self.changed[record.user] = cur
            if isinstance(record, UserScramCredential):
                cur[record.mechanism] = ScramEntry(bytes(record.salt), record.iterations,
                                                   bytes(record.stored_key), bytes(record.server_key))
            else:
                cur.pop(record.mechanism, None)

    def apply(self) -> ScramImage:
        if not self.changed:
            return self.image
        users: dict[str, Mapping[str, ScramEntry]] = dict(self.image.users)
        for user, mechs in self.changed.items():
            if mechs:
                users[user] = MappingProxyType(dict(sorted(mechs.items())))
            else:
                users.pop(user, None)
        return ScramImage(MappingProxyType(dict(sorted(users.items()))) if users else _EMPTY)


def scram_to_records(image: ScramImage) -> list[Record]:
    return [UserScramCredential(user, mech, e.salt, e.iterations, e.stored_key, e.server_key)
            for user, mechs in image.users.items() for mech, e in mechs.items()]
