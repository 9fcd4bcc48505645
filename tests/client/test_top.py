"""``rafka top``: the frame built from two scrapes (client/metrics_view.py) and its rendering
(client/cli/top.py); pure: hand-written exposition text."""

from __future__ import annotations

import io

from rafka.client.cli.top import render
from rafka.client.metrics_view import build_view, parse_metrics
from rich.console import Console

NODE1_T0 = """
rafka_active_controller 1
rafka_raft_leader_id 1
rafka_raft_commit_index 42
rafka_offline_partitions 1
rafka_fenced_brokers 0
rafka_leader_partitions 2
rafka_under_replicated_partitions 1
rafka_topic_under_replicated_partitions{topic="orders"} 1
rafka_request_duration_seconds_count{api="produce"} 10
rafka_request_duration_seconds_count{api="fetch"} 5
rafka_topic_bytes_in_total{topic="orders"} 1000
rafka_topic_bytes_out_total{topic="orders"} 0
rafka_topic_bytes_in_total{topic="__consumer_offsets"} 50
rafka_consumer_group_state{group="g",state="Stable"} 1
rafka_consumer_group_members{group="g"} 2
rafka_consumer_group_lag{group="g",topic="orders",partition="0"} 3
rafka_consumer_group_lag{group="g",topic="orders",partition="1"} 4
"""


def with_values(text: str, **repl: str) -> str:
    for old, new in repl.items():
        text = text.replace(old, new)
    return text


def test_rates_sums_and_groups() -> None:
    t0 = parse_metrics("http://n1/metrics", 100.0, NODE1_T0)
    t1 = parse_metrics("http://n1/metrics", 102.0, with_values(
        NODE1_T0, **{'{topic="orders"} 1000': '{topic="orders"} 5000',
                     '{topic="orders"} 0': '{topic="orders"} 800',
                     '{api="produce"} 10': '{api="produce"} 30'}))
    node2 = parse_metrics("http://n2/metrics", 102.0, """
rafka_active_controller 0
rafka_offline_partitions 0
rafka_under_replicated_partitions 2
rafka_topic_under_replicated_partitions{topic="orders"} 2
rafka_topic_bytes_in_total{topic="orders"} 200
""")
    view = build_view([t0], [t1, node2])
    orders = {t.topic: t for t in view.topics}["orders"]
    assert orders.in_rate == (5000 - 1000) / 2  # node 2 has no earlier scrape: no rate from it
    assert orders.out_rate == 800 / 2
    assert orders.in_total == 5200 and orders.under_replicated == 3
    assert "__consumer_offsets" not in {t.topic for t in view.topics}
    assert "__consumer_offsets" in {t.topic for t in build_view([t0], [t1], internal=True).topics}
    assert view.under_replicated == 3 and view.offline_partitions == 1
    assert view.raft_leader == 1 and view.raft_commit_index == 42
    n1 = view.nodes[0]
    assert n1.active_controller and n1.request_rate == 20 / 2
    (g,) = view.groups
    assert (g.group, g.state, g.members, g.lag) == ("g", "Stable", 2, 7)
    assert g.partitions == [("orders", 0, 3), ("orders", 1, 4)]


def test_render_shows_a_down_node_and_the_lag() -> None:
    up = parse_metrics("http://n1:1/metrics", 1.0, NODE1_T0)
    from rafka.client.metrics_view import Scrape

    down = Scrape("http://n2:2/metrics", 1.0, error="ConnectionRefusedError")
    out = io.StringIO()
    Console(file=out, width=140, color_system=None).print(render(build_view(None, [up, down])))
    text = out.getvalue()
    assert "nodes 1/2" in text and "DOWN" in text
    assert "orders/0:3 orders/1:4" in text
    assert "offline 1" in text
