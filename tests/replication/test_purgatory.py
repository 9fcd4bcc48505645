"""Delayed produce / fetch waiters under trio's mock clock: woken by effects, never polled."""

from __future__ import annotations

import trio
import trio.testing

from broker.errors import ErrorCode
from broker.replication.purgatory import PartitionWaiters, await_acks_all, delayed_fetch
from broker.replication.state import LeaderState


def leader(min_isr: int = 2) -> LeaderState:
    return LeaderState(("t", 0), leader_id=1, leader_epoch=1, partition_epoch=1,
                       replicas=(1, 2), isr=(1, 2), log_end_offset=0, high_watermark=0,
                       min_insync_replicas=min_isr, replica_lag_time_max_ms=1_000)


async def test_produce_completes_when_hw_passes(autojump_clock: trio.testing.MockClock) -> None:
    st, w = leader(), PartitionWaiters()
    w.apply_effects(st.on_append(5))
    results: dict[int, ErrorCode] = {}

    async def wait(last: int) -> None:
        results[last] = await await_acks_all(w, last, st.produce_outcome, 30_000)

    async with trio.open_nursery() as n:
        n.start_soon(wait, 2)
        n.start_soon(wait, 4)
        await trio.sleep(1)
        assert results == {} and w.statistics()["produces"] == 2
        w.apply_effects(st.on_follower_fetch(2, 3, 1_000))  # HW 3: offset 2 done, 4 not yet
        await trio.sleep(1)
        assert results == {2: ErrorCode.NONE}
        w.apply_effects(st.on_follower_fetch(2, 5, 2_000))
    assert results == {2: ErrorCode.NONE, 4: ErrorCode.NONE}
    assert w.statistics()["produces"] == 0


async def test_produce_times_out_and_leaves_nothing_behind(autojump_clock: trio.testing.MockClock) -> None:
    st, w = leader(), PartitionWaiters()
    st.on_append(1)
    assert await await_acks_all(w, 0, st.produce_outcome, 500) == ErrorCode.REQUEST_TIMED_OUT
    assert w.statistics()["produces"] == 0


async def test_isr_shrink_below_min_fails_waiting_produce(autojump_clock: trio.testing.MockClock) -> None:
    st, w = leader(min_isr=2), PartitionWaiters()
    st.on_append(1)
    out: list[ErrorCode] = []

    async def wait() -> None:
        out.append(await await_acks_all(w, 0, st.produce_outcome, 60_000))

    async with trio.open_nursery() as n:
        n.start_soon(wait)
        await trio.sleep(2)
        [req] = st.maybe_shrink_isr(2_000)
        w.apply_effects(st.on_alter_partition_response(
            {"error": 0, "leader_epoch": 1, "partition_epoch": 2, "isr": list(req.new_isr)}, 2_000))
    assert out == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]


async def test_leadership_loss_answers_not_leader(autojump_clock: trio.testing.MockClock) -> None:
    st, w = leader(), PartitionWaiters()
    st.on_append(1)
    out: list[ErrorCode] = []

    async def wait() -> None:
        out.append(await await_acks_all(w, 0, st.produce_outcome, 60_000))

    async with trio.open_nursery() as n:
        n.start_soon(wait)
        await trio.sleep(1)
        w.close()
    assert out == [ErrorCode.NOT_LEADER_OR_FOLLOWER]


async def test_bounded_waiters(autojump_clock: trio.testing.MockClock) -> None:
    st, w = leader(), PartitionWaiters(max_waiters=1)
    st.on_append(2)
    async with trio.open_nursery() as n:
        n.start_soon(w.wait_produce, 0, st.produce_outcome)
        await trio.sleep(1)
        assert await w.wait_produce(1, st.produce_outcome) == ErrorCode.REQUEST_TIMED_OUT
        w.close()


async def test_delayed_fetch_wakes_on_data_and_on_hw(autojump_clock: trio.testing.MockClock) -> None:
    follower, consumer = PartitionWaiters(), PartitionWaiters()
    data = {"leo": 0, "hw": 0}
    got: dict[str, tuple[int, float]] = {}

    async def fetch(name: str, w: PartitionWaiters, is_follower: bool) -> None:
        key = "leo" if is_follower else "hw"
        res = await delayed_fetch(lambda: data[key], lambda n: n > 0, [(w, is_follower)], 5_000)
        got[name] = (res, trio.current_time())

    async with trio.open_nursery() as n:
        n.start_soon(fetch, "follower", follower, True)
        n.start_soon(fetch, "consumer", consumer, False)
        await trio.sleep(1)
        data["leo"] = 3
        follower.notify_data()
        consumer.notify_data()  # new data is not visible to consumers: they keep waiting
        await trio.sleep(1)
        assert got["follower"] == (3, 1.0) and "consumer" not in got
        data["hw"] = 3
        consumer.notify_high_watermark(3)
    assert got["consumer"] == (3, 2.0)


async def test_delayed_fetch_returns_at_max_wait(autojump_clock: trio.testing.MockClock) -> None:
    w = PartitionWaiters()
    t0 = trio.current_time()
    assert await delayed_fetch(lambda: 0, lambda n: n > 0, [(w, True)], 250) == 0
    assert trio.current_time() - t0 == 0.25
    assert w.statistics()["fetch_watchers"] == 0
