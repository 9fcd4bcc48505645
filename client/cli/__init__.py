"""The client commands of ``rafka`` (``rafka.cli`` adds ``server`` / ``cluster`` / ``chaos``).

Theory of operation
-------------------
``main`` is the ``rafka`` click group; each command group lives in a module of its own and is
attached here: ``topic`` (create, list, describe, delete, alter-config, add-partitions),
``io`` (``produce``, ``consume``), ``quorum``, ``group``, ``txn`` (``transactions``),
``security`` (``user``, ``acl``), ``quota``, ``partition`` (``partition``, ``broker``),
``top`` and ``console``. What they share — the connection options, ``--json``, one-line
errors and the runners that open a client — is ``_common``. The library the commands call
(``client.sync``, ``client.aio``, ``client.groups``, ``client.reset_plan``…) never imports
this package.

Every client command takes ``--bootstrap`` (env ``RAFKA_BOOTSTRAP``, default 127.0.0.1:9092)
and the security options (``client/connect_options.py``: ``--security-protocol``, ``--user`` /
``--password``, ``--tls-ca``, ``--command-config FILE``, their env vars);
``list`` / ``describe`` take ``--json``. Errors print one line to stderr —
``error: <ERROR_CODE>: <message>`` — and exit with status 1 (no tracebacks); Ctrl-C exits 130.

A new command: a click command in the module of its group (a new group: a new module here,
attached below), decorated with ``_common.command_options``; its help and name then show in
``rafka --help`` (``tests/client/test_cli_help.py`` lists the command tree).
"""

from __future__ import annotations

from importlib import metadata

import click
from rafka.client.cli._common import whole_summaries
from rafka.client.cli.console import console
from rafka.client.cli.group import group
from rafka.client.cli.io import consume, produce
from rafka.client.cli.partition import broker, partition
from rafka.client.cli.quorum import quorum
from rafka.client.cli.quota import quota
from rafka.client.cli.security import acl, user
from rafka.client.cli.top import top
from rafka.client.cli.topic import topic
from rafka.client.cli.txn import transactions

__all__ = ["main", "rafka_version", "whole_summaries"]


def rafka_version() -> str:
    """The installed package's version (pyproject.toml), or ``unknown`` outside an install."""
    try:
        return metadata.version("rafka")
    except metadata.PackageNotFoundError:
        return "unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(rafka_version(), "--version", "-V", prog_name="rafka", message="%(prog)s %(version)s")
def main() -> None:
    """rafka — a Kafka-style distributed commit log."""


for _command in (topic, produce, consume, quorum, group, transactions, user, acl, quota, partition,
                 broker, top, console):
    main.add_command(_command)
del _command
