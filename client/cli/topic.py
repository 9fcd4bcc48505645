"""``rafka topic create|list|describe|delete|alter-config|add-partitions`` — what kafka-topics /
kafka-configs / rpk users look for first.

Theory of operation
-------------------
Each command is a thin layer over one blocking ``client.sync.Admin`` (``_common.sync_admin``):
``create_topic`` (``--if-not-exists``: an existing topic is no error), ``list_topics``,
``describe_topic``, ``delete_topic``, ``alter_configs`` (a value ``None`` removes an override)
and ``create_partitions`` (the new total). ``topic describe --all-configs`` shows every
effective setting: ``effective_configs`` merges the effective config (DESCRIBE_CONFIGS: defaults
and overrides) with the topic's overrides (METADATA) so that defaults are marked — a pure
function, as is ``format_configs``, its text form.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rafka.client.cli._common import command_options, key_value, plural, sync_admin

__all__ = ["topic", "effective_configs", "format_configs"]


@click.group()
def topic() -> None:
    """Create, list, describe and delete topics."""


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


@topic.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=1, show_default=True)
@click.option("--replication-factor", "-r", type=int, default=1, show_default=True)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="A topic NAME already there is no error (left as it is).")
@command_options()
def topic_create(name: str, partitions: int, replication_factor: int, configs: tuple[str, ...],
                 if_not_exists: bool, bootstrap: str) -> None:
    """Create topic NAME."""
    settings = dict(key_value(item, "--config") for item in configs)
    with sync_admin(bootstrap) as admin:
        created = admin.create_topic(name, partitions, replication_factor, settings,
                                     exist_ok=if_not_exists)
    if not created:
        click.echo(f"topic {name} already exists")
        return
    click.echo(f"created topic {name} ({plural(partitions, 'partition')}, replication factor {replication_factor})")


@topic.command("list")
@command_options(json=True)
@click.option("--internal", is_flag=True, help="Include internal topics.")
def topic_list(bootstrap: str, as_json: bool, internal: bool) -> None:
    """List topics."""
    with sync_admin(bootstrap) as admin:
        names = admin.list_topics(include_internal=internal)
    if as_json:
        click.echo(json.dumps(names))
    else:
        for n in names:
            click.echo(n)


@topic.command("describe")
@click.argument("name")
@command_options(json=True)
@click.option("--all-configs", is_flag=True, help="Every effective config, defaults marked (not only overrides).")
def topic_describe(name: str, bootstrap: str, as_json: bool, all_configs: bool) -> None:
    """Leader, replicas, ISR and high watermark of each partition of NAME."""
    with sync_admin(bootstrap) as admin:
        d = admin.describe_topic(name)
        effective = effective_configs(admin.describe_configs(name), d.configs) if all_configs else None
    if as_json:
        click.echo(json.dumps({
            "name": d.name, "topic_id": str(d.topic_id) if d.topic_id is not None else None,
            "internal": d.internal, "configs": d.configs,
            "partitions": [p._asdict() | {"replicas": list(p.replicas), "isr": list(p.isr)}
                           for p in d.partitions],
        } | ({"effective_configs": effective} if effective is not None else {}), default=str))
        return
    click.echo(f"topic {d.name}  partitions {len(d.partitions)}  id {d.topic_id}")
    if effective is not None:
        click.echo("  configs:")
        for line in format_configs(effective):
            click.echo(line)
    elif d.configs:
        click.echo("  configs: " + ", ".join(f"{k}={v}" for k, v in sorted(d.configs.items())))
    click.echo(f"  {'partition':>9}  {'leader':>6}  {'epoch':>5}  {'replicas':<12} {'isr':<12} {'high_watermark':>14}")
    for p in d.partitions:
        hw = "?" if p.high_watermark is None else str(p.high_watermark)
        click.echo(f"  {p.partition:>9}  {p.leader:>6}  {p.leader_epoch:>5}  "
                   f"{','.join(map(str, p.replicas)):<12} {','.join(map(str, p.isr)):<12} {hw:>14}")


@topic.command("delete")
@click.argument("name")
@command_options()
def topic_delete(name: str, bootstrap: str) -> None:
    """Delete topic NAME."""
    with sync_admin(bootstrap) as admin:
        admin.delete_topic(name)
    click.echo(f"deleted topic {name}")


@topic.command("alter-config")
@click.argument("name")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set an override (repeatable).")
@click.option("--delete", "deletes", multiple=True, metavar="KEY",
              help="Remove an override: back to the default (repeatable).")
@command_options()
def topic_alter_config(name: str, sets: tuple[str, ...], deletes: tuple[str, ...], bootstrap: str) -> None:
    """Set or remove per-topic config overrides of NAME."""
    changes: dict[str, str | None] = dict(key_value(item, "--set", strip=True) for item in sets)
    both = sorted(set(changes) & set(deletes))
    if both:
        raise click.UsageError(f"both --set and --delete for {', '.join(both)}")
    changes.update({k: None for k in deletes})
    if not changes:
        raise click.UsageError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    with sync_admin(bootstrap) as admin:
        admin.alter_configs(name, changes)
    for k, v in sorted(changes.items()):
        click.echo(f"{name}: {k} = {v}" if v is not None else f"{name}: {k} back to its default")


@topic.command("add-partitions")
@click.argument("name")
@click.option("--to", "total", type=click.IntRange(1), required=True, metavar="N",
              help="The new total number of partitions (more than now).")
@command_options()
def topic_add_partitions(name: str, total: int, bootstrap: str) -> None:
    """Grow NAME to N partitions (keyed records of existing keys may move to new ones)."""
    with sync_admin(bootstrap) as admin:
        before = len(admin.describe_topic(name).partitions)
        admin.create_partitions(name, total)
    click.echo(f"{name}: {before} → {total} partitions")
