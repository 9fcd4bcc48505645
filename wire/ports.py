"""A local cluster's port layout: where node i's other listeners sit relative to its client port.

``rafka cluster up --port P`` gives node i (1-based) its client listener at ``P+i-1``, its Raft
port at ``P+RAFT_PORT_OFFSET+i-1`` and its Prometheus ``/metrics`` at
``P+METRICS_PORT_OFFSET+i-1``, and its Kafka-protocol listener at ``P+KAFKA_PORT_OFFSET+i-1``
(secured: ``P+KAFKA_SECURE_PORT_OFFSET+i-1``).
Tools that find a local cluster's other ports from its client
ports (``rafka top``, the console) read the same constants, so they live in the leaf package.
"""

from __future__ import annotations

__all__ = ["RAFT_PORT_OFFSET", "METRICS_PORT_OFFSET", "KAFKA_PORT_OFFSET", "KAFKA_SECURE_PORT_OFFSET"]

RAFT_PORT_OFFSET = 10000
METRICS_PORT_OFFSET = 20000  # node i serves Prometheus metrics on PORT+20000+i-1 (broker/metrics.py)
KAFKA_PORT_OFFSET = 5000  # node i's Kafka-protocol listener: PORT+5000+i-1 (docs/kafka-compat.md)
# node i's secured Kafka listener (cluster up --tls/--auth): PORT+15000+i-1 — below the kernel's
# ephemeral range like the others (free_port_block), so no outgoing connection can hold it as
# its source port when the node binds (it sat at PORT+35000 once: EADDRINUSE in a CI run)
KAFKA_SECURE_PORT_OFFSET = 15000
