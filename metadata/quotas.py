"""Client quota configuration as metadata: ``ClientQuota`` records, their image and their fold.

Theory of operation
-------------------
The active controller decides quota changes (``ALTER_CLIENT_QUOTAS``, ``kraft/quota_admin.py``)
and writes one ``ClientQuota`` record per changed value; every node folds them into a
``QuotasImage`` (a domain of ``MetadataImage``) and its quota enforcement
(``security/throttle.py``) reads the byte rates there.

An *entity* is a user principal ("User:alice"), a client id, or both; either part may be
``DEFAULT`` ("<default>": the default for every user / client id, as Kafka's ``--entity-default``)
and a missing part is ``None``. ``entity_key(user, client_id)`` is the canonical tuple the image
is keyed by — ``("user", U)``, ``("client-id", C)`` or ``("user", U, "client-id", C)`` — the
same keys ``security.quota.QuotaBook`` asks its ``quota_of`` about. Keys are
``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per second, a float); a record with
``value`` None removes the key, and an entity without keys disappears.

``quotas_to_records(image)`` lists records whose fold onto the empty image gives back an equal
image (snapshots). Like ``rafka.metadata.security`` this imports nothing from the rest of ``metadata``
but ``_base`` (the record base and the map helpers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from rafka.metadata._base import EMPTY_MAP, NestedMapDelta, Record

__all__ = [
    "DEFAULT",
    "QUOTA_KEYS",
    "QUOTA_RECORD_TYPES",
    "ClientQuota",
    "QuotaEntityKey",
    "QuotasDelta",
    "QuotasImage",
    "entity_key",
    "entity_parts",
    "quotas_to_records",
]

DEFAULT = "<default>"
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate")
QuotaEntityKey = tuple[str, ...]


def entity_key(user: str | None, client_id: str | None) -> QuotaEntityKey:
    """The image's key of the entity (at least one part must be given)."""
    if user is not None and client_id is not None:
        return ("user", user, "client-id", client_id)
    if user is not None:
        return ("user", user)
    if client_id is not None:
        return ("client-id", client_id)
    raise ValueError("a quota entity names a user, a client id or both")


def entity_parts(key: QuotaEntityKey) -> tuple[str | None, str | None]:
    """``(user, client_id)`` of an entity key (the inverse of ``entity_key``)."""
    parts = dict(zip(key[::2], key[1::2], strict=True))
    return parts.get("user"), parts.get("client-id")


@dataclass(frozen=True, slots=True)
class ClientQuota(Record):
    record_type: ClassVar[str] = "ClientQuota"
    user: str | None
    client_id: str | None
    key: str
    value: float | None  # None: remove the key


QUOTA_RECORD_TYPES: tuple[type[Record], ...] = (ClientQuota,)


@dataclass(frozen=True, slots=True)
class QuotasImage:
    """entity key -> {quota key: value}."""

    entities: Mapping[QuotaEntityKey, Mapping[str, float]] = field(default_factory=lambda: EMPTY_MAP)
    EMPTY: ClassVar[QuotasImage]

    def get(self, entity: QuotaEntityKey, key: str) -> float | None:
        return self.entities.get(entity, EMPTY_MAP).get(key)


QuotasImage.EMPTY = QuotasImage()


class QuotasDelta:
    def __init__(self, image: QuotasImage) -> None:
        self.image = image
        self.entities: NestedMapDelta[QuotaEntityKey, str, float] = NestedMapDelta(image.entities)

    def replay(self, record: Record) -> None:
        if not isinstance(record, ClientQuota):
            return
        try:
            ent = entity_key(record.user, record.client_id)
        except ValueError:
            return  # total: a record naming no entity changes nothing
        self.entities.set(ent, record.key, None if record.value is None else float(record.value))

    def apply(self) -> QuotasImage:
        entities = self.entities.apply()
        if entities is None:
            return self.image
        return QuotasImage(entities) if entities else QuotasImage.EMPTY


def quotas_to_records(image: QuotasImage) -> list[Record]:
    out: list[Record] = []
    for ent, values in image.entities.items():
        user, client_id = entity_parts(ent)
        out.extend(ClientQuota(user, client_id, k, v) for k, v in values.items())
    return out
