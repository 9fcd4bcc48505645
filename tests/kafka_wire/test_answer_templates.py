"""Produce answers from patched templates (broker/kafka/answer_templates.py) are byte for byte
what kio writes, for every served version and any shape; other shapes go to kio."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.broker.kafka import codec
from rafka.broker.kafka.answer_templates import MAX_TEMPLATES, FetchAnswers, ProduceAnswers

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ERRORS = st.sampled_from([0, 0, 0, 3, 6, 7, 19, 45, 46, -1])


def _kio(version: int, cid: int, answer: dict[str, Any]) -> bytes:
    entity = codec.build(codec.response_schema(0, version), answer)
    return bytes(codec.encode_response(0, version, cid, entity))


@st.composite
def answers(draw: Any, odd: bool = False) -> dict[str, Any]:
    names = draw(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3, unique=True))
    responses = []
    for name in names:
        idx = draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=4, unique=True))
        prs = []
        for i in idx:
            odd_one = odd and draw(st.booleans())
            prs.append({
                "index": i, "error_code": draw(ERRORS), "base_offset": draw(I64),
                "log_append_time": (datetime.datetime(2026, 11, 28, tzinfo=datetime.UTC)
                                    if odd_one else None),
                "log_start_offset": draw(I64), "record_errors": (),
                "error_message": draw(st.none() | st.text(max_size=20)) if odd else None})
        responses.append({"name": name, "partition_responses": prs})
    return {"responses": responses, "throttle_time": draw(st.integers(0, 2**31 - 1))}


@settings(max_examples=150, deadline=None)
@given(version=st.integers(3, 9), cid=st.integers(-(2**31), 2**31 - 1), first=answers(),
       data=st.data())
def test_a_templated_answer_is_what_kio_writes(version: int, cid: int, first: dict[str, Any],
                                               data: Any) -> None:
    pa = ProduceAnswers()
    assert pa.encode(version, cid, first) in (None, _kio(version, cid, first))
    # a second answer of the same shape, other numbers: from the template (v5+) and equal
    second = {"throttle_time": data.draw(st.integers(0, 2**31 - 1)), "responses": [
        {"name": t["name"], "partition_responses": [
            {**p, "base_offset": data.draw(I64), "log_start_offset": data.draw(I64)}
            for p in t["partition_responses"]]} for t in first["responses"]]}
    frame = pa.encode(version, cid ^ 1, second)
    if version >= 5:  # log_start_offset exists from v5: every number is patchable there
        assert frame is not None and pa.hits == 2
    if frame is not None:
        assert frame == _kio(version, cid ^ 1, second)


@settings(max_examples=60, deadline=None)
@given(version=st.integers(3, 9), answer=answers(odd=True))
def test_answers_with_a_message_or_append_time_go_to_kio_or_match(version: int,
                                                                  answer: dict[str, Any]) -> None:
    pa = ProduceAnswers()
    frame = pa.encode(version, 5, answer)
    odd = any(p["error_message"] is not None or p["log_append_time"] is not None
              for t in answer["responses"] for p in t["partition_responses"])
    if odd:
        assert frame is None
    elif frame is not None:
        assert frame == _kio(version, 5, answer)


def test_the_template_cache_is_bounded() -> None:
    pa = ProduceAnswers()
    for i in range(MAX_TEMPLATES + 10):
        pa.encode(9, i, {"throttle_time": 0, "responses": [{"name": f"t{i}", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": i, "log_append_time": None,
             "log_start_offset": 0, "record_errors": (), "error_message": None}]}]})
    assert len(pa._templates) <= MAX_TEMPLATES


FETCH_ERRORS = st.sampled_from([0, 0, 0, 1, 3, 6, 74, 75])


@st.composite
def fetch_answers(draw: Any) -> dict[str, Any]:
    """A Fetch answer as ``file_records.frame_with_files`` hands it to the template: records
    are a 16-byte sentinel or empty."""
    names = draw(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3, unique=True))
    n = 0
    responses = []
    for name in names:
        parts = []
        for i in draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=3, unique=True)):
            records = b""
            if draw(st.booleans()):
                records, n = b"\xfe\xedrafka-file" + n.to_bytes(4, "big"), n + 1
            parts.append({"partition_index": i, "error_code": draw(FETCH_ERRORS),
                          "high_watermark": draw(I64), "last_stable_offset": draw(I64),
                          "log_start_offset": draw(I64),
                          "aborted_transactions": draw(st.sampled_from([None, []])),
                          "preferred_read_replica": draw(st.integers(-1, 2**31 - 1)),
                          "records": records})
        responses.append({"topic": name, "partitions": parts})
    return {"throttle_time": draw(st.integers(0, 2**31 - 1)), "error_code": draw(FETCH_ERRORS),
            "session_id": draw(st.integers(0, 2**31 - 1)), "responses": responses}


def _kio_fetch(version: int, cid: int, answer: dict[str, Any]) -> bytes:
    entity = codec.build(codec.response_schema(1, version), answer)
    return bytes(codec.encode_response(1, version, cid, entity))


@settings(max_examples=120, deadline=None)
@given(version=st.integers(4, 12), cid=st.integers(-(2**31), 2**31 - 1), first=fetch_answers(),
       data=st.data())
def test_a_templated_fetch_answer_is_what_kio_writes(version: int, cid: int,
                                                     first: dict[str, Any], data: Any) -> None:
    fa = FetchAnswers()
    assert fa.encode(version, cid, first) in (None, _kio_fetch(version, cid, first))
    second = {**first, "throttle_time": data.draw(st.integers(0, 2**31 - 1)),
              "session_id": data.draw(st.integers(0, 2**31 - 1)), "responses": [
                  {"topic": t["topic"], "partitions": [
                      {**p, "high_watermark": data.draw(I64), "last_stable_offset": data.draw(I64),
                       "log_start_offset": data.draw(I64),
                       "preferred_read_replica": data.draw(st.integers(-1, 2**31 - 1))}
                      for p in t["partitions"]]} for t in first["responses"]]}
    frame = fa.encode(version, cid ^ 1, second)
    assert frame is not None and fa.hits == 2  # every number is patchable in every version
    assert frame == _kio_fetch(version, cid ^ 1, second)


def test_fetch_answers_with_aborted_transactions_or_records_go_to_kio() -> None:
    fa = FetchAnswers()
    part = {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
            "log_start_offset": 0, "preferred_read_replica": -1}
    aborted = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{**part, "aborted_transactions": [
            {"producer_id": 7, "first_offset": 1}], "records": b""}]}]}
    assert fa.encode(12, 1, aborted) is None
    records = {**aborted, "responses": [{"topic": "t", "partitions": [
        {**part, "aborted_transactions": None, "records": b"x" * 100}]}]}
    assert fa.encode(12, 1, records) is None  # only a sentinel, never real records, in a key
