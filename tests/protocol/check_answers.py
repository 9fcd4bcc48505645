"""Opt-in pytest plugin: check every answer a ``wire.connection.Connection`` receives in this
test process against its response type in the API table (``wire/api_table.py``).

``pytest -p tests.protocol.check_answers tests/broker tests/groups …``: any answer that does
not conform is listed at the end and fails the session. Answers to requests made in other
processes (clusters started by the CLI) are not seen. Not on by default: it wraps
``Connection.send_request`` / ``send_request_nowait`` / ``PendingResponse.wait``.
"""

from __future__ import annotations

from typing import Any

import pytest
from rafka.wire import connection as c
from rafka.wire.api_table import spec_of

from tests.protocol.conformance import conforms

_keys: dict[int, int] = {}  # id(PendingResponse) -> api key
_mismatches: dict[str, None] = {}
_checked = [0]

_send_request = c.Connection.send_request
_send_request_nowait = c.Connection.send_request_nowait
_wait = c.PendingResponse.wait


def _check(api_key: int, body: Any) -> None:
    spec = spec_of(api_key)
    if spec is None:
        return
    _checked[0] += 1
    try:
        conforms(spec.response, body, spec.key.name)
    except AssertionError as exc:
        _mismatches[str(exc)[:500]] = None


async def send_request(self: c.Connection, api_key: int, body: dict[str, Any]) -> c.PendingResponse:
    pending = await _send_request(self, api_key, body)
    _keys[id(pending)] = int(api_key)
    return pending


def send_request_nowait(self: c.Connection, api_key: int, body: dict[str, Any]) -> c.PendingResponse | None:
    pending = _send_request_nowait(self, api_key, body)
    if pending is not None:
        _keys[id(pending)] = int(api_key)
    return pending


async def wait(self: c.PendingResponse) -> Any:
    resp = await _wait(self)
    key = _keys.pop(id(self), None)
    if key is not None:
        _check(key, resp.body)
    return resp


c.Connection.send_request = send_request  # type: ignore[method-assign]
c.Connection.send_request_nowait = send_request_nowait  # type: ignore[method-assign]
c.PendingResponse.wait = wait  # type: ignore[method-assign]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"check_answers: {_checked[0]} answers checked, "
                                f"{len(_mismatches)} not of their response type")
    for msg in _mismatches:
        terminalreporter.write_line(f"  {msg}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if _mismatches:
        session.exitstatus = 1
