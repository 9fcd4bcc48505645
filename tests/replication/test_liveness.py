"""Liveness after slow or paused processes: what used to leave a partition leaderless or a
leader unable to make progress on a loaded machine (seen in tests/integration/test_replication.py
under load ~10 on 2 cores)."""

from __future__ import annotations

from rafka.kraft import controller as ctl

from tests.kraft.test_controller import World


def test_controller_pause_does_not_fence_every_broker():
    """The active controller's process is paused (SIGSTOP, or starved) for longer than the
    session timeout while the brokers keep heartbeating into its socket buffers. On resuming,
    its first check must not fence them all: that shrank the ISR one fence at a time down to
    {the last broker fenced} and, with that broker dead, left the partition leaderless for good
    although two in-sync replicas were alive (``test_old_leader_truncates_records_that_never_replicated``)."""
    w = World()
    st = w.brokers(1, 2, 3)
    w.commit(ctl.create_topic(w.image, "t", 1, 3, {}, "tid", 2, 0))
    assert w.part().leader == 3
    for b in (1, 2, 3):
        st.last_contact_ms[b] = 10_000
    assert ctl.expired_brokers(w.image, st, 10_200, 3000) == []
    # paused from 10.2 s to 20 s: nothing was processed meanwhile
    assert ctl.expired_brokers(w.image, st, 20_000, 3000) == []
    # brokers 1 and 2 heartbeat at once (their queued heartbeats); broker 3 died in the pause
    for b in (1, 2):
        st.last_contact_ms[b] = 20_050
    now = 20_000
    while not (expired := ctl.expired_brokers(w.image, st, now, 3000)):
        now += 250
        for b in (1, 2):
            st.last_contact_ms[b] = now
    assert expired == [3]
    # fenced once it has been watched silent for a session (the pause counts as a quarter)
    assert now - 20_000 >= 3000 - 3000 // 4 - 200
    w.commit(ctl.fence_broker(w.image, 3, st))
    reg = w.part()
    assert reg.leader in (1, 2) and set(reg.isr) == {1, 2}, reg


def test_session_still_expires_while_the_controller_runs():
    """Checks at the normal period never count as a pause: a silent broker is fenced after the
    session timeout, to the millisecond."""
    w = World()
    st = w.brokers(1, 2)
    st.last_contact_ms.update({1: 0, 2: 0})
    for now in range(0, 3001, 250):
        st.last_contact_ms[1] = now
        assert ctl.expired_brokers(w.image, st, now, 3000) == []
    st.last_contact_ms[1] = 3001
    assert ctl.expired_brokers(w.image, st, 3001, 3000) == [2]
