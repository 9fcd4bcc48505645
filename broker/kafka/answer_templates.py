"""Produce answers written by patching numbers into a kio-encoded template.

Theory of operation
-------------------
A Produce answer is small and, on the hot path, always the same shape: per partition error 0,
a base offset and a log start offset, no log-append time, no record errors, no message.
kio writes it field by field in Python (build + encode ≈ 37 µs per answer on this VM, ~8 % of
the broker's CPU for a whole 256 KiB produce request, docs/performance.md). Yet for a given
API version and set of partitions only those numbers change, and they are fixed-width
big-endian integers: ``ProduceAnswers`` has kio encode a shape once, finds where each number
lies, and answers later requests of the same shape by copying the template and packing the
numbers (and the correlation id) in.

Nothing here knows the Produce schema: positions are *found in kio's own output*. The template
is encoded with every number 0, then once per number with only that number set to a marker
whose every byte is non-zero; the bytes that differ must be exactly the marker, big-endian, at
the number's width, and no encoding may change length — otherwise the shape is marked
unpatchable and always goes through kio. A template is then checked once against kio with
other values before it is used. Answers outside the common shape (an error message, record
errors, a log-append time) go through kio as before. ``tests/kafka_wire/test_answer_templates.py``
checks with Hypothesis that every answer this returns is byte for byte what kio writes.

Templates are kept per (version, topics, partitions and their error codes), at most ``MAX_TEMPLATES``;
past that the cache starts over (a broker's producers send few distinct shapes).
"""

from __future__ import annotations

import struct
from typing import Any

from rafka.broker.kafka import codec

__all__ = ["ProduceAnswers", "MAX_TEMPLATES"]

MAX_TEMPLATES = 1024
_PRODUCE = 0
# (format, marker): every byte of the marker non-zero, so a diff against 0 shows all of it
_I32 = (">i", 0x1B2C3D4E)
_I64 = (">q", 0x1B2C3D4E5F617283)
_UNPATCHABLE = object()


class _Template:
    __slots__ = ("frame", "fields")

    def __init__(self, frame: bytes, fields: list[tuple[str, int]]) -> None:
        self.frame = frame
        self.fields = fields  # (struct format, byte position in frame), in _values order


def _shape(version: int, answer: dict[str, Any]) -> tuple[Any, ...] | None:
    """The template key of ``answer``, or None when it is not of the patchable shape. Error
    codes are part of the shape (kio takes only codes Kafka defines, so no marker can probe
    them; an answer is almost always all zeros)."""
    topics = []
    for t in answer["responses"]:
        parts = []
        for p in t["partition_responses"]:
            if (p.get("log_append_time") is not None or p.get("record_errors")
                    or p.get("error_message") is not None):
                return None
            parts.append((p["index"], int(p["error_code"])))
        topics.append((t["name"], tuple(parts)))
    return (version, tuple(topics))


def _values(answer: dict[str, Any]) -> list[int]:
    """The numbers of ``answer``, in template field order."""
    out = [int(answer.get("throttle_time") or 0)]
    for t in answer["responses"]:
        for p in t["partition_responses"]:
            out += (int(p["base_offset"]), int(p["log_start_offset"]))
    return out


def _formats(answer: dict[str, Any]) -> list[tuple[str, int]]:
    out = [_I32]
    for t in answer["responses"]:
        out += [_I64, _I64] * len(t["partition_responses"])
    return out


def _with_values(answer: dict[str, Any], values: list[int]) -> dict[str, Any]:
    it = iter(values)
    out = {"throttle_time": next(it), "responses": []}
    for t in answer["responses"]:
        prs = [{"index": p["index"], "error_code": p["error_code"], "base_offset": next(it),
                "log_start_offset": next(it), "log_append_time": None, "record_errors": (),
                "error_message": None} for p in t["partition_responses"]]
        out["responses"].append({"name": t["name"], "partition_responses": prs})
    return out


def _kio(version: int, correlation_id: int, answer: dict[str, Any]) -> bytes:
    entity = codec.build(codec.response_schema(_PRODUCE, version), answer)
    return bytes(codec.encode_response(_PRODUCE, version, correlation_id, entity))


def _make(version: int, answer: dict[str, Any]) -> _Template | object:
    formats = _formats(answer)
    zeros = [0] * len(formats)
    base = _kio(version, 0, _with_values(answer, zeros))
    fields: list[tuple[str, int]] = []
    for i, (fmt, marker) in enumerate(formats):
        probe = list(zeros)
        probe[i] = marker
        out = _kio(version, 0, _with_values(answer, probe))
        if len(out) != len(base):
            return _UNPATCHABLE
        diff = [j for j in range(len(base)) if base[j] != out[j]]
        want = struct.pack(fmt, marker)
        if not diff or diff[-1] - diff[0] + 1 != len(want) or out[diff[0]:diff[-1] + 1] != want:
            return _UNPATCHABLE
        fields.append((fmt, diff[0]))
    template = _Template(base, fields)
    # one check against kio with other values before any use
    check = [1000 * i + 7 for i in range(len(formats))]
    if _patch(template, 0x5A5A, check) != _kio(version, 0x5A5A, _with_values(answer, check)):
        return _UNPATCHABLE
    return template


def _patch(t: _Template, correlation_id: int, values: list[int]) -> bytes:
    buf = bytearray(t.frame)
    struct.pack_into(">i", buf, 4, correlation_id)  # after the length prefix, in both headers
    for (fmt, pos), v in zip(t.fields, values, strict=True):
        struct.pack_into(fmt, buf, pos, v)
    return bytes(buf)


class ProduceAnswers:
    """Produce answer frames from templates (module docstring); one per listener."""

    __slots__ = ("_templates", "hits", "misses")

    def __init__(self) -> None:
        self._templates: dict[tuple[Any, ...], _Template | object] = {}
        self.hits = 0
        self.misses = 0  # answers left to kio (other shapes, first of a shape, unpatchable)

    def encode(self, version: int, correlation_id: int, answer: dict[str, Any]) -> bytes | None:
        """The whole answer frame, or None: encode it with kio."""
        key = _shape(version, answer)
        if key is None:
            self.misses += 1
            return None
        t = self._templates.get(key)
        if t is None:
            if len(self._templates) >= MAX_TEMPLATES:
                self._templates.clear()
            t = self._templates[key] = _make(version, answer)
        if t is _UNPATCHABLE:
            self.misses += 1
            return None
        self.hits += 1
        assert isinstance(t, _Template)
        return _patch(t, correlation_id, _values(answer))
