"""``rafka group …``: list, lag, describe, reset-offsets, delete (click commands).

Theory of operation
-------------------
Each command opens one ``ClientCore`` (``_common.run_core``) and uses the helpers of
:mod:`rafka.client.groups`, which find each group's coordinator. Lag is computed client side,
as Kafka's tooling does: high watermark (LIST_OFFSETS latest) − committed.

``reset-offsets`` behaves as Kafka's ``kafka-consumer-groups --reset-offsets``: a dry run that
prints the plan (old → new per partition) unless ``--execute``; the strategies and partition
selection are planned by :mod:`rafka.client.reset_plan`; every new offset is clamped into the
log (past the log end → the log end, below the log start → the log start; a committed offset
past the end would skip every record later written in between), each clamp said on stderr; and
a group with members is refused unless ``--force`` (the members keep their positions and may
commit over the reset).
"""

from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

import click
from rafka.client.aio._core import ClientCore
from rafka.client.aio.offsets import EARLIEST, LATEST, list_offsets
from rafka.client.cli._common import command_options, run_core
from rafka.client.errors import ErrorCode, RafkaError, error_for
from rafka.client.groups import (
    alter_group_offsets,
    delete_groups,
    describe_group,
    fetch_committed,
    list_groups,
)
from rafka.client.reset_plan import (
    PlanRow,
    Strategy,
    format_plan,
    parse_datetime,
    parse_duration,
    parse_topic_selection,
    plan,
    read_plan_file,
)
from rafka.client.types import OffsetAndMetadata, TopicPartition

__all__ = ["group"]


@click.group()
def group() -> None:
    """Consumer groups."""


@group.command("list")
@command_options(json=True)
def group_list(bootstrap: str, as_json: bool) -> None:
    """List consumer groups (state, members)."""
    groups = run_core(bootstrap, list_groups)
    if as_json:
        click.echo(json.dumps(groups))
        return
    for g in groups:
        click.echo(f"{g['group_id']}\t{g['state']}\t{g['members']} members")


@group.command("lag")
@command_options(json=True)
def group_lag(bootstrap: str, as_json: bool) -> None:
    """Lag of every group, cluster-wide, in one table (kafka-consumer-groups --describe --all-groups).

    Each group is described by its own coordinator (whichever node leads its __consumer_offsets
    partition), so this is the whole cluster's view, whichever --bootstrap node is asked."""

    async def work(core: ClientCore) -> list[dict[str, Any]]:
        out = []
        for g in await list_groups(core):
            try:
                d = await describe_group(core, g["group_id"])
            except RafkaError as exc:
                out.append({"group": g["group_id"], "state": g.get("state"), "members": g.get("members"),
                            "lag": None, "partitions": 0, "error": f"{exc.code.name}: {exc.message}"})
                continue
            lags = [r["lag"] for r in d.get("partitions", []) if r["lag"] is not None]
            out.append({"group": g["group_id"], "state": d.get("state"), "members": len(d.get("members", [])),
                        "lag": sum(lags) if lags else None, "partitions": len(d.get("partitions", []))})
        return out

    rows = run_core(bootstrap, work)
    if as_json:
        click.echo(json.dumps(rows))
        return
    click.echo(f"{'GROUP':<24} {'STATE':<12} {'MEMBERS':>7} {'PARTITIONS':>10} {'LAG':>10}")
    for r in rows:
        lag = "-" if r["lag"] is None else r["lag"]
        click.echo(f"{r['group']:<24} {r['state'] or '-':<12} {r['members']:>7} {r['partitions']:>10} {lag:>10}"
                   + (f"  ({r['error']})" if r.get("error") else ""))


@group.command("describe")
@click.argument("group_id", metavar="G")
@command_options(json=True)
def group_describe(group_id: str, bootstrap: str, as_json: bool) -> None:
    """Members, assignment, committed offsets and lag of group G."""
    d = run_core(bootstrap, lambda core: describe_group(core, group_id))
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
@click.option("--topic", "topics", multiple=True, metavar="T[:P,P]",
              help="Topic T (every partition) or T:0,1 (those); repeatable.")
@click.option("--all-topics", is_flag=True, help="Every topic G has committed offsets for (the default).")
@click.option("--to-earliest", is_flag=True, help="The start of each log.")
@click.option("--to-latest", is_flag=True, help="The end of each log (skip everything).")
@click.option("--to-current", is_flag=True, help="The committed offsets (no change; a check of the plan).")
@click.option("--to-offset", type=int, default=None, metavar="N", help="Offset N (clamped into each log).")
@click.option("--shift-by", type=int, default=None, metavar="N", help="The committed offset plus N (N < 0: back).")
@click.option("--to-datetime", default=None, metavar="ISO8601",
              help="The first record at/after this time (no zone: local time).")
@click.option("--by-duration", default=None, metavar="PnDTnHnMnS",
              help="The first record at/after now minus this duration (e.g. PT1H).")
@click.option("--from-file", type=click.File("r"), default=None, metavar="CSV",
              help="Offsets from a topic,partition,offset CSV (what --export writes).")
@click.option("--execute", is_flag=True, help="Change the offsets (without it: a dry run that prints the plan).")
@click.option("--dry-run", is_flag=True, help="Print the plan, change nothing (the default).")
@click.option("--export", is_flag=True, help="Print the plan as topic,partition,offset CSV (for --from-file).")
@click.option("--force", is_flag=True,
              help="Reset even while G has members (they keep their positions and may commit over it).")
@click.option("--metadata", default="", metavar="TEXT",
              help="Store TEXT with each new offset (OffsetAndMetadata; group describe shows it).")
@command_options(json=True)
def group_reset_offsets(group_id: str, topics: tuple[str, ...], all_topics: bool, to_earliest: bool,
                        to_latest: bool, to_current: bool, to_offset: int | None, shift_by: int | None,
                        to_datetime: str | None, by_duration: str | None, from_file: IO[str] | None,
                        execute: bool, dry_run: bool, export: bool, force: bool, metadata: str,
                        bootstrap: str, as_json: bool) -> None:
    """Plan, and with --execute set, G's committed offsets (kafka-consumer-groups --reset-offsets).

    \b
    A dry run unless --execute: prints GROUP TOPIC PARTITION OLD-OFFSET -> NEW-OFFSET.
    G must have no live members (NON_EMPTY_GROUP), unless --force. Every new offset is clamped
    into its partition's log (each clamp is reported on stderr)."""
    strategy = _strategy(to_earliest, to_latest, to_current, to_offset, shift_by, to_datetime, by_duration,
                         from_file is not None)
    if execute and dry_run:
        raise click.UsageError("--execute and --dry-run exclude each other")
    if topics and all_topics:
        raise click.UsageError("--topic and --all-topics exclude each other")
    try:
        selection = [parse_topic_selection(t) for t in topics]
        file_offsets = read_plan_file(from_file.read(), from_file.name) if from_file is not None else None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    notes: list[str] = []

    async def work(core: ClientCore) -> list[PlanRow]:
        if not force:  # as Kafka's tool, a dry run too: its plan could not be executed
            await _refuse_active(core, group_id)
        tps = await _selected(core, group_id, selection, file_offsets)
        if not tps:
            return []
        old = await fetch_committed(core, group_id, tps)
        starts = await list_offsets(core, {tp: EARLIEST for tp in tps}, attempts=3)
        ends = await list_offsets(core, {tp: LATEST for tp in tps}, attempts=3)
        found = None
        if strategy.kind == "time":
            found = {tp: off for tp, (off, _) in
                     (await list_offsets(core, {tp: strategy.value for tp in tps}, attempts=3)).items()}
        rows, clamps = plan(strategy, tps, old, {tp: v[0] for tp, v in starts.items()},
                            {tp: v[0] for tp, v in ends.items()}, found, file_offsets)
        notes.extend(clamps)
        if execute:
            await alter_group_offsets(core, group_id,
                                      {r.tp: OffsetAndMetadata(r.new, metadata) for r in rows},
                                      force=force)
        return rows

    rows = run_core(bootstrap, work)
    for note in notes:
        click.echo(note, err=True)
    if as_json:
        click.echo(json.dumps([{"topic": r.tp.topic, "partition": r.tp.partition, "old": r.old,
                                "offset": r.new} for r in rows]))
    elif export:
        for r in rows:
            click.echo(f"{r.tp.topic},{r.tp.partition},{r.new}")
    else:
        for line in format_plan(group_id, rows):
            click.echo(line)
    if not execute:
        click.echo("(dry run: nothing changed; add --execute to apply)", err=as_json or export)


def _strategy(to_earliest: bool, to_latest: bool, to_current: bool, to_offset: int | None,
              shift_by: int | None, to_datetime: str | None, by_duration: str | None,
              from_file: bool) -> Strategy:
    chosen = [name for name, on in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                    ("--to-current", to_current), ("--to-offset", to_offset is not None),
                                    ("--shift-by", shift_by is not None), ("--to-datetime", to_datetime is not None),
                                    ("--by-duration", by_duration is not None), ("--from-file", from_file)) if on]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-current, --to-offset, "
                               "--shift-by, --to-datetime, --by-duration, --from-file"
                               + (f" (got {', '.join(chosen)})" if chosen else ""))
    try:
        if to_datetime is not None:
            return Strategy("time", parse_datetime(to_datetime))
        if by_duration is not None:
            return Strategy("time", int((time.time() - parse_duration(by_duration).total_seconds()) * 1000))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if to_offset is not None:
        return Strategy("offset", to_offset)
    if shift_by is not None:
        return Strategy("shift", shift_by)
    return Strategy("earliest" if to_earliest else "latest" if to_latest else "current" if to_current else "file")


async def _selected(core: ClientCore, group_id: str, selection: list[tuple[str, list[int] | None]],
                    file_offsets: dict[TopicPartition, int] | None) -> list[TopicPartition]:
    """The partitions to reset: --topic's, else --from-file's, else every committed one."""
    if not selection and file_offsets is not None:
        return sorted(file_offsets)
    if not selection:
        return sorted(await fetch_committed(core, group_id, None))
    tps: list[TopicPartition] = []
    for topic, parts in selection:
        await core.wait_for_topic(topic, core.request_timeout_ms)
        have = core.metadata.partitions_for(topic)
        if parts is None:
            tps.extend(have)
            continue
        missing = [p for p in parts if TopicPartition(topic, p) not in have]
        if missing:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"topic {topic!r} has partitions 0..{len(have) - 1}, not {missing[0]}")
        tps.extend(TopicPartition(topic, p) for p in parts)
    if file_offsets is not None:
        unplanned = [tp for tp in tps if tp not in file_offsets]
        if unplanned:
            raise error_for(ErrorCode.INVALID_REQUEST, f"--from-file has no offset for {unplanned[0]}")
    return sorted(set(tps))


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


@group.command("delete")
@click.argument("group_ids", metavar="G", nargs=-1, required=True)
@command_options()
def group_delete(group_ids: tuple[str, ...], bootstrap: str) -> None:
    """Delete groups with no members (their committed offsets are tombstoned)."""
    results = run_core(bootstrap, lambda core: delete_groups(core, group_ids))
    failed = False
    for gid, err in results.items():
        if err is None:
            click.echo(f"deleted group {gid}")
        else:
            failed = True
            click.echo(f"error: {gid}: {err.code.name}: {err.message}", err=True)
    if failed:
        sys.exit(1)
