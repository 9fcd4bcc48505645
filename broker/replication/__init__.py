"""Partition replication (issue 4): leader-side replica state, follower truncation and the
replica fetcher.

* ``epochs``    — pure KIP-101/279 arithmetic: the leader's diverging-epoch check and the
                  follower's truncation offset.
* ``state``     — ``LeaderState``: the leader's pure replica state machine (follower progress,
                  high watermark, ISR shrink/expand via AlterPartition, ``acks=all`` outcome).
* ``fetcher``   — ``ReplicaFetcherManager``: one fetcher task per (this broker → leader) link.

The glue lives in ``broker/partition.py`` (``Partition``: leader state, HW ∧ durable end,
produce outcome, AlterPartition requests tied to the state that asked, and the events that
parked produce requests and fetches wait on — Kafka's purgatories), ``broker/replica_manager.py``
(ISR timer, AlterPartition sender, follower group commit) and ``broker/handlers/data.py``.
Durability guarantee: ``docs/durability.md``.
"""
