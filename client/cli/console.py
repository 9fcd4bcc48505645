"""``rafka console``: serve the web console (``client/console/``) until Ctrl-C.

Theory of operation
-------------------
The command takes the connection options of every client command and runs
``client.console.server.run_console`` in a fresh trio run, with one-line errors
(``_common.handle_errors``); trio and the server load only when it runs.
"""

from __future__ import annotations

import click
from rafka.client.cli._common import bootstrap_option, handle_errors

__all__ = ["console"]


@click.command("console")
@bootstrap_option
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="HTTP port of the console (0: any free port, printed).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to listen on (0.0.0.0 exposes the console: it has no login).")
@click.option("--metrics", default=None, metavar="URL[,URL]", envvar="RAFKA_METRICS",
              help="the nodes' /metrics URLs for the throughput charts (default: every broker's "
                   "client port + 20000, as 'rafka cluster up' assigns).")
@click.option("--interval", "interval_s", default=1.0, show_default=True,
              type=click.FloatRange(0.2, 60), help="seconds between metrics samples.")
def console(bootstrap: str, port: int, host: str, metrics: str | None, interval_s: float) -> None:
    """Web console: cluster and quorum, topics, consumer groups with lag, live throughput."""
    import trio
    from rafka.client.console.server import run_console

    urls = [u.strip() for u in metrics.split(",") if u.strip()] if metrics else None

    @handle_errors
    def serve() -> None:
        trio.run(lambda: run_console(bootstrap, host=host, port=port, metrics=urls, interval_s=interval_s))

    serve()
