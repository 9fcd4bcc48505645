"""``rafka group …``: list, describe, reset-offsets, delete (click commands).

``client/cli.py`` adds the exported ``group`` click group to ``rafka``. Each command opens one
``ClientCore`` in a trio nursery and uses the helpers of :mod:`rafka.client.groups`. Lag is computed
here, client side, as Kafka's tooling does: high watermark (LIST_OFFSETS latest) − committed.

``reset-offsets`` behaves as Kafka's: an explicit ``--to-offset`` is clamped into the log
(past the log end → the log end, below the log start → the log start; a committed offset past
the end would skip every record later written in between), each clamp said on stderr; and a
group with members is refused unless ``--force`` (the members keep their positions and may
commit over the reset).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import click
import trio
from rafka.client.aio._core import ClientCore
from rafka.client.aio.offsets import EARLIEST, LATEST, list_offsets
from rafka.client.connect_options import connection_options
from rafka.client.errors import ErrorCode, RafkaError, error_for
from rafka.client.groups import (
    alter_group_offsets,
    delete_groups,
    describe_group,
    fetch_committed,
    list_groups,
)
from rafka.client.types import TopicPartition
from rafka.security.client import ClientSecurity

__all__ = ["group"]

T = TypeVar("T")
_bootstrap = connection_options  # --bootstrap + the security options (client/connect_options.py)
_json = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def _run(bootstrap: str, fn: Callable[[ClientCore], Awaitable[T]]) -> T:
    async def main() -> T:
        async with trio.open_nursery() as nursery:
            core = ClientCore(bootstrap, client_id="rafka-cli",
                              security=ClientSecurity.from_kwargs({}))  # the CLI's options
            core.open(nursery)
            try:
                return await fn(core)
            finally:
                await core.aclose()
                nursery.cancel_scope.cancel()

    return trio.run(main)


def _errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``client.cli.handle_errors`` (one line ``error: CODE: message``, exit 1), imported lazily:
    ``rafka.client.cli`` imports this module."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rafka.client.cli import handle_errors

        return handle_errors(fn)(*args, **kwargs)

    return wrapper


@click.group()
def group() -> None:
    """Consumer groups."""


@group.command("list")
@_bootstrap
@_json
@_errors
def group_list(bootstrap: str, as_json: bool) -> None:
    """List consumer groups (state, members)."""
    groups = _run(bootstrap, list_groups)
    if as_json:
        click.echo(json.dumps(groups))
        return
    for g in groups:
        click.echo(f"{g['group_id']}\t{g['state']}\t{g['members']} members")


@group.command("describe")
@click.argument("group_id", metavar="G")
@_bootstrap
@_json
@_errors
def group_describe(group_id: str, bootstrap: str, as_json: bool) -> None:
    """Members, assignment, committed offsets and lag of group G."""
    d = _run(bootstrap, lambda core: describe_group(core, group_id))
    if as_json:
        click.echo(json.dumps(d))
        return
    click.echo(f"group {group_id}  state {d.get('state')}  epoch {d.get('group_epoch')}  "
               f"members {len(d.get('members', []))}")
    for m in d.get("members", []):
        parts = ", ".join(f"{a['name']}-{p}" for a in m["assignment"] for p in a["partitions"]) or "-"
        static = f"  instance {m['instance_id']}" if m.get("instance_id") else ""
        click.echo(f"  member {m['member_id']}{static}  epoch {m['member_epoch']}  client {m['client_id'] or '-'}  "
                   f"topics {','.join(m['subscribed_topics'])}  owns {parts}")
    rows = d.get("partitions", [])
    with_meta = any(r.get("metadata") for r in rows)  # the column only when some commit carried one
    click.echo(f"  {'TOPIC':<20} {'PART':>4} {'COMMITTED':>10} {'HW':>10} {'LAG':>8}  MEMBER"
               + ("  METADATA" if with_meta else ""))
    for r in rows:
        lag = "-" if r["lag"] is None else r["lag"]
        committed = "-" if r["committed"] < 0 else r["committed"]
        click.echo(f"  {r['topic']:<20} {r['partition']:>4} {committed:>10} {r['high_watermark']:>10} "
                   f"{lag:>8}  {r['member_id'] or '-'}" + (f"  {r.get('metadata') or '-'}" if with_meta else ""))


@group.command("reset-offsets")
@click.argument("group_id", metavar="G")
@click.option("--topic", "topics", multiple=True, help="Only these topics (default: every committed one).")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-datetime", default=None, metavar="ISO8601", help="First offset at/after this time.")
@click.option("--to-offset", type=int, default=None)
@click.option("--dry-run", is_flag=True, help="Show the new offsets, change nothing.")
@click.option("--force", is_flag=True,
              help="Reset even while G has members (they keep their positions and may commit over it).")
@_bootstrap
@_json
@_errors
def group_reset_offsets(group_id: str, topics: tuple[str, ...], to_earliest: bool, to_latest: bool,
                        to_datetime: str | None, to_offset: int | None, dry_run: bool, force: bool,
                        bootstrap: str, as_json: bool) -> None:
    """Set G's committed offsets (G must have no members, unless --force).

    --to-offset is clamped into each partition's log: past the log end it becomes the log end,
    below the log start the log start (each clamp is reported)."""
    modes = [to_earliest, to_latest, to_datetime is not None, to_offset is not None]
    if sum(modes) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset")
    notes: list[str] = []

    async def work(core: ClientCore) -> dict[TopicPartition, int]:
        if not force:
            await _refuse_active(core, group_id)
        if topics:
            tps: list[TopicPartition] = []
            for t in topics:
                await core.wait_for_topic(t, core.request_timeout_ms)
                tps.extend(core.metadata.partitions_for(t))
        else:
            tps = sorted(await fetch_committed(core, group_id, None))
        if not tps:
            return {}
        if to_offset is not None:
            new = await _clamped(core, tps, to_offset, notes)
        else:
            ts = EARLIEST if to_earliest else LATEST
            if to_datetime is not None:
                ts = int(datetime.fromisoformat(to_datetime).timestamp() * 1000)
            found = await list_offsets(core, {tp: ts for tp in tps}, attempts=3)
            new = {tp: off for tp, (off, _) in found.items() if off >= 0}
            if to_datetime is not None:  # no record at/after the time: the end
                missing = [tp for tp in tps if tp not in new]
                if missing:
                    ends = await list_offsets(core, {tp: LATEST for tp in missing}, attempts=3)
                    new.update({tp: off for tp, (off, _) in ends.items()})
        if not dry_run:
            await alter_group_offsets(core, group_id, new, force=force)
        return new

    new = _run(bootstrap, work)
    for note in notes:
        click.echo(note, err=True)
    rows = [{"topic": tp.topic, "partition": tp.partition, "offset": off} for tp, off in sorted(new.items())]
    if as_json:
        click.echo(json.dumps(rows))
        return
    for r in rows:
        click.echo(f"{r['topic']}\t{r['partition']}\t{r['offset']}")
    if dry_run:
        click.echo("(dry run: nothing changed)")


async def _refuse_active(core: ClientCore, group_id: str) -> None:
    """NON_EMPTY_GROUP, as Kafka's tool says it, when ``group_id`` has members."""
    try:
        d = await describe_group(core, group_id)
    except RafkaError as exc:
        if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
            return  # a group that does not exist yet has no members
        raise
    members = d.get("members") or []
    if members:
        n = len(members)
        raise error_for(ErrorCode.NON_EMPTY_GROUP,
                        f"group {group_id!r} has {n} active member{'s' if n != 1 else ''} (state {d.get('state')}): "
                        "stop its consumers first, or pass --force (they may commit over the reset)")


async def _clamped(core: ClientCore, tps: list[TopicPartition], offset: int,
                   notes: list[str]) -> dict[TopicPartition, int]:
    """``offset`` for each partition, clamped into [log start, log end]; each clamp → ``notes``."""
    starts = await list_offsets(core, {tp: EARLIEST for tp in tps}, attempts=3)
    ends = await list_offsets(core, {tp: LATEST for tp in tps}, attempts=3)
    out = {}
    for tp in tps:
        start, end = starts[tp][0], ends[tp][0]
        out[tp] = min(max(offset, start), end)
        if offset > end:
            notes.append(f"offset {offset} is past the log end {end} of {tp.topic}-{tp.partition}: reset to {end}")
        elif offset < start:
            notes.append(f"offset {offset} is before the log start {start} of {tp.topic}-{tp.partition}: "
                         f"reset to {start}")
    return out


@group.command("delete")
@click.argument("group_ids", metavar="G", nargs=-1, required=True)
@_bootstrap
@_errors
def group_delete(group_ids: tuple[str, ...], bootstrap: str) -> None:
    """Delete groups with no members (their committed offsets are tombstoned)."""
    results = _run(bootstrap, lambda core: delete_groups(core, group_ids))
    failed = False
    for gid, err in results.items():
        if err is None:
            click.echo(f"deleted group {gid}")
        else:
            failed = True
            click.echo(f"error: {gid}: {err.code.name}: {err.message}", err=True)
    if failed:
        sys.exit(1)
