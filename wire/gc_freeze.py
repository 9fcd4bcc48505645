"""Short full GC passes in long-lived rafka processes: freeze what start-up created, once.

Theory of operation
-------------------
CPython's cyclic collector makes a full (generation 2) pass once enough objects have survived
into its oldest generation, and that pass walks every tracked object of the process. Most of
them are what start-up created and will live as long as the process: modules, classes,
functions, a broker's loaded state. On the 2-vCPU VM a full pass over a process that has just
imported ``rafka.client`` (~33k objects) takes 8–30 ms, and the consumer process of the e2e
bench (``bench/bench_replication.py``) made one such pass per 3 s run: every record that
arrived meanwhile waited for it, which alone set the run's p99 (docs/performance.md, "End-to-end
latency and CPU steal").

``freeze_startup_objects()`` collects once (so no garbage gets frozen) and then moves every
surviving object to the permanent generation (``gc.freeze()``): later full passes walk only
what was created since. Frozen objects are still freed by reference counting as usual; only a
reference cycle among them that becomes garbage later is never collected, which bounds the cost
by what existed at start-up.

The broker node calls it once it is up (``rafka/node.py``), a client when it opens its
connections (``ClientCore.open``). Once per process: later calls do nothing, so a program that
opens clients again and again never freezes its own later garbage. ``RAFKA_GC_FREEZE=0`` in the
environment turns it off (for a program that manages the collector itself).
"""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["freeze_startup_objects", "ENV_SWITCH"]

ENV_SWITCH = "RAFKA_GC_FREEZE"

_lock = threading.Lock()
_done = False


def freeze_startup_objects() -> bool:
    """Collect, then freeze every tracked object, the first time it is called in this process
    (unless ``RAFKA_GC_FREEZE=0``); returns whether this call froze."""
    global _done
    with _lock:
        if _done:
            return False
        _done = True
        if os.environ.get(ENV_SWITCH, "1").strip() == "0":
            return False
        gc.collect()
        gc.freeze()
        return True
