"""Produce requests without a task (broker/detached.py), over real TCP on a real broker.

A produce is stepped by a ``Runner`` from the read loop, parked by its partition and resumed
by the listener's one ``Completer``: no request task is spawned for it. What must hold
whatever path it takes: every request answered once, in full, with the right outcome; a
connection that closes with produces still parked gives them up (the partition drops its
waits, the in-flight count returns to zero) and the broker goes on serving; code that needs a
task gets one (``to_task``); code that forgets to ask breaks loudly, not silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from rafka.broker.detached import Completer, Runner, StrayTrapError, to_task
from rafka.metadata.records import Partition, Topic
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey

from tests.broker.harness import (
    BROKER_ID,
    batch,
    next_offsets,
    part,
    produce_body,
    raw_request,
    read_response,
    running_broker,
)

N = 40  # pipelined produces on one connection (below the 64 in flight allowed)


class _Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


async def test_parked_produces_are_answered_without_a_task_each(tmp_path: Path) -> None:
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        spawns = _Spawns()
        steps = b.server.completer.steps
        trio.lowlevel.add_instrument(spawns)
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", b.port)
            await stream.send_all(b"".join(
                raw_request(ApiKey.PRODUCE, cid, produce_body("t", batch(b"v%d" % cid)))
                for cid in range(N)))
            answers = {}
            with trio.fail_after(30):
                while len(answers) < N:
                    got = await read_response(stream)
                    assert got is not None
                    answers[got[0]] = got[1]
            await stream.aclose()
        finally:
            trio.lowlevel.remove_instrument(spawns)
        assert sorted(answers) == list(range(N))
        offsets = [part(answers[cid])["base_offset"] for cid in range(N)]
        assert all(part(a)["error"] == 0 for a in answers.values()), answers
        assert offsets == list(range(N))  # appended in arrival order, each answered with its own
        assert not [n for n in spawns.names if "_run_request" in n], spawns.names
        # every one parked until its group commit, then was stepped by the completer
        assert b.server.completer.steps - steps >= N


async def _unreplicated_topic(b: Any, name: str) -> None:
    """A partition led here whose second in-sync replica (broker 2) never fetches: an
    acks=all produce to it stays undecided until its deadline."""
    tid = f"id-{name}"
    offs = next_offsets(2)
    await b.publisher.publish_records([
        (offs[0], 1, Topic(name, tid)),
        (offs[1], 1, Partition(tid, 0, (BROKER_ID, 2), (BROKER_ID, 2), BROKER_ID, 0, 0))])


async def test_a_deadline_answers_a_parked_produce(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        await _unreplicated_topic(b, "slow")
        async with b.connect() as conn:
            body = produce_body("slow", batch(b"x"))
            body["timeout_ms"] = 200
            with trio.fail_after(10):
                resp = await conn.request(ApiKey.PRODUCE, body)
        assert part(resp.body)["error"] == ErrorCode.REQUEST_TIMED_OUT, resp.body


async def test_a_connection_closed_with_parked_produces_gives_them_up(tmp_path: Path) -> None:
    async with running_broker(tmp_path, topics={"t": 1}) as b:
        await _unreplicated_topic(b, "slow")
        p = b.rm.get_leader("slow", 0, None)
        stream = await trio.open_tcp_stream("127.0.0.1", b.port)
        await stream.send_all(b"".join(
            raw_request(ApiKey.PRODUCE, cid, produce_body("slow", batch(b"x"))) for cid in range(5)))
        with trio.fail_after(10):
            while len(p._acks_all_waiters) < 5:
                await trio.sleep(0.01)
        assert all(not w[4].settled for w in p._acks_all_waiters)
        await stream.aclose()
        with trio.fail_after(10):
            while not all(w[4].settled for w in p._acks_all_waiters):
                await trio.sleep(0.01)
        # the broker goes on serving: a produce on a new connection is answered
        async with b.connect() as conn:
            resp = await conn.request(ApiKey.PRODUCE, produce_body("t", batch(b"after")))
        assert part(resp.body)["error"] == 0, resp.body


class _Home:
    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.adopted: list[Runner] = []
        self.strays: list[BaseException] = []
        self.forgotten: list[Runner] = []

    def adopt(self, runner: Runner) -> None:
        self.adopted.append(runner)
        self.nursery.start_soon(_go_on, runner)

    def forget(self, runner: Runner) -> None:
        self.forgotten.append(runner)

    def stray(self, runner: Runner, exc: BaseException) -> None:
        self.strays.append(exc)


async def _go_on(runner: Runner) -> None:
    await runner.adopted()


async def test_code_that_needs_a_task_gets_one_and_forgetting_to_ask_is_loud() -> None:
    done: list[str] = []

    async def asks() -> None:
        await to_task()
        await trio.sleep(0.01)  # a cancel scope and a trio trap: fine in the adopting task
        done.append("asked")

    async def forgets() -> None:
        try:
            await trio.sleep(0.01)
        finally:
            done.append("closed")

    async with trio.open_nursery() as nursery:
        home = _Home(nursery)
        completer = Completer()
        good = Runner(asks(), home, completer)
        good.step()
        assert home.adopted == [good] and good.closed
        bad = Runner(forgets(), home, completer)
        bad.step()
        assert bad.closed and len(home.strays) == 1
        assert isinstance(home.strays[0], StrayTrapError)
    assert done == ["closed", "asked"]  # the stray one was closed at once (its finally ran)


async def test_a_connection_sending_nonstop_does_not_starve_another(tmp_path: Path) -> None:
    """acks=0 produces finish inside the reader's own step, so only the reader's yield per
    frame that arrived without a wait (``FrameReader.yields``) lets other connections in."""
    n = 4000
    async with running_broker(tmp_path, topics={"a": 1, "b": 1}) as b:
        flood = b"".join(raw_request(ApiKey.PRODUCE, cid, produce_body("a", batch(b"x"), acks=0))
                         for cid in range(n))
        pa = b.rm.get_leader("a", 0, None)
        seen_at_answer: list[int] = []
        async with b.connect() as conn:
            stream = await trio.open_tcp_stream("127.0.0.1", b.port)

            async def other() -> None:
                resp = await conn.request(ApiKey.PRODUCE, produce_body("b", batch(b"y"), acks=1))
                assert part(resp.body)["error"] == 0, resp.body
                seen_at_answer.append(pa.log.log_end_offset)

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    await stream.send_all(flood[:len(flood) // 2])
                    nursery.start_soon(other)
                    await stream.send_all(flood[len(flood) // 2:])
                while pa.log.log_end_offset < n:
                    await trio.sleep(0.01)
            await stream.aclose()
        assert seen_at_answer and seen_at_answer[0] < n, seen_at_answer
