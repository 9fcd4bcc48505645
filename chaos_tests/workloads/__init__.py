"""Workloads: logical client processes that drive a real rafka cluster and record a history.

* :mod:`.queue` — idempotent ``acks=all`` producers, ``assign`` consumers, group consumers with
  commits, and the final catch-up reads (Jepsen's Kafka queue workload).
* :mod:`.metadata` — topic create/delete during faults, verified by describe after the heal.
* :mod:`.txn` — transactional writers, read_committed / read_uncommitted readers and an
  exactly-once consume-transform-produce pipeline (``--workload txn``).
* :mod:`.common` — run context, op recording rules, definite-vs-indefinite error classes.
"""

from .common import RunContext, classify_error
from .metadata import MetadataSpec, metadata_process, verify_topics
from .queue import QueueSpec, create_queue_topic, final_reads, groups_available, run_queue
from .txn import TxnSpec, create_txn_topics, run_txn, txn_final_reads

__all__ = [
    "RunContext",
    "classify_error",
    "MetadataSpec",
    "metadata_process",
    "verify_topics",
    "QueueSpec",
    "create_queue_topic",
    "final_reads",
    "groups_available",
    "run_queue",
    "TxnSpec",
    "create_txn_topics",
    "run_txn",
    "txn_final_reads",
]
