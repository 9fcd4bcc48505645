"""The active controller's liveness probe: a broker whose listener refuses connections is
fenced long before its session expires; one whose listen socket is there is not.

ControllerService over the in-memory quorum under trio's MockClock, with real sockets on
127.0.0.1 (a numeric address: the probe's name lookup needs no thread). The clock jumps only
after the program has been idle for a few ms of real time, so a loopback connect — answered
by the kernel at once — is not overtaken by the probe's timeout.
"""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing
from rafka.kraft import controller as ctl
from rafka.kraft.memory import MemoryQuorumCluster
from rafka.kraft.service import probe_listener
from rafka.wire.protocol import ApiKey

from . import test_service_memory as svc_util
from .test_service_memory import wait_active

SESSION_MS = 6000


@pytest.fixture
def clock():
    return trio.testing.MockClock(autojump_threshold=0.005)


@pytest.fixture
def listening_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)  # never accepts: the kernel completes handshakes into the backlog
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more
    return port


async def start(nursery, cluster, node_id, **settings):
    return await svc_util.start(nursery, cluster, node_id,
                                **{"broker.session.timeout.ms": SESSION_MS, **settings})


def image(cluster):
    return cluster.state_machine.image


async def register_unfenced(svc, cluster, bid, port):
    r = await svc.handlers[ApiKey.BROKER_REGISTRATION](
        {"broker_id": bid, "incarnation_id": f"inc-{bid}", "host": "127.0.0.1", "port": port})
    assert r["error"] == 0, r
    hb = await heartbeat(svc, cluster, bid, r["broker_epoch"])
    assert hb["error"] == 0 and not hb["is_fenced"], hb
    return r["broker_epoch"]


async def heartbeat(svc, cluster, bid, epoch):
    return await svc.handlers[ApiKey.BROKER_HEARTBEAT](
        {"broker_id": bid, "broker_epoch": epoch, "metadata_offset": image(cluster).offset,
         "want_fence": False, "want_shutdown": False})


async def fenced_at(cluster, bid, limit_s):
    """Mock time at which ``bid`` is fenced, or None if not within ``limit_s``."""
    with trio.move_on_after(limit_s):
        while not image(cluster).cluster.brokers[bid].fenced:
            await trio.sleep(0.05)
        return trio.current_time()
    return None


async def test_probe_listener_outcomes(clock, listening_port, closed_port):
    assert await probe_listener("127.0.0.1", listening_port) == "open"
    assert await probe_listener("127.0.0.1", closed_port) == "refused"
    assert await probe_listener("name.invalid", 1) in ("error", "timeout")


async def test_silent_broker_with_refusing_listener_fenced_before_session_expires(
        clock, listening_port, closed_port):
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1)
        cluster.elect(1)
        await wait_active(s1)
        dead_epoch = await register_unfenced(s1, cluster, 1, closed_port)
        await register_unfenced(s1, cluster, 2, listening_port)
        await register_unfenced(s1, cluster, 3, listening_port)
        # the activation probes have run (and fenced nothing: broker 1 had not registered yet)
        r = await s1.handlers[ApiKey.CREATE_TOPICS](
            {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 3}], "timeout_ms": 1})
        assert r["topics"][0]["error"] == 0
        leader = image(cluster).topics.by_name["t"].partitions[0].leader

        # brokers 1 and 2 go silent; 3 keeps heartbeating
        async def beat3():
            epoch = image(cluster).cluster.brokers[3].epoch
            while True:
                await heartbeat(s1, cluster, 3, epoch)
                await trio.sleep(0.25)

        nursery.start_soon(beat3)
        silent_since = trio.current_time()
        t1 = await fenced_at(cluster, 1, SESSION_MS / 1000)
        # probed after session/3 of silence, refused: fenced well before the session expires
        assert t1 is not None and t1 - silent_since < SESSION_MS / 2000
        assert not image(cluster).cluster.brokers[2].fenced  # listening: not proven dead
        reg = image(cluster).topics.by_name["t"].partitions[0]
        assert reg.leader != 1 and 1 not in reg.isr
        if leader == 1:
            assert reg.leader in (2, 3)

        # broker 2 (listen socket there, no heartbeats) is fenced only by its session
        t2 = await fenced_at(cluster, 2, 2 * SESSION_MS / 1000)
        assert t2 is not None and t2 - silent_since >= SESSION_MS / 1000

        # a live broker fenced by a probe unfences with its next heartbeat
        hb = await heartbeat(s1, cluster, 1, dead_epoch)
        assert hb["error"] == 0 and not hb["is_fenced"]
        assert not image(cluster).cluster.brokers[1].fenced
        nursery.cancel_scope.cancel()


async def test_new_controller_probes_every_broker_at_once(clock, listening_port, closed_port):
    """The broker died with the old controller: the new one grants a fresh session to all,
    but its activation probe fences the dead broker at once."""
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1)
        s2 = await start(nursery, cluster, 2)
        cluster.elect(1)
        await wait_active(s1)
        await register_unfenced(s1, cluster, 1, closed_port)
        await register_unfenced(s1, cluster, 2, listening_port)
        await trio.sleep(0.1)
        assert not image(cluster).cluster.brokers[1].fenced  # just heard from: not probed
        cluster.elect(2)
        await wait_active(s2)
        activated = trio.current_time()
        t1 = await fenced_at(cluster, 1, SESSION_MS / 1000)
        probe_after_s = SESSION_MS / 3000
        assert t1 is not None and t1 - activated < probe_after_s  # not waiting for silence
        assert not image(cluster).cluster.brokers[2].fenced
        nursery.cancel_scope.cancel()


async def _silence_to_fence_s(settings, limit_s, closed_port):
    """One broker registered on a closed port with ``settings``: mock seconds from its last
    heartbeat until it is fenced (None if not within ``limit_s``)."""
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1, **settings)
        cluster.elect(1)
        await wait_active(s1)
        await register_unfenced(s1, cluster, 1, closed_port)
        since = trio.current_time()
        t1 = await fenced_at(cluster, 1, limit_s)
        nursery.cancel_scope.cancel()
    return None if t1 is None else t1 - since


async def test_probe_disabled_leaves_it_to_the_session(clock, closed_port):
    waited = await _silence_to_fence_s({"broker.liveness.probe.enable": "false"},
                                       2 * SESSION_MS / 1000, closed_port)
    assert waited is not None and waited >= SESSION_MS / 1000


async def test_probe_after_setting(clock, closed_port):
    waited = await _silence_to_fence_s({"broker.liveness.probe.after.ms": "4000"},
                                       SESSION_MS / 1000, closed_port)
    assert waited is not None and 4.0 <= waited < SESSION_MS / 1000


# -- the pure parts ------------------------------------------------------------------------


def _world():
    from .test_controller import World

    w = World()
    st = w.brokers(1, 2, state=ctl.ControllerState())
    return w, st


def test_probe_fence_rechecks_contact_epoch_and_fencing():
    w, st = _world()
    epoch = w.image.cluster.brokers[1].epoch
    st.last_contact_ms[1] = 1000
    assert ctl.probe_fence(w.image, st, 1, epoch, started_ms=1000)  # no contact since
    st.last_contact_ms[1] = 1001  # heartbeat after the probe started: newer evidence
    assert not ctl.probe_fence(w.image, st, 1, epoch, started_ms=1000)
    st.last_contact_ms[1] = 0
    assert not ctl.probe_fence(w.image, st, 1, epoch - 1, started_ms=1000)  # other incarnation
    w.commit(ctl.fence_broker(w.image, 1, st))
    assert not ctl.probe_fence(w.image, st, 1, epoch, started_ms=1000)  # already fenced


def test_brokers_to_probe_schedule():
    w, st = _world()
    st.touch_all(w.image, 0)
    assert sorted(ctl.brokers_to_probe(w.image, st, 0, 3000)) == [1, 2]  # activation: all due
    ctl.probe_started(st, 1, 0)
    ctl.probe_started(st, 2, 0)
    assert ctl.brokers_to_probe(w.image, st, 5000, 3000) == []  # one probe in flight each
    st.probing.clear()
    st.last_contact_ms[2] = 4500
    assert ctl.brokers_to_probe(w.image, st, 5000, 3000) == [1]  # silent > session/3
    ctl.probe_started(st, 1, 5000)
    st.probing.clear()
    assert ctl.brokers_to_probe(w.image, st, 5500, 3000) == []  # probed 500 ms ago
    assert ctl.brokers_to_probe(w.image, st, 6001, 3000) == [1, 2]  # again after probe.after
    assert ctl.probe_after_ms(st, 1, 3000) == 1000
    assert ctl.probe_after_ms(st, 1, 3000, 700) == 700
    st.heartbeat_interval_ms[2] = 100  # registered with: probe after 2 x 100 ms of silence
    assert ctl.probe_after_ms(st, 2, 3000) == 200
    assert ctl.brokers_to_probe(w.image, st, 4700, 3000) == []
    assert ctl.brokers_to_probe(w.image, st, 4701, 3000) == [2]


async def test_heartbeats_carry_the_interval_that_sets_the_probe_threshold(clock, closed_port):
    """A broker's heartbeats say its interval (the brokers send it since the 30 s-session
    integration test showed a probe only after session/3 = 10 s): a silent broker is probed
    after 2 x that, and a controller that takes over learns it from the next heartbeat."""
    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1)
        cluster.elect(1)
        await wait_active(s1)
        r = await s1.handlers[ApiKey.BROKER_REGISTRATION](
            {"broker_id": 1, "incarnation_id": "inc-1", "host": "127.0.0.1",
             "port": closed_port})  # as to a controller that missed the registration:
        assert r["error"] == 0, r       # only the heartbeat says the interval
        hb = await s1.handlers[ApiKey.BROKER_HEARTBEAT](
            {"broker_id": 1, "broker_epoch": r["broker_epoch"],
             "metadata_offset": image(cluster).offset, "want_fence": False,
             "want_shutdown": False, "heartbeat_interval_ms": 100})
        assert hb["error"] == 0 and not hb["is_fenced"], hb
        assert s1._active.state.heartbeat_interval_ms[1] == 100
        silent_since = trio.current_time()
        t = await fenced_at(cluster, 1, SESSION_MS / 1000)
        # 2 x 100 ms of silence (+ one probe-loop tick), far below session/3 = 2 s
        assert t is not None and t - silent_since < SESSION_MS / 3000 / 2
        nursery.cancel_scope.cancel()


def test_next_probe_ms_is_when_brokers_to_probe_first_names_one():
    """``next_probe_ms`` (issue 26: the probe loop sleeps until then instead of a 100 ms tick)
    is exactly the first time ``brokers_to_probe`` returns a broker, given no new contact."""
    w, st = _world()
    st.last_contact_ms.clear()
    assert ctl.next_probe_ms(w.image, st, 0, 3000) is None  # no contact ever: nothing falls due
    st.touch_all(w.image, 0)
    assert ctl.next_probe_ms(w.image, st, 0, 3000) == 0  # activation: due at once
    ctl.probe_started(st, 1, 0)
    ctl.probe_started(st, 2, 0)
    st.probing.clear()
    st.last_contact_ms[1] = 4000
    st.last_contact_ms[2] = 4500
    due = ctl.next_probe_ms(w.image, st, 4600, 3000)
    assert due == 5001  # broker 1: silent for more than session/3 = 1000 ms
    assert ctl.brokers_to_probe(w.image, st, due - 1, 3000) == []
    assert ctl.brokers_to_probe(w.image, st, due, 3000) == [1]
    ctl.probe_started(st, 1, due)  # in flight, then answered "open": next after probe.after
    assert ctl.next_probe_ms(w.image, st, due, 3000) == 5501  # broker 2 now
    st.last_contact_ms[2] = 5400  # a heartbeat only moves it later
    assert ctl.next_probe_ms(w.image, st, due, 3000) == 6001
    st.probing.clear()
    assert ctl.brokers_to_probe(w.image, st, 6000, 3000) == []
    assert ctl.brokers_to_probe(w.image, st, 6001, 3000) == [1]
    st.heartbeat_interval_ms[2] = 100
    assert ctl.next_probe_ms(w.image, st, 5450, 3000) == 5601
    assert ctl.next_probe_ms(w.image, st, 7000, 3000) == 7000  # overdue: now


async def test_idle_controllers_probe_and_periodic_loops_take_few_steps(clock, listening_port):
    """Issue 26, counted over 10 s of mock time with a broker heartbeating every 250 ms: the
    standby controller's probe and periodic loops do not run at all, and the active one's probe
    loop wakes about once per probe threshold. Before: 100 probe-loop steps (a 100 ms tick) and
    40 periodic-loop steps on each controller, active or not."""
    steps: dict[tuple[int, str], int] = {}

    class Steps(trio.abc.Instrument):
        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            name = task.name.rsplit(".", 1)[-1]
            if name in ("_probe_loop", "_periodic_loop"):
                owner = task.coro.cr_frame.f_locals.get("self") if task.coro.cr_frame else None
                key = (getattr(owner, "node_id", 0), name)
                steps[key] = steps.get(key, 0) + 1

    cluster = MemoryQuorumCluster([1, 2])
    async with trio.open_nursery() as nursery:
        s1 = await start(nursery, cluster, 1)
        await start(nursery, cluster, 2)
        cluster.elect(1)
        await wait_active(s1)
        epoch = await register_unfenced(s1, cluster, 1, listening_port)

        async def beat():
            while True:
                await heartbeat(s1, cluster, 1, epoch)
                await trio.sleep(0.25)

        nursery.start_soon(beat)
        await trio.sleep(1.0)
        counter = Steps()
        trio.lowlevel.add_instrument(counter)
        try:
            await trio.sleep(10.0)
        finally:
            trio.lowlevel.remove_instrument(counter)
        assert steps.get((2, "_probe_loop"), 0) == 0 and steps.get((2, "_periodic_loop"), 0) == 0, steps
        assert steps.get((1, "_probe_loop"), 0) <= 15, steps  # the 1 s recheck cap: ~10
        assert steps.get((1, "_periodic_loop"), 0) <= 90, steps  # unchanged: every 250 ms
        assert not image(cluster).cluster.brokers[1].fenced
        nursery.cancel_scope.cancel()
