"""Short full GC passes in long-lived rafka processes: freeze what start-up created, once; in a
broker node, rare young passes too.

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

**Young passes in a node** (``raise_young_threshold``, called by the broker node only: a client
library does not retune its user's process). CPython 3.11 starts a young (generation 0) pass
once the count of tracked objects allocated minus those freed passes 700. A busy broker keeps a
working set of short-lived request objects that swings past that count many times a second,
although nothing it allocates per request is cyclic garbage (``gc.DEBUG_SAVEALL`` over a 4 s
window of 32 produces in flight collected nothing): each pass walks and promotes the requests in
flight, and they die in generation 1 by reference counting. Measured on the leader at 32
single-record produces in flight: 71 young passes a second at ~175 µs each (~2 % of its CPU);
with the threshold at 7,000, 2 passes in 11.6 s, and 1.7 % less broker CPU per request
(docs/performance.md, "Produce waits without a cancel scope, and rarer young GC passes").
``NODE_YOUNG_THRESHOLD`` is 10,000, above the swings of that load with room for more
connections; cyclic garbage, when some code makes it, waits for at most that many allocations.
``RAFKA_GC_FREEZE=0`` leaves this alone too.
"""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["freeze_startup_objects", "raise_young_threshold", "ENV_SWITCH",
           "NODE_YOUNG_THRESHOLD"]

ENV_SWITCH = "RAFKA_GC_FREEZE"
NODE_YOUNG_THRESHOLD = 10_000

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
        if _switched_off():
            return False
        gc.collect()
        gc.freeze()
        return True


def raise_young_threshold(threshold: int = NODE_YOUNG_THRESHOLD) -> bool:
    """Start young GC passes only after ``threshold`` net allocations (never lowering it; the
    older generations' thresholds are kept), unless ``RAFKA_GC_FREEZE=0``; returns whether the
    threshold is now ``threshold`` or more."""
    if _switched_off():
        return False
    young, middle, old = gc.get_threshold()
    if young < threshold:
        gc.set_threshold(threshold, middle, old)
    return True


def _switched_off() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip() == "0"
