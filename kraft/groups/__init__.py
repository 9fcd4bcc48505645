"""The consumer-group coordinator (KIP-848 style): server-side assignment decided by the active
controller and recorded as metadata, committed offsets stored by brokers in ``__consumer_offsets``.

* :mod:`rafka.kraft.groups.assignor` — the pure sticky, balanced assignor.
* :mod:`rafka.kraft.groups.coordinator` — the pure group state machine (heartbeat → response + records).
* :mod:`rafka.kraft.groups.service` — the active controller's glue (session tracker, expiry loop).

The broker side — offset commit/fetch and the group admin APIs — runs on the broker that leads a
group's ``__consumer_offsets`` partition, so it lives in :mod:`rafka.broker.groups`.
"""
