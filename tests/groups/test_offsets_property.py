"""Random hand-overs of a partition between group members, against an offsets coordinator whose
metadata image lags the controller's and whose ISR acknowledges late (broker/groups/offsets.py).

The coordinator is the real ``GroupOffsetsManager`` over a real partition log; the controller
is a script. Each hand-over expires the partition's owner and gives the partition to a new
member (the controller's offset moves by one); the coordinator's image catches up only when
the script says so, and a gate holds the acknowledgement of appends. Every member acts as the
consumer does: it reads the committed offset once it owns the partition (an OFFSET_FETCH with
its epoch and metadata offset), then commits increasing offsets from there, one request at a
time, until a request is refused — members that were expired and do not know it go on
committing (zombies). The property is the chaos checker's ``committed-offset-regression``:
the offsets acknowledged, in the order they were acknowledged, never go down.

Mutations (session 29, 400 examples, a fresh example database each run): a member's fetch
that neither waits for its metadata offset nor is validated — caught in 7 of 7 runs; a fetch
that does not wait for the commits in flight when it arrived — caught in only 2 of 6 (it also
needs trio to wake the fetch before the commit, a coin toss per example), which is why
``test_offsets.py::test_a_fetch_answers_after_the_commits_accepted_before_it`` pins that case
down on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rafka.broker.groups.offsets import GroupOffsetsManager
from rafka.log.config import LogConfig
from rafka.log.partition_log import PartitionLog
from rafka.metadata import MetadataImage
from rafka.metadata.groups import GroupEpoch, GroupMember
from rafka.wire.protocol import ApiKey

from .test_offsets import FakeRM, call, commit_body, image_with

# members act most of the time (a member needs a read and a few commits before a hand-over
# makes it a zombie): one member (indexes wrap around the members there are), or every member
# that is not waiting for an answer (a tick: zombies and the new owner at once)
_act = st.tuples(st.just("act"), st.integers(0, 5), st.integers(1, 5))
_tick = st.tuples(st.just("tick"), st.integers(1, 5))
_step = st.one_of(_act, _act, _tick, _tick,
                  st.sampled_from([("handover",), ("catch-up",), ("catch-up",), ("hold",), ("release",)]))


class LaggingPublisher:
    """The coordinator's metadata: it moves only when the script calls ``catch_up``."""

    def __init__(self, rm: FakeRM) -> None:
        self.rm = rm
        self.changed = trio.Event()

    async def wait_for_offset(self, offset: int) -> MetadataImage:
        while self.rm.image.offset < offset:
            await self.changed.wait()
        return self.rm.image

    def show(self, image: MetadataImage) -> None:
        self.rm.image = image
        self.changed.set()
        self.changed = trio.Event()


@dataclass
class Member:
    member_id: str
    metadata_offset: int
    position: int | None = None  # None: has not read the committed offset yet
    busy: bool = False
    gone: bool = False  # a request was refused: the client would rejoin under a new id

    def fields(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "member_epoch": 1,
                "min_metadata_offset": self.metadata_offset}


def _owned_by(k: int, offset: int) -> MetadataImage:
    image = image_with([GroupEpoch("g", k, k), GroupMember(
        "g", f"m{k}", member_epoch=1, previous_member_epoch=0, subscribed_topics=("t",),
        assigned=(("t", 0),))])
    return replace(image, offset=offset)


async def _run(tmp_path: Any, script: list[tuple[Any, ...]]) -> list[int]:
    plog = PartitionLog.open(tmp_path / "o-0", LogConfig.from_dict({"cleanup.policy": "compact"}))
    try:
        base = image_with([]).offset
        controller = [_owned_by(0, base + 1)]  # controller offset i -> its image
        rm = FakeRM(plog, controller[0])
        pub = LaggingPublisher(rm)
        mgr = GroupOffsetsManager(rm, pub, wall_clock_ms=lambda: 1000, metadata_wait_ms=600_000)
        members = [Member("m0", controller[0].offset)]
        acked: list[int] = []

        async def act(m: Member, step: int) -> None:
            try:
                if m.position is None:
                    body = {"group_id": "g", **m.fields(), "topics": [{"name": "t", "partitions": [0]}]}
                    r = await call(mgr, ApiKey.OFFSET_FETCH, body)
                    if r.get("error"):
                        m.gone = True
                    else:
                        m.position = max(r["topics"][0]["partitions"][0]["offset"], 0)
                    return
                offset = m.position + step
                body = {**commit_body("g", {("t", 0): offset}), **m.fields()}
                r = await call(mgr, ApiKey.OFFSET_COMMIT, body)
                if r.get("error") or r["topics"][0]["partitions"][0]["error"]:
                    m.gone = True
                else:
                    acked.append(offset)
                    m.position = offset
            finally:
                m.busy = False

        async with trio.open_nursery() as nursery:
            for op in script:
                if op[0] == "handover":  # the owner is expired, a new member gets the partition
                    k = len(members)
                    controller.append(_owned_by(k, controller[-1].offset + 1))
                    members.append(Member(f"m{k}", controller[-1].offset))
                elif op[0] == "catch-up" and rm.image.offset < controller[-1].offset:
                    pub.show(controller[rm.image.offset - base])
                elif op[0] == "hold" and rm.p.gate is None:
                    rm.p.gate = trio.Event()
                elif op[0] == "release" and rm.p.gate is not None:
                    rm.p.gate.set()
                    rm.p.gate = None
                elif op[0] in ("act", "tick"):
                    chosen = members if op[0] == "tick" else [members[op[1] % len(members)]]
                    for m in chosen:
                        if not m.busy and not m.gone:
                            m.busy = True
                            nursery.start_soon(act, m, op[-1])
                await trio.testing.wait_all_tasks_blocked()
            # the end: metadata caught up, acknowledgements flowing, every request answered
            if rm.p.gate is not None:
                rm.p.gate.set()
                rm.p.gate = None
            pub.show(controller[-1])
        return acked
    finally:
        plog.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(_step, min_size=8, max_size=40))
def test_committed_offsets_never_go_back_across_hand_overs(tmp_path_factory: Any,
                                                           script: list[tuple[Any, ...]]) -> None:
    acked = trio.run(_run, tmp_path_factory.mktemp("offsets"), script)
    assert acked == sorted(acked), acked
