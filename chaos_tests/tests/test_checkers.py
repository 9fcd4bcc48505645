"""Every checker must flag its anomaly in a small hand-made history and accept a clean one."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.chaos_tests.checkers import (
    HISTORY_CHECKERS,
    analyse,
    check_aborted_read,
    check_all,
    check_committed_offset_regression,
    check_duplicate,
    check_inconsistent_offsets,
    check_lost_write,
    check_nonmonotonic_poll,
    check_nonmonotonic_send,
    check_poll_skip,
    check_unseen,
)
from rafka.chaos_tests.history import HistoryWriter, completed, pair_ops, read_history
from rafka.chaos_tests.node_events import (
    check_acked_not_truncated,
    check_controller_leaders,
    check_hw_monotonic,
    check_partition_states,
    parse_node_log_line,
    read_node_events,
)
from rafka.chaos_tests.tests.histgen import FAULTS, Builder, simulate


def _types(result):
    return {a.type for a in result.anomalies}


# ----------------------------------------------------------------------- history module

def test_writer_reader_roundtrip_and_pairing(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, buffer_lines=2) as w:
        a = w.invoke(1, "send", {"topic": "t", "partition": 0, "key": None, "value": 1})
        b = w.invoke(2, "poll", {})
        w.ok(a, dict(a.value, offset=0))
        w.info(b)
        w.invoke(3, "send", {"topic": "t", "partition": None, "key": None, "value": 2})
    with open(path, "a") as fh:
        fh.write('{"index": 5, "proc')  # a crashed writer's torn last line
    ops = read_history(path)
    assert [op.index for op in ops] == [0, 1, 2, 3, 4]
    assert all(json.loads(line) for line in path.read_text().splitlines()[:5])
    assert ops[0].time <= ops[2].time
    assert pair_ops(ops) == {0: 2, 1: 3}
    pairs = [(i.index, c.index if c else None) for i, c in completed(ops)]
    assert pairs == [(0, 2), (1, 3), (4, None)]
    assert ops[2].value["offset"] == 0


def test_writer_is_thread_safe(tmp_path):
    import threading

    path = tmp_path / "h.jsonl"
    w = HistoryWriter(path, buffer_lines=7)

    def work(p):
        for _ in range(200):
            w.ok(w.invoke(p, "poll", {}), {"records": []})

    threads = [threading.Thread(target=work, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    ops = read_history(path)
    assert sorted(op.index for op in ops) == list(range(1600))
    assert len(pair_ops(ops)) == 800


# ----------------------------------------------------------------------- one per anomaly

def _clean() -> Builder:
    b = Builder()
    b.send(1, 0, "a", 0)
    b.send(1, 0, "b", 1)
    b.send(2, 1, "c", 0)
    b.poll(10, [(0, 0, "a"), (1, 0, "c")])
    b.poll(10, [(0, 1, "b")])
    b.commit(10, "g", {"t/0": 2, "t/1": 1})
    b.final(0, [(0, "a"), (1, "b")])
    b.final(1, [(0, "c")])
    return b


def test_clean_history_passes_everything():
    s = check_all(_clean().ops)
    assert s.valid, s.to_dict()
    assert set(HISTORY_CHECKERS) <= set(s.checkers)


def test_lost_write():
    b = Builder()
    s1 = b.send(1, 0, "a", 0)
    b.send(1, 0, "b", 1)
    _, p = b.poll(10, [(0, 1, "b")])
    r = check_lost_write(b.ops)
    assert not r.valid and _types(r) == {"lost-write"}
    assert r.anomalies[0].ops == [s1[0], s1[1], p]
    assert r.anomalies[0].details["value"] == "a"
    assert check_lost_write(_clean().ops).valid


def test_unseen_needs_final_read():
    b = Builder()
    b.send(1, 0, "a", 0)
    s2 = b.send(1, 0, "b", 1)
    assert check_unseen(b.ops).valid  # no final read: cannot judge
    assert check_unseen(b.ops).stats["unchecked_no_final_read"] == 2
    b.final(0, [(0, "a")])
    r = check_unseen(b.ops)
    assert not r.valid and r.anomalies[0].ops == list(s2)
    assert check_lost_write(b.ops).valid  # b is above every read offset: unseen, not lost
    assert check_unseen(_clean().ops).valid


def test_inconsistent_offsets():
    b = Builder()
    _, s = b.send(1, 0, "a", 0)
    _, p = b.poll(10, [(0, 0, "x")])
    r = check_inconsistent_offsets(b.ops)
    assert not r.valid and r.anomalies[0].ops == [s, p]
    assert set(r.anomalies[0].details["values"]) == {"a", "x"}
    assert check_inconsistent_offsets(_clean().ops).valid


def test_duplicate():
    b = Builder()
    _, s = b.send(1, 0, "a", 0)
    _, p = b.final(0, [(0, "a"), (1, "a")])
    r = check_duplicate(b.ops)
    assert not r.valid and r.anomalies[0].ops == [s, p]
    assert r.anomalies[0].details["positions"] == [[0, 0], [0, 1]]
    assert check_duplicate(_clean().ops).valid


def test_nonmonotonic_send():
    b = Builder()
    s1 = b.send(1, 0, "a", 5)
    s2 = b.send(1, 0, "b", 3)
    b.send(2, 0, "c", 4)  # another process: not part of the anomaly
    r = check_nonmonotonic_send(b.ops)
    assert not r.valid and len(r.anomalies) == 1
    assert r.anomalies[0].ops == [*s1, *s2]
    assert check_nonmonotonic_send(_clean().ops).valid


def test_nonmonotonic_poll_and_reset():
    b = Builder()
    _, p1 = b.poll(10, [(0, 3, "d")])
    _, p2 = b.poll(10, [(0, 2, "c")])
    r = check_nonmonotonic_poll(b.ops)
    assert not r.valid and r.anomalies[0].ops == [p1, p2]
    ok = Builder()
    ok.poll(10, [(0, 3, "d")])
    ok.assign(10, ["t/0"], {"t/0": 2})  # a seek back after reassignment is legal
    ok.poll(10, [(0, 2, "c")])
    assert check_nonmonotonic_poll(ok.ops).valid
    assert check_nonmonotonic_poll(_clean().ops).valid


def test_poll_skip_only_over_known_offsets():
    b = Builder()
    _, p1 = b.poll(10, [(0, 0, "a")])
    _, p2 = b.poll(10, [(0, 3, "d")])
    assert check_poll_skip(b.ops).valid  # 1 and 2 never seen by anyone: not known to exist
    b.final(0, [(0, "a"), (1, "b"), (2, "c"), (3, "d")])
    r = check_poll_skip(b.ops)
    assert not r.valid and r.anomalies[0].ops == [p1, p2]
    assert r.anomalies[0].details["skipped"] == 2
    assert check_poll_skip(_clean().ops).valid


def test_poll_skip_resets_and_positions():
    final = [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    b = Builder()
    b.poll(10, [(0, 0, "a")])
    b.assign(10, ["t/0"])  # rebalance: position unknown, no expectation
    b.poll(10, [(0, 3, "d")])
    b.final(0, final)
    assert check_poll_skip(b.ops).valid
    b = Builder()
    _, a = b.assign(10, ["t/0"], {"t/0": 1})  # position given: next read must be offset 1
    _, p = b.poll(10, [(0, 2, "c")])
    b.final(0, final)
    r = check_poll_skip(b.ops)
    assert not r.valid and r.anomalies[0].ops == [a, p]
    b = Builder()
    b.poll(10, [(0, 0, "a")])
    b.poll(10, [], type="info")  # may have consumed records we never saw
    b.poll(10, [(0, 3, "d")])
    b.final(0, final)
    assert check_poll_skip(b.ops).valid


def test_aborted_read():
    b = Builder()
    s = b.send(1, 0, "a", type="fail")
    b.send(1, 0, "b", type="info")  # unknown outcome: reading it is fine
    _, p = b.poll(10, [(0, 0, "a"), (0, 1, "b")])
    r = check_aborted_read(b.ops)
    assert not r.valid and len(r.anomalies) == 1
    assert r.anomalies[0].ops == [s[0], s[1], p]
    assert check_aborted_read(_clean().ops).valid


def test_committed_offset_regression():
    b = Builder()
    c1 = b.commit(10, "g", {"t/0": 5})
    c2 = b.commit(11, "g", {"t/0": 3})
    b.commit(12, "other", {"t/0": 1})
    r = check_committed_offset_regression(b.ops)
    assert not r.valid and r.anomalies[0].ops == [*c1, *c2]
    # concurrent commits (second begins before the first completes) are not ordered
    ok = Builder()
    i1 = ok.event(10, "invoke", "commit", {"group": "g", "offsets": {"t/0": 5}})
    i2 = ok.event(11, "invoke", "commit", {"group": "g", "offsets": {"t/0": 3}})
    ok.event(10, "ok", "commit", ok.ops[i1]["value"])
    ok.event(11, "ok", "commit", ok.ops[i2]["value"])
    assert check_committed_offset_regression(ok.ops).valid
    assert check_committed_offset_regression(_clean().ops).valid


# ----------------------------------------------------------------------- node events

def test_node_log_line_parsing(tmp_path):
    log = tmp_path / "node-1.log"
    log.write_text(
        '{"event": "start", "node": 1}\n'
        "2025-01-01 INFO rafka.raft rafka-event: {\"event\": \"raft-leader\", \"node\": 1, "
        "\"epoch\": 2}\n"
        "plain text line\n{not json\n"
        '{"no_event_key": 1}\n')
    evs = read_node_events([log])
    assert [e["event"] for e in evs] == ["start", "raft-leader"]
    assert evs[1]["_src"].endswith(":2")
    assert parse_node_log_line("  ") is None


def test_controller_leaders():
    good = [{"event": "raft-leader", "node": 1, "epoch": 1},
            {"event": "raft-leader", "node": 2, "epoch": 2},
            {"event": "raft-leader", "node": 2, "epoch": 2}]
    assert check_controller_leaders(good).valid
    bad = good + [{"event": "raft-leader", "node": 3, "epoch": 2}]
    r = check_controller_leaders(bad)
    assert not r.valid and r.anomalies[0].events == [1, 3]


def test_partition_states():
    ok = {"event": "partition", "node": 1, "tp": "t/0", "leader": 1, "leader_epoch": 1,
          "replicas": [1, 2, 3], "isr": [1, 2]}
    assert check_partition_states([ok, dict(ok, node=2)]).valid
    r = check_partition_states([ok, dict(ok, isr=[1, 4])])
    assert _types(r) == {"isr-not-subset"} and r.anomalies[0].events == [1]
    r = check_partition_states([ok, dict(ok, node=2, leader=2)])
    assert _types(r) == {"multiple-partition-leaders"}


def test_hw_monotonic():
    evs = [{"event": "hw", "node": 1, "tp": "t/0", "leader_epoch": 1, "hw": 5},
           {"event": "hw", "node": 1, "tp": "t/0", "leader_epoch": 1, "hw": 7},
           {"event": "hw", "node": 1, "tp": "t/0", "leader_epoch": 2, "hw": 6},  # new epoch
           {"event": "start", "node": 1},
           {"event": "hw", "node": 1, "tp": "t/0", "leader_epoch": 2, "hw": 3}]  # restarted
    assert check_hw_monotonic(evs).valid
    r = check_hw_monotonic(evs + [{"event": "hw", "node": 1, "tp": "t/0",
                                   "leader_epoch": 2, "hw": 2}])
    assert not r.valid and r.anomalies[0].events == [4, 5]


def test_acked_not_truncated_below_own_hw():
    evs = [{"event": "hw", "node": 2, "tp": "t/0", "leader_epoch": 1, "hw": 10},
           {"event": "truncate", "node": 2, "tp": "t/0", "to": 12, "from": 14}]
    assert check_acked_not_truncated(evs).valid
    r = check_acked_not_truncated(evs + [{"event": "truncate", "node": 2, "tp": "t/0",
                                          "to": 8, "from": 12}])
    assert not r.valid and r.anomalies[0].events == [0, 2]


def test_acked_not_truncated_against_history():
    b = Builder()
    s = b.send(1, 0, "a", 4)  # acked at t = 2 ms
    t_ack = b.ops[s[1]]["time"]
    start = 1_000_000_000
    early = {"event": "truncate", "node": 3, "tp": "t/0", "to": 2, "from": 6,
             "mono_ns": start + t_ack - 1}
    late_above = {"event": "truncate", "node": 3, "tp": "t/0", "to": 5, "from": 6,
                  "mono_ns": start + t_ack + 10}
    assert check_acked_not_truncated([early, late_above], analyse(b.ops),
                                     start_mono_ns=start).valid
    late = dict(early, mono_ns=start + t_ack + 10)
    s_all = check_all(b.ops, [late], start_mono_ns=start)
    assert not s_all.valid
    (a,) = s_all.checkers["acked-not-truncated"].anomalies
    assert a.ops == list(s) and a.details["why"] == "acked-offset-removed"



def test_diverging_truncation_of_an_old_epoch_spares_acks_of_a_newer_leader():
    # seen on the docker backend: node 3, the isolated leader of epoch 1, appended offsets
    # [2, 6) nobody acknowledged; node 1 led epoch 2 and acknowledged its own record at offset
    # 4; after the heal node 3 truncated its epoch-1 suffix fetching in epoch 2. Same offset,
    # different record: not an anomaly. The same truncation is one when the acking node did
    # not (by its own events) lead in epoch >= 2 when the send was invoked.
    b = Builder()
    s = b.send(1, 0, "a", 4)  # invoked at 1 ms, acked by node 1 at 2 ms
    start = 1_000_000_000
    t_ack = b.ops[s[1]]["time"]
    led = {"event": "partition", "node": 1, "tp": "t/0", "leader": 1, "leader_epoch": 2,
           "partition_epoch": 5, "replicas": [1, 2, 3], "isr": [1, 2, 3], "mono_ns": start}
    trunc = {"event": "truncate", "node": 3, "tp": "t/0", "to": 2, "from": 6,
             "leader_epoch": 2, "reason": "diverging-epoch", "mono_ns": start + t_ack + 10}
    facts = analyse(b.ops)
    assert check_acked_not_truncated([led, trunc], facts, start_mono_ns=start).valid
    for evs in ([led, dict(trunc, leader_epoch=3)],          # removes epoch-2 records
                [led, dict(trunc, reason="recovery")],       # not an epoch-based truncation
                [dict(led, leader=2), trunc],                # node 1 was not the leader
                [dict(led, mono_ns=start + t_ack), trunc],   # led only after the invoke
                [trunc]):                                    # no partition events at all
        r = check_acked_not_truncated(evs, facts, start_mono_ns=start)
        assert not r.valid and r.anomalies[0].details["why"] == "acked-offset-removed", evs


def test_diverging_truncation_outside_the_isr_spares_acks():
    # acceptance seed 4: node 3, the isolated old leader, was out of the ISR [1, 2] when
    # node 1 acknowledged offset 146; the send's history op names no node, so the epoch rule
    # cannot apply. Node 3 truncating its own epoch-0 record at 146 is fine; an ISR member
    # doing the same is not.
    b = Builder()
    s = b.send(1, 0, "a", 4)
    start = 1_000_000_000
    t_ack = b.ops[s[1]]["time"]
    isr = {"event": "partition", "node": 2, "tp": "t/0", "leader": 1, "leader_epoch": 1,
           "partition_epoch": 5, "replicas": [1, 2, 3], "isr": [1, 2], "mono_ns": start}
    trunc = {"event": "truncate", "node": 3, "tp": "t/0", "to": 4, "from": 5,
             "leader_epoch": 1, "reason": "diverging-epoch", "mono_ns": start + t_ack + 10}
    facts = analyse(b.ops)
    assert check_acked_not_truncated([isr, trunc], facts, start_mono_ns=start).valid
    for evs in ([isr, dict(trunc, node=2)],                  # an ISR member lost it
                [dict(isr, isr=[1, 2, 3]), trunc],           # node 3 was in the ISR
                [trunc]):                                    # no ISR known
        r = check_acked_not_truncated(evs, facts, start_mono_ns=start)
        assert not r.valid and r.anomalies[0].details["why"] == "acked-offset-removed", evs

def test_diverging_truncation_by_a_node_outside_the_committing_isr_spares_acks():
    # second acceptance campaign, seed 9: node 1 led epoch 1 (ISR [3, 2, 1]) and appended
    # offset 4 alone, then was paused; the send was invoked then (ISR still [3, 2, 1]), node 3
    # took over in epoch 2 with ISR [3, 2], committed another record at 4 (hw 5) and answered;
    # node 1 came back and truncated its epoch-1 record. Not an anomaly. It is one if node 1
    # was in the ISR that committed, or if the commit came from a node that did not lead.
    b = Builder()
    s = b.send(1, 0, "a", 4)  # invoked at 1 ms, acknowledged at 2 ms; the op names no node
    start = 1_000_000_000
    t_inv, t_ack = b.ops[s[0]]["time"], b.ops[s[1]]["time"]
    old = {"event": "partition", "node": 1, "tp": "t/0", "leader": 1, "leader_epoch": 1,
           "partition_epoch": 10, "replicas": [3, 2, 1], "isr": [3, 2, 1], "mono_ns": start}
    new = {"event": "partition", "node": 3, "tp": "t/0", "leader": 3, "leader_epoch": 2,
           "partition_epoch": 11, "replicas": [3, 2, 1], "isr": [3, 2],
           "mono_ns": start + (t_inv + t_ack) // 2}
    hw = {"event": "hw", "node": 3, "tp": "t/0", "leader_epoch": 2, "hw": 5,
          "mono_ns": start + t_ack - 1}
    trunc = {"event": "truncate", "node": 1, "tp": "t/0", "to": 4, "from": 5,
             "leader_epoch": 2, "reason": "diverging-epoch", "mono_ns": start + t_ack + 10}
    facts = analyse(b.ops)
    assert check_acked_not_truncated([old, new, hw, trunc], facts, start_mono_ns=start).valid
    for evs in ([old, dict(new, isr=[3, 2, 1]), hw, trunc],   # node 1 was in the ISR
                [old, dict(new, leader=2), hw, trunc],         # node 3 did not lead
                [old, new, dict(hw, hw=4), trunc],             # no commit past offset 4
                [old, new, dict(hw, mono_ns=start + t_ack + 5), trunc],  # committed after
                [old, new, trunc]):                            # no hw events at all
        r = check_acked_not_truncated(evs, facts, start_mono_ns=start)
        assert not r.valid and r.anomalies[0].details["why"] == "acked-offset-removed", evs


def test_truncation_by_a_node_the_committing_hw_did_not_count_spares_acks():
    # issue 28, docker seed 1: leader 1 (epoch 1) expanded its ISR to [3, 1, 2] while node 2
    # was paused, shrank it to [3, 1] (the controller's answer at 13.037) and the HW passed the
    # acked offset 4 at 13.041 counting nodes 3 and 1; node 2, resumed, still saw [3, 1, 2] in
    # its own metadata when it truncated its old-epoch record at 4 (13.055) and learned of the
    # shrink only at 13.094. The record had its two copies; node 2 was not one of them.
    b = Builder()
    s = b.send(1, 0, "a", 4)  # invoked at 1 ms, acknowledged at 2 ms; the op names no node
    start = 1_000_000_000
    t_inv, t_ack = b.ops[s[0]]["time"], b.ops[s[1]]["time"]
    stale = {"event": "partition", "node": 2, "tp": "t/0", "leader": 1, "leader_epoch": 1,
             "partition_epoch": 2, "replicas": [3, 1, 2], "isr": [3, 1, 2],
             "mono_ns": start + t_inv - 100}
    shrink = {"event": "isr", "node": 1, "tp": "t/0", "leader_epoch": 1, "partition_epoch": 3,
              "isr": [3, 1], "mono_ns": start + t_ack - 20}
    hw = {"event": "hw", "node": 1, "tp": "t/0", "leader_epoch": 1, "hw": 6, "isr": [3, 1],
          "mono_ns": start + t_ack - 10}
    trunc = {"event": "truncate", "node": 2, "tp": "t/0", "to": 3, "from": 5,
             "leader_epoch": 1, "reason": "diverging-epoch", "mono_ns": start + t_ack + 10}
    facts = analyse(b.ops)
    assert check_acked_not_truncated([stale, shrink, hw, trunc], facts, start_mono_ns=start).valid
    assert check_acked_not_truncated([stale, hw, trunc], facts, start_mono_ns=start).valid
    for evs in ([stale, shrink, dict(hw, isr=[3, 1, 2]), trunc],  # node 2 was counted
                [stale, shrink, dict(hw, mono_ns=start + t_ack + 5), trunc],  # committed later
                [stale, shrink, dict(hw, hw=4), trunc],  # the HW never passed offset 4
                [stale, shrink, {k: v for k, v in hw.items() if k != "isr"}, trunc]):  # unknown
        r = check_acked_not_truncated(evs, facts, start_mono_ns=start)
        assert not r.valid and r.anomalies[0].details["why"] == "acked-offset-removed", evs


def test_node_events_share_the_history_clock():
    """The ordering rule the checker relies on (node_events.py): ``mono_ns - start_mono_ns``
    is history time, and a truncation stamped at or before an ack's time is not after it."""
    b = Builder()
    s = b.send(1, 0, "a", 4)
    start = 5_000_000_000
    t_ack = b.ops[s[1]]["time"]
    trunc = {"event": "truncate", "node": 2, "tp": "t/0", "to": 3, "from": 5,
             "reason": "recovery"}
    facts = analyse(b.ops)
    for delta, valid in ((-1, True), (0, True), (1, False)):
        r = check_acked_not_truncated([dict(trunc, mono_ns=start + t_ack + delta)], facts,
                                      start_mono_ns=start)
        assert r.valid is valid, delta


# ----------------------------------------------------------------------- model-based

_action = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 2), st.integers(0, 1),
              st.sampled_from(["ok", "ok", "ok", "fail", "info"]), st.booleans()),
    st.tuples(st.just("poll"), st.integers(0, 1), st.integers(1, 3)),
    st.tuples(st.just("commit"), st.integers(0, 1)),
    st.tuples(st.just("assign"), st.integers(0, 1), st.lists(st.integers(0, 1), max_size=2)),
)
_actions = st.lists(_action, max_size=40)


@settings(max_examples=60, deadline=None)
@given(_actions)
def test_model_histories_are_clean(actions):
    s = check_all(simulate(actions))
    assert s.valid, [a.to_dict() for a in s.anomalies]


EXPECTED = {
    "drop": {"lost-write", "unseen"},
    "duplicate": {"duplicate"},
    "reorder": {"nonmonotonic-send"},
    "aborted": {"aborted-read"},
}


@settings(max_examples=60, deadline=None)
@given(_actions, st.sampled_from(FAULTS), st.integers(0, 40))
def test_model_histories_with_one_fault_fail_the_matching_checker(actions, fault, at):
    s = check_all(simulate(actions, fault=fault, fault_at=min(at, len(actions))))
    failed = {name for name, r in s.checkers.items() if not r.valid}
    assert failed, fault
    assert failed <= EXPECTED[fault], (fault, failed)


@pytest.mark.timeout(60)
def test_large_history_is_fast():
    import time

    b = Builder()
    for i in range(20000):
        b.send(i % 4, i % 2, i, i // 2)
    for i in range(0, 20000, 50):
        b.poll(10, [(0, o, 2 * o) for o in range(i // 2, i // 2 + 25)])
    t0 = time.monotonic()
    s = check_all(b.ops)
    assert s.valid, s.anomalies[:3]
    assert time.monotonic() - t0 < 30
