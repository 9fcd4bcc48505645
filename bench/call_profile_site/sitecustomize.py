"""Injected into bench node processes by ``bench/call_profile.py`` (``PYTHONPATH``), never by rafka.

Theory of operation: when ``RAFKA_CALL_PROFILE_DIR`` is set, the main thread (the node's trio
thread) gets a ``cProfile.Profile`` timed by ``time.thread_time`` (its CPU, not the wall clock)
and two signal handlers: ``SIGUSR1`` enables it, ``SIGUSR2`` disables it and writes the stats
to ``$RAFKA_CALL_PROFILE_DIR/<pid>.prof``. The driver brackets the measured window with them.
The call counts are exact; the times carry the profiler's own overhead (several times the
unprofiled CPU of a small function), so only their shares mean something.
"""

from __future__ import annotations

import os
import threading

if os.environ.get("RAFKA_CALL_PROFILE_DIR") and threading.current_thread() is threading.main_thread():
    import cProfile
    import signal
    import time
    from types import FrameType

    _profile = cProfile.Profile(time.thread_time)

    def _enable(_sig: int, _frame: FrameType | None) -> None:
        _profile.enable()

    def _dump(_sig: int, _frame: FrameType | None) -> None:
        _profile.disable()
        _profile.dump_stats(os.path.join(os.environ["RAFKA_CALL_PROFILE_DIR"], f"{os.getpid()}.prof"))

    signal.signal(signal.SIGUSR1, _enable)
    signal.signal(signal.SIGUSR2, _dump)
