"""Errors that cannot heal end a command at once, with their name (issue 15): a bootstrap host
that does not resolve fails the producer, the consumer (with and without a group) and the admin
commands with ``cannot resolve host …`` instead of waiting out a timeout; and the client core
says the same to Python callers (``UnresolvableHostError``, not retriable).

No cluster is needed: nothing can be reached. Each command gets a subprocess deadline far below
the waits it used to do (30-60 s), so a regression fails here instead of blocking, and the
message is checked too.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import trio
from rafka.client.aio._core import ClientCore
from rafka.client.errors import (
    BootstrapTimeoutError,
    NoBrokersAvailableError,
    RafkaError,
    UnresolvableHostError,
)

from .conftest import rafka

BAD = "nohost.invalid:9092"


@pytest.mark.parametrize("args", [
    ("produce", "t"),
    ("consume", "t"),
    ("consume", "t", "--group", "g"),
    ("topic", "list"),
    ("topic", "create", "t"),
    ("group", "list"),
    ("quorum", "describe"),
])
def test_unresolvable_bootstrap_fails_at_once(args: tuple[str, ...]) -> None:
    r = rafka(*args, "--bootstrap", BAD, input=b"hi\n", timeout=25)
    assert r.returncode == 1, r.stderr
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.stderr.decode(), err
    assert "cannot resolve host nohost.invalid" in err[0], err


async def test_core_raises_unresolvable_host_not_retriable() -> None:
    async with trio.open_nursery() as nursery:
        core = ClientCore(BAD, client_id="t")
        core.open(nursery)
        try:
            with trio.fail_after(20):
                with pytest.raises(UnresolvableHostError) as info:
                    await core.wait_for_topic("t", 60_000)
        finally:
            await core.aclose()
    assert not info.value.retriable and isinstance(info.value, RafkaError)
    assert "nohost.invalid" in info.value.message


async def test_one_unresolvable_host_among_good_ones_is_only_skipped() -> None:
    """A list with one bad name and one refused port: retriable (the other may come up)."""
    async with trio.open_nursery() as nursery:
        core = ClientCore(f"{BAD},127.0.0.1:1", client_id="t")
        core.open(nursery)
        try:
            with pytest.raises(RafkaError) as info:
                await core.refresh_metadata()
        finally:
            await core.aclose()
    assert not isinstance(info.value, UnresolvableHostError) and info.value.retriable


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port whose SYNs go unanswered, as a dead host's or a vanished container's: a listener
    that never accepts, its accept queue filled (Linux then drops further SYNs)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        fillers.append(s)
    try:
        yield port
    finally:
        for s in fillers:
            s.close()
        srv.close()


async def test_a_host_that_never_answers_the_connect_is_given_up_after_the_setup_timeout(blackhole: int) -> None:
    """Found with the compose cluster: a client whose first bootstrap address was a killed
    broker's container hung ~39 s in connect. The connection setup timeout (Kafka's
    socket.connection.setup.timeout.ms) ends the connect with a named error; the request
    timeout (60 s here) would not have. A client that never reached the cluster gives up for
    good once that timeout has passed (issue 25): not retriable."""
    async with trio.open_nursery() as nursery:
        core = ClientCore(f"127.0.0.1:{blackhole}", client_id="t", request_timeout_ms=60_000,
                          connection_setup_timeout_ms=300)
        core.open(nursery)
        try:
            with trio.fail_after(30):
                with pytest.raises(NoBrokersAvailableError) as info:
                    await core.refresh_metadata()
        finally:
            await core.aclose()
    assert isinstance(info.value, BootstrapTimeoutError) and not info.value.retriable
    assert "connection setup timeout" in info.value.message


# ------------------------------------------------------------------ issue 25: a refused port


@pytest.fixture
def closed_port() -> int:
    """A loopback port nobody listens on (bound then closed: connects are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(40)
@pytest.mark.parametrize("args", [
    ("produce", "events"),
    ("consume", "events", "--timeout-ms", "2000"),
    ("consume", "events", "--group", "g"),
    ("topic", "list"),
])
def test_a_refused_bootstrap_fails_within_the_timeout_naming_why(args: tuple[str, ...], closed_port: int) -> None:
    """Issue 25: a wrong bootstrap hung produce 62 s and consume 33 s (ending in ``: None``).
    ``--timeout`` (here 1 s) bounds every command; the one-line error names the address and
    the reason. The subprocess deadline is far below the old waits."""
    addr = f"127.0.0.1:{closed_port}"
    r = rafka(*args, "--bootstrap", addr, "--timeout", "1", input=b"x\n", timeout=25)
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 1 and len(err) == 1, err
    assert f"{addr} (cannot connect to {addr}: Connection refused)" in err[0], err
    assert ": None" not in err[0]


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_the_default_bootstrap_timeout_is_at_most_ten_seconds(closed_port: int) -> None:
    """The default (no ``--timeout``) ends a produce to a refused port well before the old 62 s:
    the subprocess deadline (20 s) fails the test otherwise."""
    r = rafka("produce", "events", "--bootstrap", f"127.0.0.1:{closed_port}", input=b"x\n", timeout=20)
    assert r.returncode == 1
    assert "within 10000 ms (connection setup timeout" in r.stderr.decode()


@pytest.mark.timeout(30)
def test_python_clients_fail_a_refused_bootstrap_with_one_error(closed_port: int) -> None:
    """The same through the Python API: ``Producer.send`` and a group ``Consumer.poll``."""
    from rafka.client import Consumer, Producer

    addr = f"127.0.0.1:{closed_port}"
    with Producer(bootstrap_servers=addr, connection_setup_timeout_ms=500) as p:
        with pytest.raises(BootstrapTimeoutError) as sent:
            p.send("events", value=b"x").result(timeout=20)
    with Consumer("events", bootstrap_servers=addr, group_id="g", connection_setup_timeout_ms=500) as c:
        with pytest.raises(BootstrapTimeoutError) as polled:
            for _ in range(100):
                c.poll(timeout_ms=200)
    for info in (sent, polled):
        assert not info.value.retriable and "Connection refused" in info.value.message
