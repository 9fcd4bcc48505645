"""Quota configuration as metadata and its enforcement, pure: ClientQuota records fold the same
under any batch split and survive a snapshot; the controller's decision checks every entry;
Kafka's precedence (user+client > user > client > defaults) picks the quota from the image;
the node's quota wrapper (security/throttle.py) throttles only quota'd PRODUCE / FETCH."""

from __future__ import annotations

import msgpack
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.broker.handlers.security_api import describe_client_quotas
from rafka.broker.server import Reply, Server
from rafka.kraft.quota_admin import decide_alter_client_quotas
from rafka.metadata import (
    MetadataImage,
    image_to_records,
    record_from_dict,
    records_to_image,
)
from rafka.metadata.quotas import DEFAULT, ClientQuota, entity_key
from rafka.security.quota import QuotaBook
from rafka.security.throttle import ClientQuotas
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import NEED_DATA, ApiKey, ClientProtocol, Request, validate_request

from tests.metadata.test_fold import fold

USERS = [None, "User:alice", "User:bob", DEFAULT]
CLIENTS = [None, "etl", "web", DEFAULT]
KEYS = ["producer_byte_rate", "consumer_byte_rate"]


@st.composite
def quota_records(draw):
    user, client = draw(st.sampled_from(USERS)), draw(st.sampled_from(CLIENTS))
    if user is None and client is None:
        client = "etl"
    value = draw(st.one_of(st.none(), st.floats(1, 1e9)))
    return ClientQuota(user, client, draw(st.sampled_from(KEYS)), value)


@settings(max_examples=200, deadline=None)
@given(st.lists(quota_records(), max_size=30), st.lists(st.integers(0, 30), max_size=6))
def test_quota_fold_is_split_invariant_and_snapshots_round_trip(recs, cuts):
    image = fold(recs, cuts)
    assert image == fold(recs)
    snap = image_to_records(image)
    wire = msgpack.unpackb(msgpack.packb([r.to_dict() for r in snap]))
    again = records_to_image([record_from_dict(d) for d in wire], image.offset, image.epoch)
    assert again == image
    # the last value written for each (entity, key) is what the image holds
    last = {}
    for r in recs:
        last[(entity_key(r.user, r.client_id), r.key)] = r.value
    for (ent, key), value in last.items():
        assert image.quotas.get(ent, key) == value


def test_removing_the_last_key_removes_the_entity():
    image = fold([ClientQuota(None, "etl", "producer_byte_rate", 100.0)])
    assert image.quotas.entities == {("client-id", "etl"): {"producer_byte_rate": 100.0}}
    image = fold([ClientQuota(None, "etl", "producer_byte_rate", None)], image=image)
    assert image.quotas.entities == {}
    assert image == MetadataImage(offset=image.offset, epoch=image.epoch)


def decide(image, *entries):
    body = {"entries": list(entries)}
    validate_request(ApiKey.ALTER_CLIENT_QUOTAS, body)
    return decide_alter_client_quotas(image, body["entries"])


def test_the_controller_checks_each_entry_and_writes_only_changes():
    ok = {"user": "User:alice", "ops": [{"key": "producer_byte_rate", "value": 1000.0}]}
    bad = [
        {"ops": [{"key": "producer_byte_rate", "value": 1.0}]},  # no entity
        {"user": "alice", "ops": [{"key": "producer_byte_rate", "value": 1.0}]},  # no User:
        {"client_id": "x", "ops": [{"key": "request_percentage", "value": 1.0}]},
        {"client_id": "x", "ops": [{"key": "producer_byte_rate", "value": -5.0}]},
        {"client_id": "x", "ops": [{"key": "producer_byte_rate", "value": float("nan")}]},
        {"client_id": "", "ops": [{"key": "producer_byte_rate", "value": 1.0}]},
        {"client_id": "x", "ops": []},
    ]
    results, decision = decide(MetadataImage.EMPTY, ok, *bad)
    assert results[0] == {"error": 0, "message": None}
    assert [r["error"] for r in results[1:]] == [int(ErrorCode.INVALID_REQUEST)] * len(bad)
    assert all(r["message"] for r in results[1:])
    assert decision.records == [ClientQuota("User:alice", None, "producer_byte_rate", 1000.0)]
    image = fold(decision.records)
    # the same value again, and removing a key that is not there, write nothing
    _, again = decide(image, ok, {"client_id": DEFAULT, "ops": [{"key": "consumer_byte_rate"}]})
    assert not again
    _, remove = decide(image, {"user": "User:alice", "ops": [{"key": "producer_byte_rate"}]})
    assert remove.records == [ClientQuota("User:alice", None, "producer_byte_rate", None)]


def test_kafka_precedence_from_the_image():
    levels = [  # strongest first (Kafka's order)
        ("User:alice", "etl"), ("User:alice", DEFAULT), ("User:alice", None),
        (DEFAULT, "etl"), (DEFAULT, DEFAULT), (DEFAULT, None), (None, "etl"), (None, DEFAULT)]
    recs = [ClientQuota(u, c, "producer_byte_rate", float(i + 1)) for i, (u, c) in enumerate(levels)]
    holder = {"image": fold(recs)}
    book = QuotaBook(lambda e: holder["image"].quotas.get(e, "producer_byte_rate"))
    expected_keys = [("user", "User:alice", "client-id", "etl")] * 2 + [("user", "User:alice")] + \
        [("user", "User:alice", "client-id", "etl")] * 2 + [("user", "User:alice")] + \
        [("client-id", "etl")] * 2
    for i, (u, c) in enumerate(levels):
        assert book.resolve("User:alice", "etl") == (expected_keys[i], float(i + 1)), (u, c)
        holder["image"] = fold([ClientQuota(u, c, "producer_byte_rate", None)], image=holder["image"])
        book.invalidate()
    assert book.resolve("User:alice", "etl") is None
    # without a principal (a plaintext listener) only the client-id levels apply
    holder["image"] = fold(recs)
    book.invalidate()
    assert book.resolve(None, "etl") == (("client-id", "etl"), 7.0)
    assert book.resolve(None, "other") == (("client-id", "other"), 8.0)  # default: its own tracker


def test_a_default_quota_holds_each_client_separately():
    image = fold([ClientQuota(None, DEFAULT, "producer_byte_rate", 1000.0)])
    book = QuotaBook(lambda e: image.quotas.get(e, "producer_byte_rate"))
    assert book.record(None, "a", 5000, 0) > 0
    assert book.record(None, "b", 900, 0) == 0  # b has its own 1000 B/s
    assert set(book.trackers) == {("client-id", "a"), ("client-id", "b")}
    assert book.record(None, "a", 10**12, 1) == book.window_ms * book.samples  # capped


def _produce(client_id: str, nbytes: int, principal: str | None = None) -> Request:
    body = {"acks": 1, "timeout_ms": 1000,
            "topics": [{"name": "t", "partitions": [{"partition": 0, "records": b"x" * nbytes}]}]}
    return Request(ApiKey.PRODUCE, 1, body, client_id=client_id, principal=principal)


def _fetch(client_id: str, replica_id: int = -1) -> Request:
    body = {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 10**6, "topics": []}
    return Request(ApiKey.FETCH, 2, body, client_id=client_id)


async def test_the_node_wrapper_throttles_only_quotad_produce_and_fetch():
    holder = {"image": fold([ClientQuota(None, "slow", "producer_byte_rate", 1000.0),
                             ClientQuota(None, "slow", "consumer_byte_rate", 1000.0)])}
    now = {"ms": 0}
    quotas = ClientQuotas(lambda: holder["image"], clock_ms=lambda: now["ms"])

    async def handler(req: Request):
        if req.api_key == ApiKey.FETCH:
            return Reply({"error": 0, "topics": []}, [b"r" * 3000])
        return {"topics": []}

    dispatch = quotas.wrap(handler)
    assert (await dispatch(_produce("slow", 3000)))["throttle_time_ms"] == 2000
    assert "throttle_time_ms" not in await dispatch(_produce("fast", 3000))  # unquoted: untouched
    assert (await dispatch(_fetch("slow"))).body["throttle_time_ms"] == 2000
    assert "throttle_time_ms" not in (await dispatch(_fetch("slow", replica_id=2))).body  # replication
    usage = {u["kind"]: u for u in quotas.usage()}
    assert usage["produce"]["window_bytes"] == [[0, 3000]]
    assert usage["produce"]["throttle_count"] == 1 and usage["fetch"]["throttle_time_ms_total"] == 2000
    # a new image without the quota: the next request is free again
    holder["image"] = fold([ClientQuota(None, "slow", "producer_byte_rate", None)], image=holder["image"])
    now["ms"] = 10
    assert (await dispatch(_produce("slow", 3000))).get("throttle_time_ms") is None
    body = describe_client_quotas({}, holder["image"], quotas.usage())
    assert body["entries"] == [{"user": None, "client_id": "slow", "values": {"consumer_byte_rate": 1000.0}}]


async def _ask(port: int, client_id: str, n: int) -> list[float]:
    """Send ``n`` METADATA requests at once on a fresh connection; when each answer arrived."""
    proto = ClientProtocol(client_id)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"".join(proto.send(ApiKey.METADATA, {})[1] for _ in range(n)))
    times: list[float] = []
    while len(times) < n:
        proto.receive_data(await stream.receive_some(65536))
        while proto.next_response() is not NEED_DATA:
            times.append(trio.current_time())
    await stream.aclose()
    return times


@pytest.mark.parametrize("throttle_ms", [0, 300])
async def test_the_server_holds_a_throttled_answer_and_mutes_only_that_connection(throttle_ms, autojump_clock):
    """A real Server on loopback under trio's mock clock (times are virtual): a throttled answer
    is held ``throttle_time_ms`` and the connection's next request is not dispatched before
    then; another connection is answered meanwhile."""
    seen: dict[str, list[float]] = {"slow": [], "fast": []}

    async def dispatch(req: Request):
        seen[req.client_id].append(trio.current_time())
        return {"error": 0, "throttle_time_ms": throttle_ms if req.client_id == "slow" else 0}

    server = Server(dispatch)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        t0 = trio.current_time()
        got: dict[str, list[float]] = {}

        async def run(name: str, n: int) -> None:
            got[name] = await _ask(port, name, n)

        async with trio.open_nursery() as clients:
            clients.start_soon(run, "slow", 2)
            clients.start_soon(run, "fast", 3)
        nursery.cancel_scope.cancel()
    held = throttle_ms / 1000
    slow = seen["slow"]
    assert len(seen["fast"]) == 3
    assert slow[1] - slow[0] >= held  # muted: the 2nd request waited out the 1st one's throttle
    assert got["slow"][0] - t0 >= held and got["slow"][1] - t0 >= 2 * held
    assert max(got["fast"]) - t0 < 0.1  # the other connection was never held
    assert server.stats.throttled == (2 if throttle_ms else 0)
