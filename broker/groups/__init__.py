"""The broker side of consumer groups: committed offsets in ``__consumer_offsets``.

* :mod:`rafka.broker.groups.offsets` — ``GroupOffsetsManager``: offset commit / fetch, the group
  admin APIs (list, describe, delete, alter offsets) and the transactional offset commits, on
  the broker that leads the group's ``__consumer_offsets`` partition;
* :mod:`rafka.broker.groups.offsets_cache` — the pure in-memory view of one led partition
  (loaded by replaying it, then kept by the commits this broker appends).

Group membership and assignment are the controller's (:mod:`rafka.kraft.groups`); this package
only stores and serves what members commit. It sits beside :mod:`rafka.broker.txn`, the other
coordinator of an internal topic; what the two share (placement, leadership, the per-epoch
state table, the replay) is :mod:`rafka.broker.internal_topic`. Metrics read the manager through
``GroupOffsetsManager.statistics()``.
"""
