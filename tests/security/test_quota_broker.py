"""Byte-rate quotas on a real single-node rafka process.

The quota is set with the ``rafka quota`` CLI (through the controller into the metadata log);
then two producers write at full speed side by side for about three seconds: client id
``capped`` (producer_byte_rate 200 KiB/s) gets answers with throttle_time_ms > 0 and the
broker's own measurement (DESCRIBE_CLIENT_QUOTAS usage: bytes per 1 s window) stays near the
quota, while client id ``free`` (no quota) is never throttled. Nothing here reads the test's
own clock to judge the rate: the windows are the broker's."""

from __future__ import annotations

import json

import trio
from rafka.client.aio import AsyncAdmin, AsyncProducer
from rafka.client.aio.quota_admin import client_quota_usage, describe_client_quotas

from tests.security.test_authorizer_broker import rafka
from tests.security.test_secured_broker import create_topic, running_node

QUOTA = 200 * 1024
VALUE = b"v" * 8 * 1024


async def _produce_for(bootstrap: str, client_id: str, seconds: float) -> dict:
    """Send 8 KiB records as fast as the producer goes (at most 16 unacknowledged) for
    ``seconds``; the producer's statistics at the end."""
    async with AsyncProducer(bootstrap, client_id=client_id, batch_size=32 * 1024, linger_ms=2,
                             request_timeout_ms=60_000) as p:
        pending = []
        deadline = trio.current_time() + seconds  # how long to keep sending, not a measurement
        while trio.current_time() < deadline:
            pending.append(await p.send("q", VALUE))
            if len(pending) >= 16:
                await pending.pop(0)
        for fut in pending:
            await fut
        return p.statistics()


async def test_a_capped_producer_is_held_to_its_rate_and_another_client_is_not(tmp_path):
    with running_node(tmp_path) as (plain, _secure, _files, _tmp), trio.fail_after(240):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "q")
        out = await trio.to_thread.run_sync(lambda: rafka(
            "quota", "set", "--client-id", "capped", "--producer-byte-rate", str(QUOTA),
            "--bootstrap", plain))
        assert out.returncode == 0, out.stderr
        out = await trio.to_thread.run_sync(lambda: rafka("quota", "list", "--json", "--bootstrap", plain))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["entries"] == [
            {"user": None, "client_id": "capped", "values": {"producer_byte_rate": float(QUOTA)}}]

        stats: dict[str, dict] = {}

        async def run(client_id: str) -> None:
            stats[client_id] = await _produce_for(plain, client_id, 3.0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "capped")
            nursery.start_soon(run, "free")

        assert stats["capped"]["throttled_responses"] > 0
        assert stats["capped"]["throttle_time_ms_max"] > 0
        assert stats["free"]["throttled_responses"] == 0
        assert stats["free"]["throttle_time_ms"] == 0

        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            assert (await describe_client_quotas(admin, client_id="capped"))[0]["values"] == {
                "producer_byte_rate": float(QUOTA)}
            usage = (await client_quota_usage(admin))[1]
        trackers = {(u["kind"], tuple(u["entity"])): u for u in usage}
        assert set(trackers) == {("produce", ("client-id", "capped"))}  # "free" has no tracker
        t = trackers[("produce", ("client-id", "capped"))]
        assert t["throttle_count"] > 0 and t["throttle_time_ms_total"] > 0
        windows = t["window_bytes"]  # [[window start ms, bytes]] as the broker measured them
        first, last = windows[0][0], windows[-1][0]
        span_s = (last - first) / 1000 + 1  # every window from the first to the last, whole
        rate = sum(b for _, b in windows) / span_s
        assert len(windows) >= 2
        # the broker held the client near its quota: one unthrottled burst of at most 16
        # records (128 KiB) and a batch in flight on top of 200 KiB/s
        assert rate <= 1.5 * QUOTA, (rate, windows)
        assert max(b for _, b in windows[1:]) <= 2 * QUOTA, windows
