"""ControllerChannel on real sockets: a paused active controller is asked once, not twice.

Three voters on loopback: voter 3 accepts connections and never answers (a SIGSTOPped active
controller), voter 1 answers NOT_CONTROLLER naming voter 2, voter 2 is the new active
controller. A broker's channel that last reached voter 3 must give up on it after one attempt
timeout and reach voter 2 through voter 1's hint. Before the fix its turn pointed right back
at voter 3 (it had been tried out of turn), so two attempt timeouts passed — longer than the
new controller's activation grace, which then fenced the broker.
"""

from __future__ import annotations

import socket
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


# -- the group-close hang that got issue 27 reverted (6afbbff) -------------------------------
#
# A voter node's Raft view can name a voter that is not the active controller for a while: a
# stale view (this node has not heard from the new leader yet; with pre-vote it does not
# campaign, so it keeps naming its last leader), or a leader that never activates. The view is
# a hint like any other, not an oracle: when the viewed voter itself answers NOT_CONTROLLER and
# names another voter, or another live voter does, that voter is asked — before issue 27 it
# was, and a forwarded LeaveGroup found the active controller at once.


async def _ok(req: Request) -> dict[str, Any]:
    return {"error": 0, "message": "", "is_fenced": False, "should_shutdown": False}


def _not_controller(hint: tuple[int, str, int] | None) -> dict[str, Any]:
    vid, host, port = hint if hint is not None else (-1, None, None)
    return {"error": int(ErrorCode.NOT_CONTROLLER), "message": "not the active controller",
            "leader_id": vid, "leader_host": host, "leader_port": port}


async def test_the_viewed_voter_naming_another_leader_is_believed() -> None:
    """The node's view names voter 1; voter 1 answers NOT_CONTROLLER naming voter 2, which is
    active. Before the fix the channel asked voter 1 again and again (its view beat every
    hint) until its 100 attempts ran out (~10 s, then NOT_CONTROLLER) — a forwarded
    LeaveGroup answered nothing useful within a client's 30 s of retries while the view stayed
    stale."""
    asked: list[int] = []

    async def voter1(req: Request) -> dict[str, Any]:
        asked.append(1)
        return _not_controller((2, "127.0.0.1", port2))

    async def voter2(req: Request) -> dict[str, Any]:
        asked.append(2)
        return await _ok(req)

    async with trio.open_nursery() as nursery:
        port2 = await nursery.start(Server(voter2, "127.0.0.1", 0).serve)
        port1 = await nursery.start(Server(voter1, "127.0.0.1", 0).serve)
        channel = ControllerChannel(ConnectionPool(nursery), [(1, "127.0.0.1", port1), (2, "127.0.0.1", port2)],
                                    leader_view=lambda: 1)  # stale: it never moves
        with trio.fail_after(5):  # the caller's deadline; the fix needs two answers
            out = await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=5.0)
        assert out["error"] == 0
        assert asked == [1, 2], asked
        assert channel.leader_hint == ("127.0.0.1", port2)
        nursery.cancel_scope.cancel()


async def test_a_silent_viewed_voter_is_asked_once_and_the_hint_followed() -> None:
    """The view names voter 3, which is paused (accepts, never answers) and stays named;
    voter 1 answers NOT_CONTROLLER naming voter 2, the active controller. The request costs
    one attempt timeout at voter 3, then voter 1's hint. Before the fix voter 1's hint was
    dropped for the view, so voter 3 was asked again — another whole attempt timeout each
    time round."""
    paused_conns = 0
    asked: list[int] = []

    async def paused(stream: trio.SocketStream) -> None:
        nonlocal paused_conns
        paused_conns += 1
        await trio.sleep_forever()

    async def voter1(req: Request) -> dict[str, Any]:
        asked.append(1)
        return _not_controller((2, "127.0.0.1", port2))

    async def voter2(req: Request) -> dict[str, Any]:
        asked.append(2)
        return await _ok(req)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, paused, 0, host="127.0.0.1"))
        port3 = listeners[0].socket.getsockname()[1]
        port2 = await nursery.start(Server(voter2, "127.0.0.1", 0).serve)
        port1 = await nursery.start(Server(voter1, "127.0.0.1", 0).serve)
        channel = ControllerChannel(ConnectionPool(nursery), [(3, "127.0.0.1", port3), (1, "127.0.0.1", port1),
                                                              (2, "127.0.0.1", port2)],
                                    leader_view=lambda: 3)
        with trio.fail_after(5):
            out = await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=0.5)
        assert out["error"] == 0
        assert paused_conns == 1, "the silent viewed voter was asked again instead of the hinted one"
        assert asked == [1, 2], asked
        nursery.cancel_scope.cancel()


async def test_a_viewed_leader_that_never_activates_does_not_hold_the_request() -> None:
    """The view names voter 1, which answers NOT_CONTROLLER without a hint for ever (elected
    and never active, or deposed and not yet aware of it); voter 2 is the active controller.
    Asking voter 1 again is right for a moment (activation is one commit), not for the whole
    request: after a grace the channel asks the other voters too, and takes their hints.
    Before the fix: voter 1 only, 100 times, then NOT_CONTROLLER."""
    asked: list[int] = []

    async def voter1(req: Request) -> dict[str, Any]:
        asked.append(1)
        return _not_controller(None)

    async def voter2(req: Request) -> dict[str, Any]:
        asked.append(2)
        return await _ok(req)

    async with trio.open_nursery() as nursery:
        port2 = await nursery.start(Server(voter2, "127.0.0.1", 0).serve)
        port1 = await nursery.start(Server(voter1, "127.0.0.1", 0).serve)
        channel = ControllerChannel(ConnectionPool(nursery), [(1, "127.0.0.1", port1), (2, "127.0.0.1", port2)],
                                    leader_view=lambda: 1)
        with trio.fail_after(5):
            out = await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=5.0)
        assert out["error"] == 0 and asked[-1] == 2 and 2 not in asked[:-1]
        nursery.cancel_scope.cancel()


async def test_every_attempt_is_bounded_when_the_view_never_names_the_target() -> None:
    """``_attempt`` watches the view for the target's deposition; a view that is None, or names
    another voter, must not leave the attempt waiting beyond its own timeout."""
    paused_conns = 0

    async def paused(stream: trio.SocketStream) -> None:
        nonlocal paused_conns
        paused_conns += 1
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, paused, 0, host="127.0.0.1"))
        port3 = listeners[0].socket.getsockname()[1]
        port2 = await nursery.start(Server(_ok, "127.0.0.1", 0).serve)
        for view in (None, 2):
            paused_conns = 0
            channel = ControllerChannel(ConnectionPool(nursery), [(3, "127.0.0.1", port3), (2, "127.0.0.1", port2)],
                                        leader_view=lambda v=view: v)  # type: ignore[misc]
            channel.note_leader(3)  # the voter it last reached, paused since
            with trio.fail_after(5):
                out = await channel.request_any(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=0.5)
            assert out["error"] == 0
        nursery.cancel_scope.cancel()


async def test_a_voter_that_refused_while_starting_is_asked_again_once_it_leads() -> None:
    """Issue 27 (kill-all): every voter restarts; a broker's forward starts while voter 2 is not
    listening yet (refused), and voter 2 is the one that becomes the active controller. The
    other voters answer NOT_CONTROLLER, then name voter 2. Before the fix the refused voter
    stayed in the request's failed set, its hint was ignored, and the channel asked voters 1
    and 3 until it gave up (the harness's client saw a whole 5 s attempt unanswered)."""
    with socket.socket() as s:  # voter 2's port: nothing listens there yet
        s.bind(("127.0.0.1", 0))
        port2 = s.getsockname()[1]
    asked: list[int] = []
    others_asked = trio.Event()
    leader_up = False

    async def voter(vid: int, req: Request) -> dict[str, Any]:
        asked.append(vid)
        if vid == 2:
            return {"error": 0, "message": "", "is_fenced": False, "should_shutdown": False}
        if asked.count(1) >= 2 and asked.count(3) >= 2:
            others_asked.set()
        out: dict[str, Any] = {"error": int(ErrorCode.NOT_CONTROLLER), "message": "not active",
                               "leader_id": -1, "leader_host": None, "leader_port": None}
        if leader_up:
            out.update(leader_id=2, leader_host="127.0.0.1", leader_port=port2)
        return out

    async with trio.open_nursery() as nursery:
        port1 = await nursery.start(Server(partial(voter, 1), "127.0.0.1", 0).serve)
        port3 = await nursery.start(Server(partial(voter, 3), "127.0.0.1", 0).serve)

        async def voter2_starts() -> None:
            nonlocal leader_up
            await others_asked.wait()
            await nursery.start(Server(partial(voter, 2), "127.0.0.1", port2).serve)
            leader_up = True

        nursery.start_soon(voter2_starts)
        channel = ControllerChannel(ConnectionPool(nursery), [(2, "127.0.0.1", port2),
                                                             (1, "127.0.0.1", port1),
                                                             (3, "127.0.0.1", port3)],
                                    max_attempts=40)
        out = await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=5.0)
        assert out["error"] == 0
        assert asked[-1] == 2 and asked.count(2) == 1
        nursery.cancel_scope.cancel()


async def test_a_parked_attempt_waits_for_the_view_change_event_not_a_poll() -> None:
    """Issue 26: with ``view_changed`` (the quorum's ``leader_changed``) an attempt parked at
    the viewed leader — the metadata long poll, all the time on an idle voter — takes no steps
    until the view changes, and still ends when it moves to another voter. Before, it re-read
    the view every 50 ms: ~20 steps over the 1 s window below."""
    view: list[int | None] = [3]
    changed = [trio.Event()]
    steps: dict[str, int] = {}

    class Steps(trio.abc.Instrument):
        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            steps[task.name] = steps.get(task.name, 0) + 1

    def move_view(to: int | None) -> None:
        view[0] = to
        changed[0].set()
        changed[0] = trio.Event()

    async def paused(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async def voter2(req: Request) -> dict[str, Any]:
        return {"error": 0, "message": "", "is_fenced": False, "should_shutdown": False}

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, paused, 0, host="127.0.0.1"))
        port3 = listeners[0].socket.getsockname()[1]
        port2 = await nursery.start(Server(voter2, "127.0.0.1", 0).serve)
        channel = ControllerChannel(ConnectionPool(nursery), [(3, "127.0.0.1", port3), (2, "127.0.0.1", port2)],
                                    leader_view=lambda: view[0], view_changed=lambda: changed[0])
        result: list[dict[str, Any]] = []

        async def heartbeat() -> None:
            result.append(await channel.request(ApiKey.BROKER_HEARTBEAT, BODY, attempt_timeout_s=30.0))

        nursery.start_soon(heartbeat, name="parked-heartbeat")
        await trio.sleep(0.2)  # connected to voter 3, parked
        counter = Steps()
        trio.lowlevel.add_instrument(counter)
        try:
            await trio.sleep(1.0)
        finally:
            trio.lowlevel.remove_instrument(counter)
        assert not result
        parked = sum(n for name, n in steps.items() if name == "parked-heartbeat" or "ControllerChannel" in name)
        assert parked == 0, steps
        move_view(None)  # an election: no leader for a moment (the attempt stays)
        await trio.sleep(0.1)
        assert not result
        move_view(2)
        with trio.fail_after(5):  # a count-free guard: the attempt must end on the event
            while not result:
                await trio.sleep(0.01)
        assert result[0]["error"] == 0
        nursery.cancel_scope.cancel()
