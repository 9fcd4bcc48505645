"""Does an answer have the shape of its response type (``wire/responses.py``)? ``conforms``
walks a ``TypedDict`` (or a generic one's alias, ``TopicsResponse[entry]``) against a decoded
body: required keys present, every known key of the right type, unknown keys ignored (newer
brokers may add some). Used by ``test_api_table.py`` and by the opt-in plugin
``tests/protocol/check_answers.py``."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

__all__ = ["conforms"]


def conforms(tp: Any, value: Any, path: str) -> None:
    """Assert ``value`` has the shape of the type ``tp`` (TypedDicts, lists, dicts, unions)."""
    origin = get_origin(tp)
    if tp is Any:
        return
    if is_typeddict(tp) or is_typeddict(origin):  # a TypedDict, or a generic one's alias
        td = origin if is_typeddict(origin) else tp
        bound = dict(zip(getattr(td, "__parameters__", ()), get_args(tp), strict=False))
        assert isinstance(value, dict), f"{path}: expected a map, got {value!r}"
        hints = get_type_hints(td)
        missing = td.__required_keys__ - value.keys()
        assert not missing, f"{path}: missing {sorted(missing)} in {sorted(value)}"
        for k, v in value.items():
            if k in hints:
                hint = hints[k]
                params = getattr(hint, "__parameters__", ())
                if params:  # list[T] of TopicsResponse[X] -> list[X]
                    hint = hint[tuple(bound[p] for p in params)]
                conforms(hint, v, f"{path}.{k}")
    elif origin is list:
        assert isinstance(value, list), f"{path}: expected a list, got {value!r}"
        for i, item in enumerate(value):
            conforms(get_args(tp)[0], item, f"{path}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), f"{path}: expected a map, got {value!r}"
        kt, vt = get_args(tp)
        for k, v in value.items():
            conforms(kt, k, f"{path} key")
            conforms(vt, v, f"{path}[{k!r}]")
    elif origin in (Union, types.UnionType):
        errors = []
        for alt in get_args(tp):
            try:
                conforms(alt, value, path)
                return
            except AssertionError as exc:
                errors.append(str(exc))
        raise AssertionError(" / ".join(errors))
    elif tp is type(None):
        assert value is None, f"{path}: expected None, got {value!r}"
    elif tp is float:
        assert isinstance(value, int | float) and not isinstance(value, bool), f"{path}: {value!r}"
    elif tp is int:
        assert isinstance(value, int) and not isinstance(value, bool), f"{path}: {value!r}"
    else:
        assert isinstance(value, tp), f"{path}: expected {tp}, got {value!r}"
