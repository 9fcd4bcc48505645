"""The cluster as its nodes' ``/metrics`` show it: scrapes, and the view built from two of them.

Theory of operation
-------------------
``scrape(url)`` is one HTTP GET of a node's Prometheus exposition, bounded by
``SCRAPE_TIMEOUT_S`` and parsed with prometheus_client's parser into a ``Scrape`` (an endpoint
that does not answer is a ``Scrape`` with ``error``); ``scrape_all`` does every endpoint.
``build_view(previous, current)`` — a pure function of two scrapes, matched by URL — turns
counters into rates over the time between them (bytes in/out per topic, requests per node) and
sums the per-node gauges: the active controller's offline partitions and fenced brokers, each
leader's under-replicated partitions, each coordinator's groups with their lag. Nothing is kept
between views but the previous scrape, which the caller holds.

Two readers draw the ``TopView``: ``rafka top`` in the terminal (``client/cli/top.py``) and the
web console's throughput charts (``client/console/``).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

__all__ = ["SCRAPE_TIMEOUT_S", "GroupRow", "NodeRow", "Scrape", "TopView", "TopicRow", "build_view",
           "parse_metrics", "scrape", "scrape_all"]

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
    """One topic, summed over the nodes: bytes in / out per second and in total, and its
    under-replicated partitions."""

    topic: str
    in_rate: float = 0.0
    out_rate: float = 0.0
    in_total: float = 0.0
    out_total: float = 0.0
    under_replicated: int = 0


@dataclass
class GroupRow:
    """One consumer group as its coordinator reports it; ``lag`` sums its ``partitions``' lags."""

    group: str
    state: str = "?"
    members: int = 0
    lag: int = 0
    partitions: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, lag)


@dataclass
class NodeRow:
    """One endpoint: ``error`` when it did not answer, else its requests per second and gauges."""

    url: str
    error: str | None = None
    active_controller: bool = False
    request_rate: float = 0.0
    leader_partitions: int = 0
    under_replicated: int = 0
    connections: int = 0


@dataclass
class TopView:
    """One frame: every node, topic and group, and the cluster-wide gauges (``raft_*`` from the
    active controller, -1 when none answered); ``interval_s`` is the time the rates span."""

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
    delta = now.get(name, 0.0, **labels) - before.get(name, 0.0, **labels)
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
