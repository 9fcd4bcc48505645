"""``rafka user …`` and ``rafka acl …`` (click commands; docs/security.md).

``client/cli.py`` adds the exported ``user`` and ``acl`` groups to ``rafka``. Each command opens
an ``AsyncAdmin`` and calls ``client.aio.security_admin``. The connection itself may be secured:
``--security-protocol`` (env ``RAFKA_SECURITY_PROTOCOL``), ``--user`` / ``--password``
(``RAFKA_USER`` / ``RAFKA_PASSWORD``), ``--sasl-mechanism``, ``--tls-ca`` (``RAFKA_TLS_CA``),
``--tls-cert`` / ``--tls-key`` — the same as kafka-python's client options.

* ``rafka user create NAME`` asks for the new password (or ``--password-stdin``); the SCRAM
  credential is derived here, the password never leaves this process. ``user list``,
  ``user delete NAME``.
* ``rafka acl add --principal User:alice --topic events --operation write`` (``--group``,
  ``--transactional-id``, ``--cluster``; ``--prefixed``; ``--deny``; ``--host``; several
  ``--operation``), ``acl list`` (any filter), ``acl remove`` (a filter; at least one field).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
import trio

from client.group_cli import _bootstrap, _errors, _json
from security.acl import CLUSTER_NAME, OPERATIONS

__all__ = ["user", "acl", "security_options"]

T = TypeVar("T")


def security_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The client's security options as click options (collected into ``security``)."""
    opts = [
        click.option("--security-protocol", envvar="RAFKA_SECURITY_PROTOCOL", default="PLAINTEXT",
                     show_default=True, type=click.Choice(["PLAINTEXT", "SSL", "SASL_PLAINTEXT",
                                                           "SASL_SSL"], case_sensitive=False)),
        click.option("--user", "sasl_user", envvar="RAFKA_USER", help="SASL user (env RAFKA_USER)."),
        click.option("--password", "sasl_password", envvar="RAFKA_PASSWORD",
                     help="SASL password (env RAFKA_PASSWORD)."),
        click.option("--sasl-mechanism", default="SCRAM-SHA-256", show_default=True,
                     type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"])),
        click.option("--tls-ca", envvar="RAFKA_TLS_CA", help="CA file to verify brokers (env RAFKA_TLS_CA)."),
        click.option("--tls-cert", help="Client certificate (mutual TLS)."),
        click.option("--tls-key", help="Client key (mutual TLS)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _client_options(kw: dict[str, Any]) -> dict[str, Any]:
    proto = kw.pop("security_protocol").upper()
    out: dict[str, Any] = {"security_protocol": proto}
    user, password, mech = kw.pop("sasl_user"), kw.pop("sasl_password"), kw.pop("sasl_mechanism")
    ca, cert, key = kw.pop("tls_ca"), kw.pop("tls_cert"), kw.pop("tls_key")
    if proto.startswith("SASL"):
        out.update(sasl_mechanism=mech, sasl_plain_username=user, sasl_plain_password=password)
    if proto.endswith("SSL"):
        out.update(ssl_cafile=ca, ssl_certfile=cert, ssl_keyfile=key)
    return out


def _run(bootstrap: str, security: dict[str, Any], fn: Callable[[Any], Awaitable[T]]) -> T:
    from client.aio import AsyncAdmin

    try:
        admin = AsyncAdmin(bootstrap, client_id="rafka-cli", **security)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

    async def main() -> T:
        async with admin:
            return await fn(admin)

    return trio.run(main)


@click.group()
def user() -> None:
    """SCRAM users: create, list, delete."""


@user.command("create")
@click.argument("name")
@click.option("--mechanism", default="SCRAM-SHA-256", show_default=True,
              type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512", "both"]))
@click.option("--iterations", default=4096, show_default=True, type=click.IntRange(4096, 16384))
@click.option("--password-stdin", is_flag=True, help="Read the new password from stdin.")
@_bootstrap
@security_options
@_errors
def user_create(name: str, mechanism: str, iterations: int, password_stdin: bool, bootstrap: str,
                **kw: Any) -> None:
    """Create (or change the password of) a user."""
    security = _client_options(kw)
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

    _run(bootstrap, security, go)
    click.echo(f"user {name}: {', '.join(mechs)}")


@user.command("list")
@_bootstrap
@_json
@security_options
@_errors
def user_list(bootstrap: str, as_json: bool, **kw: Any) -> None:
    """Users and their mechanisms (never salts or keys)."""
    found = _run(bootstrap, _client_options(kw), lambda a: a.describe_scram_credentials())
    if as_json:
        click.echo(json.dumps(found))
        return
    for name, mechs in sorted(found.items()):
        click.echo(f"{name}\t" + ", ".join(f"{m} ({i} iterations)" for m, i in sorted(mechs.items())))


@user.command("delete")
@click.argument("name")
@click.option("--mechanism", default="both", show_default=True,
              type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512", "both"]))
@_bootstrap
@security_options
@_errors
def user_delete(name: str, mechanism: str, bootstrap: str, **kw: Any) -> None:
    """Delete a user's credentials."""

    async def go(admin: Any) -> list[str]:
        have = (await admin.describe_scram_credentials([name]))[name]
        mechs = list(have) if mechanism == "both" else [mechanism]
        for m in mechs:
            await admin.delete_scram_credential(name, mechanism=m)
        return mechs

    mechs = _run(bootstrap, _client_options(kw), go)
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
@click.option("--deny", is_flag=True, help="A deny entry (deny wins over allow).")
@_bootstrap
@security_options
@_errors
def acl_add(principal: str | None, topic: str | None, group: str | None, txn: str | None,
            cluster: bool, prefixed: bool, host: str | None, operations: tuple[str, ...],
            deny: bool, bootstrap: str, **kw: Any) -> None:
    """Add entries: PRINCIPAL may (or, with --deny, may not) do OPERATION on a resource."""
    if not principal:
        raise click.UsageError("--principal is required (User:<name> or User:*)")
    rtype, name = _resource(topic, group, txn, cluster, required=True)
    acls = [{"principal": principal, "resource_type": rtype, "resource_name": name,
             "pattern_type": "prefixed" if prefixed else "literal", "operation": op,
             "permission": "deny" if deny else "allow", "host": host or "*"} for op in operations]

    async def go(admin: Any) -> None:
        from client.aio.security_admin import create_acls

        await create_acls(admin, acls)

    _run(bootstrap, _client_options(kw), go)
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
@_bootstrap
@_json
@security_options
@_errors
def acl_list(principal: str | None, topic: str | None, group: str | None, txn: str | None,
             cluster: bool, prefixed: bool, host: str | None, bootstrap: str, as_json: bool,
             **kw: Any) -> None:
    """Entries matching the filters (none: all)."""
    flt = _filter(principal, topic, group, txn, cluster, prefixed, host, required=False)

    async def go(admin: Any) -> list[dict[str, str]]:
        from client.aio.security_admin import describe_acls

        return await describe_acls(admin, **flt)

    _print_acls(_run(bootstrap, _client_options(kw), go), as_json)


@acl.command("remove")
@_resource_options
@click.option("--operation", type=click.Choice(list(OPERATIONS)))
@_bootstrap
@security_options
@_errors
def acl_remove(principal: str | None, topic: str | None, group: str | None, txn: str | None,
               cluster: bool, prefixed: bool, host: str | None, operation: str | None,
               bootstrap: str, **kw: Any) -> None:
    """Remove every entry matching the filters (at least one)."""
    flt = {**_filter(principal, topic, group, txn, cluster, prefixed, host, required=True),
           "operation": operation}

    async def go(admin: Any) -> list[dict[str, str]]:
        from client.aio.security_admin import delete_acls

        return await delete_acls(admin, **flt)

    gone = _run(bootstrap, _client_options(kw), go)
    _print_acls(gone, False)
    click.echo(f"removed {len(gone)} entr{'y' if len(gone) == 1 else 'ies'}")
