"""The client commands of ``rafka`` (``rafka.cli`` adds ``server`` / ``cluster`` / ``chaos``).

Every client command takes ``--bootstrap`` (env ``RAFKA_BOOTSTRAP``, default 127.0.0.1:9092)
and the security options (``client/connect_options.py``: ``--security-protocol``, ``--user`` /
``--password``, ``--tls-ca``, ``--command-config FILE``, their env vars);
``list`` / ``describe`` take ``--json``. Errors print one line to stderr —
``error: <ERROR_CODE>: <message>`` — and exit with status 1 (no tracebacks); Ctrl-C exits 130.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rafka.client.connect_options import connection_options
from rafka.client.errors import RafkaError
from rafka.client.topic_cli import (
    add_topic_commands,
    effective_configs,
    format_configs,
    version_option,
)

__all__ = ["main", "whole_summaries"]

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _plural(n: int, noun: str) -> str:
    """``1 record``, ``5 records``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _fail(msg: str, code: int = 1) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def unwrap_exception(exc: BaseException) -> BaseException:
    """The one real error inside (nested) exception groups, as trio nurseries wrap them.

    A group of several errors is reduced by dropping ``trio.Cancelled`` (collateral of the
    nursery being cancelled); if exactly one error is left it is returned, else the group.
    """
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if type(e).__name__ != "Cancelled"] or list(exc.exceptions)
        if len(inner) != 1:
            return exc
        exc = inner[0]
    return exc


def error_line(exc: BaseException) -> str | None:
    """``CODE: message`` for the errors a CLI command reports in one line (else None)."""
    if isinstance(exc, RafkaError):
        return f"{exc.code.name}: {exc.message}"
    if isinstance(exc, NotImplementedError):
        return f"not supported: {exc}"
    if isinstance(exc, (ValueError, OSError)):
        return f"{type(exc).__name__}: {exc}"
    return None


def handle_errors(fn: F) -> F:
    """CLI command decorator: errors → one line ``error: CODE: message`` on stderr, exit 1;
    Ctrl-C → exit 130. Unwraps the exception groups trio nurseries raise."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as raised:
            if isinstance(raised, (SystemExit, GeneratorExit)):
                raise
            exc = unwrap_exception(raised)
            if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: 130; SIGTERM (client.terminate): 143
                sys.exit(getattr(exc, "exit_code", 130))
            line = error_line(exc)
            if line is None:
                raise
            _fail(line)

    return wrapper  # type: ignore[return-value]


_handle_errors = handle_errors


# --bootstrap and the security options (--security-protocol, --user/--password, --tls-ca,
# --command-config FILE, env vars), applied to every client command: client/connect_options.py
bootstrap_option = connection_options
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@version_option()
def main() -> None:
    """rafka — a Kafka-style distributed commit log."""


# ---------------------------------------------------------------------- topics


@main.group()
def topic() -> None:
    """Create, list, describe and delete topics."""


def _parse_configs(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        out[k] = v
    return out


@topic.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=1, show_default=True)
@click.option("--replication-factor", "-r", type=int, default=1, show_default=True)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="A topic NAME already there is no error (left as it is).")
@bootstrap_option
@_handle_errors
def topic_create(name: str, partitions: int, replication_factor: int, configs: tuple[str, ...],
                 if_not_exists: bool, bootstrap: str) -> None:
    """Create topic NAME."""
    from rafka.client.sync import Admin

    with Admin(bootstrap) as admin:
        created = admin.create_topic(name, partitions, replication_factor, _parse_configs(configs),
                                     exist_ok=if_not_exists)
    if not created:
        click.echo(f"topic {name} already exists")
        return
    click.echo(f"created topic {name} ({_plural(partitions, 'partition')}, replication factor {replication_factor})")


@topic.command("list")
@bootstrap_option
@json_option
@click.option("--internal", is_flag=True, help="Include internal topics.")
@_handle_errors
def topic_list(bootstrap: str, as_json: bool, internal: bool) -> None:
    """List topics."""
    from rafka.client.sync import Admin

    with Admin(bootstrap) as admin:
        names = admin.list_topics(include_internal=internal)
    if as_json:
        click.echo(json.dumps(names))
    else:
        for n in names:
            click.echo(n)


@topic.command("describe")
@click.argument("name")
@bootstrap_option
@json_option
@click.option("--all-configs", is_flag=True, help="Every effective config, defaults marked (not only overrides).")
@_handle_errors
def topic_describe(name: str, bootstrap: str, as_json: bool, all_configs: bool) -> None:
    """Leader, replicas, ISR and high watermark of each partition of NAME."""
    from rafka.client.sync import Admin

    with Admin(bootstrap) as admin:
        d = admin.describe_topic(name)
        effective = effective_configs(admin.describe_configs(name), d.configs) if all_configs else None
    if as_json:
        click.echo(json.dumps({
            "name": d.name, "topic_id": str(d.topic_id) if d.topic_id is not None else None,
            "internal": d.internal, "configs": d.configs,
            "partitions": [p._asdict() | {"replicas": list(p.replicas), "isr": list(p.isr)}
                           for p in d.partitions],
        } | ({"effective_configs": effective} if effective is not None else {}), default=str))
        return
    click.echo(f"topic {d.name}  partitions {len(d.partitions)}  id {d.topic_id}")
    if effective is not None:
        click.echo("  configs:")
        for line in format_configs(effective):
            click.echo(line)
    elif d.configs:
        click.echo("  configs: " + ", ".join(f"{k}={v}" for k, v in sorted(d.configs.items())))
    click.echo(f"  {'partition':>9}  {'leader':>6}  {'epoch':>5}  {'replicas':<12} {'isr':<12} {'high_watermark':>14}")
    for p in d.partitions:
        hw = "?" if p.high_watermark is None else str(p.high_watermark)
        click.echo(f"  {p.partition:>9}  {p.leader:>6}  {p.leader_epoch:>5}  "
                   f"{','.join(map(str, p.replicas)):<12} {','.join(map(str, p.isr)):<12} {hw:>14}")


@topic.command("delete")
@click.argument("name")
@bootstrap_option
@_handle_errors
def topic_delete(name: str, bootstrap: str) -> None:
    """Delete topic NAME."""
    from rafka.client.sync import Admin

    with Admin(bootstrap) as admin:
        admin.delete_topic(name)
    click.echo(f"deleted topic {name}")


# ---------------------------------------------------------------------- produce / consume


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


@main.command()
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
@bootstrap_option
@_handle_errors
def produce(topic_name: str, key_separator: str | None, key: str | None, headers: tuple[str, ...],
            partition: int | None, value_file: Any, progress: bool | None, acks: str, compression: str,
            linger_ms: float, bootstrap: str) -> None:
    """Send one record per stdin line to TOPIC (or one record: --value-file)."""
    from rafka.client.io_cli import ProduceProgress, parse_headers, produce_lines
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
    click.echo(f"produced {_plural(n, 'record')} to {topic_name}", err=True)


@main.command(help=CONSUME_HELP)
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
@bootstrap_option
@_handle_errors
def consume(topic_name: str, group: str | None, instance_id: str | None, partitions: tuple[int, ...],
            offset: str | None,
            from_beginning: bool, max_messages: int | None, timeout_ms: int | None, exit_at_end: bool,
            print_key: bool,
            fmt: str | None, isolation_level: str, bootstrap: str) -> None:
    from rafka.client.errors import ErrorCode, error_for
    from rafka.client.io_cli import (
        EARLIEST,
        LATEST,
        Clamped,
        compile_format,
        parse_offset,
        records_until_end,
        resolve_partitions,
        seek_to_spec,
        write_records,
    )
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


# ---------------------------------------------------------------------- quorum / groups


@main.group()
def quorum() -> None:
    """The controller quorum."""


@quorum.command("describe")
@bootstrap_option
@json_option
@_handle_errors
def quorum_describe(bootstrap: str, as_json: bool) -> None:
    """Voters, leader, epoch, metadata offsets and lag."""
    from rafka.client.sync import Admin

    with Admin(bootstrap) as admin:
        q = admin.describe_quorum()
    q.pop("error", None)
    if as_json:
        click.echo(json.dumps(q, default=str))
        return
    click.echo(f"leader {q.get('leader_id')}  epoch {q.get('epoch')}  high watermark {q.get('high_watermark')}")
    for v in q.get("voters") or []:
        where = f"  voter {v.get('id')}  raft {v.get('raft', '?')}  rpc {v.get('rpc', '?')}"
        if v.get("directory_id"):
            where += f"  dir {v['directory_id'][:8]}"
        if v.get("reachable") is False:  # a dead or cut-off voter: no offset to report
            click.echo(f"{where}  UNREACHABLE  raft lag {v.get('raft_lag')}")
            continue
        extra = f"  log start {v['log_start_offset']}" if v.get("log_start_offset") else ""
        click.echo(f"{where}  offset {v.get('metadata_offset')}  lag {v.get('lag')}{extra}")
    for o in q.get("observers") or []:
        state = "  fenced" if o.get("fenced") else ""
        click.echo(f"  broker {o.get('id')}  offset {o.get('metadata_offset')}  lag {o.get('lag')}{state}")


@quorum.command("add-voter")
@click.option("--id", "voter_id", type=int, required=True, help="the controller's node id")
@click.option("--address", required=True, help="its Raft address, HOST:RAFT_PORT")
@bootstrap_option
@_handle_errors
def quorum_add_voter(voter_id: int, address: str, bootstrap: str) -> None:
    """Add a controller to the quorum (KIP-853). Start the node first: on an empty data dir it
    waits to be added. One change at a time; docs/operations.md."""
    from rafka.client.sync import Admin

    with Admin(bootstrap) as admin:
        voters = admin.add_raft_voter(voter_id, address)
    click.echo(f"voter {voter_id} added; voters {sorted(v['id'] for v in voters if v.get('id') is not None)}")


@quorum.command("remove-voter")
@click.option("--id", "voter_id", type=int, required=True, help="the voter's node id")
@bootstrap_option
@_handle_errors
def quorum_remove_voter(voter_id: int, bootstrap: str) -> None:
    """Remove a controller from the quorum (e.g. one whose disk is lost). docs/operations.md."""
    from rafka.client.sync import Admin

    with Admin(bootstrap) as admin:
        voters = admin.remove_raft_voter(voter_id)
    click.echo(f"voter {voter_id} removed; voters {sorted(v['id'] for v in voters if v.get('id') is not None)}")


add_topic_commands(topic, bootstrap_option, _handle_errors)  # alter-config, add-partitions


def _add_group_commands() -> None:
    from rafka.client.group_cli import group  # rafka group list|describe|reset-offsets|delete

    main.add_command(group, "group")
    from rafka.client.txn_cli import (
        transactions,  # rafka transactions list|describe|producers|abort
    )

    main.add_command(transactions, "transactions")
    from rafka.client.security_cli import acl, user  # rafka user|acl (docs/security.md)

    main.add_command(user, "user")
    main.add_command(acl, "acl")
    from rafka.client.quota_cli import quota  # rafka quota set|list (docs/security.md)

    main.add_command(quota, "quota")
    # rafka partition reassign, rafka broker decommission|unregister (docs/operations.md)
    from rafka.client.partition_cli import broker, partition

    main.add_command(partition, "partition")
    main.add_command(broker, "broker")


_add_group_commands()

from rafka.client.top import top as _top  # noqa: E402 - rafka top: live view of the nodes' /metrics

main.add_command(_top, "top")
from rafka.client.console import console as _console  # noqa: E402 - rafka console: the web console

main.add_command(_console, "console")


def whole_summaries(group: click.Group) -> None:
    """Command lists (``rafka --help``, ``rafka group --help``…) show each command's whole first
    sentence, wrapped, instead of cutting it at the terminal width with "..."."""

    def format_commands(ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    group.format_commands = format_commands  # type: ignore[method-assign]
    for cmd in group.commands.values():
        if isinstance(cmd, click.Group):
            whole_summaries(cmd)
