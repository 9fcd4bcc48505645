"""``rafka user …`` and ``rafka acl …`` (click commands; docs/security.md).

Theory of operation
-------------------
Each command opens one ``AsyncAdmin`` (``_common.run_admin``) and calls
``rafka.client.aio.security_admin``. The connection itself may be secured with the options
every client command takes (``client/connect_options.py``: ``--security-protocol``, ``--user`` /
``--password``, ``--tls-ca``, ``--command-config FILE``, env vars).

* ``rafka user create NAME`` asks for the new password (or ``--password-stdin``); the SCRAM
  credential is derived here, the password never leaves this process. ``user list``,
  ``user delete NAME``.
* ``rafka acl add --allow User:alice --topic events --operation write`` (or ``--principal``;
  ``--deny User:bob``; ``--group``,
  ``--transactional-id``, ``--cluster``; ``--prefixed``; ``--deny``; ``--host``; several
  ``--operation``), ``acl list`` (any filter), ``acl remove`` (a filter; at least one field).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click
from rafka.client.cli._common import command_options, run_admin
from rafka.security.acl import CLUSTER_NAME, OPERATIONS

__all__ = ["user", "acl"]


@click.group()
def user() -> None:
    """SCRAM users: create, list, delete."""


@user.command("create")
@click.argument("name")
@click.option("--mechanism", default="SCRAM-SHA-256", show_default=True,
              type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512", "both"]))
@click.option("--iterations", default=4096, show_default=True, type=click.IntRange(4096, 16384))
@click.option("--password-stdin", is_flag=True, help="Read the new password from stdin.")
@command_options()
def user_create(name: str, mechanism: str, iterations: int, password_stdin: bool, bootstrap: str) -> None:
    """Create (or change the password of) a user."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt(f"password for {name}", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password must not be empty")
    mechs = ["SCRAM-SHA-256", "SCRAM-SHA-512"] if mechanism == "both" else [mechanism]

    async def go(admin: Any) -> None:
        for m in mechs:
            await admin.upsert_scram_credential(name, password, mechanism=m, iterations=iterations)

    run_admin(bootstrap, go)
    click.echo(f"user {name}: {', '.join(mechs)}")


@user.command("list")
@command_options(json=True)
def user_list(bootstrap: str, as_json: bool) -> None:
    """Users and their mechanisms (never salts or keys)."""
    found = run_admin(bootstrap, lambda a: a.describe_scram_credentials())
    if as_json:
        click.echo(json.dumps(found))
        return
    for name, mechs in sorted(found.items()):
        click.echo(f"{name}\t" + ", ".join(f"{m} ({i} iterations)" for m, i in sorted(mechs.items())))


@user.command("delete")
@click.argument("name")
@click.option("--mechanism", default="both", show_default=True,
              type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512", "both"]))
@command_options()
def user_delete(name: str, mechanism: str, bootstrap: str) -> None:
    """Delete a user's credentials."""

    async def go(admin: Any) -> list[str]:
        have = (await admin.describe_scram_credentials([name]))[name]
        mechs = list(have) if mechanism == "both" else [mechanism]
        for m in mechs:
            await admin.delete_scram_credential(name, mechanism=m)
        return mechs

    mechs = run_admin(bootstrap, go)
    click.echo(f"deleted {name}: {', '.join(mechs)}")


@click.group()
def acl() -> None:
    """Access control entries: add, list, remove (checked on listeners with authorizer = true)."""


def _resource(topic: str | None, group: str | None, txn: str | None, cluster: bool,
              required: bool) -> tuple[str | None, str | None]:
    given = [(t, n) for t, n in (("topic", topic), ("group", group), ("transactional_id", txn),
                                 ("cluster", CLUSTER_NAME if cluster else None)) if n is not None]
    if len(given) > 1:
        raise click.UsageError("give one of --topic, --group, --transactional-id, --cluster")
    if not given:
        if required:
            raise click.UsageError("give one of --topic, --group, --transactional-id, --cluster")
        return None, None
    return given[0]


def _resource_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed([
        click.option("--principal", help="User:<name> or User:*."),
        click.option("--topic"), click.option("--group"),
        click.option("--transactional-id", "txn"),
        click.option("--cluster", is_flag=True, help="The cluster resource."),
        click.option("--prefixed", is_flag=True, help="The name is a prefix."),
        click.option("--host", help="Client IP address (default: any, '*')."),
    ]):
        fn = opt(fn)
    return fn


def _print_acls(acls: list[dict[str, str]], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(acls))
        return
    for a in acls:
        click.echo(f"{a['permission'].upper():5} {a['principal']} {a['operation']} "
                   f"{a['resource_type']}:{a['pattern_type']}:{a['resource_name']} from {a['host']}")


@acl.command("add")
@_resource_options
@click.option("--operation", "operations", multiple=True, required=True,
              type=click.Choice(list(OPERATIONS)), help="Repeatable.")
@click.option("--allow", "allow", metavar="PRINCIPAL",
              help="Allow PRINCIPAL (as --principal; Kafka's --allow-principal).")
@click.option("--deny", "deny", is_flag=False, flag_value="", default=None, metavar="[PRINCIPAL]",
              help="A deny entry (deny wins over allow); may name the principal.")
@command_options()
def acl_add(principal: str | None, topic: str | None, group: str | None, txn: str | None,
            cluster: bool, prefixed: bool, host: str | None, operations: tuple[str, ...],
            allow: str | None, deny: str | None, bootstrap: str) -> None:
    """Add entries: PRINCIPAL may (or, with --deny, may not) do OPERATION on a resource.

    --allow User:alice is --principal User:alice; --deny User:bob is
    --principal User:bob --deny."""
    named = [p for p in (principal, allow, deny) if p]
    if allow is not None and deny is not None:
        raise click.UsageError("give --allow or --deny, not both")
    if len(named) != 1:
        raise click.UsageError("name one principal: --allow User:<name>, --deny User:<name> or "
                               "--principal User:<name> (User:* for anyone)")
    principal = named[0]
    rtype, name = _resource(topic, group, txn, cluster, required=True)
    acls = [{"principal": principal, "resource_type": rtype, "resource_name": name,
             "pattern_type": "prefixed" if prefixed else "literal", "operation": op,
             "permission": "deny" if deny is not None else "allow", "host": host or "*"} for op in operations]

    async def go(admin: Any) -> None:
        from rafka.client.aio.security_admin import create_acls

        await create_acls(admin, acls)

    run_admin(bootstrap, go)
    _print_acls(acls, False)  # type: ignore[arg-type]


def _filter(principal: str | None, topic: str | None, group: str | None, txn: str | None,
            cluster: bool, prefixed: bool, host: str | None, required: bool) -> dict[str, Any]:
    rtype, name = _resource(topic, group, txn, cluster, required=False)
    flt = {"principal": principal, "resource_type": rtype, "resource_name": name, "host": host,
           "pattern_type": "prefixed" if prefixed else ("literal" if name else None)}
    if required and not any(flt.values()):
        raise click.UsageError("give at least one filter (--principal, --topic, ...)")
    return flt


@acl.command("list")
@_resource_options
@command_options(json=True)
def acl_list(principal: str | None, topic: str | None, group: str | None, txn: str | None,
             cluster: bool, prefixed: bool, host: str | None, bootstrap: str, as_json: bool) -> None:
    """Entries matching the filters (none: all)."""
    flt = _filter(principal, topic, group, txn, cluster, prefixed, host, required=False)

    async def go(admin: Any) -> list[dict[str, str]]:
        from rafka.client.aio.security_admin import describe_acls

        return await describe_acls(admin, **flt)

    _print_acls(run_admin(bootstrap, go), as_json)


@acl.command("remove")
@_resource_options
@click.option("--operation", type=click.Choice(list(OPERATIONS)))
@command_options()
def acl_remove(principal: str | None, topic: str | None, group: str | None, txn: str | None,
               cluster: bool, prefixed: bool, host: str | None, operation: str | None,
               bootstrap: str) -> None:
    """Remove every entry matching the filters (at least one)."""
    flt = {**_filter(principal, topic, group, txn, cluster, prefixed, host, required=True),
           "operation": operation}

    async def go(admin: Any) -> list[dict[str, str]]:
        from rafka.client.aio.security_admin import delete_acls

        return await delete_acls(admin, **flt)

    gone = run_admin(bootstrap, go)
    _print_acls(gone, False)
    click.echo(f"removed {len(gone)} entr{'y' if len(gone) == 1 else 'ies'}")
