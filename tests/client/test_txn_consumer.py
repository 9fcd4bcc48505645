"""read_committed / read_uncommitted decoding on hand-built logs (no sockets), the isolation
option, ``group_metadata``, and the pure part of ``rafka transactions abort``.

A log here is a list of batches with consecutive offsets, built with ``rafka.log.batch``'s own
builders (transactional data batches and control batches), exactly as a FETCH returns them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest
import trio
from rafka.client.aio.consumer import AsyncConsumer
from rafka.client.aio.fetch import CompletedFetch, split_fetch_response
from rafka.client.aio.txn_admin import ProducerState
from rafka.client.cli.txn import choose_aborts
from rafka.client.errors import CorruptRecordError, IllegalStateError
from rafka.client.txn_filter import isolation_level_code
from rafka.client.types import GroupMetadata, TopicPartition
from rafka.log.batch import build_batch, build_control_batch, stamp

if TYPE_CHECKING:
    from click.testing import Result

TP = TopicPartition("t", 0)


def _log(*items: tuple) -> tuple[memoryview, list[tuple[int, str, int]]]:
    """``("data", pid, n, transactional)`` / ``("commit", pid)`` / ``("abort", pid)`` / ``("plain", n)``
    → (bytes, [(offset, kind, pid)] one per record) with offsets from 0."""
    out = bytearray()
    offsets: list[tuple[int, str, int]] = []
    off = 0
    for item in items:
        kind = item[0]
        if kind in ("commit", "abort"):
            b = bytearray(build_control_batch(item[1], 0, kind == "commit", 3, 1000))
            stamp(b, 0, off, 0)
            offsets.append((off, kind, item[1]))
            off += 1
        else:
            pid, n, txn = (item[1], item[2], item[3]) if kind == "data" else (-1, item[1], False)
            recs = [(None, f"{pid}:{off + i}".encode(), [], 1000) for i in range(n)]
            b = bytearray(build_batch(recs, base_offset=off, producer_id=pid,
                                      producer_epoch=0 if pid >= 0 else -1,
                                      base_sequence=0 if pid >= 0 else -1, transactional=txn))
            offsets.extend((off + i, kind, pid) for i in range(n))
            off += n
        out += b
    return memoryview(bytes(out)), offsets


def _take_all(cf: CompletedFetch, position: int = 0, step: int = 1000) -> tuple[list[int], int]:
    got: list[int] = []
    while True:
        recs, position = cf.take(position, step)
        got.extend(r.offset for r in recs)
        if not recs and cf.exhausted:
            return got, position


def test_read_uncommitted_hides_only_markers_and_passes_them() -> None:
    raw, offs = _log(("data", 7, 2, True), ("abort", 7), ("plain", 1), ("data", 8, 1, True), ("commit", 8))
    got, position = _take_all(CompletedFetch(TP, raw))
    assert got == [o for o, kind, _ in offs if kind in ("data", "plain")]  # aborted data shown
    assert position == 6  # past the tail COMMIT marker at offset 5: not stuck


def test_read_committed_drops_aborted_and_keeps_committed() -> None:
    raw, _ = _log(("data", 7, 2, True), ("abort", 7), ("plain", 1), ("data", 7, 2, True), ("commit", 7))
    # producer 7's aborted transaction began at offset 0; its next one (3..4) commits
    got, position = _take_all(CompletedFetch(TP, raw, aborted=[(7, 0)]))
    assert got == [3, 4, 5]
    assert position == 7


def test_interleaved_producers_only_the_aborted_ones_vanish() -> None:
    raw, _ = _log(("data", 1, 2, True),   # 0-1  pid 1 (aborted)
                  ("data", 2, 2, True),   # 2-3  pid 2 (committed)
                  ("plain", 1),           # 4
                  ("data", 1, 1, True),   # 5    pid 1 (aborted)
                  ("data", 3, 1, True),   # 6    pid 3 (aborted, starts after pid 1's)
                  ("commit", 2),          # 7
                  ("abort", 1),           # 8
                  ("data", 1, 1, True),   # 9    pid 1, a new transaction (committed)
                  ("data", 3, 1, True),   # 10   pid 3 still aborted
                  ("abort", 3),           # 11
                  ("commit", 1))          # 12
    got, position = _take_all(CompletedFetch(TP, raw, aborted=[(3, 6), (1, 0)]))  # unsorted on purpose
    assert got == [2, 3, 4, 9]
    assert position == 13


def test_aborted_transaction_spanning_fetches() -> None:
    """The second fetch starts inside the aborted transaction; the broker repeats the entry."""
    raw, _ = _log(("data", 5, 2, True), ("data", 6, 1, True), ("data", 5, 2, True), ("abort", 5),
                  ("commit", 6))
    first = memoryview(bytes(raw[:_batch_end(raw, 2)]))  # batches 0-1 and 2 (offsets 0..2)
    got1, pos1 = _take_all(CompletedFetch(TP, first, aborted=[(5, 0)]))
    assert (got1, pos1) == ([2], 3)
    rest = memoryview(bytes(raw[_batch_end(raw, 2):]))
    got2, pos2 = _take_all(CompletedFetch(TP, rest, aborted=[(5, 0)]), pos1)
    assert (got2, pos2) == ([], 7)  # pid 5's 3..4 dropped, both markers passed


def test_control_batch_at_fetch_boundary_and_position_inside_batch() -> None:
    raw, _ = _log(("data", 4, 3, True), ("commit", 4), ("data", 4, 2, True), ("abort", 4))
    cut = _batch_end(raw, 2)
    got1, pos1 = _take_all(CompletedFetch(TP, memoryview(bytes(raw[:cut])), aborted=[(4, 4)]), 1)
    assert (got1, pos1) == ([1, 2], 4)  # fetch ends with the COMMIT marker: position 4, not 3
    got2, pos2 = _take_all(CompletedFetch(TP, memoryview(bytes(raw[cut:])), aborted=[(4, 4)]), pos1)
    assert (got2, pos2) == ([], 7)


def test_marker_only_fetch_moves_position() -> None:
    raw, _ = _log(("commit", 9))
    cf = CompletedFetch(TP, raw)
    assert cf.end_offset == 1
    recs, position = cf.take(0, 10)
    assert recs == [] and position == 1 and cf.exhausted


def test_max_records_splits_across_skipped_batches() -> None:
    raw, _ = _log(("data", 1, 3, True), ("data", 2, 3, True), ("abort", 1), ("data", 2, 2, True),
                  ("commit", 2))
    cf = CompletedFetch(TP, raw, aborted=[(1, 0)])
    seen: list[int] = []
    position = 0
    for _ in range(10):
        recs, position = cf.take(position, 2)
        seen.extend(r.offset for r in recs)
    assert seen == [3, 4, 5, 7, 8] and position == 10


def test_corrupt_control_batch_is_a_named_error() -> None:
    raw, _ = _log(("data", 1, 1, True), ("abort", 1))
    bad = bytearray(raw)
    bad[-3] ^= 0xFF  # inside the marker's record
    with pytest.raises(CorruptRecordError) as err:
        _take_all(CompletedFetch(TP, memoryview(bytes(bad)), aborted=[(1, 0)]))
    assert err.value.start_offset == 1


def test_split_fetch_response_reads_lso_and_aborted() -> None:
    raw, _ = _log(("plain", 1))
    body = {"topics": [{"name": "t", "partitions": [
        {"partition": 0, "error": 0, "high_watermark": 9, "log_start_offset": 0, "last_stable_offset": 4,
         "aborted_transactions": [[7, 2]], "records_len": len(raw)},
        {"partition": 1, "error": 0, "high_watermark": 0, "log_start_offset": 0, "records_len": 0}]}]}
    p0, p1 = split_fetch_response(body, bytes(raw))
    assert (p0.last_stable_offset, p0.aborted) == (4, [(7, 2)])
    assert (p1.last_stable_offset, p1.aborted) == (-1, None)
    body["topics"][0]["partitions"][0]["aborted_transactions"] = [[7]]
    with pytest.raises(CorruptRecordError):
        split_fetch_response(body, bytes(raw))


def _batch_end(raw: memoryview, n: int) -> int:
    """Byte position after the first ``n`` batches."""
    from rafka.log.batch import iter_batches

    ends = [pos + h.size for pos, h in iter_batches(raw)]
    return ends[n - 1]


# ---------------------------------------------------------------- options, group metadata


@pytest.mark.parametrize("level, code", [("read_uncommitted", 0), ("read_committed", 1),
                                         (" READ_COMMITTED ", 1)])
def test_isolation_level_codes(level: str, code: int) -> None:
    assert isolation_level_code(level) == code


@pytest.mark.parametrize("bad", ["committed", "", 1, None])
def test_bad_isolation_level_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="isolation_level"):
        AsyncConsumer(bootstrap_servers="127.0.0.1:1", isolation_level=bad)  # type: ignore[arg-type]


def test_group_metadata_from_membership() -> None:
    import rafka.client.groups  # noqa: F401  registers the group coordinator

    async def main() -> None:
        async with AsyncConsumer(bootstrap_servers="127.0.0.1:1", group_id="g",
                                 isolation_level="read_committed") as c:
            assert c.isolation_level == "read_committed"
            assert c.group_metadata() == GroupMetadata("g", "", -1, -1)  # not joined yet
            m = c._coordinator
            m.member_id, m.member_epoch, m.metadata_offset = "m-1", 4, 17  # type: ignore[union-attr]
            assert c.group_metadata() == GroupMetadata("g", "m-1", 4, 17)

    trio.run(main)


def test_group_metadata_needs_a_group() -> None:
    async def main() -> None:
        async with AsyncConsumer(bootstrap_servers="127.0.0.1:1") as c:
            with pytest.raises(IllegalStateError):
                c.group_metadata()

    trio.run(main)


# ---------------------------------------------------------------- rafka transactions abort (pure)


def _producers(*open_at: int) -> Sequence[ProducerState]:
    return [ProducerState(100 + i, 2, 5, 0, at) for i, at in enumerate(open_at)]


def test_abort_choice() -> None:
    one = _producers(-1, 40)
    assert [p.producer_id for p in choose_aborts(one, None, False).chosen] == [101]
    several = _producers(50, -1, 10)
    plan = choose_aborts(several, None, False)
    assert plan.chosen == [] and plan.error and "--all" in plan.message
    assert [p.producer_id for p in choose_aborts(several, None, True).chosen] == [102, 100]  # oldest first
    assert [p.producer_id for p in choose_aborts(several, 100, False).chosen] == [100]
    plan = choose_aborts(several, 101, False)  # known producer, but no open transaction
    assert plan.chosen == [] and plan.error
    plan = choose_aborts(_producers(-1), None, True)
    assert plan.chosen == [] and not plan.error and plan.message == "no open transaction"


# ---------------------------------------------------------------- CLI parsing


def _cli(*args: str) -> Result:
    from click.testing import CliRunner

    from rafka.cli import main

    return CliRunner().invoke(main, list(args))


def test_transactions_group_is_registered() -> None:
    res = _cli("transactions", "--help")
    assert res.exit_code == 0
    for cmd in ("list", "describe", "producers", "abort"):
        assert cmd in res.output


@pytest.mark.parametrize("args, words", [
    (("consume", "t", "--isolation-level", "committed"), ["--isolation-level", "read_committed"]),
    (("transactions", "abort", "--topic", "t", "--partition", "0", "--producer-epoch", "3"),
     ["--producer-epoch needs --producer-id"]),
    (("transactions", "abort", "--topic", "t"), ["--partition"]),
    (("transactions", "producers", "--partition", "0"), ["--topic"]),
    (("transactions", "describe"), ["ID"]),
])
def test_cli_usage_errors(args: tuple[str, ...], words: list[str]) -> None:
    res = _cli(*args)
    assert res.exit_code == 2, res.output
    assert all(w in res.output for w in words), res.output


def test_consume_help_shows_isolation_default() -> None:
    res = _cli("consume", "--help")
    assert "--isolation-level" in res.output and "read_uncommitted" in res.output
