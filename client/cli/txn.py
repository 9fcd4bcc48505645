"""``rafka transactions …``: list, describe, producers, abort (click commands).

Theory of operation
-------------------
Each command opens a blocking :class:`~client.sync.Admin` (``_common.sync_admin``) and calls
its transaction methods (``rafka.client.aio.txn_admin`` explains the requests). ``abort`` is the operator's tool for a
*hanging* transaction — one that holds a partition's last stable offset back and that no
coordinator will end: it writes an ABORT marker on that partition for the producer's open
transaction (``--producer-id``; without it, the one open transaction, or every one with
``--all``), and says what it did; which transactions it ends is decided first, by the pure
``choose_aborts``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import click
from rafka.client.cli._common import command_options, sync_admin

__all__ = ["transactions", "choose_aborts", "AbortPlan"]


@click.group()
def transactions() -> None:
    """Transactions: list, describe, producers of a partition, operator abort."""


def _age(start_ms: int, now_ms: int) -> str:
    if start_ms < 0:
        return "-"
    s = max(0, now_ms - start_ms) // 1000
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


@transactions.command("list")
@click.option("--state", "states", multiple=True, metavar="STATE",
              help="Only these states (Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
                   "CompleteAbort, Empty; repeatable).")
@command_options(json=True)
def txn_list(states: tuple[str, ...], bootstrap: str, as_json: bool) -> None:
    """Every transactional id the coordinators know."""
    with sync_admin(bootstrap) as admin:
        found = admin.list_transactions(states or None)
    if as_json:
        click.echo(json.dumps([t._asdict() for t in found]))
        return
    click.echo(f"{'TRANSACTIONAL_ID':<30} {'STATE':<15} {'PRODUCER_ID':>12} {'EPOCH':>6} {'COORDINATOR':>11}")
    for t in found:
        click.echo(f"{t.transactional_id:<30} {t.state:<15} {t.producer_id:>12} {t.producer_epoch:>6} "
                   f"{t.coordinator_id:>11}")


@transactions.command("describe")
@click.argument("transactional_id", metavar="ID")
@command_options(json=True)
def txn_describe(transactional_id: str, bootstrap: str, as_json: bool) -> None:
    """State, producer id/epoch, partitions and age of transaction ID."""
    with sync_admin(bootstrap) as admin:
        d = admin.describe_transactions([transactional_id])[transactional_id]
    now_ms = int(time.time() * 1000)
    if as_json:
        out = d._asdict() | {"partitions": [{"topic": t, "partition": p} for t, p in d.partitions],
                             "age_ms": None if d.txn_start_ms < 0 else max(0, now_ms - d.txn_start_ms)}
        click.echo(json.dumps(out))
        return
    click.echo(f"transactional id {d.transactional_id}  state {d.state}  coordinator {d.coordinator_id}")
    click.echo(f"  producer id {d.producer_id}  epoch {d.producer_epoch}  timeout {d.timeout_ms} ms  "
               f"age {_age(d.txn_start_ms, now_ms)}")
    parts = ", ".join(f"{t}-{p}" for t, p in d.partitions) or "-"
    click.echo(f"  partitions {parts}")


def _producer_rows(producers: Sequence[Any]) -> list[dict[str, Any]]:
    return [p._asdict() for p in producers]


@transactions.command("producers")
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@command_options(json=True)
def txn_producers(topic: str, partition: int, bootstrap: str, as_json: bool) -> None:
    """The producers a partition's leader tracks; OPEN_TXN_AT is where an open transaction began."""
    with sync_admin(bootstrap) as admin:
        producers = admin.describe_producers(topic, partition)
    if as_json:
        click.echo(json.dumps(_producer_rows(producers)))
        return
    click.echo(f"{'PRODUCER_ID':>12} {'EPOCH':>6} {'LAST_SEQ':>9} {'LAST_TIMESTAMP':>14} {'OPEN_TXN_AT':>12}")
    for p in producers:
        open_at = "-" if p.txn_first_offset < 0 else str(p.txn_first_offset)
        click.echo(f"{p.producer_id:>12} {p.producer_epoch:>6} {p.last_sequence:>9} {p.last_timestamp:>14} "
                   f"{open_at:>12}")


class AbortPlan(NamedTuple):
    """What ``abort`` does: the producers whose transactions it aborts (oldest first), else why
    not, and whether that is an error (exit status 1) or just nothing to do."""

    chosen: list[Any]
    message: str = ""
    error: bool = False


def choose_aborts(producers: Sequence[Any], producer_id: int | None, all_open: bool) -> AbortPlan:
    """Which open transactions of a partition ``abort`` ends (pure; see the module docstring)."""
    open_txns = sorted((p for p in producers if p.txn_first_offset >= 0), key=lambda p: p.txn_first_offset)
    if producer_id is not None:
        chosen = [p for p in open_txns if p.producer_id == producer_id]
        return AbortPlan(chosen) if chosen else AbortPlan(
            [], f"producer {producer_id} has no open transaction here", error=True)
    if not open_txns:
        return AbortPlan([], "no open transaction")
    if len(open_txns) == 1 or all_open:
        return AbortPlan(open_txns)
    ids = ", ".join(f"{p.producer_id} (since offset {p.txn_first_offset})" for p in open_txns)
    return AbortPlan([], f"{len(open_txns)} open transactions: {ids}; give --producer-id, or --all to "
                         f"abort every one", error=True)


@transactions.command("abort")
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--producer-id", type=int, default=None, help="The producer whose transaction to abort.")
@click.option("--producer-epoch", type=int, default=None,
              help="Its epoch (default: the one the leader reports).")
@click.option("--all", "all_open", is_flag=True, help="Abort every open transaction of the partition.")
@command_options(json=True)
def txn_abort(topic: str, partition: int, producer_id: int | None, producer_epoch: int | None,
              all_open: bool, bootstrap: str, as_json: bool) -> None:
    """Abort the open (hanging) transaction(s) of one partition with an ABORT marker: the one
    of --producer-id; without it the only open one, or every one with --all."""
    if producer_epoch is not None and producer_id is None:
        raise click.UsageError("--producer-epoch needs --producer-id")
    with sync_admin(bootstrap) as admin:
        plan = choose_aborts(admin.describe_producers(topic, partition), producer_id, all_open)
        done = [admin.abort_transaction(topic, partition, p.producer_id,
                                        p.producer_epoch if producer_epoch is None else producer_epoch)
                for p in plan.chosen]
    if as_json:
        click.echo(json.dumps({"aborted": _producer_rows(done), "message": plan.message}))
    else:
        for p in done:
            click.echo(f"aborted the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) "
                       f"on {topic}-{partition}, open since offset {p.txn_first_offset}")
        if plan.message:
            click.echo(f"nothing aborted on {topic}-{partition}: {plan.message}", err=plan.error)
    if plan.error:
        sys.exit(1)
