"""KIP-227 fetch sessions (broker/kafka/fetch_sessions.py) on real Fetch request entities:
full and incremental sessions, unchanged partitions left out of an incremental answer, the
session errors, closing, and the bounded cache evicting the least recently used session."""

from __future__ import annotations

from typing import Any

from rafka.broker.kafka import codec
from rafka.broker.kafka.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSessionCache,
)


def fetch(session_id: int, epoch: int, parts: dict[tuple[str, int], int],
          forgotten: dict[str, list[int]] | None = None, version: int = 12) -> Any:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), off in parts.items():
        by_topic.setdefault(t, []).append({
            "partition": p, "current_leader_epoch": -1, "fetch_offset": off,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20})
    return codec.build(codec.request_schema(1, version), {
        "cluster_id": None, "replica_id": -1, "max_wait": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
        "session_epoch": epoch, "rack_id": "",
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        "forgotten_topics_data": [{"topic": t, "partitions": ps}
                                  for t, ps in (forgotten or {}).items()]})


def answer(plan: Any, hw: dict[tuple[str, int], int],
           records: dict[tuple[str, int], bytes] | None = None) -> list[dict[str, Any]]:
    """A broker answer for every partition the plan fetches (what apis.fetch builds)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for t in plan.topics:
        for p in t["partitions"]:
            tp = (t["name"], p["partition"])
            out.setdefault(t["name"], []).append({
                "partition_index": p["partition"], "error_code": 0, "high_watermark": hw[tp],
                "last_stable_offset": hw[tp], "log_start_offset": 0,
                "records": (records or {}).get(tp, b"")})
    return [{"topic": t, "partitions": ps} for t, ps in out.items()]


def answered(responses: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(t["topic"], p["partition_index"]) for t in responses for p in t["partitions"]}


def offsets(plan: Any) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition"]): p["fetch_offset"] for t in plan.topics
            for p in t["partitions"]}


def test_full_then_incremental_session_answers_only_what_changed() -> None:
    cache = FetchSessionCache()
    a0, a1, b0 = ("a", 0), ("a", 1), ("b", 0)
    hw = {a0: 5, a1: 0, b0: 0}
    full = cache.begin(fetch(0, 0, {a0: 0, a1: 0, b0: 0}), 12)
    assert not full.error and full.session_id != 0
    assert answered(full.finish(answer(full, hw, {a0: b"recs"}))) == {a0, a1, b0}
    sid = full.session_id
    # incremental: only a0 moved its fetch offset; every partition of the session is fetched
    inc = cache.begin(fetch(sid, 1, {a0: 5}), 12)
    assert (inc.error, inc.session_id) == (0, sid)
    assert offsets(inc) == {a0: 5, a1: 0, b0: 0}
    assert answered(inc.finish(answer(inc, hw))) == set()  # nothing new anywhere
    hw[b0] = 3  # records arrived on b0 only
    inc = cache.begin(fetch(sid, 2, {}), 12)
    assert answered(inc.finish(answer(inc, hw, {b0: b"recs"}))) == {b0}
    # forgetting a partition takes it out of the session; a new one joins and is answered
    inc = cache.begin(fetch(sid, 3, {("c", 0): 0}, forgotten={"a": [1]}), 12)
    hw[("c", 0)] = 0
    assert offsets(inc) == {a0: 5, b0: 0, ("c", 0): 0}
    assert answered(inc.finish(answer(inc, hw))) == {("c", 0)}


def test_session_errors_and_closing() -> None:
    cache = FetchSessionCache()
    full = cache.begin(fetch(0, 0, {("a", 0): 0}), 12)
    sid = full.session_id
    assert cache.begin(fetch(sid + 1, 1, {}), 12).error == FETCH_SESSION_ID_NOT_FOUND
    assert cache.begin(fetch(sid, 2, {}), 12).error == INVALID_FETCH_SESSION_EPOCH
    ok = cache.begin(fetch(sid, 1, {}), 12)
    assert ok.error == 0
    # the same epoch again (a duplicated request) is refused: the epoch moved on acceptance
    assert cache.begin(fetch(sid, 1, {}), 12).error == INVALID_FETCH_SESSION_EPOCH
    assert ok.error_answer()["session_id"] == 0
    # epoch -1 closes the session and is itself a sessionless full fetch
    final = cache.begin(fetch(sid, -1, {("a", 0): 3}), 12)
    assert (final.error, final.session_id, offsets(final)) == (0, 0, {("a", 0): 3})
    assert cache.begin(fetch(sid, 2, {}), 12).error == FETCH_SESSION_ID_NOT_FOUND
    # versions before 7 have no sessions: always full, session id 0
    old = cache.begin(fetch(0, 0, {("a", 0): 1}, version=6), 6)
    assert (old.session_id, offsets(old)) == (0, {("a", 0): 1})
    # a new initial request naming an old session replaces it
    first = cache.begin(fetch(0, 0, {("a", 0): 0}), 12).session_id
    second = cache.begin(fetch(first, 0, {("a", 0): 0}), 12).session_id
    assert second != first and set(cache.sessions) == {second}


def test_cache_is_bounded_least_recently_used_out() -> None:
    cache = FetchSessionCache(max_sessions=2)
    s1 = cache.begin(fetch(0, 0, {("a", 0): 0}), 12).session_id
    s2 = cache.begin(fetch(0, 0, {("a", 0): 0}), 12).session_id
    assert cache.begin(fetch(s1, 1, {}), 12).error == 0  # s1 used: s2 is the oldest now
    s3 = cache.begin(fetch(0, 0, {("a", 0): 0}), 12).session_id
    assert set(cache.sessions) == {s1, s3} and cache.evicted == 1
    assert cache.begin(fetch(s2, 1, {}), 12).error == FETCH_SESSION_ID_NOT_FOUND
    # no slots at all: every fetch is sessionless (session id 0), still answered in full
    none = FetchSessionCache(max_sessions=0).begin(fetch(0, 0, {("a", 0): 0}), 12)
    assert (none.error, none.session_id, offsets(none)) == (0, 0, {("a", 0): 0})


def test_partitions_that_returned_records_go_to_the_back() -> None:
    """Partitions are fetched in session order; one that returned records moves last, so a
    filled byte budget does not keep starving the same partitions."""
    cache = FetchSessionCache()
    parts = {("a", i): 0 for i in range(3)}
    full = cache.begin(fetch(0, 0, parts), 12)
    full.finish(answer(full, {tp: 0 for tp in parts}, {("a", 0): b"recs"}))
    inc = cache.begin(fetch(full.session_id, 1, {}), 12)
    assert list(offsets(inc)) == [("a", 1), ("a", 2), ("a", 0)]


def test_epoch_wraps_to_one() -> None:
    cache = FetchSessionCache()
    sid = cache.begin(fetch(0, 0, {("a", 0): 0}), 12).session_id
    cache.sessions[sid].epoch = 2**31 - 1
    assert cache.begin(fetch(sid, 2**31 - 1, {}), 12).error == 0
    assert cache.begin(fetch(sid, 1, {}), 12).error == 0
