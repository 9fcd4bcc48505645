"""What the web console shows, as JSON-ready dicts: pure functions of admin answers and scrapes.

Theory of operation
-------------------
The console's server (``rafka.client.console.server``) asks the cluster (AsyncAdmin and the group
helpers of ``rafka.client.groups``) and the nodes' ``/metrics`` (``client.metrics_view.scrape_all``); this
module only shapes what came back, so it is tested without a cluster:

- ``cluster_json(cluster, quorum, nodes)``: brokers (with each one's metrics row, when its
  endpoint answered), the active controller, the Raft quorum (leader, epoch, voters with their
  metadata lag);
- ``topics_json(topics)``: every partition's leader, replicas, ISR, high watermark and log
  start, with under-replicated and offline partitions flagged;
- ``group_json(listing, described)``: state, members with their assignment, and the lag per
  partition (high watermark − committed, as ``rafka group describe`` computes it);
- ``Throughput``: a bounded history (``HISTORY_SAMPLES``) of throughput samples, each made by
  ``client.metrics_view.build_view`` from two successive scrapes (rates are counter deltas over the time
  between them) — the live charts read it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rafka.client.aio.admin import ClusterDescription, TopicDescription
from rafka.client.metrics_view import NodeRow, Scrape, TopView, build_view

__all__ = ["cluster_json", "topics_json", "group_json", "nodes_json", "Throughput",
           "HISTORY_SAMPLES", "MAX_TOPICS_PER_SAMPLE"]

HISTORY_SAMPLES = 300        # one per sampling interval: 5 minutes at the default 1 s
MAX_TOPICS_PER_SAMPLE = 20   # the busiest topics of a sample keep their own series


def _node_json(n: NodeRow) -> dict[str, Any]:
    return {"url": n.url, "up": n.error is None, "error": n.error,
            "active_controller": n.active_controller, "request_rate": round(n.request_rate, 2),
            "leader_partitions": n.leader_partitions, "under_replicated": n.under_replicated,
            "connections": n.connections}


def nodes_json(view: TopView | None) -> dict[str, dict[str, Any]]:
    """The metrics row of every scraped endpoint, by URL."""
    return {n.url: _node_json(n) for n in (view.nodes if view else ())}


def cluster_json(cluster: ClusterDescription, quorum: Mapping[str, Any] | None,
                 nodes: Mapping[str, dict[str, Any]], metrics_url: Mapping[int, str]) -> dict[str, Any]:
    """Brokers, controller and quorum; ``metrics_url`` maps a broker id to its /metrics URL."""
    voters = {int(v["id"]): v for v in (quorum or {}).get("voters") or ()}
    leader = int((quorum or {}).get("leader_id", -1))
    brokers = []
    for b in cluster.brokers:
        v = voters.get(b.node_id)
        brokers.append({
            "id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
            "controller": b.node_id == cluster.controller_id,
            "voter": v is not None, "raft_leader": b.node_id == leader,
            "metadata_offset": v.get("metadata_offset") if v else None,
            "metadata_lag": v.get("lag") if v else None,
            "metrics": nodes.get(metrics_url.get(b.node_id, "")),
        })
    q = None
    if quorum is not None:
        q = {"leader_id": leader, "epoch": quorum.get("epoch"),
             "high_watermark": quorum.get("high_watermark"),
             "voters": [{"id": int(v["id"]), "raft": v.get("raft"), "rpc": v.get("rpc"),
                         "metadata_offset": v.get("metadata_offset"), "lag": v.get("lag"),
                         "reachable": v.get("reachable", True)}
                        for v in sorted(voters.values(), key=lambda v: int(v["id"]))],
             "observers": [dict(o) for o in quorum.get("observers") or ()]}
    return {"cluster_id": cluster.cluster_id, "controller_id": cluster.controller_id,
            "brokers": brokers, "quorum": q}


def topics_json(topics: Iterable[TopicDescription]) -> dict[str, Any]:
    out = []
    under = offline = 0
    for t in sorted(topics, key=lambda t: t.name):
        parts = []
        for p in t.partitions:
            is_under = len(p.isr) < len(p.replicas)
            is_offline = p.leader < 0
            under += is_under
            offline += is_offline
            parts.append({"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                          "replicas": list(p.replicas), "isr": list(p.isr),
                          "high_watermark": p.high_watermark, "log_start_offset": p.log_start_offset,
                          "under_replicated": is_under, "offline": is_offline})
        records = sum((p.high_watermark or 0) - (p.log_start_offset or 0) for p in t.partitions)
        out.append({"name": t.name, "internal": t.internal,
                    "topic_id": None if t.topic_id is None else str(t.topic_id),
                    "partitions": parts, "records": records, "configs": dict(t.configs)})
    return {"topics": out, "under_replicated": under, "offline": offline}


def group_json(listing: Mapping[str, Any], described: Mapping[str, Any] | None,
               error: str | None = None) -> dict[str, Any]:
    """One group: ``listing`` from LIST_GROUPS, ``described`` from ``client.groups.describe_group``
    (None when its coordinator did not answer: ``error`` says why)."""
    gid = listing["group_id"]
    if described is None:
        return {"group_id": gid, "state": listing.get("state", "?"), "epoch": None,
                "member_count": int(listing.get("members", 0)), "members": [], "partitions": [],
                "lag": None, "error": error}
    members = [{"member_id": m["member_id"], "member_epoch": m.get("member_epoch"),
                "client_id": m.get("client_id") or "", "client_host": m.get("client_host") or "",
                "subscribed_topics": list(m.get("subscribed_topics") or ()),
                "assignment": [{"topic": a["name"], "partitions": sorted(a["partitions"])}
                               for a in m.get("assignment") or ()]}
               for m in described.get("members") or ()]
    partitions = [dict(r) for r in described.get("partitions") or ()]
    lags = [r["lag"] for r in partitions if r.get("lag") is not None]
    return {"group_id": gid, "state": described.get("state", listing.get("state", "?")),
            "epoch": described.get("group_epoch"), "member_count": len(members), "members": members,
            "partitions": partitions, "lag": sum(lags) if lags else None, "error": None}


class Throughput:
    """The last ``max_samples`` throughput samples; ``add(current)`` after each scrape round."""

    def __init__(self, max_samples: int = HISTORY_SAMPLES) -> None:
        self.samples: deque[dict[str, Any]] = deque(maxlen=max_samples)
        self.view: TopView | None = None
        self._previous: Sequence[Scrape] | None = None

    def add(self, current: Sequence[Scrape], at_unix_s: float | None = None) -> TopView:
        """Rates of ``current`` against the previous round; the first round only sets the base."""
        view = build_view(self._previous, current)
        if self._previous is not None:
            busiest = sorted(view.topics, key=lambda t: t.in_rate + t.out_rate, reverse=True)
            self.samples.append({
                "t": round(time.time() if at_unix_s is None else at_unix_s, 3),
                "bytes_in": round(sum(t.in_rate for t in view.topics), 1),
                "bytes_out": round(sum(t.out_rate for t in view.topics), 1),
                "requests": round(sum(n.request_rate for n in view.nodes), 2),
                "topics": {t.topic: [round(t.in_rate, 1), round(t.out_rate, 1)]
                           for t in busiest[:MAX_TOPICS_PER_SAMPLE]},
            })
        self._previous = current
        self.view = view
        return view

    def to_json(self) -> dict[str, Any]:
        v = self.view
        return {
            "samples": list(self.samples),
            "nodes": list(nodes_json(v).values()),
            "topics": [{"topic": t.topic, "in_rate": t.in_rate, "out_rate": t.out_rate,
                        "in_total": t.in_total, "out_total": t.out_total} for t in (v.topics if v else ())],
            "under_replicated": v.under_replicated if v else None,
            "offline_partitions": v.offline_partitions if v else None,
            "fenced_brokers": v.fenced_brokers if v else None,
            "raft_leader": v.raft_leader if v else None,
            "raft_commit_index": v.raft_commit_index if v else None,
        }
