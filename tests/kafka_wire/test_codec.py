"""The Kafka codec (broker/kafka/codec.py): a Hypothesis round trip of every request and
response of every API version the listener serves, the header versions, and the KIP-511
answer to an ApiVersions request of a version it does not serve — no sockets."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records, i64Timedelta
from rafka.broker.kafka import codec
from rafka.broker.kafka.apis import READABLE_FROM, SERVED
from rafka.broker.kafka.listener import KafkaListener

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# kio's own i64Timedelta strategy reaches int64 milliseconds that it writes but cannot read
# back (Python's timedelta ends at 999999999 days): such a request is closed as unreadable.
# Clients send -1 or small durations (retention_time, ...); the round trips stay in that range.
st.register_type_strategy(i64Timedelta, st.integers(-(2**47), 2**47).map(
    lambda ms: datetime.timedelta(milliseconds=ms)))

CASES = [(k, v) for k, (lo, hi, _) in sorted(SERVED.items())
         for v in range(READABLE_FROM.get(k, lo), hi + 1)]
SUPPORTED = {k: (READABLE_FROM.get(k, lo), hi) for k, (lo, hi, _) in SERVED.items()}


def _ids(case: tuple[int, int]) -> str:
    return f"key{case[0]}-v{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_request_round_trip(case: tuple[int, int], data: st.DataObject) -> None:
    key, version = case
    schema = codec.request_schema(key, version)
    entity = data.draw(st.from_type(schema))
    cid = data.draw(st.integers(-(2**31), 2**31 - 1))
    client_id = data.draw(st.one_of(st.none(), st.text(max_size=20)))
    frame = codec.encode_request(entity, cid, client_id)
    (n,) = struct.unpack_from(">i", frame)
    assert n == len(frame) - 4
    req = codec.decode_request(frame[4:], SUPPORTED)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (
        key, version, cid, client_id)
    assert req.body == entity


@pytest.mark.parametrize("case", CASES, ids=_ids)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_response_round_trip(case: tuple[int, int], data: st.DataObject) -> None:
    key, version = case
    schema = codec.response_schema(key, version)
    entity = data.draw(st.from_type(schema))
    cid = data.draw(st.integers(-(2**31), 2**31 - 1))
    frame = codec.encode_response(key, version, cid, entity)
    assert codec.decode_response(frame[4:], key, version) == (cid, entity)


def test_header_versions_follow_flexibility() -> None:
    # Metadata v8 is not flexible: request header v1, response header v0 (cid only)
    old = codec.build(codec.request_schema(3, 8), {"topics": None,
                                                   "allow_auto_topic_creation": False,
                                                   "include_cluster_authorized_operations": False,
                                                   "include_topic_authorized_operations": False})
    frame = codec.encode_request(old, 7, "c")
    assert frame[4:15] == struct.pack(">hhih", 3, 8, 7, 1) + b"c"
    assert frame[15:19] == b"\xff\xff\xff\xff"  # the body at once: topics = null (int32 -1)
    # Metadata v9+ is flexible: request header v2 ends with an empty tagged-field section
    new = codec.build(codec.request_schema(3, 9), {"topics": None,
                                                   "allow_auto_topic_creation": False,
                                                   "include_cluster_authorized_operations": False,
                                                   "include_topic_authorized_operations": False})
    frame = codec.encode_request(new, 7, "c")
    assert frame[4:15] == struct.pack(">hhih", 3, 9, 7, 1) + b"c"
    assert frame[15] == 0  # no tagged fields
    # responses: v0 header (4 bytes) for Metadata v8, v1 (cid + tagged fields) for v9
    r8 = codec.encode_response(3, 8, 7, codec.build(codec.response_schema(3, 8), {
        "throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": 1, "topics": []}))
    r9 = codec.encode_response(3, 9, 7, codec.build(codec.response_schema(3, 9), {
        "throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": 1, "topics": []}))
    assert r8[4:8] == r9[4:8] == struct.pack(">i", 7)
    assert r9[8] == 0 and r8[8:12] == b"\x00\x00\x00\x00"  # tagged fields vs throttle_time


def test_api_versions_response_header_is_always_v0() -> None:
    entity = codec.build(codec.response_schema(18, 3), {"error_code": 0, "api_keys": [],
                                                       "throttle_time": 0})
    frame = codec.encode_response(18, 3, 9, entity)
    # v0 header: correlation id, then the body's error_code straight away (no tagged fields)
    assert frame[4:10] == struct.pack(">ih", 9, 0)


async def test_unsupported_api_versions_version_answers_with_the_ranges() -> None:
    listener = KafkaListener(ctx=None, host="127.0.0.1", port=0)  # type: ignore[arg-type]
    payload = struct.pack(">hhih", 18, 99, 42, 1) + b"x" + b"\x00\x00\x00"
    out = await listener.handle(payload)
    assert isinstance(out, (bytes, memoryview))  # a frame (encode_response: a view of its buffer)
    cid, body = codec.decode_response(out[4:], 18, 0)
    assert cid == 42 and int(body.error_code) == 35  # UNSUPPORTED_VERSION
    ranges = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in body.api_keys}
    assert ranges == {k: (lo, hi) for k, (lo, hi, _) in SERVED.items()}
    assert ranges[18] == (0, 3) and ranges[0][0] == 0  # Produce advertised from v0


@pytest.mark.parametrize("payload", [
    b"",                                            # shorter than a header
    struct.pack(">hhi", 3, 12, 1),                  # header cut before client id
    struct.pack(">hhih", 3, 99, 1, -1),             # Metadata v99
    struct.pack(">hhih", 77, 0, 1, -1),             # unknown api key
    struct.pack(">hhih", 0, 1, 1, -1) + b"\x00" * 10,  # Produce v1: advertised, not served
    struct.pack(">hhih", 3, 12, 1, -1) + b"\x00\xff\xff\xff",  # garbage body
])
async def test_bad_requests_close_the_connection(payload: bytes) -> None:
    listener = KafkaListener(ctx=None, host="127.0.0.1", port=0)  # type: ignore[arg-type]
    assert await listener.handle(payload) is not None
    assert not isinstance(await listener.handle(payload), (bytes, memoryview))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash_the_decoder(payload: bytes) -> None:
    try:
        codec.decode_request(payload, SUPPORTED)
    except codec.KafkaDecodeError:
        pass
