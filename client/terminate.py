"""SIGTERM as a Ctrl-C for the long-running client commands (``rafka consume``).

A consumer stopped with SIGTERM (``kill``, systemd, a container stop) must leave its group and
commit as it does on Ctrl-C, instead of staying a member until its session times out. Inside
``sigterm_as_interrupt()`` the first SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) in
the main thread, so the same ``with`` blocks unwind — the blocking clients run their trio loop
in a thread of their own, the main thread only waits on them; later SIGTERMs are ignored until
the block is left, so the close they are waiting for is not cut short. The CLI's error handling
(``rafka.client.cli._common.handle_errors``) turns ``Terminated`` into exit status 143
(128 + SIGTERM), as a shell would report the signal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["Terminated", "sigterm_as_interrupt"]


class Terminated(KeyboardInterrupt):
    """Raised by the SIGTERM handler of ``sigterm_as_interrupt``."""

    exit_code = 128 + signal.SIGTERM


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``Terminated`` once (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(_sig: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the close this starts is not interrupted
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
