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
