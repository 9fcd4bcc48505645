"""Pure parts of the Spark source: options, offset JSON, admission control, range splitting.

No Spark, no broker: these run in milliseconds on every ``make test``.
"""

from __future__ import annotations

import json
import random

import pytest
from rafka.spark_source.offsets import (
    OffsetRange,
    admit,
    backlog,
    from_json_offset,
    min_rows_ready,
    offset_json_str,
    ranges_between,
    split_ranges,
    to_json_offset,
)
from rafka.spark_source.options import OptionError, parse_sink_options, parse_source_options

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


def src(**kw: str) -> dict[str, str]:
    return {**BASE, **kw}


# --------------------------------------------------------------------------- options


def test_minimal_subscribe() -> None:
    o = parse_source_options(src(subscribe="b, a,b"), streaming=True)
    assert o.strategy == "subscribe" and o.topics == ("a", "b")
    assert o.starting.kind == "latest" and o.fail_on_data_loss is True
    assert o.max_offsets_per_trigger is None and not o.include_headers


def test_options_are_case_insensitive_and_typed() -> None:
    o = parse_source_options(src(SUBSCRIBE="t", maxoffsetspertrigger="100",
                                 FailOnDataLoss="false", minPartitions="4",
                                 includeHeaders="true", startingOffsets="earliest"))
    assert o.max_offsets_per_trigger == 100 and o.fail_on_data_loss is False
    assert o.min_partitions == 4 and o.include_headers and o.starting.kind == "earliest"


def test_kafka_prefixed_bootstrap_is_accepted() -> None:
    o = parse_source_options({"kafka.bootstrap.servers": "h:1,h:2", "subscribe": "t"})
    assert o.bootstrap_servers == "h:1,h:2"


@pytest.mark.parametrize("opts, words", [
    ({"subscribe": "t"}, ["bootstrap.servers"]),
    (src(), ["exactly one", "subscribe", "assign"]),
    (src(subscribe="t", assign='{"t":[0]}'), ["exactly one", "subscribe", "assign"]),
    (src(subscribe="t", subscribePattern="t.*"), ["subscribePattern"]),
    (src(subscribe="t", bogus="1"), ["unknown option", "bogus"]),
    (src(subscribe="t", maxOffsetsPerTrigger="0"), ["maxOffsetsPerTrigger", ">= 1"]),
    (src(subscribe="t", maxOffsetsPerTrigger="many"), ["maxOffsetsPerTrigger", "integer"]),
    (src(subscribe="t", failOnDataLoss="maybe"), ["failOnDataLoss"]),
    (src(subscribe="t", startingOffsets="{nope"), ["startingOffsets", "JSON"]),
    (src(subscribe="t", startingOffsets='{"t": {"0": -7}}'), ["startingOffsets", "-2"]),
    (src(assign="[0, 1]"), ["assign"]),
    (src(assign='{"t": [0]}', startingOffsets='{"u": {"0": 1}}'), ["startingOffsets", "u-0"]),
    (src(subscribePattern="("), ["subscribePattern", "regular expression"]),
    (src(subscribe="t", minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5"),
     ["minOffsetsPerTrigger", "maxOffsetsPerTrigger"]),
    (src(subscribe="t", maxTriggerDelay="5m"), ["maxTriggerDelay", "minOffsetsPerTrigger"]),
    (src(subscribe="t", minOffsetsPerTrigger="5", maxTriggerDelay="soon"), ["maxTriggerDelay"]),
    (src(subscribe="t", startingOffsets="earliest", startingTimestamp="5"),
     ["startingOffsets", "startingTimestamp"]),
    (src(subscribe="t", endingOffsets="earliest"), ["endingOffsets"]),
    ({"bootstrap.servers": "nohost", "subscribe": "t"}, ["bootstrap.servers", "HOST:PORT"]),
])
def test_bad_options_name_the_option(opts: dict[str, str], words: list[str]) -> None:
    with pytest.raises(OptionError) as info:
        parse_source_options(opts)
    for w in words:
        assert w.lower() in str(info.value).lower(), (w, str(info.value))


def test_stream_and_batch_only_options() -> None:
    with pytest.raises(OptionError, match="endingOffsets"):
        parse_source_options(src(subscribe="t", endingOffsets="latest"), streaming=True)
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger"):
        parse_source_options(src(subscribe="t", maxOffsetsPerTrigger="5"), streaming=False)
    with pytest.raises(OptionError, match="latest"):
        parse_source_options(src(subscribe="t", startingOffsets="latest"), streaming=False)
    with pytest.raises(OptionError, match="-1"):
        parse_source_options(src(subscribe="t", startingOffsets='{"t": {"0": -1}}'),
                             streaming=False)


def test_assign_and_json_positions() -> None:
    o = parse_source_options(src(assign='{"b": [1, 0], "a": [2]}',
                                 startingOffsets='{"a": {"2": -2}, "b": {"0": 5, "1": -1}}',
                                 endingOffsets='{"a": {"2": 9}, "b": {"0": -1, "1": 7}}'))
    assert o.assignment == (("a", 2), ("b", 0), ("b", 1))
    assert o.starting.kind == "offsets" and o.starting.offsets["b"][0] == 5
    assert o.ending.offsets["a"][2] == 9
    assert o.matches("a") and not o.matches("c")


def test_timestamps_and_durations() -> None:
    o = parse_source_options(src(subscribe="t", startingTimestamp="1700000000000",
                                 minOffsetsPerTrigger="10", maxTriggerDelay="30s"))
    assert o.starting.kind == "timestamp" and o.starting.timestamp == 1_700_000_000_000
    assert o.min_offsets_per_trigger == 10 and o.max_trigger_delay_ms == 30_000


def test_pattern_never_matches_internal_topics() -> None:
    o = parse_source_options(src(subscribePattern=".*"))
    assert o.matches("events") and not o.matches("__consumer_offsets")


def test_sink_options() -> None:
    s = parse_sink_options({**BASE, "topic": "out", "acks": "-1", "checkpointLocation": "/x"})
    assert s.topic == "out" and s.acks == "all"
    with pytest.raises(OptionError, match="subscribe"):
        parse_sink_options({**BASE, "subscribe": "t"})
    with pytest.raises(OptionError, match="acks"):
        parse_sink_options({**BASE, "acks": "2"})


# --------------------------------------------------------------------------- offset JSON


def test_offset_json_is_canonical() -> None:
    a = {("b", 10): 5, ("b", 2): 1, ("a", 0): 7}
    b = dict(reversed(list(a.items())))
    assert offset_json_str(a) == offset_json_str(b)
    j = to_json_offset(a)
    assert list(j) == ["a", "b"] and list(j["b"]) == ["2", "10"]
    assert all(isinstance(k, str) for ps in j.values() for k in ps)
    # round trip through Spark's storage format (json.dumps / json.loads)
    assert from_json_offset(json.loads(json.dumps(j))) == a
    assert from_json_offset(json.dumps(j)) == a


# --------------------------------------------------------------------------- admission control


def test_admit_without_limit_is_latest() -> None:
    start = {("t", 0): 0, ("t", 1): 5}
    latest = {("t", 0): 10, ("t", 1): 5}
    assert admit(start, latest, None) == latest
    assert admit(start, latest, 100) == latest


def test_admit_apportions_exactly_by_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 600, ("t", 1): 300, ("t", 2): 100}
    end = admit(start, latest, 100)
    assert end == {("t", 0): 60, ("t", 1): 30, ("t", 2): 10}


def test_admit_never_starves_and_never_exceeds() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randint(1, 8)
        start = {("t", p): rng.randint(0, 50) for p in range(n)}
        latest = {tp: o + rng.choice([0, 0, 1, 3, 1000]) for tp, o in start.items()}
        limit = rng.randint(1, 500)
        end = admit(start, latest, limit)
        admitted = backlog(start, end)
        assert admitted == min(limit, backlog(start, latest))
        assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_admit_small_partitions_get_records_in_turn() -> None:
    # one record per partition backlog, limit 1: someone gets it (the sorted-first on ties)
    start = {("t", p): 0 for p in range(3)}
    latest = {("t", p): 1 for p in range(3)}
    end = admit(start, latest, 1)
    assert backlog(start, end) == 1 and end[("t", 0)] == 1


# --------------------------------------------------------------------------- ranges


def test_ranges_between_skips_empty_and_unknown() -> None:
    start = {("t", 0): 3, ("t", 1): 5, ("u", 0): 0}
    end = {("t", 0): 3, ("t", 1): 9, ("v", 0): 4}
    assert ranges_between(start, end) == [OffsetRange("t", 1, 5, 9)]


def test_split_ranges_for_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 10, 13)]
    out = split_ranges(ranges, 8)
    assert len(out) >= 8
    for r in ranges:
        pieces = [p for p in out if p.partition == r.partition]
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:], strict=False))
        sizes = [p.size for p in pieces]
        assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges
    assert split_ranges([OffsetRange("t", 0, 0, 3)], 10) == [
        OffsetRange("t", 0, i, i + 1) for i in range(3)]


def test_min_rows_and_trigger_delay() -> None:
    assert not min_rows_ready(0, None, 0, 10, 100)
    assert min_rows_ready(1, None, 0, 10, 100)
    assert not min_rows_ready(5, 10, 0, 50, 100)
    assert min_rows_ready(5, 10, 0, 100, 100)      # waited long enough
    assert min_rows_ready(10, 10, 0, 1, 100)
