"""A forwarded admin request that reaches its deadline says where the time went (issue 27).

One kill-all round of the quorum torture had a create through a just-restarted node go
unanswered for a whole client attempt with nothing in any node log to say whether the
broker's forward waited on a controller attempt or on its own metadata. Real sockets on
loopback: a voter that accepts and never answers (a paused or stuck process), and a
controller that answers but whose record never reaches this broker's image. The tests read
the log line; they bound the requests with ``timeout_ms`` but assert nothing about time.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import pytest
import trio
from rafka.broker.controller_channel import ControllerChannel
from rafka.broker.handlers.admin import forward
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.broker.server import Server
from rafka.wire.connection import ConnectionPool
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, Request

CREATE = {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1, "configs": {}}],
          "timeout_ms": 300, "validate_only": False, "request_id": "r-1"}


async def _silent(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def test_a_forward_cut_by_its_deadline_names_the_silent_voter(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rafka.admin")
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _silent, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        channel = ControllerChannel(ConnectionPool(nursery), [(3, "127.0.0.1", port)])
        out = await forward(channel, MetadataPublisher(1), ApiKey.CREATE_TOPICS, CREATE)
        nursery.cancel_scope.cancel()
    assert out["error"] == ErrorCode.REQUEST_TIMED_OUT
    lines = [r.getMessage() for r in caplog.records if "no answer within 300 ms" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert "CREATE_TOPICS" in lines[0] and "voter 3 no answer yet" in lines[0], lines[0]
    assert "abandoned" not in caplog.text  # our own deadline is not the client hanging up


async def test_a_forward_waiting_for_its_own_metadata_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rafka.admin")
    asked: list[int] = []

    async def controller(req: Request) -> dict[str, Any]:
        asked.append(req.api_key)
        return {"error": 0, "topics": [{"name": "t", "error": 0}], "metadata_offset": 50}

    async with trio.open_nursery() as nursery:
        port = await nursery.start(Server(controller, "127.0.0.1", 0).serve)
        channel = ControllerChannel(ConnectionPool(nursery), [(1, "127.0.0.1", port)])
        out = await forward(channel, MetadataPublisher(1), ApiKey.CREATE_TOPICS, CREATE)
        nursery.cancel_scope.cancel()
    assert asked == [ApiKey.CREATE_TOPICS]
    assert out["error"] == ErrorCode.REQUEST_TIMED_OUT
    lines = [r.getMessage() for r in caplog.records if "no answer within 300 ms" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert "the controller answered" in lines[0] and "offset -1, waiting for 50" in lines[0], lines[0]


async def test_a_forward_the_client_hung_up_on_says_where_it_was(
        caplog: pytest.LogCaptureFixture) -> None:
    """The client's own timeout came first: it closed the connection, which cancels the
    handler — the same account, as "abandoned by the client"."""
    caplog.set_level(logging.INFO, logger="rafka.admin")
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _silent, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        channel = ControllerChannel(ConnectionPool(nursery), [(3, "127.0.0.1", port)])
        with trio.move_on_after(1.2):  # the connection's nursery, cancelled by the hang-up
            await forward(channel, MetadataPublisher(1), ApiKey.CREATE_TOPICS,
                          {**CREATE, "timeout_ms": 60_000})
        nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records if "abandoned by the client" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert "voter 3 no answer yet" in lines[0], lines[0]
    assert not [r for r in caplog.records if "no answer within" in r.getMessage()]
