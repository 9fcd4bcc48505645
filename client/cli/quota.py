"""``rafka quota set|list`` — client byte-rate quotas (click commands; docs/security.md, "Quotas").

Theory of operation
-------------------
Each command opens one ``AsyncAdmin`` (``_common.run_admin``) and calls
``rafka.client.aio.quota_admin``. The connection takes the options of every client command
(``client/connect_options.py``) — which is why the quota's user is ``--principal`` (``--user``
is the SASL login, as for ``rafka acl``).

* ``rafka quota set --client-id etl --producer-byte-rate 1048576`` — the entity is
  ``--principal USER`` (``alice`` or ``User:alice``) or ``--default-principal``, and/or
  ``--client-id ID`` or ``--default-client-id`` (``--default`` is ``--default-client-id``:
  every client id without a quota of its own, on every listener); the values are
  ``--producer-byte-rate N`` / ``--consumer-byte-rate N`` in bytes per second, ``none`` removes
  one. Kafka's precedence decides which entity applies to a connection (security/quota.py).
* ``rafka quota list [--principal U] [--client-id C] [--usage] [--json]`` — the configured
  quotas; ``--usage`` adds what each broker measured (bytes per window, throttled answers).
"""

from __future__ import annotations

import json
from typing import Any

import click
from rafka.client.cli._common import command_options, run_admin

__all__ = ["quota"]

_DEFAULT = "<default>"


class _Rate(click.ParamType):
    name = "BYTES/S|none"

    def convert(self, value: Any, param: Any, ctx: Any) -> float | str:
        if isinstance(value, int | float):
            return float(value)
        if str(value).lower() == "none":
            return "none"
        try:
            rate = float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of bytes per second (or 'none')", param, ctx)
        if not rate > 0:
            self.fail(f"the byte rate must be positive, got {value}", param, ctx)
        return rate


def _entity(principal: str | None, default_principal: bool, client_id: str | None,
            default_client_id: bool) -> tuple[str | None, str | None]:
    if principal is not None and default_principal:
        raise click.UsageError("give --principal or --default-principal, not both")
    if client_id is not None and default_client_id:
        raise click.UsageError("give --client-id or --default-client-id (--default), not both")
    user = _DEFAULT if default_principal else principal
    client = _DEFAULT if default_client_id else client_id
    if user is None and client is None:
        raise click.UsageError("name the entity: --principal USER, --client-id ID, "
                               "--default-principal or --default-client-id (--default)")
    return user, client


@click.group()
def quota() -> None:
    """Byte-rate quotas per user principal / client id: set, list."""


@quota.command("set")
@click.option("--principal", help="The user: alice or User:alice (Kafka's --user).")
@click.option("--default-principal", is_flag=True, help="The default for every user.")
@click.option("--client-id", help="The client id.")
@click.option("--default-client-id", "--default", "default_client_id", is_flag=True,
              help="The default for every client id.")
@click.option("--producer-byte-rate", type=_Rate(), help="Bytes/s produced, or 'none' to remove.")
@click.option("--consumer-byte-rate", type=_Rate(), help="Bytes/s fetched, or 'none' to remove.")
@command_options()
def quota_set(principal: str | None, default_principal: bool, client_id: str | None,
              default_client_id: bool, producer_byte_rate: float | str | None,
              consumer_byte_rate: float | str | None, bootstrap: str) -> None:
    """Set (or remove) the byte-rate quotas of one entity."""
    user, client = _entity(principal, default_principal, client_id, default_client_id)
    values = {k: None if v == "none" else v for k, v in (("producer_byte_rate", producer_byte_rate),
                                                         ("consumer_byte_rate", consumer_byte_rate))
              if v is not None}
    if not values:
        raise click.UsageError("give --producer-byte-rate and/or --consumer-byte-rate")

    async def go(admin: Any) -> None:
        from rafka.client.aio.quota_admin import alter_client_quotas

        await alter_client_quotas(admin, [{"user": user, "client_id": client, "values": values}])

    run_admin(bootstrap, go)
    click.echo(_line({"user": user, "client_id": client, "values": values}))


def _line(entry: dict[str, Any]) -> str:
    who = " ".join(f"{k}={entry[k]}" for k in ("user", "client_id") if entry.get(k) is not None)
    vals = " ".join(f"{k}={'none' if v is None else f'{v:g}'}" for k, v in sorted(entry["values"].items()))
    return f"{who}\t{vals}"


@quota.command("list")
@click.option("--principal", help="Only this user (exact; alice or User:alice).")
@click.option("--client-id", help="Only this client id (exact).")
@click.option("--usage", is_flag=True, help="Also what each broker measured.")
@command_options(json=True)
def quota_list(principal: str | None, client_id: str | None, usage: bool, bootstrap: str,
               as_json: bool) -> None:
    """The configured quotas (and, with --usage, each broker's measurements)."""

    async def go(admin: Any) -> tuple[list[dict[str, Any]], dict[int, Any]]:
        from rafka.client.aio.quota_admin import client_quota_usage, describe_client_quotas

        entries = await describe_client_quotas(admin, user=principal, client_id=client_id)
        return entries, (await client_quota_usage(admin) if usage else {})

    entries, measured = run_admin(bootstrap, go)
    if as_json:
        click.echo(json.dumps({"entries": entries, **({"usage": measured} if usage else {})}))
        return
    for e in entries:
        click.echo(_line(e))
    for node, trackers in measured.items():
        for t in trackers:
            windows = t["window_bytes"]
            rate = sum(b for _, b in windows) * 1000 / (t["window_ms"] * max(len(windows), 1))
            click.echo(f"broker {node}\t{t['kind']} {'/'.join(t['entity'])}\tquota {t['quota']:g} B/s"
                       f"\tmeasured ~{rate:.0f} B/s\tthrottled {t['throttle_count']} answers, "
                       f"{t['throttle_time_ms_total']} ms")
