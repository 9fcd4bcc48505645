"""The node-side commands of the ``rafka`` CLI: ``rafka server`` and ``rafka cluster up/down``.

``rafka/cli.py`` (the composition root) adds these to the client's ``rafka`` group with
``main.add_command(server)`` / ``main.add_command(cluster)``. Errors users can fix (a bad config, a busy port, a cluster that
does not come up) print one line naming the problem and exit non-zero; never a traceback.

A foreground ``cluster up`` stops its nodes however it ends: SIGINT, SIGTERM or SIGHUP (while
starting they interrupt the start, which then stops what it started), the reader of its stdout
gone (``rafka cluster up | tee log`` after ``tee`` exited: seen as POLLERR on the pipe), or
every node exiting. Its messages survive a closed pipe (``_say``), so a dead reader cannot kill
it before the nodes are down; if it is SIGKILLed, the nodes' parent-death signal stops them.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Any

import click

from rafka.cluster import (
    ClusterError,
    bootstrap,
    cluster_down,
    cluster_up,
    is_running,
    load_cluster,
    parse_overrides,
    stop_nodes,
)

__all__ = ["server", "cluster"]


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="the node's TOML config (docs/internals.md §3)")
def server(config_path: str) -> None:
    """Run one node (roles, ids, addresses, data dir, quorum voters from the config)."""
    from rafka.node import main as node_main

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
@click.option("--tls", is_flag=True,
              help="a throw-away CA and node certificates in DATA_DIR/tls; every node gets a TLS "
                   "listener on PORT+30000+i-1 (docs/security.md)")
@click.option("--auth", is_flag=True,
              help="SCRAM on that listener, ACLs (default deny) and a super user admin whose "
                   "password goes to DATA_DIR/admin.properties (mode 0600)")
def up(nodes: int, data_dir: str, host: str, port: int, detach: bool, ready_timeout: float,
       broker_config: tuple[str, ...], controller_config: tuple[str, ...], tls: bool,
       auth: bool) -> None:
    """Start (or restart) the cluster in DATA_DIR; print the bootstrap string (with --tls or
    --auth: the secured listeners, and how to connect)."""
    d = Path(data_dir)
    try:
        overrides = {"broker_config": parse_overrides(broker_config, "broker"),
                     "controller_config": parse_overrides(controller_config, "controller"),
                     "tls": tls, "auth": auth}
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if detach:
        try:
            state = cluster_up(d, nodes, host, port, ready_timeout_s=ready_timeout, echo=_say, **overrides)
        except ClusterError as exc:
            raise click.ClickException(str(exc)) from None
        _say(bootstrap(state), err=False)
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):  # while starting: as a Ctrl-C
        signal.signal(sig, signal.default_int_handler)
    try:
        state = cluster_up(d, nodes, host, port, ready_timeout_s=ready_timeout, echo=_say,
                           die_with_parent=True, **overrides)
    except BaseException as exc:  # a failed or interrupted start stops what it started
        _stop_quietly(d)
        if isinstance(exc, ClusterError):
            raise click.ClickException(str(exc)) from None
        if isinstance(exc, SystemExit):
            raise
        sys.exit(130)
    _supervise(d, state)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _say(message: str, err: bool = True) -> None:
    """``click.echo`` that a closed pipe or a hung-up terminal cannot break."""
    try:
        click.echo(message, err=err)
    except OSError:  # BrokenPipeError, EIO
        pass


def _stdout_gone() -> bool:
    """True once nobody reads our stdout pipe any more (POLLERR on a pipe's write end)."""
    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR / POLLHUP are always reported
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


def _stop_quietly(d: Path) -> None:
    """Stop whatever nodes the cluster in ``d`` has running (after an interrupted start); a
    second signal meanwhile is ignored so that the stop completes."""
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    try:
        state = load_cluster(d.resolve())
    except ClusterError:
        return
    if state is not None:
        stopped = stop_nodes(d.resolve(), state)
        _say(f"stopped node(s) {', '.join(map(str, stopped)) or '-'}")


def _supervise(d: Path, state: dict[str, Any]) -> None:
    """Print the bootstrap string, wait for a reason to stop, stop the nodes."""
    why: list[str] = []

    def on_signal(sig: int, _frame: object) -> None:
        why.append(signal.Signals(sig).name)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, on_signal)
    _say(bootstrap(state), err=False)
    _say("cluster running; Ctrl-C stops it")
    while not why:
        time.sleep(0.2)
        if _stdout_gone():
            why.append("stdout closed")
        elif not any(is_running(n) for n in state["nodes"]):
            _say("every node has exited")
            break
    _say(f"stopping the cluster ({why[0]})..." if why else "stopping the cluster...")
    stopped = stop_nodes(d.resolve(), state)
    _say(f"stopped node(s) {', '.join(map(str, stopped)) or '-'}")
    if why and why[0] == "stdout closed":  # nothing more can be written there; no flush error at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


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
