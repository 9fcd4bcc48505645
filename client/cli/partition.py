"""``rafka partition reassign`` and ``rafka broker decommission|unregister`` (click commands;
docs/operations.md, "Scale out" / "Remove a broker").

Theory of operation
-------------------
Each command opens one ``AsyncAdmin`` (``_common.run_admin``; the requests are
``client/aio/reassign_admin.py``'s):

* ``rafka partition reassign --topic T --partition P --replicas 2,3,4 [--throttle BYTES/S]
  [--wait]`` — or ``--plan plan.json`` in kafka-reassign-partitions' format
  (``{"partitions": [{"topic": .., "partition": .., "replicas": [..]}]}``); ``--cancel`` with
  the same selection reverts to the original replicas; ``--status [--topic T]`` lists the
  reassignments in progress (adding / removing replicas, catch-up lag). A bad plan is refused
  as a whole with its named error (exit 1) and changes nothing.
* ``rafka partition delete-records --topic T --partition P --before OFFSET`` — Kafka's
  DeleteRecords (``Admin.delete_records``): the records below OFFSET (-1: all) are deleted,
  the new low watermark printed.
* ``rafka broker decommission ID [--throttle BYTES/S] [--wait] [--cancel]`` — move every replica
  off the broker, place no new ones there; ``--wait`` returns once it holds none (then stop it
  and ``rafka broker unregister ID``).

``--wait`` polls (every 0.2 s) until done, bounded by ``--wait-timeout-s``. ``--json`` prints
machine-readable output, as everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import trio
from rafka.client.aio.reassign_admin import (
    PartitionReassignment,
    broker_replicas,
    wait_decommissioned,
    wait_reassignments,
)
from rafka.client.cli._common import command_options, run_admin
from rafka.client.errors import ErrorCode, error_for
from rafka.client.types import TopicPartition

__all__ = ["broker", "partition", "read_plan"]

_throttle = click.option("--throttle", "throttle", type=click.IntRange(min=0), default=0,
                         metavar="BYTES/S",
                         help="Limit the new replicas' catch-up to this many bytes/s (0: none).")
_wait = click.option("--wait", is_flag=True, help="Return once the move is complete.")
_wait_timeout = click.option("--wait-timeout-s", type=click.FloatRange(min=0), default=3600,
                             show_default=True, help="Give up waiting after this long.")


def _move_options(fn: Any) -> Any:
    """--throttle, --wait, --wait-timeout-s, the connection options, --json, named errors."""
    for deco in (command_options(json=True), _wait_timeout, _wait, _throttle):
        fn = deco(fn)
    return fn


def read_plan(path: Path) -> dict[TopicPartition, list[int]]:
    """A kafka-reassign-partitions plan: ``{"partitions": [{"topic", "partition", "replicas"}]}``
    (other keys, e.g. ``version`` and ``log_dirs``, are ignored)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"--plan {path}: {exc}") from None
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise click.UsageError(f'--plan {path}: expected {{"partitions": [{{"topic", "partition", "replicas"}}, ...]}}')
    plan: dict[TopicPartition, list[int]] = {}
    for i, e in enumerate(entries):
        ok = (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
              and isinstance(e.get("replicas"), list) and all(isinstance(r, int) for r in e["replicas"]))
        if not ok:
            raise click.UsageError(f"--plan {path}: partitions[{i}] needs topic (string), partition "
                                   f"(integer) and replicas (list of broker ids)")
        tp = TopicPartition(e["topic"], e["partition"])
        if tp in plan:
            raise error_for(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{tp.topic}/{tp.partition} appears twice in the plan")
        plan[tp] = list(e["replicas"])
    return plan


async def _bounded(what: str, timeout_s: float, wait: Any) -> None:
    """``await wait`` within ``timeout_s``, else REQUEST_TIMED_OUT naming what is still going on."""
    with trio.move_on_after(timeout_s):
        await wait
        return
    raise error_for(ErrorCode.REQUEST_TIMED_OUT,
                    f"{what} still in progress after {timeout_s:g} s (it goes on; see --status)")


def _replicas(value: str) -> list[int]:
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.UsageError(f"--replicas {value!r}: expected broker ids like 2,3,4") from None


def _status_json(tp: TopicPartition, r: PartitionReassignment) -> dict[str, Any]:
    return {"topic": tp.topic, "partition": tp.partition, "replicas": list(r.replicas),
            "target_replicas": list(r.target_replicas), "adding_replicas": list(r.adding_replicas),
            "removing_replicas": list(r.removing_replicas), "isr": list(r.isr), "leader": r.leader,
            "throttle_bytes_per_s": r.throttle_bytes_per_s,
            "lag": None if r.lag is None else {str(k): v for k, v in r.lag.items()}}


def _ids(ids: tuple[int, ...] | list[int]) -> str:
    return ",".join(map(str, ids)) or "-"


def _status_line(tp: TopicPartition, r: PartitionReassignment) -> str:
    lag = "?" if r.lag is None else " ".join(f"{b}:{n}" for b, n in sorted(r.lag.items())) or "-"
    throttle = f"{r.throttle_bytes_per_s} B/s" if r.throttle_bytes_per_s else "none"
    return (f"{tp.topic}/{tp.partition}\treplicas {_ids(r.replicas)}\tadding {_ids(r.adding_replicas)}"
            f"\tremoving {_ids(r.removing_replicas)}\tisr {_ids(r.isr)}\tleader {r.leader}"
            f"\tlag {lag}\tthrottle {throttle}")


@click.group()
def partition() -> None:
    """Partition replicas: reassign (move, cancel, status); delete records."""


@partition.command("reassign")
@click.option("--topic", help="The topic (with --partition and --replicas, --cancel or --status).")
@click.option("--partition", "partition_", type=int, help="The partition.")
@click.option("--replicas", help="Target broker ids, comma separated: 2,3,4.")
@click.option("--plan", type=click.Path(path_type=Path, dir_okay=False),
              help='A JSON plan: {"partitions": [{"topic", "partition", "replicas"}]}.')
@click.option("--cancel", is_flag=True, help="Revert the selected partitions to their original replicas.")
@click.option("--status", is_flag=True, help="List the reassignments in progress (and lag).")
@_move_options
def reassign(topic: str | None, partition_: int | None, replicas: str | None, plan: Path | None,
             cancel: bool, status: bool, throttle: int, wait: bool, wait_timeout_s: float,
             bootstrap: str, as_json: bool) -> None:
    """Move a partition's replicas to other brokers (throttled catch-up, then switch)."""
    if status:
        return _status(bootstrap, topic, partition_, as_json)
    if plan is not None and (topic is not None or replicas is not None):
        raise click.UsageError("give --plan, or --topic/--partition/--replicas, not both")
    if plan is not None:
        moves: dict[TopicPartition, list[int] | None] = dict(read_plan(plan))
    else:
        if topic is None or partition_ is None:
            raise click.UsageError("give --topic and --partition (or --plan, or --status)")
        if replicas is None and not cancel:
            raise click.UsageError("give --replicas (or --cancel)")
        moves = {TopicPartition(topic, partition_): None if replicas is None else _replicas(replicas)}
    if cancel:
        moves = dict.fromkeys(moves)

    async def go(admin: Any) -> dict[TopicPartition, PartitionReassignment]:
        await admin.alter_partition_reassignments(moves, throttle_bytes_per_s=throttle)
        if wait:
            await _bounded("the reassignment", wait_timeout_s, wait_reassignments(admin, moves))
        return await admin.list_partition_reassignments(list(moves))

    pending = run_admin(bootstrap, go)
    if as_json:
        click.echo(json.dumps({"partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": r,
             "in_progress": tp in pending} for tp, r in moves.items()]}))
        return
    for tp, r in moves.items():
        what = "cancelled" if r is None else f"-> {_ids(r)}"
        state = "in progress" if tp in pending else "done"
        click.echo(f"{tp.topic}/{tp.partition}\t{what}\t{state}")


@partition.command("delete-records")
@click.option("--topic", required=True, help="The topic.")
@click.option("--partition", "partition_", type=int, required=True, help="The partition.")
@click.option("--before", type=int, required=True,
              help="Delete the records below this offset (-1: the high watermark, all of them).")
@command_options(json=True)
def delete_records(topic: str, partition_: int, before: int, bootstrap: str, as_json: bool) -> None:
    """Delete a partition's records below an offset (Kafka's DeleteRecords): its log start
    moves there on every replica; prints the new low watermark."""
    tp = TopicPartition(topic, partition_)

    async def go(admin: Any) -> dict[TopicPartition, int]:
        return await admin.delete_records({tp: before})

    low = run_admin(bootstrap, go)[tp]
    if as_json:
        click.echo(json.dumps({"topic": topic, "partition": partition_, "low_watermark": low}))
    else:
        click.echo(f"{topic}/{partition_}\tlow watermark {low}")


def _status(bootstrap: str, topic: str | None, partition_: int | None, as_json: bool) -> None:
    async def go(admin: Any) -> dict[TopicPartition, PartitionReassignment]:
        return await admin.list_partition_reassignments()

    found = {tp: r for tp, r in run_admin(bootstrap, go).items()
             if (topic is None or tp.topic == topic) and (partition_ is None or tp.partition == partition_)}
    if as_json:
        click.echo(json.dumps({"reassignments": [_status_json(tp, r) for tp, r in found.items()]}))
        return
    if not found:
        click.echo("no reassignment in progress")
    for tp, r in found.items():
        click.echo(_status_line(tp, r))


@click.group()
def broker() -> None:
    """Brokers: decommission (move every replica off), unregister."""


@broker.command("decommission")
@click.argument("broker_id", type=int)
@click.option("--cancel", is_flag=True, help="Put the broker back in service (moved replicas stay).")
@_move_options
def decommission(broker_id: int, cancel: bool, throttle: int, wait: bool, wait_timeout_s: float,
                 bootstrap: str, as_json: bool) -> None:
    """Move every replica off BROKER_ID and place no new ones there."""

    async def go(admin: Any) -> tuple[dict[TopicPartition, tuple[int, ...]], list[TopicPartition]]:
        moved = await admin.decommission_broker(broker_id, throttle_bytes_per_s=throttle, cancel=cancel)
        if wait and not cancel:
            await _bounded(f"decommissioning broker {broker_id}", wait_timeout_s,
                           wait_decommissioned(admin, broker_id))
        return moved, await broker_replicas(admin, broker_id)

    moved, held = run_admin(bootstrap, go)
    if as_json:
        click.echo(json.dumps({"broker_id": broker_id, "decommissioning": not cancel,
                               "moved": [{"topic": tp.topic, "partition": tp.partition, "replicas": list(r)}
                                         for tp, r in moved.items()],
                               "holds": [{"topic": tp.topic, "partition": tp.partition} for tp in held]}))
        return
    if cancel:
        click.echo(f"broker {broker_id}: back in service")
        return
    for tp, r in moved.items():
        click.echo(f"{tp.topic}/{tp.partition}\t-> {_ids(r)}")
    if held:
        click.echo(f"broker {broker_id}: decommissioning, still holds {len(held)} replicas")
    else:
        click.echo(f"broker {broker_id}: holds no replica; stop it, then `rafka broker unregister {broker_id}`")


@broker.command("unregister")
@click.argument("broker_id", type=int)
@command_options()
def unregister(broker_id: int, bootstrap: str) -> None:
    """Remove a stopped broker that holds no replica from the cluster metadata."""

    async def go(admin: Any) -> None:
        await admin.unregister_broker(broker_id)

    run_admin(bootstrap, go)
    click.echo(f"broker {broker_id}: unregistered")
