"""Fault implementations that need more than a signal or an iptables rule.

* :mod:`.disk` — ``disk-full``: data dirs on per-node tmpfs volumes, filled on demand.
* :mod:`.unfsynced` — ``lose-unfsynced-writes``: a FUSE pass-through that tracks fsynced
  lengths and drops everything else when the node "crashes".

Each exposes a nemesis handler (``setup`` / ``start(fault, targets)`` / ``stop`` / ``heal_all``
/ ``teardown``) that :class:`~chaos_tests.nemesis.NemesisRunner` uses through ``handlers=``.
"""

__all__ = ["disk", "unfsynced"]
