"""ControllerChannel on real sockets: a paused active controller is asked once, not twice.

Three voters on loopback: voter 3 accepts connections and never answers (a SIGSTOPped active
controller), voter 1 answers NOT_CONTROLLER naming voter 2, voter 2 is the new active
controller. A broker's channel that last reached voter 3 must give up on it after one attempt
timeout and reach voter 2 through voter 1's hint. Before the fix its turn pointed right back
at voter 3 (it had been tried out of turn), so two attempt timeouts passed — longer than the
new controller's activation grace, which then fenced the broker.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import trio
from rafka.broker.controller_channel import ControllerChannel
from rafka.broker.server import Server
from rafka.wire.connection import ConnectionPool
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, Request

BODY = {"broker_id": 7, "broker_epoch": 1, "metadata_offset": 0, "want_fence": False,
        "want_shutdown": False}


async def test_a_silent_voter_is_not_asked_twice_in_a_row() -> None:
    paused_conns = 0
    answered: list[int] = []

    async def paused(stream: trio.SocketStream) -> None:
        nonlocal paused_conns
        paused_conns += 1
        await trio.sleep_forever()

    async def voter(vid: int, hint: tuple[str, int] | None, req: Request) -> dict[str, Any]:
        answered.append(vid)
        if hint is not None:
            return {"error": int(ErrorCode.NOT_CONTROLLER), "message": "not the controller",
                    "leader_id": 2, "leader_host": hint[0], "leader_port": hint[1]}
        return {"error": 0, "message": "", "is_fenced": False, "should_shutdown": False}

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, paused, 0, host="127.0.0.1"))
        port3 = listeners[0].socket.getsockname()[1]
        port2 = await nursery.start(Server(partial(voter, 2, None), "127.0.0.1", 0).serve)
        port1 = await nursery.start(Server(partial(voter, 1, ("127.0.0.1", port2)), "127.0.0.1", 0).serve)
        pool = ConnectionPool(nursery)
        # voter 3 first in the list: the turn starts at it, as it does when it led last
        channel = ControllerChannel(pool, [(3, "127.0.0.1", port3), (1, "127.0.0.1", port1),
                                           (2, "127.0.0.1", port2)])
        channel.note_leader(3)
        out = await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=0.5)
        assert out["error"] == 0
        assert paused_conns == 1, "the silent voter was asked again before the others"
        assert answered == [1, 2]
        assert channel.leader_hint == ("127.0.0.1", port2)
        nursery.cancel_scope.cancel()


async def test_an_attempt_at_a_deposed_leader_ends_when_the_local_view_moves() -> None:
    """Issue 27: a forward (5 s per attempt) that started towards the active controller just
    before it was paused ends when this node's own Raft view names another leader — not when
    the attempt times out — and a request that starts after the view moved never goes to the
    paused voter, whatever ``note_leader`` said. Before: 5 s at the paused voter, both times."""
    paused_conns = 0
    view: list[int | None] = [3]

    async def paused(stream: trio.SocketStream) -> None:
        nonlocal paused_conns
        paused_conns += 1
        await trio.sleep_forever()

    async def voter2(req: Request) -> dict[str, Any]:
        return {"error": 0, "message": "", "is_fenced": False, "should_shutdown": False}

    async def elect_2_later() -> None:
        await trio.sleep(0.3)
        view[0] = None  # an election: no leader known for a moment
        await trio.sleep(0.2)
        view[0] = 2

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, paused, 0, host="127.0.0.1"))
        port3 = listeners[0].socket.getsockname()[1]
        port2 = await nursery.start(Server(voter2, "127.0.0.1", 0).serve)
        pool = ConnectionPool(nursery)
        channel = ControllerChannel(pool, [(3, "127.0.0.1", port3), (2, "127.0.0.1", port2)],
                                    leader_view=lambda: view[0])
        nursery.start_soon(elect_2_later)
        t0 = trio.current_time()
        out = await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=5.0)
        assert out["error"] == 0 and paused_conns == 1
        assert trio.current_time() - t0 < 1.5, "waited for the attempt timeout at the paused voter"

        channel.note_leader(3)  # a stale hint
        t0 = trio.current_time()
        voter, _ = await channel.request_any_from(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=5.0)
        assert voter == 2 and paused_conns == 1 and trio.current_time() - t0 < 1.0
        nursery.cancel_scope.cancel()


async def test_with_a_leader_view_a_refused_voter_is_an_error_not_a_crash() -> None:
    """A connection error inside the view-watching attempt is the channel's usual RafkaError
    (next voter), not an ExceptionGroup escaping to the request handler."""
    async def voter2(req: Request) -> dict[str, Any]:
        return {"error": 0, "message": "", "is_fenced": False, "should_shutdown": False}

    async with trio.open_nursery() as nursery:
        with trio.socket.socket() as s:  # a port nothing listens on
            await s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        port2 = await nursery.start(Server(voter2, "127.0.0.1", 0).serve)
        channel = ControllerChannel(ConnectionPool(nursery), [(1, "127.0.0.1", dead), (2, "127.0.0.1", port2)],
                                    leader_view=lambda: 1)
        out = await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=5.0)
        assert out["error"] == 0
        nursery.cancel_scope.cancel()


async def test_a_leader_not_yet_active_is_asked_again_not_the_deposed_one() -> None:
    """The viewed leader answers NOT_CONTROLLER (no hint) until its activation commits; the
    channel must wait for it, not rotate to the next voter — the deposed, silent one — for a
    whole attempt timeout (found by the quorum torture: isolate-leader, 5 s)."""
    paused_conns = 0
    activated_at = trio.current_time() + 0.3

    async def paused(stream: trio.SocketStream) -> None:
        nonlocal paused_conns
        paused_conns += 1
        await trio.sleep_forever()

    async def voter1(req: Request) -> dict[str, Any]:
        if trio.current_time() < activated_at:
            return {"error": int(ErrorCode.NOT_CONTROLLER), "message": "elected, not active yet",
                    "leader_id": -1, "leader_host": None, "leader_port": None}
        return {"error": 0, "message": "", "is_fenced": False, "should_shutdown": False}

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, paused, 0, host="127.0.0.1"))
        port3 = listeners[0].socket.getsockname()[1]
        port1 = await nursery.start(Server(voter1, "127.0.0.1", 0).serve)
        channel = ControllerChannel(ConnectionPool(nursery), [(1, "127.0.0.1", port1), (3, "127.0.0.1", port3)],
                                    leader_view=lambda: 1)
        t0 = trio.current_time()
        out = await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=5.0)
        assert out["error"] == 0 and paused_conns == 0
        assert trio.current_time() - t0 < 1.5
        nursery.cancel_scope.cancel()
