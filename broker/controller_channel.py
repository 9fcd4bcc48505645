"""Requests from a broker to the controller quorum.

Theory of operation
-------------------
``ControllerChannel.request(api_key, body)`` sends a request to the *active* controller and
returns its response body. The active controller is not known in advance: the channel starts
with the voter it last succeeded with (or the first voter), and

* a ``NOT_CONTROLLER`` answer names the leader (``leader_id`` / ``leader_host`` /
  ``leader_port``): go there next; with no hint, try the next voter;
* a network error (connection refused, reset) drops that connection and tries the next voter
  — never the same one again when there is another (``_rotate(avoid=...)``);
* between attempts it sleeps with capped exponential backoff; after ``max_attempts`` it gives
  up with the last error (``NotControllerError`` / ``BrokerNotAvailableError``).

``request_any(api_key, body)`` is the same without the leader requirement (any voter may answer,
e.g. ``METADATA_FETCH``); it rotates on failure. ``request_any_from`` also says which voter
answered (its id, or None when the address is not in the voter list), so a caller can tell a
response served by the active controller (``leader_id`` equal to the responder) from one served
by a follower voter; ``note_leader(voter_id)`` points the next requests at a voter that another
voter named as the leader. Callers bound the total time with
``trio.fail_after``/``move_on_after``; the channel bounds the attempts, and with
``attempt_timeout_s`` each attempt: a voter that accepts the request but does not answer in
time (paused, hung, or not a rafka controller at all) is treated like an unreachable one —
its connection is dropped and the next voter is tried. Without it, a heartbeat sent to a
paused controller would wait forever while another voter takes over, and the broker would be
fenced by the new controller for silence.

On a node that is also a voter, ``leader_view`` (its own Raft engine's current leader id) is
usually fresher than any hint: requests start at that voter, and an attempt at a voter is
abandoned as soon as the view moves from it to another voter (``_wait_deposed``: woken by the
view's change event where the node gives one, ``view_changed``; else it re-reads the view every
50 ms — which, with a long poll parked there all the time, was 20 wake-ups a second on an idle
voter, issue 26). Without this a
paused former active controller kept every request that had started towards it — a forwarded
topic create, the broker's metadata long-poll that the create's answer then waits for — until
the per-attempt timeout (5 s), long after a new controller was active (issue 27, measured:
creates sent 4 s into such a pause took 4 s, the listener's 5.5 s long-poll). A broker-only
node has no view and still relies on the per-attempt timeout and the voters' hints.

Whom to ask next (``request``)
------------------------------
The view is a hint like the others, not an oracle: it can be stale (with pre-vote, a node that
missed an election does not campaign and keeps naming its last leader until it hears from the
new one), or name a leader that has not activated. So, after each answer:

* ``NOT_CONTROLLER`` naming another voter that has not failed in this request → that voter,
  at once (once in a row; then after the backoff) — even when the view names someone else.
  Before this rule (4da361c..) the view beat every hint: a node whose view named a voter that
  answered "not me, ask X" asked that voter again, 100 times (~10 s), and never X.
* ``NOT_CONTROLLER`` without a usable hint from the viewed leader → elected, not active yet:
  ask it again after the backoff (rotating could land on the deposed voter, silent for a whole
  attempt timeout; found by the quorum torture). For ``_VIEW_GRACE_S`` only: after it, every
  other attempt asks another voter, whose hint may name the controller the view does not see.
* from another voter without a usable hint → back to the viewed leader, if any; else the next
  voter in turn.
* no answer (connection error, attempt timeout) → the viewed leader if it is another voter,
  else the next voter in turn; a voter that failed *slowly* (it was silent for an attempt or
  connection-setup timeout) is not asked again in this request (nor followed in a hint) until
  every voter has failed once. One that refused or reset the connection at once is not
  excluded: that is a voter that is down or still starting, cheap to ask again, and after a
  restart of every voter it may be the one that becomes the active controller.

Every attempt is bounded by ``attempt_timeout_s`` (the view-watching included: a view that
never names the target does not extend it), the whole request by ``max_attempts`` and by the
caller's own deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio
from rafka.wire.connection import ConnectionPool, backoff_ms
from rafka.wire.errors import ErrorCode, RafkaError, error_for

__all__ = ["Attempt", "ControllerChannel", "FORWARDED_KEY", "describe_trace"]

log = logging.getLogger("rafka.controller_channel")

# Marks an admin request forwarded by a broker so that the receiving node hands it to its
# controller instead of forwarding it again (extra body keys are ignored by the schema).
FORWARDED_KEY = "_forwarded"

# Between attempts: while an election runs, every voter answers NOT_CONTROLLER without a hint;
# polling every 100 ms (not 500) finds the new controller within ~0.1 s of its activation —
# a controller failover is then visible to clients in ~election time, not election + 0.5 s.
# 100 attempts ≈ 10 s in all.
_MAX_BACKOFF_MS = 100
_VIEW_POLL_S = 0.05  # how often an attempt re-reads the leader view
# How long the viewed leader may answer "not active yet" (NOT_CONTROLLER, no hint) before the
# channel also asks the other voters: activation is one Raft commit (the LeaderChange), well
# under this on a loaded box; a view that names a voter for longer may be stale.
_VIEW_GRACE_S = 0.5
# A failed attempt that took this long was a silent voter (attempt or connection-setup timeout,
# a paused process): not asked again in this request until every voter has failed. A quicker
# failure (connection refused or reset) was a voter that is down or still starting: asked again
# in turn, and followed when the view or a hint names it. Before this distinction a voter that
# refused once — restarting after a kill of every node — stayed out of the whole request while
# it became the active controller, and its view and the other voters' hints naming it were
# ignored: the forward asked the other two for 5 s (issue 27, kill-all, seen in node logs as
# "voter 2 NETWORK_EXCEPTION in 0.00 s; voter 1 NOT_CONTROLLER …; voter 3 NOT_CONTROLLER …").
_SLOW_FAILURE_S = 1.0


_TRACE_MAX = 200  # attempts kept per traced request (100 attempts is the default bound)


@dataclass
class Attempt:
    """One attempt of a traced ``request``: at which voter, when it started (trio clock),
    and how it ended (None: still waiting when the trace was read)."""

    voter_id: int | None
    address: tuple[str, int]
    started: float
    outcome: str | None = None
    seconds: float | None = None

    def finish(self, outcome: str) -> None:
        self.outcome, self.seconds = outcome, trio.current_time() - self.started

    def describe(self, now: float) -> str:
        who = f"voter {self.voter_id}" if self.voter_id is not None else "{}:{}".format(*self.address)
        if self.outcome is None:
            return f"{who} no answer yet after {now - self.started:.2f} s"
        return f"{who} {self.outcome} in {self.seconds:.2f} s"


def describe_trace(trace: Sequence[Attempt], now: float, limit: int = 12) -> str:
    """The attempts of a traced request, oldest first, long runs abbreviated."""
    parts = [a.describe(now) for a in trace]
    if len(parts) > limit:
        parts = parts[:limit // 2] + [f"… {len(parts) - limit} more …"] + parts[-(limit // 2):]
    return "; ".join(parts) or "none"


class ControllerChannel:
    def __init__(self, pool: ConnectionPool, voters: Sequence[tuple[int, str, int]],
                 *, max_attempts: int = 100, leader_view: Callable[[], int | None] | None = None,
                 view_changed: Callable[[], trio.Event | None] | None = None) -> None:
        if not voters:
            raise ValueError("no controller voters configured")
        self.pool = pool
        self.voters = list(voters)
        self.max_attempts = max_attempts
        self._next = 0
        self._leader: tuple[str, int] | None = None
        self._leader_view = leader_view  # this node's own Raft leader id (a voter), else None
        # an event set at the view's next change (the quorum's ``leader_changed``), so that a
        # parked attempt waits for it instead of re-reading the view every _VIEW_POLL_S
        self._view_changed = view_changed

    def _rotate(self, avoid: tuple[str, int] | None = None) -> tuple[str, int]:
        """The next voter in turn — never ``avoid`` (the one that just failed) when there is
        another: the target may have come from a hint or ``_leader``, out of turn, and the
        turn may point right back at it. Two attempt timeouts at a paused active controller
        (2 s each) outlast the new controller's 3 s activation grace, which then fenced brokers
        that were only stuck asking the paused voter twice."""
        for _ in range(len(self.voters)):
            _vid, host, port = self.voters[self._next % len(self.voters)]
            self._next += 1
            if (host, port) != avoid:
                break
        return host, port

    def _voter_id(self, target: tuple[str, int]) -> int | None:
        for vid, host, port in self.voters:
            if (host, port) == target:
                return vid
        return None

    def note_leader(self, voter_id: int) -> None:
        """A voter named ``voter_id`` as the active controller: try it first next time."""
        for vid, host, port in self.voters:
            if vid == voter_id:
                self._leader = (host, port)
                return

    @property
    def leader_hint(self) -> tuple[str, int] | None:
        return self._leader

    def _viewed_leader(self) -> tuple[str, int] | None:
        vid = self._leader_view() if self._leader_view is not None else None
        for v, host, port in self.voters:
            if v == vid:
                return host, port
        return None

    def _first_target(self) -> tuple[str, int]:
        return self._viewed_leader() or self._leader or self._rotate()

    def _next_target(self, avoid: tuple[str, int]) -> tuple[str, int]:
        viewed = self._viewed_leader()
        return viewed if viewed is not None and viewed != avoid else self._rotate(avoid=avoid)

    async def _wait_deposed(self, target: tuple[str, int]) -> None:
        """Returns once the leader view, having named ``target``, names another voter."""
        named = False
        while True:
            changed = self._view_changed() if self._view_changed is not None else None
            viewed = self._viewed_leader()  # read after taking the event: no change is missed
            named = named or viewed == target
            if named and viewed is not None and viewed != target:
                return
            if changed is None:
                await trio.sleep(_VIEW_POLL_S)
            else:
                await changed.wait()

    async def _attempt(self, target: tuple[str, int], api_key: int, body: dict[str, Any],
                       timeout_s: float | None) -> Any:
        with trio.move_on_after(float("inf") if timeout_s is None else timeout_s):
            if self._leader_view is None:
                return await self.pool.request(target[0], target[1], api_key, body)
            answer: list[Any] = []
            failed: list[RafkaError] = []
            async with trio.open_nursery() as nursery:
                async def ask() -> None:
                    try:  # raised here it would leave the nursery as an ExceptionGroup
                        answer.append(await self.pool.request(target[0], target[1], api_key, body))
                    except RafkaError as exc:
                        failed.append(exc)
                    nursery.cancel_scope.cancel()
                nursery.start_soon(ask)
                await self._wait_deposed(target)
                nursery.cancel_scope.cancel()
            if failed:
                raise failed[0]
            if answer:
                return answer[0]
            raise error_for(ErrorCode.NOT_CONTROLLER,
                            f"{target[0]}:{target[1]} lost the Raft leadership while we waited")
        raise error_for(ErrorCode.REQUEST_TIMED_OUT,
                        f"{target[0]}:{target[1]} did not answer within {timeout_s:.1f} s")

    async def request(self, api_key: int, body: dict[str, Any], *,
                      attempt_timeout_s: float | None = None,
                      trace: list[Attempt] | None = None) -> dict[str, Any]:
        """The active controller's answer to ``body`` (errors other than NOT_CONTROLLER are
        returned in the body, not raised). Whom it asks: "Whom to ask next" in the module
        docstring. ``trace``: each attempt is appended as it starts and completed as it ends,
        so a caller whose own deadline cut the request short can say where the time went."""
        target = self._first_target()
        last: RafkaError = error_for(ErrorCode.NOT_CONTROLLER, "no active controller found")
        failed: set[tuple[str, int]] = set()  # voters that did not answer in this request
        view_waited_since: float | None = None  # the viewed leader first said "not active yet"
        hopped = False  # the last step followed a hint at once, without a backoff
        for attempt in range(self.max_attempts):
            step = Attempt(self._voter_id(target), target, trio.current_time())
            if trace is not None and len(trace) < _TRACE_MAX:
                trace.append(step)
            try:
                resp = await self._attempt(target, api_key, body, attempt_timeout_s)
            except RafkaError as exc:
                step.finish(exc.code.name)
                last = exc
                self.pool.discard(*target)
                self._leader = None
                if (step.seconds or 0.0) >= _SLOW_FAILURE_S:
                    # silent (paused, hung): each new try costs a whole attempt timeout
                    failed = failed | {target}
                    if failed >= self._all_voters():
                        failed = {target}  # every voter failed once: any of them may be back
                # a refused or reset connection costs nothing to try again, and it is what a
                # voter that is still starting answers — the one that may lead a moment later
                viewed = self._viewed_leader()
                if viewed is not None and viewed != target and viewed not in failed:
                    target = viewed
                else:
                    target = self._rotate_among(avoid=failed | {target}) or self._rotate(avoid=target)
            else:
                out = resp.body
                step.finish("NOT_CONTROLLER" if out.get("error") == ErrorCode.NOT_CONTROLLER else "answered")
                if out.get("error") != ErrorCode.NOT_CONTROLLER:
                    self._leader = target
                    return out
                last = error_for(ErrorCode.NOT_CONTROLLER, out.get("message") or "")
                self._leader = None
                host, port = out.get("leader_host"), out.get("leader_port")
                hint = (host, port) if isinstance(host, str) and isinstance(port, int) else None
                viewed = self._viewed_leader()
                if viewed in failed:
                    viewed = None  # it did not answer in this request: no better than no view
                if hint is not None and hint != target and hint not in failed:
                    target = hint  # a live voter names the leader: believe it over the view
                    if not hopped:
                        hopped = True
                        continue  # a fresh hint is worth trying at once (but no ping-pong)
                elif viewed is not None and target == viewed:
                    # the viewed leader says NOT_CONTROLLER without a hint: elected, not active
                    # yet — ask it again; after the grace, every other attempt asks another voter
                    now = trio.current_time()
                    view_waited_since = now if view_waited_since is None else view_waited_since
                    if now - view_waited_since >= _VIEW_GRACE_S:
                        target = self._rotate_among(avoid=failed | {viewed}) or viewed
                elif viewed is not None:
                    target = viewed  # another voter knew no better: back to the view
                else:
                    target = self._rotate_among(avoid=failed | {target}) or self._rotate(avoid=target)
            hopped = False
            await trio.sleep(backoff_ms(attempt, 10, _MAX_BACKOFF_MS) / 1000)
        raise last

    def _all_voters(self) -> set[tuple[str, int]]:
        return {(host, port) for _vid, host, port in self.voters}

    def _rotate_among(self, avoid: set[tuple[str, int]]) -> tuple[str, int] | None:
        """The next voter in turn that is not in ``avoid``, or None."""
        for _ in range(len(self.voters)):
            _vid, host, port = self.voters[self._next % len(self.voters)]
            self._next += 1
            if (host, port) not in avoid:
                return host, port
        return None

    async def request_any(self, api_key: int, body: dict[str, Any], *,
                          attempt_timeout_s: float | None = None) -> dict[str, Any]:
        """Any voter's answer; rotates on network errors, bounded like ``request``."""
        _voter, out = await self.request_any_from(api_key, body, attempt_timeout_s=attempt_timeout_s)
        return out

    async def request_any_from(self, api_key: int, body: dict[str, Any], *,
                               attempt_timeout_s: float | None = None
                               ) -> tuple[int | None, dict[str, Any]]:
        """``(id of the voter that answered, its answer)``, like ``request_any``."""
        last: RafkaError = error_for(ErrorCode.BROKER_NOT_AVAILABLE, "no controller reachable")
        target = self._first_target()
        for attempt in range(self.max_attempts):
            try:
                resp = await self._attempt(target, api_key, body, attempt_timeout_s)
                return self._voter_id(target), resp.body
            except RafkaError as exc:
                last = exc
                self.pool.discard(*target)
                if self._leader == target:
                    self._leader = None
                target = self._next_target(avoid=target)
            await trio.sleep(backoff_ms(attempt, 10, _MAX_BACKOFF_MS) / 1000)
        raise last
