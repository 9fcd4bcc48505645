"""Settings primitives every package parses with: the named config error and HOST:PORT.

Theory of operation: a node's config (``broker.config``) and a listener's security settings
(``security.listener``) are checked by different packages, but a wrong value must read the same
to the operator wherever it was caught: ``ConfigError`` names the file and the key, and
``parse_hostport`` says what it expected. They live in the leaf package so that ``security``
need not import the broker to report a bad setting.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "parse_hostport"]


class ConfigError(Exception):
    """A node config is wrong: ``.key`` names the setting and ``.source`` the file."""

    def __init__(self, source: str, key: str, message: str) -> None:
        self.source = source
        self.key = key
        super().__init__(f"{source}: {key}: {message}")


def parse_hostport(value: Any) -> tuple[str, int]:
    """'host:port' → (host, port); ValueError with a readable message."""
    if not isinstance(value, str):
        raise ValueError(f"expected \"HOST:PORT\", got {value!r}")
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected \"HOST:PORT\", got {value!r}")
    return host.strip("[]"), int(port)
