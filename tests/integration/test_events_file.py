"""A real node writes a line per high-watermark move to ``events.jsonl`` only with
``events.hw.enable`` (broker/events.py); its rare events (start, partition roles) always."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rafka.broker.events import event_files
from rafka.client.sync import Admin, Producer


@pytest.mark.parametrize("enable", [False, True])
def test_a_real_node_writes_hw_lines_only_when_configured(cluster_factory: Any, enable: bool) -> None:
    c = cluster_factory(1, broker_config={"events.hw.enable": enable})
    with Admin(bootstrap_servers=c.bootstrap) as admin:
        admin.create_topic("ev", partitions=1, replication_factor=1)
    with Producer(bootstrap_servers=c.bootstrap, acks="all") as p:
        for i in range(5):
            p.send("ev", value=b"%d" % i).result(timeout=30)
    events = [json.loads(line) for p in event_files(c.data_dir / "node-1" / "events.jsonl")
              for line in p.read_text().splitlines()]
    kinds = {e["event"] for e in events}
    assert {"start", "partition"} <= kinds  # the rare events are always there
    hws = [e["hw"] for e in events if e["event"] == "hw" and e["tp"] == "ev/0"]
    assert (max(hws, default=0) == 5) is enable and (not hws) is (not enable)
