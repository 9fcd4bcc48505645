"""The ``rafka`` entry point: the composition root attaches every package's commands to one group.

Theory of operation: ``rafka.client.cli.main`` is the client's command group (topics, produce,
consume, groups, security, quotas, top, console); this module adds the node's commands
(``server``, ``cluster``: ``rafka.node_cli``) and the chaos harness's (``chaos``:
``rafka.chaos_tests.cli``, optional in a client-only install), then makes every command list
show whole summaries. The client package never imports the node or the chaos harness — only
this root knows all three — so ``client`` stays importable on its own and the package graph
keeps no cycle (``tests/test_layering.py``).

``rafka`` (the console script) and ``python -m rafka`` both run ``main``.
"""

from __future__ import annotations

import click

from rafka.client.cli import main, whole_summaries

__all__ = ["main"]


def _add_node_commands(group: click.Group) -> None:
    try:
        from rafka.node_cli import cluster, server  # the broker engineer's commands
    except ImportError as exc:  # a client-only install
        missing = str(exc)

        @group.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
        def server() -> None:
            """Run one node (not available in this build)."""
            raise click.ClickException(f"the broker is not available: {missing}")

        @group.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
        def cluster() -> None:
            """Start/stop a local cluster (not available in this build)."""
            raise click.ClickException(f"the broker is not available: {missing}")

        return
    group.add_command(server, "server")
    group.add_command(cluster, "cluster")


def _add_chaos_commands(group: click.Group) -> None:
    try:  # `rafka chaos ...` (chaos_tests/, optional in a client-only install)
        from rafka.chaos_tests.cli import chaos
    except ImportError:  # pragma: no cover
        return
    group.add_command(chaos)


_add_node_commands(main)
_add_chaos_commands(main)
whole_summaries(main)

if __name__ == "__main__":  # pragma: no cover
    main()
