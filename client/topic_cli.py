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

__all__ = ["add_topic_commands", "effective_configs", "format_configs", "version_option", "rafka_version"]


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


def _parse_sets(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        out[k.strip()] = v.strip()
    return out


def add_topic_commands(topic: click.Group, bootstrap_option: Any, handle_errors: Any) -> None:
    """Register ``alter-config`` and ``add-partitions`` on the ``rafka topic`` group."""

    @topic.command("alter-config")
    @click.argument("name")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set an override (repeatable).")
    @click.option("--delete", "deletes", multiple=True, metavar="KEY",
                  help="Remove an override: back to the default (repeatable).")
    @bootstrap_option
    @handle_errors
    def topic_alter_config(name: str, sets: tuple[str, ...], deletes: tuple[str, ...], bootstrap: str) -> None:
        """Set or remove per-topic config overrides of NAME."""
        from rafka.client.sync import Admin

        changes: dict[str, str | None] = dict(_parse_sets(sets))
        both = sorted(set(changes) & set(deletes))
        if both:
            raise click.UsageError(f"both --set and --delete for {', '.join(both)}")
        changes.update({k: None for k in deletes})
        if not changes:
            raise click.UsageError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
        with Admin(bootstrap) as admin:
            admin.alter_configs(name, changes)
        for k, v in sorted(changes.items()):
            click.echo(f"{name}: {k} = {v}" if v is not None else f"{name}: {k} back to its default")

    @topic.command("add-partitions")
    @click.argument("name")
    @click.option("--to", "total", type=click.IntRange(1), required=True, metavar="N",
                  help="The new total number of partitions (more than now).")
    @bootstrap_option
    @handle_errors
    def topic_add_partitions(name: str, total: int, bootstrap: str) -> None:
        """Grow NAME to N partitions (keyed records of existing keys may move to new ones)."""
        from rafka.client.sync import Admin

        with Admin(bootstrap) as admin:
            before = len(admin.describe_topic(name).partitions)
            admin.create_partitions(name, total)
        click.echo(f"{name}: {before} → {total} partitions")
