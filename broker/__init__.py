"""The data broker: partitions on disk, their replication, and the requests that reach them.

A broker is the process that holds partition replicas. It learns everything about the cluster
— topics, replica sets, leaders and epochs, ISRs, fenced brokers, ACLs, quotas, groups — only by
tailing the controller quorum's ``@metadata`` log; it never asks another broker who leads what.

Reading order (each module opens with its theory of operation):

* ``server`` — the trio TCP listener: frames in, ``Dispatch`` called, replies out (sendfile from
  the page cache for fetches); the wire vocabulary itself is the leaf package ``rafka.wire``;
* ``handlers/`` — which code answers which API key (``handlers/__init__.py``), and the handlers:
  ``data`` (produce, fetch, list offsets), ``metadata_api``, ``admin`` (forwarding to the active
  controller), ``coordinator`` (find coordinator), ``txn_data``, ``security_api``, ``reassign_api``;
* ``metadata_listener`` — tails ``@metadata`` into immutable images (``rafka.metadata``) and
  publishes them; ``replica_manager`` — applies each image to the partitions this broker hosts
  (become leader / follower, group commit, retention, compaction);
* ``partition`` — one replica: its ``log.PartitionLog``, high watermark, waiters; ``replication/``
  — the pure leader state machine (``state``), divergence checks by leader epoch (``epochs``)
  and the follower's fetcher (``fetcher``);
* ``groups/`` and ``txn/`` — the two coordinators of internal topics (committed offsets in
  ``__consumer_offsets``, transaction state in ``__transaction_state``), run by the broker that
  leads the key's partition; ``read_barrier`` proves a coordinator still leads before it answers
  from memory;
* ``lifecycle`` — register, heartbeat, unfence, controlled shutdown (KIP-631);
  ``controller_channel`` — requests to whichever controller is active;
* ``config``, ``metrics``, ``events`` (the chaos checker's facts), ``error_map`` (storage
  exceptions → wire error codes).

The broker imports ``wire``, ``log``, ``metadata``, ``security`` and the controller's pure
helpers in ``kraft``; nothing in those imports the broker back (``tests/test_layering.py``). A node
process — broker, controller or both — is assembled in the composition root, ``rafka/node.py``.
"""
