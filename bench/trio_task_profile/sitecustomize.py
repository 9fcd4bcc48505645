"""Injected into bench node processes by ``bench/task_profile.py`` (``PYTHONPATH``), never by rafka.

Theory of operation: when ``RAFKA_TASK_PROFILE_DIR`` is set, ``trio.run`` is wrapped so that
every run gets a ``trio.abc.Instrument`` counting, per task name, the steps and their thread CPU
(``time.thread_time``), and the scheduler's I/O waits (all, and those with a timeout > 0: the
ones that may block). About once a second (at an I/O wait) the totals are written atomically
to ``$RAFKA_TASK_PROFILE_DIR/<pid>.json``; the driver diffs two snapshots.
"""

from __future__ import annotations

import os

if os.environ.get("RAFKA_TASK_PROFILE_DIR"):
    import json
    import time
    from typing import Any

    import trio

    _real_run = trio.run

    class _TaskProfile(trio.abc.Instrument):
        def __init__(self) -> None:
            self.steps: dict[str, int] = {}
            self.cpu: dict[str, float] = {}
            self.io_waits = 0
            self.io_blocking = 0
            self._t = 0.0
            self._last = time.monotonic()
            self._path = os.path.join(os.environ["RAFKA_TASK_PROFILE_DIR"], f"{os.getpid()}.json")

        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            self._t = time.thread_time()

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            name = task.name
            self.steps[name] = self.steps.get(name, 0) + 1
            self.cpu[name] = self.cpu.get(name, 0.0) + time.thread_time() - self._t

        def before_io_wait(self, timeout: float) -> None:
            self.io_waits += 1
            if timeout > 0:
                self.io_blocking += 1
            now = time.monotonic()
            if now - self._last > 1.0:
                self._last = now
                with open(self._path + ".tmp", "w") as f:
                    json.dump({"steps": self.steps, "cpu": self.cpu, "io_waits": self.io_waits,
                               "io_blocking": self.io_blocking}, f)
                os.replace(self._path + ".tmp", self._path)

    def _run(*args: Any, **kwargs: Any) -> Any:
        kwargs["instruments"] = [*kwargs.get("instruments", ()), _TaskProfile()]
        return _real_run(*args, **kwargs)

    trio.run = _run
