"""Transactions (docs/transactions.md): the coordinator's pure state machine (``state``), the
coordinator (``coordinator``), its marker writer (``markers``) and the partition leaders'
verifier (``verify``). What the coordinator shares with the group offsets manager, the other
coordinator of an internal topic, is :mod:`rafka.broker.internal_topic`."""
