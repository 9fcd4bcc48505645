"""Broker lifecycle (KIP-631): register, heartbeat, get unfenced, shut down under control.

Theory of operation
-------------------
``BrokerLifecycle.run`` registers with the active controller (``BROKER_REGISTRATION`` with a
fresh incarnation id; the answer's ``broker_epoch`` is the offset of the registration record)
and then heartbeats every ``broker.heartbeat.interval.ms`` (at multiples of it on the trio
clock, so the beat shares its wake-up with the node's other periodic loops: wire/wakeups.py),
reporting the offset of its metadata image. The controller unfences the broker once that offset has reached its
registration (it has seen its own registration, so it knows every partition assigned before
it). The first heartbeat after a registration goes as soon as the image holds the
registration record (bounded by the interval), not an interval later: a restarted broker is
fenced — it leads nothing and no new partition is placed on it — until that heartbeat, which
after a restart of every node is on the path of the first topic create (issue 27, measured
0.3–0.5 s between registration and unfence with a 250 ms interval). A ``STALE_BROKER_EPOCH`` answer (the controller forgot us, e.g. after we were removed)
re-registers. Errors back off and retry; the loop never gives up on its own.

Controlled shutdown: ``controlled_shutdown()`` sets ``want_shutdown`` on the next heartbeats
(sent at once, then at the normal interval); the controller moves leadership and ISR
membership away and answers ``should_shutdown`` when this broker leads nothing. The caller
bounds the wait (``controlled.shutdown.timeout.ms``) and then stops the node either way.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import trio
from rafka.broker.controller_channel import ControllerChannel
from rafka.broker.metadata_listener import MetadataPublisher
from rafka.wire.connection import backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import ApiKey
from rafka.wire.wakeups import grid_deadline

__all__ = ["BrokerLifecycle"]

log = logging.getLogger("rafka.lifecycle")


class BrokerLifecycle:
    def __init__(self, broker_id: int, advertised: tuple[str, int], channel: ControllerChannel,
                 publisher: MetadataPublisher, *, heartbeat_interval_ms: int = 500,
                 rack: str | None = None, secure_listener: str | None = None,
                 kafka_listener: str | None = None) -> None:
        self.broker_id = broker_id
        self.kafka_listener = kafka_listener  # "host:port" advertised to Kafka clients
        self.secure_listener = secure_listener  # "host:port" advertised to secured clients
        self.host, self.port = advertised
        self.channel = channel
        self.publisher = publisher
        self.interval_s = heartbeat_interval_ms / 1000
        # one attempt at one controller; then the channel tries the next voter
        self.attempt_timeout_s = max(2.0, 4 * self.interval_s)
        self.rack = rack or None
        self.incarnation_id = uuid.uuid4().hex
        self.broker_epoch = -1
        self.fenced = True
        self.want_shutdown = False
        self.should_shutdown = trio.Event()
        self.registered = trio.Event()
        self.unfenced = trio.Event()
        self._poke = trio.Event()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        attempt = 0
        while True:
            registered_now = False
            if self.broker_epoch < 0:
                ok = registered_now = await self._register()
            else:
                ok = await self._heartbeat()
            attempt = 0 if ok else attempt + 1
            # after a success, the next beat is at the next multiple of the interval on the
            # trio clock (wire/wakeups.py: it shares the wake-up of the node's other periodic
            # loops); one that started on that grid thus keeps the exact interval
            deadline = (grid_deadline(self.interval_s) if ok
                        else trio.current_time() + backoff_ms(attempt, 50, 1000) / 1000)
            with trio.move_on_at(deadline):
                if registered_now:
                    # the controller unfences us on the first heartbeat whose offset reaches our
                    # registration record: send it as soon as our image holds that record, not a
                    # whole interval later (until then no partition can be led or placed here)
                    await self.publisher.wait_for_offset(self.broker_epoch)
                else:
                    await self._poke.wait()
            self._poke = trio.Event()

    async def _register(self) -> bool:
        try:
            body = await self.channel.request(ApiKey.BROKER_REGISTRATION, {
                "broker_id": self.broker_id, "incarnation_id": self.incarnation_id,
                "host": self.host, "port": self.port, "rack": self.rack,
                "heartbeat_interval_ms": round(self.interval_s * 1000),
                "secure_listener": self.secure_listener, "kafka_listener": self.kafka_listener},
                attempt_timeout_s=self.attempt_timeout_s)
        except RafkaError as exc:
            log.info("registration failed: %s", exc)
            return False
        if body.get("error"):
            log.info("registration refused: %s %s", body.get("error"), body.get("message"))
            return False
        self.broker_epoch = body["broker_epoch"]
        log.info("registered as broker %d with epoch %d", self.broker_id, self.broker_epoch)
        self.registered.set()
        return True

    async def _heartbeat(self) -> bool:
        try:
            body = await self.channel.request(ApiKey.BROKER_HEARTBEAT, {
                "broker_id": self.broker_id, "broker_epoch": self.broker_epoch,
                "metadata_offset": self.publisher.image.offset, "want_fence": False,
                "want_shutdown": self.want_shutdown,
                "heartbeat_interval_ms": round(self.interval_s * 1000)},
                attempt_timeout_s=self.attempt_timeout_s)
        except RafkaError as exc:
            log.info("heartbeat failed: %s", exc)
            return False
        err = body.get("error", 0)
        if err == ErrorCode.STALE_BROKER_EPOCH:
            log.warning("controller says broker epoch %d is stale: registering again", self.broker_epoch)
            self.broker_epoch = -1
            return False
        if err:
            log.info("heartbeat error %s: %s", err, body.get("message"))
            return False
        fenced = bool(body.get("is_fenced"))
        if fenced != self.fenced:
            log.info("broker %d is now %s", self.broker_id, "fenced" if fenced else "unfenced")
        self.fenced = fenced
        if not fenced:
            self.unfenced.set()
        if body.get("should_shutdown") and self.want_shutdown:
            self.should_shutdown.set()
        return True

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away; returns when it says we may stop."""
        if self.broker_epoch < 0:
            return
        self.want_shutdown = True
        self._poke.set()
        await self.should_shutdown.wait()
