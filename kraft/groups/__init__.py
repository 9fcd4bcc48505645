"""The consumer-group coordinator (KIP-848 style): server-side assignment decided by the active
controller and recorded as metadata, committed offsets stored by brokers in ``__consumer_offsets``.

* :mod:`kraft.groups.assignor` — the pure sticky, balanced assignor.
* :mod:`kraft.groups.coordinator` — the pure group state machine (heartbeat → response + records).
* :mod:`kraft.groups.service` — the active controller's glue (session tracker, expiry loop).
* :mod:`kraft.groups.offsets` — the broker side: offset commit/fetch and the group admin APIs.
"""
