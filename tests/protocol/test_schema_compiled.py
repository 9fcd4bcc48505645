"""The compiled schema checks (``wire/apis.py``) accept exactly the bodies ``_check`` accepts.

``validate_request`` trusts a compiled check's "valid" without asking ``_check``, so a compiled
check that let through one body the reference refuses would hand a handler a body it was
promised could not arrive. Bodies are drawn shaped like each schema, with any node replaced,
now and then, by a value of another type (a bool for an int, None for a required field, a
missing key, a list for a map, ...), so both verdicts occur for every schema.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rafka.wire.apis import (
    _COMPILED,
    SCHEMAS,
    ApiKey,
    MapOf,
    Opt,
    _check,
    compile_spec,
    validate_request,
)
from rafka.wire.errors import ProtocolError

_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=3)
    | st.binary(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)


def _shaped(spec: Any) -> st.SearchStrategy[Any]:
    """Values shaped like ``spec``, any node of which may be something else (1 in 8)."""
    if isinstance(spec, Opt):
        good = st.none() | _shaped(spec.spec)
    elif spec is int:
        good = st.integers(-(2**63), 2**63 - 1)
    elif spec is bytes:
        good = st.binary(max_size=4) | st.binary(max_size=4).map(bytearray) | st.binary(max_size=4).map(memoryview)
    elif spec is bool:
        good = st.booleans()
    elif spec is float:
        good = st.floats(allow_nan=False)
    elif spec is str:
        good = st.text(max_size=4)
    elif isinstance(spec, list):
        good = st.lists(_shaped(spec[0]), max_size=3)
    elif isinstance(spec, MapOf):
        keys = _shaped(spec.key).filter(lambda k: not isinstance(k, list | dict | memoryview))
        good = st.dictionaries(keys | st.integers() | st.none(), _shaped(spec.value), max_size=2)
    elif isinstance(spec, dict):
        fields = {name: _shaped(sub) for name, sub in spec.items()}
        whole = st.fixed_dictionaries(
            {n: s for n, s in fields.items() if not isinstance(spec[n], Opt)},
            optional={n: s for n, s in fields.items() if isinstance(spec[n], Opt)})
        good = whole | whole | whole | st.fixed_dictionaries({}, optional=fields)  # keys missing
    else:
        raise TypeError(spec)
    return st.one_of(good, good, good, good, good, good, good, _ANY)


def _reference_accepts(spec: Any, value: Any) -> bool:
    try:
        _check(spec, value, "body")
    except ProtocolError:
        return False
    return True


@pytest.mark.parametrize("key", sorted(SCHEMAS), ids=lambda k: ApiKey(k).name.lower())
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_check_agrees_with_the_reference(key: ApiKey, data: st.DataObject) -> None:
    spec = SCHEMAS[key]
    body = data.draw(_shaped(spec))
    assert _COMPILED[int(key)](body) is _reference_accepts(spec, body)


def test_both_verdicts_are_exercised() -> None:
    """The strategy reaches valid and invalid bodies (else the agreement test proves little)."""
    seen = set()

    @settings(max_examples=200, deadline=None)
    @given(body=_shaped(SCHEMAS[ApiKey.PRODUCE]))
    def draw(body: Any) -> None:
        seen.add(_reference_accepts(SCHEMAS[ApiKey.PRODUCE], body))

    draw()
    assert seen == {True, False}


@pytest.mark.parametrize(("spec", "value", "ok"), [
    (int, True, False), (int, 3, True), (int, ApiKey.PRODUCE, True), (Opt(int), None, True),
    (bytes, memoryview(b"x"), True), (bytes, "x", False), ({"a": int}, {}, False),
    ({"a": Opt(int)}, {}, True), ({"a": Opt(int)}, {"a": "x"}, False), ([int], (1,), False),
    (MapOf(str, int), {"k": 1}, True), (MapOf(str, int), {1: 1}, False), (float, 1, False),
])
def test_edge_cases(spec: Any, value: Any, ok: bool) -> None:
    assert compile_spec(spec)(value) is ok is _reference_accepts(spec, value)


def test_a_refused_body_still_gets_the_named_error() -> None:
    body = {"acks": -1, "timeout_ms": 1, "topics": [{"name": "t", "partitions": [{"partition": True,
                                                                                   "records": b""}]}]}
    with pytest.raises(ProtocolError, match=r"produce\.topics\[0\]\.partitions\[0\]\.partition: expected int"):
        validate_request(ApiKey.PRODUCE, body)
    with pytest.raises(ProtocolError, match="unknown api key 999"):
        validate_request(999, {})
