"""A registered broker asks to be unfenced as soon as its image holds its registration.

Issue 27 (kill-all rounds of the quorum torture): after every node restarts, the first topic
create needs an unfenced broker, and a broker is fenced from its registration until its first
heartbeat reporting an image offset at or past the registration record. That heartbeat used to
wait a whole ``broker.heartbeat.interval.ms`` after the registration (0.3-0.5 s measured with a
250 ms interval). Here the interval is an hour of trio's mock clock, so only a heartbeat sent
because the image caught up can unfence the broker; the test counts heartbeats and reads the
offsets they reported, it does not time anything.
"""

from __future__ import annotations

from typing import Any

import trio
from rafka.broker.lifecycle import BrokerLifecycle
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.metadata.delta import LocalChanges
from rafka.metadata.image import MetadataImage
from rafka.wire.protocol import ApiKey

REGISTRATION_OFFSET = 41
HOUR_MS = 3_600_000


class _Controller:
    """Answers the lifecycle's requests like an active controller: the registration record at
    ``REGISTRATION_OFFSET``; unfenced once a heartbeat reports an offset that reaches it."""

    def __init__(self) -> None:
        self.heartbeats: list[int] = []  # metadata_offset of each heartbeat

    async def request(self, api_key: int, body: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        if api_key == ApiKey.BROKER_REGISTRATION:
            return {"error": 0, "broker_epoch": REGISTRATION_OFFSET}
        assert api_key == ApiKey.BROKER_HEARTBEAT
        self.heartbeats.append(body["metadata_offset"])
        caught_up = body["metadata_offset"] >= REGISTRATION_OFFSET
        return {"error": 0, "is_caught_up": caught_up, "is_fenced": not caught_up,
                "should_shutdown": False}


async def test_first_heartbeat_follows_the_registration_record_not_the_interval(
        autojump_clock: trio.testing.MockClock) -> None:
    publisher = MetadataPublisher(1, MetadataImage(offset=REGISTRATION_OFFSET - 5))
    controller = _Controller()
    lifecycle = BrokerLifecycle(1, ("127.0.0.1", 9092), controller,  # type: ignore[arg-type]
                                publisher, heartbeat_interval_ms=HOUR_MS)
    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.run)
        await lifecycle.registered.wait()
        assert lifecycle.fenced and controller.heartbeats == []
        # the listener folds the registration record in: the broker asks to be unfenced at once
        await publisher.publish(MetadataImage(offset=REGISTRATION_OFFSET), _no_changes())
        with trio.move_on_after(HOUR_MS / 1000 / 2):  # well inside one heartbeat interval
            await lifecycle.unfenced.wait()
        assert controller.heartbeats == [REGISTRATION_OFFSET]
        assert not lifecycle.fenced
        nursery.cancel_scope.cancel()


async def test_without_the_record_the_interval_still_bounds_the_wait(
        autojump_clock: trio.testing.MockClock) -> None:
    """A listener that never catches up does not stop the heartbeats: the next one goes after
    the interval, reporting the offset the image has (the controller keeps it fenced)."""
    publisher = MetadataPublisher(1, MetadataImage(offset=3))
    controller = _Controller()
    lifecycle = BrokerLifecycle(1, ("127.0.0.1", 9092), controller,  # type: ignore[arg-type]
                                publisher, heartbeat_interval_ms=1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.run)
        with trio.move_on_after(2.5):
            await lifecycle.unfenced.wait()
        assert controller.heartbeats == [3, 3]
        assert lifecycle.fenced
        nursery.cancel_scope.cancel()


def _no_changes() -> LocalChanges:
    return LocalChanges()
