"""The controller's liveness probe on real processes: a partition leader killed with SIGKILL
loses its leadership long before its (here 30 s) broker session would expire, because the
active controller's TCP probe of its listener is refused (kraft/service.py, "Failure
detection"). The only time bound is a generous one — far below the session timeout, far above
what the probe needs even on a loaded machine.
"""

from __future__ import annotations

from typing import Any

import trio

from tests.integration.test_replication import (
    FAST,
    create_topic,
    dump_clusters,
    partition_md,
    sigkill,
)

SESSION_MS = 30_000
BOUND_S = 10  # << SESSION_MS: only the probe can move leadership within it


async def test_killed_leader_loses_leadership_long_before_its_session_expires(
        cluster_factory: Any) -> None:
    c = cluster_factory(3, broker_config=FAST,
                        controller_config={"broker.session.timeout.ms": SESSION_MS})
    await create_topic(c, "probe")
    old = (await partition_md(c, "probe"))["leader"]
    survivors = [n for n in range(1, c.nodes + 1) if n != old]
    await sigkill(c, old)
    last: Any = None
    with trio.move_on_after(BOUND_S):
        while True:
            try:
                last = await partition_md(c, "probe", via=survivors)
                if last["leader"] in survivors and old in last["fenced"]:
                    break
            except Exception as exc:  # noqa: BLE001 - a new controller is being elected
                last = exc
            await trio.sleep(0.1)
    if not (isinstance(last, dict) and last["leader"] in survivors and old in last["fenced"]):
        print(await trio.to_thread.run_sync(dump_clusters, "leadership did not move"))
        raise AssertionError(f"broker {old} killed, {BOUND_S} s later still: {last!r}")
    assert old not in last["isr"]
