"""The ``rafka`` console script: ``rafka server --config PATH`` goes straight to the node.

Theory of operation: ``rafka.cli.main`` is the whole command tree — the client's commands (all
of ``rafka.client``), the node's and the chaos harness's — and importing it costs a process
0.3-0.5 s on a 2-core box (``python -X importtime``; docs/quorum.md, "Run E"). A node process
uses none of the client's commands, and a node restarted after a crash pays that time before
it listens, which after a kill-all delays the quorum's first commit (issue 27). So the plain
``rafka server --config PATH`` (``--config=PATH`` too) calls ``rafka.node.main`` — the same
function the click command calls, with the same arguments — without building the tree; any
other command line (``--help``, a missing or extra option, every other command) goes through
``rafka.cli.main`` exactly as before, with its errors and help.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main", "server_config"]


def server_config(args: Sequence[str]) -> str | None:
    """The config path when ``args`` are exactly ``server --config PATH`` (or ``--config=PATH``)."""
    if len(args) == 3 and args[0] == "server" and args[1] == "--config" and args[2]:
        return args[2]
    if len(args) == 2 and args[0] == "server" and args[1].startswith("--config=") \
            and len(args[1]) > len("--config="):
        return args[1][len("--config="):]
    return None


def main() -> None:
    config = server_config(sys.argv[1:])
    if config is not None:
        from rafka.node import main as node_main

        sys.exit(node_main(["--config", config]))
    from rafka.cli import main as cli_main

    cli_main()
