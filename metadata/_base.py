"""The common shape of every metadata record (shared by ``records`` and ``groups``).

A record is a frozen, slotted dataclass with a ``record_type`` tag; ``to_dict`` gives a
msgpack-able dict (tuples become lists) tagged with ``type``, ``from_dict`` reverses it and
ignores unknown keys, so a newer writer's extra fields do not break an older reader.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["Record", "to_wire", "from_wire"]


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
