"""Produce and Fetch answers written by patching numbers into a kio-encoded template.

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

A number that a version does not have (a probe changes no byte: ``log_start_offset`` before
Produce v5) is skipped, not patched.

**Fetch** (``FetchAnswers``): the same for a Fetch answer whose records are not in it yet —
each partition's records are a 16-byte sentinel (or empty), spliced in afterwards by
``file_records.frame_with_files`` from memory or from the segment file. The numbers are the
throttle time, the session id and each partition's high watermark, last stable offset, log
start offset and preferred read replica; error codes, whether the aborted-transaction list is
null, and which partitions carry records are the shape. kio's build + encode of a one-partition
Fetch v12 answer costs ~22 µs (``timeit``), a patched template ~3 µs.

Templates are kept per (version, topics, partitions and their error codes), at most ``MAX_TEMPLATES``;
past that the cache starts over (a broker's clients send few distinct shapes).
"""

from __future__ import annotations

import struct
from typing import Any

from rafka.broker.kafka import codec

__all__ = ["Answers", "ProduceAnswers", "FetchAnswers", "MAX_TEMPLATES"]

MAX_TEMPLATES = 1024
# (format, marker): every byte of the marker non-zero, so a diff against 0 shows all of it
_I32 = (">i", 0x1B2C3D4E)
_I64 = (">q", 0x1B2C3D4E5F617283)
_UNPATCHABLE = object()


class _Template:
    __slots__ = ("frame", "fields")

    def __init__(self, frame: bytes, fields: list[tuple[str, int]]) -> None:
        self.frame = frame
        self.fields = fields  # (struct format, byte position in frame), in _values order


class _Kind:
    """How the answers of one API map onto templates: which answers have a patchable shape
    (``shape``: the template key, or None), their numbers in template order (``values``, with
    ``formats``), and an answer of the same shape carrying other numbers (``with_values``)."""

    api_key: int

    def shape(self, version: int, answer: dict[str, Any]) -> tuple[Any, ...] | None:
        raise NotImplementedError

    def values(self, answer: dict[str, Any]) -> list[int]:
        raise NotImplementedError

    def formats(self, answer: dict[str, Any]) -> list[tuple[str, int]]:
        raise NotImplementedError

    def with_values(self, answer: dict[str, Any], values: list[int]) -> dict[str, Any]:
        raise NotImplementedError


class _ProduceKind(_Kind):
    api_key = 0

    def shape(self, version: int, answer: dict[str, Any]) -> tuple[Any, ...] | None:
        """Error codes are part of the shape (kio takes only codes Kafka defines, so no marker
        can probe them; an answer is almost always all zeros)."""
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

    def values(self, answer: dict[str, Any]) -> list[int]:
        out = [int(answer.get("throttle_time") or 0)]
        for t in answer["responses"]:
            for p in t["partition_responses"]:
                out += (int(p["base_offset"]), int(p["log_start_offset"]))
        return out

    def formats(self, answer: dict[str, Any]) -> list[tuple[str, int]]:
        out = [_I32]
        for t in answer["responses"]:
            out += [_I64, _I64] * len(t["partition_responses"])
        return out

    def with_values(self, answer: dict[str, Any], values: list[int]) -> dict[str, Any]:
        it = iter(values)
        out: dict[str, Any] = {"throttle_time": next(it), "responses": []}
        for t in answer["responses"]:
            prs = [{"index": p["index"], "error_code": p["error_code"], "base_offset": next(it),
                    "log_start_offset": next(it), "log_append_time": None, "record_errors": (),
                    "error_message": None} for p in t["partition_responses"]]
            out["responses"].append({"name": t["name"], "partition_responses": prs})
        return out


class _FetchKind(_Kind):
    """A Fetch answer whose records are *fixed*: the caller puts a 16-byte sentinel (or
    nothing) where each partition's records go and splices the records in afterwards
    (``file_records.frame_with_files``), so only numbers vary between answers of a shape.
    Aborted-transaction lists (read_committed over an aborted transaction) are not patchable."""

    api_key = 1

    def shape(self, version: int, answer: dict[str, Any]) -> tuple[Any, ...] | None:
        topics = []
        for t in answer["responses"]:
            parts = []
            for p in t["partitions"]:
                aborted = p.get("aborted_transactions")
                if aborted or len(p.get("records") or b"") > 16:  # records: a sentinel or none
                    return None
                parts.append((p["partition_index"], int(p["error_code"]), aborted is None,
                              bytes(p.get("records") or b"")))
            topics.append((t["topic"], tuple(parts)))
        return (version, int(answer.get("error_code") or 0), tuple(topics))

    def values(self, answer: dict[str, Any]) -> list[int]:
        out = [int(answer.get("throttle_time") or 0), int(answer.get("session_id") or 0)]
        for t in answer["responses"]:
            for p in t["partitions"]:
                out += (int(p["high_watermark"]), int(p.get("last_stable_offset", -1)),
                        int(p.get("log_start_offset", -1)), int(p.get("preferred_read_replica", -1)))
        return out

    def formats(self, answer: dict[str, Any]) -> list[tuple[str, int]]:
        out = [_I32, _I32]
        for t in answer["responses"]:
            out += [_I64, _I64, _I64, _I32] * len(t["partitions"])
        return out

    def with_values(self, answer: dict[str, Any], values: list[int]) -> dict[str, Any]:
        it = iter(values)
        out: dict[str, Any] = {"throttle_time": next(it), "error_code": answer.get("error_code") or 0,
                               "session_id": next(it), "responses": []}
        for t in answer["responses"]:
            parts = [{"partition_index": p["partition_index"], "error_code": p["error_code"],
                      "high_watermark": next(it), "last_stable_offset": next(it),
                      "log_start_offset": next(it),
                      "aborted_transactions": p.get("aborted_transactions"),
                      "preferred_read_replica": next(it), "records": p.get("records") or b""}
                     for p in t["partitions"]]
            out["responses"].append({"topic": t["topic"], "partitions": parts})
        return out


def _kio(kind: _Kind, version: int, correlation_id: int, answer: dict[str, Any]) -> bytes:
    entity = codec.build(codec.response_schema(kind.api_key, version), answer)
    return bytes(codec.encode_response(kind.api_key, version, correlation_id, entity))


def _make(kind: _Kind, version: int, answer: dict[str, Any]) -> _Template | object:
    formats = kind.formats(answer)
    zeros = [0] * len(formats)
    base = _kio(kind, version, 0, kind.with_values(answer, zeros))
    fields: list[tuple[str, int]] = []
    for i, (fmt, marker) in enumerate(formats):
        probe = list(zeros)
        probe[i] = marker
        out = _kio(kind, version, 0, kind.with_values(answer, probe))
        if len(out) != len(base):
            return _UNPATCHABLE
        diff = [j for j in range(len(base)) if base[j] != out[j]]
        if not diff:  # a field this version does not have (e.g. log_start_offset before v5)
            fields.append((fmt, -1))
            continue
        want = struct.pack(fmt, marker)
        if diff[-1] - diff[0] + 1 != len(want) or out[diff[0]:diff[-1] + 1] != want:
            return _UNPATCHABLE
        fields.append((fmt, diff[0]))
    template = _Template(base, fields)
    # one check against kio with other values before any use
    check = [1000 * i + 7 for i in range(len(formats))]
    if _patch(template, 0x5A5A, check) != _kio(kind, version, 0x5A5A, kind.with_values(answer, check)):
        return _UNPATCHABLE
    return template


def _patch(t: _Template, correlation_id: int, values: list[int]) -> bytes:
    buf = bytearray(t.frame)
    struct.pack_into(">i", buf, 4, correlation_id)  # after the length prefix, in both headers
    for (fmt, pos), v in zip(t.fields, values, strict=True):
        if pos >= 0:
            struct.pack_into(fmt, buf, pos, v)
    return bytes(buf)


class Answers:
    """Answer frames of one API from templates (module docstring); one per listener and API."""

    __slots__ = ("_kind", "_templates", "hits", "misses")

    def __init__(self, kind: _Kind) -> None:
        self._kind = kind
        self._templates: dict[tuple[Any, ...], _Template | object] = {}
        self.hits = 0
        self.misses = 0  # answers left to kio (other shapes, first of a shape, unpatchable)

    def encode(self, version: int, correlation_id: int, answer: dict[str, Any]) -> bytes | None:
        """The whole answer frame, or None: encode it with kio."""
        kind = self._kind
        key = kind.shape(version, answer)
        if key is None:
            self.misses += 1
            return None
        t = self._templates.get(key)
        if t is None:
            if len(self._templates) >= MAX_TEMPLATES:
                self._templates.clear()
            t = self._templates[key] = _make(kind, version, answer)
        if t is _UNPATCHABLE:
            self.misses += 1
            return None
        self.hits += 1
        assert isinstance(t, _Template)
        return _patch(t, correlation_id, kind.values(answer))


class ProduceAnswers(Answers):
    """Produce answer frames from templates."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(_ProduceKind())


class FetchAnswers(Answers):
    """Fetch answer skeletons (records as sentinels) from templates."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(_FetchKind())
