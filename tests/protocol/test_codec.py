"""The sans-I/O codec: round trips, schema validation, and random bytes never crash it."""

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.wire import errors
from rafka.wire.protocol import (
    NEED_DATA,
    ApiKey,
    ClientProtocol,
    FrameDecoder,
    FrameTooLargeError,
    MalformedFrameError,
    Request,
    Response,
    UnknownApiError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_head,
    peek_correlation_id,
    validate_request,
)

PRODUCE = {
    "acks": -1,
    "timeout_ms": 1000,
    "topics": [{"name": "t", "partitions": [{"partition": 0, "records": b"\x00" * 70}]}],
}


def frames_of(data: bytes, chunk: int, max_frame: int = 1 << 20) -> list[bytes]:
    dec = FrameDecoder(max_frame)
    out = []
    for i in range(0, len(data), chunk):
        dec.receive_data(data[i : i + chunk])
        while (f := dec.next_frame()) is not NEED_DATA:
            out.append(f)
    return out


@given(st.integers(1, 50))
def test_request_round_trip_under_any_chunking(chunk: int) -> None:
    reqs = [Request(ApiKey.PRODUCE, cid, PRODUCE, client_id="c") for cid in range(5)]
    wire = b"".join(encode_request(r) for r in reqs)
    got = [decode_request(f) for f in frames_of(wire, chunk)]
    assert got == reqs


@given(st.binary(max_size=300), st.integers(0, 2**31 - 1))
def test_response_raw_tail_round_trip(raw: bytes, cid: int) -> None:
    body = {"topics": [{"name": "t", "partitions": [{"partition": 0, "records_len": len(raw)}]}]}
    (frame,) = frames_of(encode_response(Response(cid, body, raw)), 7)
    resp = decode_response(frame)
    assert resp.correlation_id == cid and resp.body == body and bytes(resp.raw) == raw
    head = encode_response_head(cid, body, len(raw))
    assert head + raw == encode_response(Response(cid, body, raw))


def test_client_protocol_matches_out_of_order_responses() -> None:
    cp = ClientProtocol()
    cids = [cp.send(ApiKey.METADATA, {})[0] for _ in range(3)]
    for cid in reversed(cids):
        cp.receive_data(encode_response(Response(cid, {"error": 0})))
    got = [cp.next_response().correlation_id for _ in cids]  # type: ignore[union-attr]
    assert got == list(reversed(cids)) and not cp.in_flight


def test_oversized_frame_is_refused_before_buffering() -> None:
    dec = FrameDecoder(max_frame_bytes=1000)
    dec.receive_data(struct.pack(">I", 1001))
    with pytest.raises(FrameTooLargeError) as ei:
        dec.next_frame()
    assert ei.value.code == errors.ErrorCode.FRAME_TOO_LARGE


@pytest.mark.parametrize(
    "payload, exc",
    [
        (b"\xc1garbage", MalformedFrameError),
        (msgpack.packb([1, 2, 3]), MalformedFrameError),
        (msgpack.packb([999, 0, 7, "c", {}]), UnknownApiError),
        (msgpack.packb([2, 0, 7, "c", {"acks": "all"}]), errors.ProtocolError),
        (msgpack.packb([2, 5, 7, "c", PRODUCE]), errors.UnsupportedVersionError),  # type: ignore[attr-defined]
    ],
)
def test_bad_requests_get_named_errors(payload: bytes, exc: type) -> None:
    with pytest.raises(exc):
        decode_request(payload)


def test_schema_error_names_the_path() -> None:
    bad = {"acks": 1, "timeout_ms": 1, "topics": [{"name": "t", "partitions": [{"partition": "0"}]}]}
    with pytest.raises(errors.ProtocolError, match=r"topics\[0\]\.partitions\[0\]\.partition"):
        validate_request(ApiKey.PRODUCE, bad)


def test_peek_correlation_id_of_a_bad_body() -> None:
    payload = msgpack.packb([2, 0, 4242, "c", {"acks": None}])
    assert peek_correlation_id(payload) == 4242
    assert peek_correlation_id(b"\xff\xff") == -1


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes_never_crash_the_decoder(data: bytes) -> None:
    dec = FrameDecoder(max_frame_bytes=64)
    dec.receive_data(data)
    while True:
        try:
            frame = dec.next_frame()
        except FrameTooLargeError:
            return
        if frame is NEED_DATA:
            return
        try:
            decode_request(frame)  # type: ignore[arg-type]
        except errors.RafkaError:
            pass


def test_error_classes_are_named_after_codes() -> None:
    e = errors.error_for(6, "leader is 2")
    assert type(e).__name__ == "NotLeaderOrFollowerError" and e.retriable
    assert errors.error_class(36).__name__ == "TopicAlreadyExistsError"
    assert errors.error_class(12345) is errors.error_class(-1)
