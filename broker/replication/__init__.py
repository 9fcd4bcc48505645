"""Partition replication (issue 4): leader-side replica state, follower truncation, purgatories
and the replica fetcher.

* ``epochs``    — pure KIP-101/279 arithmetic: the leader's diverging-epoch check and the
                  follower's truncation offset.
* ``state``     — ``LeaderState``: the leader's pure replica state machine (follower progress,
                  high watermark, ISR shrink/expand via AlterPartition, ``acks=all`` outcome).
* ``purgatory`` — trio waiters: delayed produce (HW passes an offset) and delayed fetch.
* ``leader``    — the glue the broker calls: ``LeaderReplica`` (fetch handling for followers
                  and consumers, produce checks, AlterPartition round trips).
* ``fetcher``   — ``ReplicaFetcherManager``: one fetcher task per (this broker → leader) link.
"""
