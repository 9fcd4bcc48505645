"""rafka's controller quorum (KRaft-style): the Raft engine behind a narrow interface, the
``@metadata`` log store and its snapshots, and the active controller's decisions.

Public entry points: :class:`kraft.service.ControllerService` (the trio service a node runs),
:mod:`rafka.kraft.quorum` (the interface), :mod:`rafka.kraft.memory` (in-memory quorum for tests).
The pysyncobj engine (:mod:`rafka.kraft.syncobj_engine`) is imported lazily by the service.
"""

from rafka.kraft.quorum import (
    Command,
    Guard,
    LeadershipEvent,
    LogEntry,
    MetadataQuorum,
    OffsetOutOfRange,
    ProposeResult,
    Snapshot,
)

__all__ = [
    "Command",
    "Guard",
    "LeadershipEvent",
    "LogEntry",
    "MetadataQuorum",
    "OffsetOutOfRange",
    "ProposeResult",
    "Snapshot",
]
