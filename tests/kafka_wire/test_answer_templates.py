"""Produce answers from patched templates (broker/kafka/answer_templates.py) are byte for byte
what kio writes, for every served version and any shape; other shapes go to kio."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rafka.broker.kafka import codec
from rafka.broker.kafka.answer_templates import MAX_TEMPLATES, ProduceAnswers

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
