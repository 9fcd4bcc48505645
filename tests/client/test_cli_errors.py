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
from rafka.client.errors import NoBrokersAvailableError, RafkaError, UnresolvableHostError

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
    socket.connection.setup.timeout.ms) ends the connect with a named, retriable error; the
    request timeout (60 s here) would not have."""
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
    assert info.value.retriable and "connection setup timeout" in info.value.message
