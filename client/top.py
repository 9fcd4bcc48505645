"""``rafka top``: a live terminal view of a cluster, read from its nodes' ``/metrics``.

Theory of operation
-------------------
The endpoints are given (``--metrics URL,...``) or found through the admin API: every broker
in the cluster's metadata, at its client port + ``METRICS_PORT_OFFSET`` (what ``rafka cluster
up`` assigns). Each refresh scrapes every endpoint (``scrape``: one HTTP GET, bounded by
``SCRAPE_TIMEOUT_S``, parsed with prometheus_client's parser into a ``Scrape``), and
``build_view(previous, current)`` — a pure function of two scrapes — turns counters into rates
over the time between them (bytes in/out per topic, requests per node) and sums the per-node
gauges: the active controller's offline partitions and fenced brokers, each leader's
under-replicated partitions, each coordinator's groups with their lag. ``render(view)`` makes
the rich tables. Nothing is kept between refreshes but the previous scrape.

``run_top`` refreshes every ``interval_s`` until ``q`` (read from the terminal in cbreak mode,
when stdin is one) or Ctrl-C; ``--once`` takes two scrapes ``interval_s`` apart and prints one
frame (rates need two samples) — what scripts and tests use.
"""

from __future__ import annotations

import contextlib
import select
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich and prometheus_client load only when `rafka top` runs
    from rich.console import Console, Group

__all__ = ["Scrape", "TopView", "scrape", "scrape_all", "build_view", "render", "discover_endpoints",
           "run_top", "parse_metrics", "top", "SCRAPE_TIMEOUT_S"]

SCRAPE_TIMEOUT_S = 2.0
Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrape:
    """One endpoint's samples at ``at`` (monotonic seconds); ``error`` when it did not answer."""

    url: str
    at: float
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    error: str | None = None

    def get(self, name: str, default: float = 0.0, **labels: str) -> float:
        return self.samples.get((name, tuple(sorted(labels.items()))), default)

    def series(self, name: str) -> Iterator[tuple[dict[str, str], float]]:
        for (n, labels), v in self.samples.items():
            if n == name:
                yield dict(labels), v


def parse_metrics(url: str, at: float, text: str) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    out = Scrape(url, at)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> Scrape:
    at = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - http only
            return parse_metrics(url, at, resp.read().decode())
    except (OSError, ValueError) as exc:
        return Scrape(url, at, error=f"{type(exc).__name__}: {exc}")


def scrape_all(urls: Sequence[str]) -> list[Scrape]:
    return [scrape(u) for u in urls]


@dataclass
class TopicRow:
    topic: str
    in_rate: float = 0.0
    out_rate: float = 0.0
    in_total: float = 0.0
    out_total: float = 0.0
    under_replicated: int = 0


@dataclass
class GroupRow:
    group: str
    state: str = "?"
    members: int = 0
    lag: int = 0
    partitions: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, lag)


@dataclass
class NodeRow:
    url: str
    error: str | None = None
    active_controller: bool = False
    request_rate: float = 0.0
    leader_partitions: int = 0
    under_replicated: int = 0
    connections: int = 0


@dataclass
class TopView:
    nodes: list[NodeRow]
    topics: list[TopicRow]
    groups: list[GroupRow]
    offline_partitions: int = 0
    fenced_brokers: int = 0
    under_replicated: int = 0
    raft_leader: int = -1
    raft_commit_index: int = -1
    interval_s: float = 0.0


def _rate(now: Scrape, before: Scrape | None, name: str, **labels: str) -> float:
    if before is None or before.error or now.at <= before.at:
        return 0.0
    delta = now.get(name, **labels) - before.get(name, **labels)
    return max(0.0, delta) / (now.at - before.at)


def build_view(previous: Sequence[Scrape] | None, current: Sequence[Scrape], *,
               internal: bool = False) -> TopView:
    """The frame for ``current`` (rates against ``previous``, matched by URL)."""
    prev = {s.url: s for s in previous or ()}
    topics: dict[str, TopicRow] = {}
    groups: dict[str, GroupRow] = {}
    nodes: list[NodeRow] = []
    view = TopView(nodes, [], [])
    for s in current:
        node = NodeRow(s.url, s.error)
        nodes.append(node)
        if s.error:
            continue
        before = prev.get(s.url)
        node.active_controller = s.get("rafka_active_controller") == 1
        node.request_rate = sum(_rate(s, before, "rafka_request_duration_seconds_count", **lb)
                                for lb, _v in s.series("rafka_request_duration_seconds_count"))
        node.leader_partitions = int(s.get("rafka_leader_partitions"))
        node.under_replicated = int(s.get("rafka_under_replicated_partitions"))
        node.connections = int(s.get("rafka_connections_open"))
        view.offline_partitions += int(s.get("rafka_offline_partitions"))
        view.fenced_brokers += int(s.get("rafka_fenced_brokers"))
        view.under_replicated += node.under_replicated
        if node.active_controller:
            view.raft_leader = int(s.get("rafka_raft_leader_id", -1))
            view.raft_commit_index = int(s.get("rafka_raft_commit_index", -1))
        for metric, attr in (("rafka_topic_bytes_in_total", "in"), ("rafka_topic_bytes_out_total", "out")):
            for lb, v in s.series(metric):
                row = topics.setdefault(lb["topic"], TopicRow(lb["topic"]))
                setattr(row, f"{attr}_total", getattr(row, f"{attr}_total") + v)
                setattr(row, f"{attr}_rate", getattr(row, f"{attr}_rate") + _rate(s, before, metric, **lb))
        for lb, v in s.series("rafka_topic_under_replicated_partitions"):
            topics.setdefault(lb["topic"], TopicRow(lb["topic"])).under_replicated += int(v)
        _groups(s, groups)
        if before is not None and not before.error:
            view.interval_s = max(view.interval_s, s.at - before.at)
    view.topics = [t for name, t in sorted(topics.items()) if internal or not name.startswith("__")]
    for g in groups.values():
        g.partitions.sort()
    view.groups = [groups[k] for k in sorted(groups)]
    return view


def _groups(s: Scrape, groups: dict[str, GroupRow]) -> None:
    for lb, v in s.series("rafka_consumer_group_state"):
        if v == 1:
            groups.setdefault(lb["group"], GroupRow(lb["group"])).state = lb["state"]
    for lb, v in s.series("rafka_consumer_group_members"):
        groups.setdefault(lb["group"], GroupRow(lb["group"])).members = int(v)
    for lb, v in s.series("rafka_consumer_group_lag"):
        g = groups.setdefault(lb["group"], GroupRow(lb["group"]))
        g.lag += int(v)
        g.partitions.append((lb["topic"], int(lb["partition"]), int(v)))


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


def _top_command() -> Any:
    import click

    @click.command("top")
    @click.option("--bootstrap", envvar="RAFKA_BOOTSTRAP", default="127.0.0.1:9092", show_default=True,
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

    return top


top = _top_command()
