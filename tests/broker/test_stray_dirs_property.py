"""Random histories of topic creations, deletions and moves, against a broker that goes down,
misses some of them, and comes back with a first image that may be older than what it had
seen (a deposed leader's committed offset) before catching up (broker/partition_dirs.py).

The broker is the real in-process one (ReplicaManager, PartitionLogs on disk, produce over
loopback); only the metadata is scripted. After every image it applies:

- every open partition's directory holds the identity of the topic the image names: a log is
  never served as another topic's;

and once caught up with the whole history:

- every partition the history places here is open, and a produce to it succeeds;
- nothing acknowledged is lost: a topic never moved away from this broker still has every
  record it acknowledged, whatever it missed while down;
- no directory is left that the history does not place here.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rafka.broker.partition_dirs import parse_dir_name, read_identity
from rafka.broker.replica_manager import partition_dir_name
from rafka.metadata.records import Partition, PartitionChange, RegisterBroker, RemoveTopic, Topic
from rafka.wire.protocol import ApiKey

from .harness import BROKER_ID, Broker, batch, part, produce_body, running_broker

OTHER = 2
_examples = itertools.count()

# "a" twice as often as "b": same-name re-creations are the interesting histories. A script is
# one to three phases: changes the broker applies, then it goes down, changes it misses, and it
# comes back with a first image cut at a fraction of the history (0: none of it). After every
# step the broker, when up, acknowledges a record on every partition placed here.
_name = st.sampled_from(["a", "a", "b"])
_change = st.one_of(
    st.tuples(st.just("create"), _name, st.booleans()),
    st.tuples(st.just("delete"), _name),
    st.tuples(st.just("move"), _name),
)
_phase = st.tuples(st.lists(_change, max_size=3), st.lists(_change, max_size=3),
                   st.sampled_from([0.0, 0.3, 0.6, 0.9, 1.0]))
steps = st.lists(_phase, min_size=1, max_size=3).map(
    lambda phases: [s for up, down, lag in phases for s in [*up, ("down",), *down, ("up", lag)]])


@dataclass
class Truth:
    """The history as the controller wrote it, and what the broker acknowledged."""

    base: int
    entries: list[tuple[int, int, Any]] = field(default_factory=list)
    topics: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (id, here)
    acked: dict[str, int] = field(default_factory=dict)  # id -> records acknowledged here
    moved_away: set[str] = field(default_factory=set)  # ids that ever left this broker
    ids: itertools.count = field(default_factory=itertools.count)

    def write(self, *records: Any) -> list[tuple[int, int, Any]]:
        new = [(self.base + len(self.entries) + i, 1, r) for i, r in enumerate(records)]
        self.entries += new
        return new


def _check_open_partitions(b: Broker, data: Path) -> None:
    for tp in b.rm.partitions:
        topic = b.publisher.image.topics.by_name[tp.topic]
        identity = read_identity(data / partition_dir_name(tp.topic, tp.partition))
        assert identity is not None and identity.topic_id == topic.topic_id, (tp, identity, topic)


async def _produce_everywhere(b: Broker, truth: Truth) -> None:
    """One acknowledged record on every partition placed here (it must be open: caught up)."""
    async with b.connect() as conn:
        for name, (tid, here) in sorted(truth.topics.items()):
            if here:
                r = part((await conn.request(ApiKey.PRODUCE, produce_body(name, batch(b"v")))).body)
                assert r["error"] == 0, (name, r)
                truth.acked[tid] = truth.acked.get(tid, 0) + 1


async def _run(tmp_path: Path, script: list[tuple[Any, ...]]) -> None:
    data = tmp_path / "data"
    truth = Truth(base=1_000_000_000 + next(_examples) * 10_000)
    truth.write(RegisterBroker(OTHER, "inc", "127.0.0.1", 1))
    async with contextlib.AsyncExitStack() as stack:
        b: Broker | None = None

        async def publish(entries: list[tuple[int, int, Any]]) -> None:
            if b is not None:
                await b.publisher.publish_records(entries)
                await b.rm.wait_logs_open()
                _check_open_partitions(b, data)

        async def start(lag: float) -> Broker:
            # the first image: the history up to a point at or before its end, then the rest
            cut = round(lag * len(truth.entries))
            new = await stack.enter_async_context(running_broker(tmp_path, first_entries=truth.entries[:cut]))
            await new.rm.wait_logs_open()
            _check_open_partitions(new, data)
            for entry in truth.entries[cut:]:
                await new.publisher.publish_records([entry])
                await new.rm.wait_logs_open()
                _check_open_partitions(new, data)
            return new

        b = await start(1.0)
        for step in [*script, ("up", 1.0)]:
            kind, name = step[0], step[1] if len(step) > 1 else None
            current = truth.topics.get(name) if isinstance(name, str) else None
            if kind == "create" and current is None:
                tid, here = f"id-{name}-{next(truth.ids)}", bool(step[2])
                truth.topics[name] = (tid, here)
                replicas = (BROKER_ID,) if here else (OTHER,)
                await publish(truth.write(Topic(name, tid), Partition(tid, 0, replicas, replicas, replicas[0])))
            elif kind == "delete" and current is not None:
                del truth.topics[name]
                await publish(truth.write(RemoveTopic(current[0])))
            elif kind == "move" and current is not None:
                tid, here = current
                truth.topics[name] = (tid, not here)
                if here:
                    truth.moved_away.add(tid)
                to = OTHER if here else BROKER_ID
                await publish(truth.write(PartitionChange(tid, 0, leader=to, isr=(to,), replicas=(to,))))
            elif kind == "down" and b is not None:
                await stack.aclose()
                b = None
            elif kind == "up" and b is None:
                b = await start(float(step[1]))
            if b is not None:
                await _produce_everywhere(b, truth)
        assert b is not None

        # caught up with the whole history
        placed = {name for name, (_, here) in truth.topics.items() if here}
        assert {tp.topic for tp in b.rm.partitions} == placed
        for name in placed:
            tid = truth.topics[name][0]
            log_end = b.rm.get_leader(name, 0).log.log_end_offset
            if tid not in truth.moved_away:
                assert log_end == truth.acked.get(tid, 0), (name, tid, log_end, truth)
        on_disk = {tp.topic for p in data.iterdir() if p.is_dir() and (tp := parse_dir_name(p.name))}
        assert on_disk == placed, (on_disk, truth)
        assert not b.rm.undecided


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(steps)
def test_random_histories_with_missed_deltas_and_older_first_images(tmp_path_factory: Any, script: Any) -> None:
    trio.run(_run, tmp_path_factory.mktemp("stray"), script)

