"""The ``rafka`` command tree: every command is where users (and docs) expect it and its help
renders — the guard for moving CLI code between modules (issue 22: ``client/cli/``).

In process (click's CliRunner), no cluster. The tree is written out below: a command added,
renamed or lost in a move fails here and must be changed here on purpose.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner
from rafka.client.cli import main as client_main

from rafka.cli import main as rafka_main

# the client's commands (rafka.client.cli): group → subcommands ("" for a plain command)
CLIENT_TREE = {
    "acl": {"add", "list", "remove"},
    "broker": {"decommission", "unregister"},
    "console": set(),
    "consume": set(),
    "group": {"delete", "describe", "lag", "list", "reset-offsets"},
    "partition": {"delete-records", "reassign"},
    "produce": set(),
    "quorum": {"add-voter", "describe", "remove-voter"},
    "quota": {"list", "set"},
    "top": set(),
    "topic": {"add-partitions", "alter-config", "create", "delete", "describe", "list"},
    "transactions": {"abort", "describe", "list", "producers"},
    "user": {"create", "delete", "list"},
}
# what the composition root (rafka/cli.py) attaches besides
NODE_TREE = {"server": set(), "cluster": {"down", "up"}}
# the commands that print machine-readable output (the module docstring of client/cli promises
# it for list / describe)
JSON_COMMANDS = {("topic", "list"), ("topic", "describe"), ("group", "list"), ("group", "lag"),
                 ("group", "describe"), ("group", "reset-offsets"), ("transactions", "list"),
                 ("transactions", "describe"), ("transactions", "producers"),
                 ("transactions", "abort"), ("user", "list"), ("acl", "list"), ("quota", "list"),
                 ("quorum", "describe"), ("partition", "reassign"), ("partition", "delete-records"),
                 ("broker", "decommission")}
CONNECTION_OPTIONS = {"--bootstrap", "--command-config", "--timeout", "--security-protocol",
                      "--user", "--password-file", "--password", "--sasl-mechanism", "--tls-ca",
                      "--tls-cert", "--tls-key"}


def _tree(group: click.Group) -> dict[str, set[str]]:
    ctx = click.Context(group)
    out: dict[str, set[str]] = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        out[name] = set(cmd.list_commands(click.Context(cmd))) if isinstance(cmd, click.Group) else set()
    return out


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            yield from _leaves(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def _options(cmd: click.Command) -> set[str]:
    return {opt for p in cmd.params if isinstance(p, click.Option) for opt in p.opts}


def test_the_client_command_tree() -> None:
    """``rafka.client.cli`` alone, in a fresh interpreter (``rafka.cli`` adds the node's and the
    chaos harness's commands to the same group object)."""
    code = textwrap.dedent("""
        import json, click
        from rafka.client.cli import main
        ctx = click.Context(main)
        cmds = {n: main.get_command(ctx, n) for n in main.list_commands(ctx)}
        print(json.dumps({n: c.list_commands(click.Context(c)) if isinstance(c, click.Group) else []
                          for n, c in cmds.items()}))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert {k: set(v) for k, v in json.loads(r.stdout).items()} == CLIENT_TREE


def test_the_rafka_command_adds_the_node_and_chaos_commands() -> None:
    tree = _tree(rafka_main)
    assert {k: v for k, v in tree.items() if k in CLIENT_TREE} == CLIENT_TREE
    assert {k: tree.get(k) for k in NODE_TREE} == NODE_TREE
    assert set(tree) - set(CLIENT_TREE) - set(NODE_TREE) <= {"chaos"}  # optional: chaos_tests


@pytest.mark.parametrize("path", [(), *[(g,) for g in sorted(CLIENT_TREE)],
                                  *[(g, c) for g in sorted(CLIENT_TREE) for c in sorted(CLIENT_TREE[g])]],
                         ids=lambda p: " ".join(p) or "rafka")
def test_every_help_renders(path: tuple[str, ...]) -> None:
    r = CliRunner().invoke(rafka_main, [*path, "--help"], terminal_width=100, prog_name="rafka")
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"Usage: rafka {' '.join(path)}".rstrip()), r.output
    assert "Options:" in r.output and "-h, --help" in r.output


def test_client_commands_take_the_connection_options_and_list_describe_take_json() -> None:
    for path, cmd in _leaves(client_main):
        if path[0] not in CLIENT_TREE:  # the node's and chaos commands, when rafka.cli is loaded
            continue
        opts = _options(cmd)
        if path == ("top",):  # reads /metrics; --bootstrap only finds the endpoints
            assert "--bootstrap" in opts
            continue
        assert CONNECTION_OPTIONS <= opts, (path, CONNECTION_OPTIONS - opts)
        assert ("--json" in opts) == (path in JSON_COMMANDS), path


@pytest.mark.parametrize("group", ["", *sorted(g for g, sub in CLIENT_TREE.items() if sub)])
def test_command_lists_show_whole_summaries(group: str) -> None:
    """A command list wraps a long first sentence instead of cutting it with '...'."""
    r = CliRunner().invoke(rafka_main, [*filter(None, [group]), "--help"], terminal_width=60)
    assert "..." not in r.output.split("Commands:", 1)[1], r.output


def test_version() -> None:
    r = CliRunner().invoke(rafka_main, ["--version"])
    assert r.exit_code == 0 and r.output.startswith("rafka ")
