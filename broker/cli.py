"""The node-side commands of the ``rafka`` CLI: ``rafka server`` and ``rafka cluster up/down``.

``client/cli.py`` owns the ``rafka`` group and adds these with ``main.add_command(server)`` /
``main.add_command(cluster)``. Errors users can fix (a bad config, a busy port, a cluster that
does not come up) print one line naming the problem and exit non-zero; never a traceback.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import click

from broker.cluster import (
    ClusterError,
    bootstrap,
    cluster_down,
    cluster_up,
    is_running,
    parse_overrides,
    stop_nodes,
)

__all__ = ["server", "cluster"]


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="the node's TOML config (docs/internals.md §3)")
def server(config_path: str) -> None:
    """Run one node (roles, ids, addresses, data dir, quorum voters from the config)."""
    from broker.node import main as node_main

    sys.exit(node_main(["--config", config_path]))


@click.group()
def cluster() -> None:
    """A self-contained local quorum cluster of combined nodes."""


@cluster.command("up")
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option("--data-dir", default="./rafka-data", show_default=True, type=click.Path(file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9092, show_default=True, type=click.IntRange(1, 65535),
              help="node i listens on PORT+i-1 (clients) and PORT+10000+i-1 (Raft)")
@click.option("--detach", is_flag=True, help="return once the cluster is ready")
@click.option("--ready-timeout", default=60.0, show_default=True, help="seconds to wait for readiness")
@click.option("--broker-config", "broker_config", multiple=True, metavar="KEY=VALUE",
              help="a [broker] setting for every node (repeatable), e.g. replica.lag.time.max.ms=2000")
@click.option("--controller-config", "controller_config", multiple=True, metavar="KEY=VALUE",
              help="a [controller] setting for every node (repeatable)")
def up(nodes: int, data_dir: str, host: str, port: int, detach: bool, ready_timeout: float,
       broker_config: tuple[str, ...], controller_config: tuple[str, ...]) -> None:
    """Start (or restart) the cluster in DATA_DIR; print the bootstrap string."""
    d = Path(data_dir)
    try:
        state = cluster_up(d, nodes, host, port, ready_timeout_s=ready_timeout,
                           echo=lambda m: click.echo(m, err=True),
                           broker_config=parse_overrides(broker_config, "broker"),
                           controller_config=parse_overrides(controller_config, "controller"))
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(bootstrap(state))
    if detach:
        return
    click.echo("cluster running; Ctrl-C stops it", err=True)
    stop = {"now": False}

    def on_signal(_sig: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop["now"]:
        time.sleep(0.2)
        if not any(is_running(n) for n in state["nodes"]):
            click.echo("every node has exited", err=True)
            break
    click.echo("stopping the cluster...", err=True)
    stopped = stop_nodes(d.resolve(), state)
    click.echo(f"stopped node(s) {', '.join(map(str, stopped)) or '-'}", err=True)


@cluster.command("down")
@click.option("--data-dir", default="./rafka-data", show_default=True, type=click.Path(file_okay=False))
@click.option("--timeout", default=30.0, show_default=True, help="seconds before SIGKILL")
def down(data_dir: str, timeout: float) -> None:
    """Stop a detached cluster cleanly (SIGTERM, then SIGKILL after --timeout)."""
    try:
        stopped = cluster_down(Path(data_dir), timeout)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"stopped node(s) {', '.join(map(str, stopped)) or '-'}" if stopped
               else "no node was running")
