"""What every metadata domain shares: the record base and the copy-on-write map helpers.

A record is a frozen, slotted dataclass with a ``record_type`` tag; ``to_dict`` gives a
msgpack-able dict (tuples become lists) tagged with ``type``, ``from_dict`` reverses it and
ignores unknown keys, so a newer writer's extra fields do not break an older reader.

Records and images name the same facts the same way (``Partition`` / ``PartitionRegistration``,
``GroupMember`` / ``GroupMemberImage``...): ``copy_fields(cls, src, **values)`` builds one from
the other, so the fold (record → image) and the snapshot (image → record) cannot forget a field.

Images hold read-only maps in key order (``sorted_map``: one shared ``EMPTY_MAP`` when empty),
so two nodes that folded the same records hold equal images. A domain's delta collects what
records changed and builds the next map with ``apply_changes`` (``None`` removes a key);
``NestedMapDelta`` is that fold for a map of maps (broker configs, SCRAM credentials, quotas),
copying an inner map on its first change and dropping it once emptied.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Generic, TypeVar

__all__ = ["EMPTY_MAP", "NestedMapDelta", "Record", "apply_changes", "copy_fields", "from_wire",
           "sorted_map", "to_wire"]

K = TypeVar("K")
T = TypeVar("T")
N = TypeVar("N")
V = TypeVar("V")

EMPTY_MAP: Mapping[Any, Any] = MappingProxyType({})


def to_wire(value: Any) -> Any:
    if isinstance(value, tuple):
        return [to_wire(v) for v in value]
    return value


def from_wire(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(from_wire(v) for v in value)
    return value


@dataclass(frozen=True, slots=True)
class Record:
    record_type: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.record_type}
        for f in dataclasses.fields(self):
            out[f.name] = to_wire(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: from_wire(v) for k, v in d.items() if k in names})


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def copy_fields(cls: type[T], src: object, **values: Any) -> T:
    """A ``cls`` (a dataclass) with ``values``; every other field that ``src`` has the same name
    for is copied from ``src``, the rest keep their defaults."""
    copied = {n: getattr(src, n) for n in _field_names(cls) if n not in values and hasattr(src, n)}
    return cls(**copied, **values)


def sorted_map(d: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only copy of ``d`` in key order (``EMPTY_MAP`` when ``d`` is empty)."""
    return MappingProxyType(dict(sorted(d.items()))) if d else EMPTY_MAP  # type: ignore[type-var]


def apply_changes(base: Mapping[K, V], changes: Mapping[K, V | None]) -> Mapping[K, V]:
    """``base`` with ``changes`` applied — a value replaces, ``None`` removes — as a
    ``sorted_map``."""
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return sorted_map(out)


class NestedMapDelta(Generic[K, N, V]):
    """Copy-on-first-write edits of a map of maps ``{key: {name: value}}``."""

    __slots__ = ("base", "changed")

    def __init__(self, base: Mapping[K, Mapping[N, V]]) -> None:
        self.base = base
        self.changed: dict[K, dict[N, V]] = {}

    def set(self, key: K, name: N, value: V | None) -> None:
        """Set ``name`` under ``key`` to ``value``; ``None`` removes it."""
        cur = self.changed.get(key)
        if cur is None:
            cur = self.changed[key] = dict(self.base.get(key, EMPTY_MAP))
        if value is None:
            cur.pop(name, None)
        else:
            cur[name] = value

    def apply(self) -> Mapping[K, Mapping[N, V]] | None:
        """The new map (an emptied inner map drops its key), or None when nothing was set."""
        if not self.changed:
            return None
        return apply_changes(
            self.base, {k: sorted_map(v) if v else None for k, v in self.changed.items()})
