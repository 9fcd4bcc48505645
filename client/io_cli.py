"""``rafka produce`` / ``rafka consume`` options as kcat and rpk users expect them (issue 15).

Theory of operation
-------------------
``client/cli.py`` declares the two commands; the option handling lives here, as pure functions
where it can (tested without a broker):

* produce: ``parse_headers`` (``-H key=value``, repeatable: every record gets them),
  ``produce_lines`` (one record per stdin line, sent ``CHUNK_LINES`` lines at a time with
  ``Producer.send_batch``; a fixed ``--key``, ``--key-separator``, ``--partition``) and
  ``ProduceProgress`` — a rich progress line on stderr once the input is large (more than one
  chunk), by default only when stderr is a terminal, with a bar when stdin is a regular file
  (its size is known). ``--value-file PATH`` (``-`` = stdin) sends the whole file as one
  record instead.
* consume: ``parse_offset`` reads kcat's ``-o`` forms (``earliest``/``beginning``,
  ``latest``/``end``, ``N``, ``-N`` = N before the end, ``@TS`` or ``s@TS`` = the first record
  at or after the timestamp in ms) into an ``OffsetSpec``; ``seek_to_spec`` moves an assigned
  consumer there (an absolute offset is clamped into the log; a timestamp after the last record
  starts at the end, as Kafka's ``offsetsForTimes`` says; a clamped absolute offset is reported,
  and is an error with ``--exit-at-end``, as kcat's ``-e``). ``records_until_end`` is ``-e``. ``compile_format`` turns a kcat
  ``-f`` string into a function of a record giving its bytes: ``%t`` topic, ``%p`` partition,
  ``%o`` offset, ``%k`` key, ``%v`` (and kcat's ``%s``) value, ``%T`` timestamp (ms), ``%h``
  headers as ``k=v`` CSV, ``%K`` / ``%S`` key / value length (-1 for none), ``%%``; escapes
  ``\\n \\t \\r \\\\ \\0`` and ``\\xHH``. ``write_records`` is the print loop: without a
  format it writes value and newline inline (no per-record call), as before.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import IO, TYPE_CHECKING, Any, Literal, NamedTuple

import click
from rafka.client.errors import ErrorCode, error_for
from rafka.client.types import ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    from rafka.client.sync import Consumer, Producer

__all__ = ["CHUNK_LINES", "EARLIEST", "LATEST", "OffsetSpec", "ProduceProgress", "compile_format", "parse_headers",
           "parse_offset", "produce_lines", "resolve_partitions", "seek_to_spec", "write_records",
           "Clamped", "records_until_end"]

CHUNK_LINES = 10_000  # lines per send_batch (the whole-batch fast path)
_IN_FLIGHT_CHUNKS = 10  # wait for the acknowledgements of this many chunks, then go on

# ---------------------------------------------------------------------- produce


def parse_headers(items: Iterable[str]) -> list[tuple[str, bytes]]:
    """``-H key=value`` options → record headers (order kept; a key may repeat)."""
    out = []
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="-H/--header")
        out.append((k, v.encode()))
    return out


class ProduceProgress:
    """A progress line on stderr for ``rafka produce`` (rich), shown once ``threshold`` lines
    were read; ``enabled=None`` = only when stderr is a terminal. A bar when the size of the
    input is known (stdin is a regular file)."""

    def __init__(self, enabled: bool | None, total_bytes: int | None = None,
                 threshold: int = CHUNK_LINES, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.forced = bool(enabled)
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total_bytes = total_bytes
        self.threshold = threshold
        self.records = 0
        self.bytes_read = 0
        self._progress: Any = None
        self._task: Any = None

    @classmethod
    def for_input(cls, enabled: bool | None, source: IO[bytes]) -> ProduceProgress:
        """The size of ``source`` when it is a regular file (a bar), else unknown (a counter)."""
        total = None
        try:
            st = os.fstat(source.fileno())
            if stat.S_ISREG(st.st_mode):
                total = max(0, st.st_size - source.tell())
        except (OSError, ValueError, AttributeError):
            pass
        return cls(enabled, total)

    def advance(self, records: int, bytes_read: int) -> None:
        self.records += records
        self.bytes_read += bytes_read
        if not self.enabled:
            return
        if self._progress is None:
            if self.records < self.threshold:
                return
            self._start()
        self._progress.update(self._task, completed=self.bytes_read, records=self.records)

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )

        console = Console(file=self.stream, force_terminal=self.forced or None)
        columns: list[Any] = [TextColumn("produce {task.fields[records]:,} records")]
        if self.total_bytes:
            columns.append(BarColumn())
        columns += [DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn()]
        self._progress = Progress(*columns, console=console, transient=True)
        self._task = self._progress.add_task("produce", total=self.total_bytes or None, records=0)
        self._progress.start()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> ProduceProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lines(source: IO[bytes]) -> Iterator[list[bytes]]:
    while chunk := list(islice(source, CHUNK_LINES)):
        yield chunk


def produce_lines(producer: Producer, topic: str, source: IO[bytes], *, key_separator: bytes | None = None,
                  key: bytes | None = None, headers: list[tuple[str, bytes]] | None = None,
                  partition: int | None = None, progress: ProduceProgress | None = None) -> int:
    """One record per line of ``source`` (line end stripped), ``CHUNK_LINES`` per
    ``send_batch``; waits for each group of chunks' acknowledgements, raising the first
    error. Returns the number of records sent."""
    n = 0
    futures: list[Any] = []
    for raw in _lines(source):
        chunk = [line.rstrip(b"\r\n") for line in raw]
        keys: list[bytes | None] | None = None
        if key_separator is not None:
            keys = [None] * len(chunk)
            for i, line in enumerate(chunk):
                k, found, v = line.partition(key_separator)
                if found:
                    keys[i], chunk[i] = k, v
        elif key is not None:
            keys = [key] * len(chunk)
        futures.append(producer.send_batch(topic, chunk, keys=keys, partition=partition,
                                           headers=[headers] * len(chunk) if headers else None))
        n += len(chunk)
        if progress is not None:
            progress.advance(len(chunk), sum(map(len, raw)))
        if len(futures) >= _IN_FLIGHT_CHUNKS:
            _check(futures)
    producer.flush()
    _check(futures)
    return n


def _check(futures: list[Any]) -> None:
    for f in futures:
        f.result()
    futures.clear()


# ---------------------------------------------------------------------- consume: offsets


class OffsetSpec(NamedTuple):
    """Where ``rafka consume --offset`` starts: ``kind`` and its number (unused for
    earliest / latest)."""

    kind: Literal["earliest", "latest", "offset", "from_end", "timestamp"]
    value: int = 0


EARLIEST = OffsetSpec("earliest")
LATEST = OffsetSpec("latest")


def parse_offset(text: str) -> OffsetSpec:
    """kcat's ``-o``: ``earliest|beginning``, ``latest|end``, ``N``, ``-N`` (N before the
    end), ``@TS`` / ``s@TS`` (the first record at or after TS, ms since the epoch)."""
    t = text.strip().lower()
    if t in ("earliest", "beginning", "oldest"):
        return EARLIEST
    if t in ("latest", "end", "newest"):
        return LATEST
    try:
        if t.startswith(("@", "s@")):
            ts = int(t.partition("@")[2])
            if ts < 0:
                raise ValueError
            return OffsetSpec("timestamp", ts)
        n = int(t)
    except ValueError:
        raise click.BadParameter(f"{text!r}: use earliest, latest, N, -N or @TIMESTAMP_MS",
                                 param_hint="--offset") from None
    return OffsetSpec("from_end", -n) if t.startswith("-") else OffsetSpec("offset", n)


def resolve_partitions(consumer: Consumer, topic: str, wanted: Iterable[int]) -> list[TopicPartition]:
    """``wanted`` partitions of ``topic`` (all of them when empty); one that does not exist is
    ``UNKNOWN_TOPIC_OR_PARTITION``."""
    have = consumer.partitions_for_topic(topic)
    chosen = sorted(set(wanted)) or sorted(have)
    missing = [p for p in chosen if p not in have]
    if missing:
        raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"topic {topic!r} has partitions 0..{max(have, default=-1)}, not {missing[0]}")
    return [TopicPartition(topic, p) for p in chosen]


class Clamped(NamedTuple):
    """An absolute ``--offset`` outside a partition's log, and where consume starts instead."""

    tp: TopicPartition
    wanted: int
    start: int
    end: int

    def message(self) -> str:
        where = "past the end" if self.wanted > self.end else "before the start"
        return (f"offset {self.wanted} is {where} of {self.tp.topic} partition {self.tp.partition} "
                f"(its log ends at offset {self.end}); starting at {self.start}")


def seek_to_spec(consumer: Consumer, tps: list[TopicPartition], spec: OffsetSpec,
                 clamped: list[Clamped] | None = None) -> dict[TopicPartition, int]:
    """Move the assigned ``tps`` to ``spec`` (see the module docstring); returns the offsets
    chosen for absolute, relative and timestamp specs ({} for earliest / latest). An absolute
    offset outside a log is clamped into it and, with ``clamped``, reported there."""
    if spec.kind == "earliest":
        consumer.seek_to_beginning(*tps)
        return {}
    if spec.kind == "latest":
        consumer.seek_to_end(*tps)
        return {}
    begin = consumer.beginning_offsets(tps)
    end = consumer.end_offsets(tps)
    if spec.kind == "timestamp":
        found = consumer.offsets_for_times({tp: spec.value for tp in tps})
        target = {tp: (found[tp].offset if found.get(tp) is not None else end[tp]) for tp in tps}  # type: ignore[union-attr]
    elif spec.kind == "from_end":
        target = {tp: end[tp] - spec.value for tp in tps}
    else:
        target = {tp: spec.value for tp in tps}
    out = {tp: min(max(off, begin[tp]), end[tp]) for tp, off in target.items()}
    if clamped is not None and spec.kind == "offset":
        clamped.extend(Clamped(tp, target[tp], off, end[tp]) for tp, off in out.items() if off != target[tp])
    for tp, off in out.items():
        consumer.seek(tp, off)
    return out


def records_until_end(consumer: Consumer, poll_ms: int = 200) -> Iterator[ConsumerRecord]:
    """kcat's ``-e``: the consumer's records until every assigned partition has been read up
    to the end offset it had when it was first seen assigned (a group member waits for its
    assignment first)."""
    ends: dict[TopicPartition, int] = {}
    while True:
        for recs in consumer.poll(timeout_ms=poll_ms).values():
            yield from recs
        assigned = consumer.assignment()
        new = [tp for tp in assigned if tp not in ends]
        if new:
            ends.update(consumer.end_offsets(new))
        if assigned and all(consumer.position(tp) >= ends[tp] for tp in assigned):
            return


# ---------------------------------------------------------------------- consume: output

Formatter = Callable[[ConsumerRecord], bytes]


def _length(b: bytes | None) -> bytes:
    return b"-1" if b is None else str(len(b)).encode()


def _headers(hs: Iterable[tuple[str, bytes]]) -> bytes:
    return b",".join(k.encode() + b"=" + v for k, v in hs)


_FIELDS: dict[str, Formatter] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "k": lambda r: r.key or b"",
    "v": lambda r: r.value or b"",
    "s": lambda r: r.value or b"",  # kcat's name for the value
    "T": lambda r: str(r.timestamp).encode(),
    "h": lambda r: _headers(r.headers),
    "K": lambda r: _length(r.key),
    "S": lambda r: _length(r.value),
}
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "0": b"\0"}


def _parse_format(fmt: str) -> list[bytes | Formatter]:
    parts: list[bytes | Formatter] = []
    lit = bytearray()
    i = 0
    while i < len(fmt):
        c = fmt[i]
        nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
        if c == "%":
            if nxt == "%":
                lit += b"%"
            elif nxt in _FIELDS:
                if lit:
                    parts.append(bytes(lit))
                    lit.clear()
                parts.append(_FIELDS[nxt])
            else:
                raise click.BadParameter(f"%{nxt} in {fmt!r}: known are %t %p %o %k %v %s %T %h %K %S %%",
                                         param_hint="--format")
            i += 2
        elif c == "\\" and nxt == "x":
            try:
                lit.append(int(fmt[i + 2:i + 4], 16))
            except ValueError:
                raise click.BadParameter(f"\\x needs two hex digits in {fmt!r}", param_hint="--format") from None
            i += 4
        elif c == "\\" and nxt in _ESCAPES:
            lit += _ESCAPES[nxt]
            i += 2
        else:
            lit += c.encode()
            i += 1
    if lit:
        parts.append(bytes(lit))
    return parts


def compile_format(fmt: str) -> Formatter:
    """A kcat ``-f`` string → record → bytes (see the module docstring); ``BadParameter``
    names an unknown ``%`` code."""
    parts = _parse_format(fmt)
    fields = [p if callable(p) else (lambda _r, b=p: b) for p in parts]

    def render(rec: ConsumerRecord) -> bytes:
        return b"".join([f(rec) for f in fields])

    return render


def write_records(records: Iterable[ConsumerRecord], out: IO[bytes], *, formatter: Formatter | None = None,
                  print_key: bool = False, max_messages: int | None = None) -> int:
    """Print ``records`` — with ``formatter``, else value (``print_key``: key TAB value) and a
    newline — stopping after ``max_messages``; flushes every 1000. Returns how many."""
    n = 0
    for rec in records:
        if formatter is not None:
            out.write(formatter(rec))
        else:
            if print_key:
                out.write((rec.key or b"") + b"\t")
            out.write((rec.value or b"") + b"\n")
        n += 1
        if max_messages is not None and n >= max_messages:
            break
        if n % 1000 == 0:
            out.flush()
    return n
