"""``rafka chaos ...``: run a Jepsen-style campaign against a real cluster from the command line.

``rafka chaos run --backend netns|docker|local --nemesis kill,pause,partition,clock
--time-limit 120 --seed S [--results DIR] [--unsafe-ack-before-replication]
[--workload queue|txn [--unsafe-txn-offsets]]`` runs
:func:`chaos_tests.campaign.run` and exits 0 (no anomaly), 1 (anomalies; the results folder
says which) or 2 (the campaign could not run).  ``rafka chaos nemeses`` lists the fault names.
``rafka chaos table DIR[:EXIT]...`` prints the verdict table of several runs
(:mod:`chaos_tests.seed_table`; ``make chaos`` / ``make chaos-docker`` with ``SEEDS``).
The same group runs as ``python -m rafka.chaos_tests``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from .campaign import NEMESIS_ALIASES, CampaignOptions, expand_nemesis, main_run
from .nemesis import FAULT_KINDS
from .seed_table import all_valid, read_row, render_table
from .workloads.queue import QueueSpec
from .workloads.txn import TxnSpec, unsafe

__all__ = ["chaos"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def chaos() -> None:
    """Fault-injection (Jepsen-style) campaigns against a real rafka cluster."""


@chaos.command("run")
@click.option("--backend", type=click.Choice(["netns", "docker", "local"]), default="netns",
              show_default=True, help="Where nodes run (netns needs root).")
@click.option("--nemesis", default="kill,partition", show_default=True,
              help="Comma-separated faults: " + ", ".join(NEMESIS_ALIASES)
              + " (or exact fault kinds, see `rafka chaos nemeses`).")
@click.option("--time-limit", "time_limit_s", type=float, default=60.0, show_default=True,
              help="Seconds of workload + faults (the last --quiet seconds are fault-free).")
@click.option("--seed", type=int, default=1, show_default=True,
              help="Seeds the fault schedule; print it to reproduce a failure.")
@click.option("--results", "results_dir", type=click.Path(path_type=Path), default=None,
              help="Results folder (default chaos-results/<time>-seed<S>).")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("chaos-work"),
              show_default=True, help="Node configs and data (wiped at start).")
@click.option("--nodes", type=int, default=3, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--producers", type=int, default=3, show_default=True)
@click.option("--group-consumers", type=int, default=2, show_default=True,
              help="0 turns the consumer-group workload off.")
@click.option("--static-members", is_flag=True,
              help="Group consumers use static membership (group_instance_id, one per slot).")
@click.option("--no-metadata", is_flag=True, help="Turn the topic create/delete workload off.")
@click.option("--quiet", "quiet_s", type=float, default=5.0, show_default=True,
              help="Fault-free seconds at the end of the time limit.")
@click.option("--unsafe-ack-before-replication", is_flag=True,
              help="Test-only: acknowledge writes before replication (the checker must fail).")
@click.option("--workload", type=click.Choice(["queue", "txn"]), default="queue",
              show_default=True, help="queue: idempotent producers and consumers; txn: "
              "transactional writers, read_committed/uncommitted readers, an exactly-once "
              "transform (chaos_tests/workloads/txn.py).")
@click.option("--unsafe-txn-offsets", is_flag=True,
              help="Test-only (--workload txn): the transform commits its offsets outside the "
                   "transaction (the exactly-once checker must fail).")
@click.option("--secure", is_flag=True,
              help="TLS + SASL/SCRAM: a SASL_SSL listener with the authorizer on every node; "
                   "the workloads connect to it as an ACL'd user (chaos_tests/secure.py).")
@click.option("--flush", type=click.Choice(["node", "topic", "off"]), default="node",
              show_default=True,
              help="Which flush rule keeps the workload's records on disk (broker/flush_rule.py). "
                   "node: the nodes' log.flush.policy=batch. topic: nodes at none, the workload's "
                   "topics set flush.messages=1. off: nodes at none, topics set nothing (Kafka's "
                   "default; a crash of several nodes may lose acknowledged records: the "
                   "checker's control). Internal topics always follow the nodes.")
@click.option("--no-png", is_flag=True, help="Skip timeline.png (no matplotlib needed).")
@click.option("-v", "--verbose", count=True)
def run_cmd(backend: str, nemesis: str, time_limit_s: float, seed: int,
            results_dir: Path | None, work_dir: Path, nodes: int, partitions: int,
            producers: int, group_consumers: int, static_members: bool, no_metadata: bool, quiet_s: float,
            unsafe_ack_before_replication: bool, workload: str, unsafe_txn_offsets: bool,
            secure: bool, flush: str, no_png: bool, verbose: int) -> None:
    """Run one campaign; exit 0 = valid, 1 = anomalies found, 2 = could not run."""
    logging.basicConfig(level=logging.WARNING - 10 * min(verbose, 2),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    names = [n for n in nemesis.split(",") if n.strip()]
    try:
        expand_nemesis(names)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--nemesis") from None
    topic_config = {"flush.messages": "1"} if flush == "topic" else {}
    txn = TxnSpec(partitions=partitions, topic_config=topic_config)
    opts = CampaignOptions(
        backend=backend, nemesis=tuple(names), time_limit_s=time_limit_s, seed=seed,
        work_dir=work_dir, results_dir=results_dir, nodes=nodes,
        unsafe_ack_before_replication=unsafe_ack_before_replication,
        queue=QueueSpec(partitions=partitions, producers=producers,
                        group_consumers=group_consumers, static_members=static_members,
                        topic_config=topic_config),
        workload=workload, txn=unsafe(txn) if unsafe_txn_offsets else txn,
        metadata=not no_metadata, quiet_s=quiet_s, png=not no_png, secure=secure,
        broker_config={} if flush == "node" else {"log.flush.policy": "none"})
    sys.exit(main_run(opts))


@chaos.command("nemeses")
def nemeses_cmd() -> None:
    """List the fault names --nemesis accepts."""
    for alias, kinds in NEMESIS_ALIASES.items():
        click.echo(f"{alias:10s} {', '.join(kinds)}")
    click.echo("")
    for k in FAULT_KINDS:
        root = " (root)" if k.needs_root else ""
        click.echo(f"{k.name:30s} {k.family:8s} {k.description}{root}")


def _copied_event_files(results_dir: Path) -> list[Path]:
    """A results folder's node event files, each node's rotated file (``.1``) before its
    current one."""
    out: list[Path] = []
    for current in sorted(results_dir.glob("nodes/node-*-events.jsonl")):
        rotated = current.with_name(current.name + ".1")
        out += [rotated, current] if rotated.exists() else [current]
    return out


@chaos.command("recheck")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--indefinite", "indefinite", multiple=True, metavar="CODE",
              help="Count send ops that failed with this error as info (unknown outcome), "
                   "e.g. for histories recorded before a classification fix. Repeatable.")
def recheck_cmd(results_dir: Path, indefinite: tuple[str, ...]) -> None:
    """Re-run every checker on a results folder (history.jsonl + nodes/*events.jsonl) with
    this build's checkers; prints the anomalies per checker. Exit 0 valid, 1 anomalies."""
    import json

    from .checkers import check_all
    from .checkers_txn import TXN_FS, check_all_txn
    from .node_events import read_node_events

    ops = [json.loads(line) for line in open(results_dir / "history.jsonl", encoding="utf-8")
           if line.strip()]
    changed = 0
    for op in ops:
        if (op.get("f") == "send" and op.get("type") == "fail"
                and (op.get("value") or {}).get("error") in indefinite):
            op["type"] = "info"
            changed += 1
    results_path = results_dir / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    start = results.get("notes", {}).get("history_start_mono_ns")
    events = read_node_events(_copied_event_files(results_dir))
    txn = any(op.get("f") in TXN_FS for op in ops)
    summary = (check_all_txn if txn else check_all)(ops, events, start_mono_ns=start)
    meta = results.get("checkers", {}).get("metadata")
    bad = {k: r.stats.get("anomalies") for k, r in summary.checkers.items() if not r.valid}
    if meta is not None and not meta.get("valid", True):
        bad["metadata (from results.json)"] = len(meta.get("anomalies", []))
    if indefinite:
        click.echo(f"{changed} failed sends counted as info ({', '.join(indefinite)})")
    if start is None:
        click.echo("no history_start_mono_ns in results.json: acked-truncated (b) not checked")
    for a in summary.anomalies[:20]:
        click.echo(f"* {a.type}: {json.dumps(a.details)} ops {a.ops[:6]}")
    click.echo("VALID" if not bad else "INVALID: " + ", ".join(f"{k} {v}" for k, v in bad.items()))
    sys.exit(0 if not bad else 1)


@chaos.command("table")
@click.argument("folders", nargs=-1, required=True)
@click.option("--title", default="chaos seeds", show_default=True, help="Heading of the table.")
@click.option("--append", "append_to", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also append the table to this file.")
def table(folders: tuple[str, ...], title: str, append_to: Path | None) -> None:
    """Verdict table of results folders (DIR, or DIR:EXIT with the campaign's exit status);
    exit 0 when every one is valid, 1 when one is invalid, 2 when one did not run."""
    rows = [read_row(f) for f in folders]
    text = render_table(rows, title)
    click.echo(text)
    if append_to is not None:
        append_to.parent.mkdir(parents=True, exist_ok=True)
        with append_to.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    if not all_valid(rows):
        sys.exit(2 if any(r.valid is None for r in rows) else 1)
