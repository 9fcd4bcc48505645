"""The membership check finds a voter that starts late without a long backoff (issue 27).

After a kill-all the voters come up one by one; the first one up waits on this check before it
starts its Raft voter, so the quorum's election waits for it too. Under trio's mock clock (no
wall clock involved): voter 2 starts listening 1.6 s after this node began asking. The check
must agree within one short retry interval (``UNTIL_AGREED_MAX_S``) of that, where the old
0.1 → 2 s doubling asked at 0, 0.1, 0.3, 0.7, 1.5 and then only at 3.1 s.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from rafka.kraft.membership import UNTIL_AGREED_MAX_S, verify_cluster_membership

VOTERS = [(1, ("h1", 1)), (2, ("h2", 2)), (3, ("h3", 3))]
UP_AT_S = 1.6


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_voter_that_starts_late_is_found_within_one_short_retry(autojump_clock) -> None:
    t0 = trio.current_time()
    asked: list[tuple[int, float]] = []

    async def request(addr: tuple[str, int], body: dict[str, Any]) -> dict[str, Any] | None:
        now = trio.current_time() - t0
        asked.append((addr[1], now))
        if addr[1] == 2 and now >= UP_AT_S:  # voter 2 is up; voter 3 stays down
            return {"node_id": 2, "cluster_id": "c", "voter_ids": [1, 2, 3], "secret_proof": None}
        return None  # refused: not listening yet

    agreed = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: verify_cluster_membership(1, VOTERS, "c", None, request=request,
                                                             agreed=agreed))
        await agreed.wait()
        agreed_at = trio.current_time() - t0
        # after agreeing, the one voter left is asked less and less often (up to 2 s apart)
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    assert UP_AT_S <= agreed_at <= UP_AT_S + UNTIL_AGREED_MAX_S
    later = [t for v, t in asked if v == 3 and t > agreed_at]
    gaps = [b - a for a, b in zip(later, later[1:], strict=False)]
    assert max(gaps) == pytest.approx(2.0)
