"""``rafka produce`` / ``rafka consume``, with options as kcat and rpk users expect them (issue 15).

Theory of operation
-------------------
The two commands are at the end of this module: each builds one blocking ``Producer`` or
``Consumer`` and hands it to the option handling above them — pure functions where it can be
(tested without a broker):

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
from rafka.client.cli._common import command_options, key_value, plural
from rafka.client.errors import ErrorCode, error_for
from rafka.client.types import ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    from rafka.client.sync import Consumer, Producer

__all__ = ["CHUNK_LINES", "EARLIEST", "LATEST", "OffsetSpec", "ProduceProgress", "compile_format", "parse_headers",
           "parse_offset", "produce_lines", "resolve_partitions", "seek_to_spec", "write_records",
           "Clamped", "records_until_end", "produce", "consume"]

CHUNK_LINES = 10_000  # lines per send_batch (the whole-batch fast path)
_IN_FLIGHT_CHUNKS = 10  # wait for the acknowledgements of this many chunks, then go on

# ---------------------------------------------------------------------- produce


def parse_headers(items: Iterable[str]) -> list[tuple[str, bytes]]:
    """``-H key=value`` options → record headers (order kept; a key may repeat)."""
    return [(k, v.encode()) for k, v in (key_value(item, "-H/--header") for item in items)]


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


# ---------------------------------------------------------------------- the commands


CONSUME_HELP = """Print the records of TOPIC, one per line: each value by default, or as --format says.

\b
Without --group: every partition of TOPIC (or those of --partition), from --offset.
With --group G: the partitions come from the group and each starts at G's committed offset
(--offset earliest|latest only says where to start in a partition without one).

\b
A TOPIC that does not exist is an error at once (exit 1). An --offset past the end (or before
the start) of a partition is reported on stderr and consume starts at the end (start); with
--exit-at-end (-e) it is an error (exit 1), and -e otherwise stops once every partition is
read to the end it had at the start, as kcat -e.

\b
Auto-commit (with --group): every 5 s, the offsets of the records printed by earlier polls.
When consume ends - --max-messages reached, --timeout-ms without records, Ctrl-C or SIGTERM -
it commits every record it printed, then leaves the group at once. An error exit commits only
what earlier polls returned (the record in hand comes again); SIGKILL commits nothing more and
the member stays in the group until its session times out.
"""


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@click.option("--key-separator", default=None, help="Split each line into KEY<SEP>VALUE.")
@click.option("--key", default=None, help="This key for every record.")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="A header on every record (repeatable).")
@click.option("--partition", type=click.IntRange(0), default=None, metavar="N",
              help="Send every record to partition N (default: by key, or sticky).")
@click.option("--value-file", type=click.File("rb"), default=None, metavar="PATH",
              help="Send the whole file as ONE record's value ('-': all of stdin).")
@click.option("--progress/--no-progress", default=None,
              help="A progress line on stderr for large inputs (default: when stderr is a terminal).")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True)
@click.option("--compression", type=click.Choice(["none", "lz4"]), default="none", show_default=True)
@click.option("--linger-ms", type=float, default=5, show_default=True)
@command_options()
def produce(topic_name: str, key_separator: str | None, key: str | None, headers: tuple[str, ...],
            partition: int | None, value_file: Any, progress: bool | None, acks: str, compression: str,
            linger_ms: float, bootstrap: str) -> None:
    """Send one record per stdin line to TOPIC (or one record: --value-file)."""
    from rafka.client.sync import Producer

    if key is not None and key_separator is not None:
        raise click.UsageError("--key and --key-separator exclude each other")
    if value_file is not None and key_separator is not None:
        raise click.UsageError("--key-separator splits lines: not with --value-file")
    hdrs = parse_headers(headers)
    with Producer(bootstrap, acks=acks if acks == "all" else int(acks),
                  compression_type=None if compression == "none" else compression,
                  linger_ms=linger_ms) as producer:
        if value_file is not None:
            producer.send_and_wait(topic_name, value_file.read(), key.encode() if key is not None else None,
                                   hdrs or None, partition)
            n = 1
        else:
            with ProduceProgress.for_input(progress, sys.stdin.buffer) as bar:
                n = produce_lines(producer, topic_name, sys.stdin.buffer,
                                  key_separator=key_separator.encode() if key_separator else None,
                                  key=key.encode() if key is not None else None, headers=hdrs,
                                  partition=partition, progress=bar)
    click.echo(f"produced {plural(n, 'record')} to {topic_name}", err=True)


@click.command(help=CONSUME_HELP)
@click.argument("topic_name", metavar="TOPIC")
@click.option("--group", default=None, help="Consumer group (see auto-commit below).")
@click.option("--instance-id", default=None, metavar="ID",
              help="Static group membership (Kafka's group.instance.id): a restart with the same "
                   "ID takes its partitions back without a rebalance; no leave on exit.")
@click.option("--partition", "partitions", type=click.IntRange(0), multiple=True, metavar="N",
              help="Only partition N (repeatable; not with --group).")
@click.option("--offset", "offset", default=None, metavar="SPEC",
              help="Where to start: earliest | latest (default) | N | -N (N before the end) | "
                   "@TIMESTAMP_MS (first record at or after it), as kcat's -o.")
@click.option("--from-beginning", is_flag=True, help="Same as --offset earliest.")
@click.option("--max-messages", type=int, default=None, help="Exit after N records.")
@click.option("--timeout-ms", type=int, default=None, help="Exit when no record came for T ms.")
@click.option("--exit-at-end", "-e", is_flag=True,
              help="Exit once every partition is read to the end it had at the start (kcat -e); "
                   "an --offset outside a partition's log is then an error (exit 1).")
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE.")
@click.option("--format", "-f", "fmt", default=None, metavar="FMT",
              help="As kcat's -f: %t topic, %p partition, %o offset, %k key, %v value, %T timestamp (ms), "
                   "%h headers (k=v,...), %K/%S key/value length, \\n \\t escapes. Example: '%k=%v\\n'.")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True,
              help="read_committed: only records of committed transactions (docs/transactions.md).")
@command_options()
def consume(topic_name: str, group: str | None, instance_id: str | None, partitions: tuple[int, ...],
            offset: str | None,
            from_beginning: bool, max_messages: int | None, timeout_ms: int | None, exit_at_end: bool,
            print_key: bool,
            fmt: str | None, isolation_level: str, bootstrap: str) -> None:
    from rafka.client.sync import Consumer
    from rafka.client.terminate import sigterm_as_interrupt

    spec = parse_offset(offset) if offset is not None else None
    if from_beginning:
        if spec not in (None, EARLIEST):
            raise click.UsageError("--from-beginning is --offset earliest: not with another --offset")
        spec = EARLIEST
    if instance_id is not None and group is None:
        raise click.UsageError("--instance-id is a group member's identity: it needs --group")
    if group is not None and partitions:
        raise click.UsageError("--partition and --group exclude each other: the group assigns partitions")
    if group is not None and spec is not None and spec.kind not in ("earliest", "latest"):
        raise click.UsageError("with --group, --offset is earliest or latest (where to start without a "
                               "committed offset); to move the group, use 'rafka group reset-offsets'")
    if print_key and fmt is not None:
        raise click.UsageError("--print-key is --format '%k\\t%v\\n': give one of them")
    formatter = compile_format(fmt) if fmt is not None else None
    if max_messages is not None and max_messages <= 0:
        return
    out = sys.stdout.buffer
    stopped: KeyboardInterrupt | None = None
    reset = "earliest" if spec is not None and spec.kind == "earliest" else "latest"
    with sigterm_as_interrupt(), Consumer(*((topic_name,) if group is not None else ()), bootstrap_servers=bootstrap,
                                          group_id=group, auto_offset_reset=reset,
                                          consumer_timeout_ms=timeout_ms, isolation_level=isolation_level,
                                          **({"group_instance_id": instance_id} if instance_id else {})) as consumer:
        # a missing topic is an error at once, with or without a group (a member would wait)
        tps = resolve_partitions(consumer, topic_name, partitions)
        if group is None:
            consumer.assign(tps)
            clamped: list[Clamped] = []
            seek_to_spec(consumer, tps, spec or LATEST, clamped)
            for c in clamped:
                if exit_at_end:
                    raise error_for(ErrorCode.OFFSET_OUT_OF_RANGE, c.message().split("; ")[0])
                click.echo(f"consume: {c.message()}", err=True)
        try:
            write_records(records_until_end(consumer) if exit_at_end else consumer, out, formatter=formatter, print_key=print_key, max_messages=max_messages)
        except KeyboardInterrupt as exc:  # Ctrl-C / SIGTERM is a stop, not a failure: the close
            stopped = exc                 # commits what was printed and leaves the group
        out.flush()
    if stopped is not None:
        raise stopped
