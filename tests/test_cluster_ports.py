"""``rafka cluster up`` refuses Raft ports inside the kernel's ephemeral port range (issue 27):
an outgoing connection can take such a port as its source port while the node is down, and
the node then cannot bind its Raft listener. Before the fix ``--port 23000`` (Raft at 33000+,
inside Linux's default 32768-60999) was accepted silently."""

from __future__ import annotations

import pytest

from rafka import cluster
from rafka.cluster import ClusterError, _create


@pytest.fixture
def linux_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "ephemeral_port_range", lambda: (32768, 60999))
    monkeypatch.setattr(cluster, "_reserved_ports", lambda: set())


def test_raft_ports_in_the_ephemeral_range_are_refused(tmp_path, linux_defaults) -> None:
    with pytest.raises(ClusterError) as exc:
        _create(tmp_path / "c", 3, "127.0.0.1", 23000)
    msg = str(exc.value)
    assert "33000-33002" in msg and "32768-60999" in msg and "--port 22765" in msg
    assert not (tmp_path / "c" / "cluster.json").exists()


def test_ports_below_the_range_or_reserved_are_accepted(tmp_path, linux_defaults, monkeypatch) -> None:
    _create(tmp_path / "a", 3, "127.0.0.1", 9092)  # Raft at 19092: the default layout
    monkeypatch.setattr(cluster, "_reserved_ports", lambda: set(range(33000, 33003)))
    _create(tmp_path / "b", 3, "127.0.0.1", 23000)
    assert (tmp_path / "b" / "cluster.json").exists()


def test_the_kernel_range_is_read() -> None:
    span = cluster.ephemeral_port_range()
    assert span is None or 1024 <= span[0] <= span[1] <= 65535
