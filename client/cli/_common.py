"""What every ``rafka`` client command shares: options, error lines, output, how it reaches the cluster.

Theory of operation
-------------------
A command is a click function decorated, top to bottom, with its own options, then
``command_options(json=...)``: ``--bootstrap`` and the security options
(``client/connect_options.py``: they run the command with the security settings ambient, so
every client it builds connects with them), ``--json`` when the command can print
machine-readable output, and ``handle_errors`` innermost. ``handle_errors`` turns what a user
can act on — a named ``RafkaError``, ``NotImplementedError``, ``ValueError`` / ``OSError`` — into
one line ``error: CODE: message`` on stderr and exit status 1, and Ctrl-C into 130 (SIGTERM,
``client/terminate.py``: 143); it first unwraps the exception groups trio nurseries raise.
Anything else is a bug and keeps its traceback.

The body reaches the cluster through one of three runners, each opening one client for the
command and closing it before the command prints: ``sync_admin`` (the blocking
``client.sync.Admin``), ``run_admin`` (one ``AsyncAdmin`` in a fresh trio run) or ``run_core``
(one bare ``ClientCore``: the group commands, which use ``client.groups``).

``whole_summaries`` makes the command lists of ``--help`` print each command's whole first
sentence; ``rafka.cli`` applies it once every command group is attached.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rafka.client.connect_options import connection_options
from rafka.client.errors import RafkaError

if TYPE_CHECKING:
    from rafka.client.aio import AsyncAdmin
    from rafka.client.aio._core import ClientCore
    from rafka.client.sync import Admin

__all__ = ["CLIENT_ID", "bootstrap_option", "command_options", "error_line", "fail",
           "handle_errors", "json_option", "key_value", "plural", "run_admin", "run_core",
           "sync_admin", "unwrap_exception", "whole_summaries"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
CLIENT_ID = "rafka-cli"  # the client id every command's connections announce

# --bootstrap and the security options (--security-protocol, --user/--password, --tls-ca,
# --command-config FILE, env vars): client/connect_options.py
bootstrap_option = connection_options
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


# ---------------------------------------------------------------------- errors


def fail(msg: str, code: int = 1) -> None:
    """``error: msg`` on stderr, then exit with ``code``."""
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def unwrap_exception(exc: BaseException) -> BaseException:
    """The one real error inside (nested) exception groups, as trio nurseries wrap them.

    A group of several errors is reduced by dropping ``trio.Cancelled`` (collateral of the
    nursery being cancelled); if exactly one error is left it is returned, else the group.
    """
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if type(e).__name__ != "Cancelled"] or list(exc.exceptions)
        if len(inner) != 1:
            return exc
        exc = inner[0]
    return exc


def error_line(exc: BaseException) -> str | None:
    """``CODE: message`` for the errors a CLI command reports in one line (else None)."""
    if isinstance(exc, RafkaError):
        return f"{exc.code.name}: {exc.message}"
    if isinstance(exc, NotImplementedError):
        return f"not supported: {exc}"
    if isinstance(exc, (ValueError, OSError)):
        return f"{type(exc).__name__}: {exc}"
    return None


def handle_errors(fn: F) -> F:
    """CLI command decorator: errors → one line ``error: CODE: message`` on stderr, exit 1;
    Ctrl-C → exit 130. Unwraps the exception groups trio nurseries raise."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as raised:
            if isinstance(raised, (SystemExit, GeneratorExit)):
                raise
            exc = unwrap_exception(raised)
            if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: 130; SIGTERM (client.terminate): 143
                sys.exit(getattr(exc, "exit_code", 130))
            line = error_line(exc)
            if line is None:
                raise
            fail(line)

    return wrapper  # type: ignore[return-value]


def command_options(*, json: bool = False) -> Callable[[F], F]:
    """The decorators of a client command, in their order: the connection options, ``--json``
    (when the command has machine-readable output) and ``handle_errors`` innermost.

    Put it below the command's own options that ``--help`` lists first, above those it lists
    after ``--json``."""

    def decorate(fn: F) -> F:
        fn = handle_errors(fn)
        if json:
            fn = json_option(fn)
        return bootstrap_option(fn)

    return decorate


# ---------------------------------------------------------------------- input and output


def key_value(item: str, param_hint: str, *, strip: bool = False) -> tuple[str, str]:
    """``KEY=VALUE`` → ``(KEY, VALUE)`` (both stripped of blanks with ``strip``);
    ``click.BadParameter`` naming ``param_hint`` when there is no ``=`` or no key."""
    k, sep, v = item.partition("=")
    if strip:
        k, v = k.strip(), v.strip()
    if not sep or not k:
        raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=param_hint)
    return k, v


def plural(n: int, noun: str) -> str:
    """``1 record``, ``5 records``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def whole_summaries(group: click.Group) -> None:
    """Command lists (``rafka --help``, ``rafka group --help``…) show each command's whole first
    sentence, wrapped, instead of cutting it at the terminal width with "..."."""

    def format_commands(ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    group.format_commands = format_commands  # type: ignore[method-assign]
    for cmd in group.commands.values():
        if isinstance(cmd, click.Group):
            whole_summaries(cmd)


# ---------------------------------------------------------------------- reaching the cluster


def sync_admin(bootstrap: str) -> Admin:
    """A blocking ``Admin`` for ``bootstrap`` (use it as a context manager); the security
    options are ambient (``command_options``)."""
    from rafka.client.sync import Admin

    return Admin(bootstrap)


def run_admin(bootstrap: str, fn: Callable[[AsyncAdmin], Awaitable[T]]) -> T:
    """``await fn(admin)`` with one ``AsyncAdmin`` open for it, in a fresh trio run; a bad
    security setting is a usage error."""
    import trio
    from rafka.client.aio import AsyncAdmin

    try:  # the security options are ambient (client/connect_options.py)
        admin = AsyncAdmin(bootstrap, client_id=CLIENT_ID)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

    async def main() -> T:
        async with admin:
            return await fn(admin)

    return trio.run(main)


def run_core(bootstrap: str, fn: Callable[[ClientCore], Awaitable[T]]) -> T:
    """``await fn(core)`` with one ``ClientCore`` open for it (in its own nursery), in a fresh
    trio run."""
    import trio
    from rafka.client.aio._core import ClientCore
    from rafka.security.client import ClientSecurity

    async def main() -> T:
        async with trio.open_nursery() as nursery:
            core = ClientCore(bootstrap, client_id=CLIENT_ID,
                              security=ClientSecurity.from_kwargs({}))  # the CLI's options
            core.open(nursery)
            try:
                return await fn(core)
            finally:
                await core.aclose()
                nursery.cancel_scope.cancel()

    return trio.run(main)
