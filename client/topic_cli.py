"""``rafka topic alter-config|add-partitions``, the effective configs of ``topic describe`` and
``rafka --version`` — what kafka-topics / kafka-configs / rpk users look for first.

``client/cli.py`` calls ``add_topic_commands(topic)`` on its ``topic`` group and uses
``version_option`` on ``rafka``. Each command is a thin layer over ``client.sync.Admin``
(``alter_configs``: a value ``None`` removes an override; ``create_partitions``: the new total),
with ``client.cli.handle_errors`` for one-line errors. ``effective_configs`` merges the
effective config (DESCRIBE_CONFIGS: defaults and overrides) with the topic's overrides
(METADATA) so that the caller can mark which values are defaults.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import click

__all__ = ["effective_configs", "format_configs", "version_option", "rafka_version"]


def rafka_version() -> str:
    """The installed package's version (pyproject.toml), or ``unknown`` outside an install."""
    try:
        return metadata.version("rafka")
    except metadata.PackageNotFoundError:
        return "unknown"


def version_option() -> Any:
    """``rafka --version`` → ``rafka <version>``."""
    return click.version_option(rafka_version(), "--version", "-V", prog_name="rafka",
                                message="%(prog)s %(version)s")


def effective_configs(effective: dict[str, Any], overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """Every effective setting, sorted, with ``default`` true unless the topic overrides it."""
    keys = sorted(set(effective) | set(overrides))
    return [{"name": k, "value": overrides.get(k, effective.get(k)), "default": k not in overrides}
            for k in keys]


def format_configs(rows: list[dict[str, Any]]) -> list[str]:
    """``  name = value  (default)`` lines for ``topic describe``."""
    width = max((len(r["name"]) for r in rows), default=0)
    return [f"    {r['name']:<{width}} = {r['value']}" + ("  (default)" if r["default"] else "")
            for r in rows]


