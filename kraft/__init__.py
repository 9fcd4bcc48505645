"""rafka's controller quorum (KRaft-style): the Raft engine behind a narrow interface, the
``@metadata`` log store and its snapshots, and the active controller's decisions.

Public entry points: :class:`kraft.service.ControllerService` (the trio service a node runs),
:mod:`rafka.kraft.quorum` (the interface, re-exported here as a whole: its ``__all__`` is this
package's), :mod:`rafka.kraft.memory` (in-memory quorum for tests). The controller's admin APIs
live in ``kraft/*_admin.py`` against :mod:`rafka.kraft.admin_context`. The pysyncobj engine
(:mod:`rafka.kraft.syncobj_engine`) is imported lazily by the service.
"""

from rafka.kraft import quorum as _quorum
from rafka.kraft.quorum import *  # noqa: F403 — the interface; one list of names, in quorum.py

__all__ = list(_quorum.__all__)
