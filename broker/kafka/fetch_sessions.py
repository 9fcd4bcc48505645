"""KIP-227 incremental fetch sessions for the Kafka listener's Fetch (v7+).

Theory of operation
-------------------
A consumer that fetches the same partitions over and over can open a *session*: its first
Fetch (``session_epoch`` 0, "initial") names every partition and is answered in full with a
new ``session_id``; the broker remembers the partitions and their fetch positions. Each later
Fetch names that session and the next epoch (1, 2, … wrapping to 1 after 2³¹−1) and carries
only the partitions whose fetch offset or byte budget changed (``topics``) or that leave the
session (``forgotten_topics_data``); the broker fetches *every* partition of the session and
answers only those with something to say — records, an error, or a high watermark / last
stable offset / log start offset that moved since the last answer. ``session_epoch`` −1
("final") closes a session (or, with ``session_id`` 0, asks for a plain sessionless fetch,
which is what v4–6 always are).

``FetchSessionCache`` holds one broker's sessions, shared by all its Kafka connections (a
client may move a session to a new connection): at most ``max_sessions``; a new session
evicts the least recently used one (whose owner's next incremental fetch is answered
``FETCH_SESSION_ID_NOT_FOUND`` and starts a new session, as with Kafka). Errors, with an empty
answer and ``session_id`` 0, as Kafka gives them: an unknown session id →
``FETCH_SESSION_ID_NOT_FOUND`` (70); an epoch other than the one expected (a lost or
duplicated request) → ``INVALID_FETCH_SESSION_EPOCH`` (71). The expected epoch moves when a
request is accepted, before it is answered, so two concurrent requests with the same epoch
cannot both use the session.

Use (``apis.fetch``): ``plan = cache.begin(request body, version)``; if ``plan.error``, answer
``plan.error_answer()``; else fetch ``plan.topics`` (native fetch bodies) and answer
``plan.finish(responses)``, which records what was answered and drops unchanged partitions
of an incremental answer. A partition that returned records moves to the back of its
session's order, so a response byte budget filled by the first partitions does not starve the
others on the next fetch (partitions are fetched in session order).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FetchSessionCache", "FetchPlan", "Session", "FETCH_SESSION_ID_NOT_FOUND",
           "INVALID_FETCH_SESSION_EPOCH", "MAX_SESSIONS"]

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
MAX_SESSIONS = 1000  # Kafka's max.incremental.fetch.session.cache.slots default
_MAX_EPOCH = 2**31 - 1

TP = tuple[str, int]


@dataclass
class _Partition:
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    answered: tuple[int, int, int] | None = None  # high watermark, last stable, log start


@dataclass
class Session:
    id: int
    epoch: int  # the epoch the next request must carry
    partitions: OrderedDict[TP, _Partition] = field(default_factory=OrderedDict)


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


def _partition(p: Any) -> _Partition:
    return _Partition(p.fetch_offset, p.partition_max_bytes,
                      getattr(p, "current_leader_epoch", -1))


@dataclass
class FetchPlan:
    """What one Fetch request asks for once its session (if any) is applied."""

    session: Session | None
    incremental: bool
    error: int = 0
    partitions: list[tuple[TP, _Partition]] = field(default_factory=list)

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else 0

    @property
    def topics(self) -> list[dict[str, Any]]:
        """The native FETCH ``topics`` for this request's partitions, in session order."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, part), st in self.partitions:
            by_topic.setdefault(topic, []).append({
                "partition": part, "fetch_offset": st.fetch_offset,
                "partition_max_bytes": st.max_bytes,
                **({"current_leader_epoch": st.leader_epoch} if st.leader_epoch >= 0 else {})})
        return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]

    def error_answer(self) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": self.error, "session_id": 0, "responses": []}

    def finish(self, responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Remember what each partition was answered; an incremental answer keeps only the
        partitions with records, an error, or offsets that moved since their last answer."""
        if self.session is None:
            return responses
        cached = dict(self.partitions)
        out = []
        for t in responses:
            keep = []
            for p in t["partitions"]:
                st = cached.get((t["topic"], p["partition_index"]))
                now = (p["high_watermark"], p["last_stable_offset"], p["log_start_offset"])
                changed = st is None or st.answered != now
                if st is not None:
                    st.answered = now
                if p.get("records") and st is not None:  # to the back of the session's
                    self.session.partitions.move_to_end((t["topic"], p["partition_index"]))
                if (not self.incremental or changed or p["error_code"]
                        or p.get("records")):
                    keep.append(p)
            if keep:
                out.append({**t, "partitions": keep})
        return out


class FetchSessionCache:
    """One broker's fetch sessions: session id → ``Session``, least recently used first."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[int, Session] = OrderedDict()
        self.evicted = 0

    def begin(self, body: Any, version: int) -> FetchPlan:
        """Apply a Fetch request to the cache: the partitions to fetch, or an error."""
        requested = [((t.topic, p.partition), _partition(p))
                     for t in body.topics for p in t.partitions]
        sid = getattr(body, "session_id", 0) if version >= 7 else 0
        epoch = getattr(body, "session_epoch", FINAL_EPOCH) if version >= 7 else FINAL_EPOCH
        if epoch == FINAL_EPOCH:  # sessionless, closing the named session if any
            if sid:
                self.sessions.pop(sid, None)
            return FetchPlan(None, False, partitions=requested)
        if epoch == INITIAL_EPOCH:
            if sid:
                self.sessions.pop(sid, None)
            session = self._create()
            if session is not None:
                session.partitions.update(requested)
            return FetchPlan(session, False, partitions=requested)
        session = self.sessions.get(sid)
        if session is None:
            return FetchPlan(None, True, error=FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.epoch:
            return FetchPlan(None, True, error=INVALID_FETCH_SESSION_EPOCH)
        self.sessions.move_to_end(sid)
        session.epoch = _next_epoch(session.epoch)
        for tp, st in requested:
            old = session.partitions.get(tp)
            if old is not None:
                st.answered = old.answered
            session.partitions[tp] = st
        for t in getattr(body, "forgotten_topics_data", ()) or ():
            for part in t.partitions:
                session.partitions.pop((t.topic, part), None)
        return FetchPlan(session, True, partitions=list(session.partitions.items()))

    def _create(self) -> Session | None:
        if self.max_sessions <= 0:
            return None
        while len(self.sessions) >= self.max_sessions:
            self.sessions.popitem(last=False)
            self.evicted += 1
        sid = random.randint(1, _MAX_EPOCH)
        while sid in self.sessions:
            sid = random.randint(1, _MAX_EPOCH)
        session = self.sessions[sid] = Session(sid, _next_epoch(INITIAL_EPOCH))
        return session
