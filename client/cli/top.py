"""``rafka top``: a live terminal view of a cluster, read from its nodes' ``/metrics``.

Theory of operation
-------------------
The endpoints are given (``--metrics URL,...``) or found through the admin API: every broker
in the cluster's metadata, at its client port + ``METRICS_PORT_OFFSET`` (what ``rafka cluster
up`` assigns). Each refresh scrapes every endpoint and builds the frame from this scrape and the
previous one (``client/metrics_view.py``: rates are counter deltas over the time between them);
``render(view)`` makes the rich tables.

``run_top`` refreshes every ``interval_s`` until ``q`` (read from the terminal in cbreak mode,
when stdin is one) or Ctrl-C; ``--once`` takes two scrapes ``interval_s`` apart and prints one
frame (rates need two samples) — what scripts and tests use.
"""

from __future__ import annotations

import contextlib
import select
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click
from rafka.client.connect_options import DEFAULT_BOOTSTRAP
from rafka.client.metrics_view import TopView, build_view, scrape_all

if TYPE_CHECKING:  # rich loads only when `rafka top` runs
    from rich.console import Console, Group

__all__ = ["render", "discover_endpoints", "run_top", "top"]


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def render(view: TopView) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    up = sum(1 for n in view.nodes if not n.error)
    head = Text.assemble(
        ("rafka top", "bold"), f"  nodes {up}/{len(view.nodes)}",
        f"  raft leader {view.raft_leader if view.raft_leader >= 0 else '-'}",
        f"  commit index {view.raft_commit_index if view.raft_commit_index >= 0 else '-'}",
        ("  under-replicated ", ""), (str(view.under_replicated), "red" if view.under_replicated else "green"),
        ("  offline ", ""), (str(view.offline_partitions), "red" if view.offline_partitions else "green"),
        ("  fenced brokers ", ""), (str(view.fenced_brokers), "red" if view.fenced_brokers else "green"),
        "  (q quits)")
    nodes = Table(title="Nodes", title_justify="left", expand=False)
    for col in ("endpoint", "controller", "req/s", "leaders", "under-repl.", "conns"):
        nodes.add_column(col, justify="left" if col == "endpoint" else "right")
    for n in view.nodes:
        name = n.url.removeprefix("http://").removesuffix("/metrics")
        if n.error:
            nodes.add_row(name, Text("DOWN", "red"), "-", "-", "-", "-")
            continue
        nodes.add_row(name, "active" if n.active_controller else "", f"{n.request_rate:.1f}",
                      str(n.leader_partitions), str(n.under_replicated), str(n.connections))
    topics = Table(title="Topics", title_justify="left")
    for col in ("topic", "in/s", "out/s", "in total", "out total", "under-repl."):  # bytes
        topics.add_column(col, justify="left" if col == "topic" else "right")
    for t in view.topics:
        topics.add_row(t.topic, _bytes(t.in_rate), _bytes(t.out_rate), _bytes(t.in_total),
                       _bytes(t.out_total), Text(str(t.under_replicated), "red" if t.under_replicated else ""))
    groups = Table(title="Consumer groups", title_justify="left")
    for col in ("group", "state", "members", "lag", "lag by partition"):
        groups.add_column(col, justify="right" if col in ("members", "lag") else "left")
    for g in view.groups:
        parts = " ".join(f"{t}/{p}:{lag}" for t, p, lag in g.partitions[:8])
        if len(g.partitions) > 8:
            parts += f" (+{len(g.partitions) - 8})"
        groups.add_row(g.group, g.state, str(g.members), str(g.lag), parts)
    return Group(head, nodes, topics, groups)


def discover_endpoints(bootstrap: str) -> list[str]:
    """Every broker of the cluster, at its client port + the cluster-up metrics offset."""
    from rafka.client.sync import Admin
    from rafka.wire.ports import METRICS_PORT_OFFSET

    with Admin(bootstrap) as admin:
        brokers = admin.describe_cluster().brokers
    return [f"http://{b.host}:{b.port + METRICS_PORT_OFFSET}/metrics" for b in brokers]


@contextlib.contextmanager
def _keys() -> Iterator[Any]:
    """stdin in cbreak mode (single keys, no echo) while the view runs, when it is a terminal."""
    if not sys.stdin.isatty():
        yield None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _wait_for_quit(fd: int | None, timeout_s: float) -> bool:
    """Sleep up to ``timeout_s``; True when ``q`` was pressed meanwhile."""
    if fd is None:
        time.sleep(timeout_s)
        return False
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            import os

            if os.read(fd, 1).lower() == b"q":
                return True
    return False


def run_top(urls: Sequence[str], *, once: bool = False, interval_s: float = 1.0,
            internal: bool = False, console: Console | None = None) -> None:
    from rich.console import Console

    console = console or Console()
    previous = scrape_all(urls)
    if once:
        time.sleep(interval_s)
        console.print(render(build_view(previous, scrape_all(urls), internal=internal)))
        return
    from rich.live import Live

    with _keys() as fd, Live(render(build_view(None, previous, internal=internal)), console=console,
                             auto_refresh=False, screen=False) as live:
        try:
            while not _wait_for_quit(fd, interval_s):
                current = scrape_all(urls)
                live.update(render(build_view(previous, current, internal=internal)), refresh=True)
                previous = current
        except KeyboardInterrupt:
            pass


@click.command("top")
@click.option("--bootstrap", envvar="RAFKA_BOOTSTRAP", default=DEFAULT_BOOTSTRAP, show_default=True,
              help="HOST:PORT[,HOST:PORT] of any brokers; the metrics endpoints are found from "
                   "the cluster's brokers (client port + 20000, as 'rafka cluster up' assigns).")
@click.option("--metrics", "metrics", default=None, metavar="URL[,URL]", envvar="RAFKA_METRICS",
              help="the nodes' /metrics URLs instead (env RAFKA_METRICS).")
@click.option("--once", is_flag=True, help="print one frame (two scrapes --interval apart) and exit.")
@click.option("--interval", "interval_s", default=1.0, show_default=True,
              type=click.FloatRange(0.1, 3600), help="seconds between refreshes.")
@click.option("--internal", is_flag=True, help="also show internal topics (__consumer_offsets...).")
def top(bootstrap: str, metrics: str | None, once: bool, interval_s: float, internal: bool) -> None:
    """Live view of throughput, consumer lag and under-replicated partitions (q quits)."""
    from rafka.client.errors import RafkaError

    if metrics:
        urls = [u.strip() for u in metrics.split(",") if u.strip()]
    else:
        try:
            urls = discover_endpoints(bootstrap)
        except (RafkaError, OSError) as exc:
            raise click.ClickException(f"cannot find the brokers through {bootstrap}: {exc}") from None
    if not urls:
        raise click.ClickException("no metrics endpoints")
    try:
        run_top(urls, once=once, interval_s=interval_s, internal=internal)
    except KeyboardInterrupt:
        pass
