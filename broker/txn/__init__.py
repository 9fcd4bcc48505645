"""Transactions (docs/transactions.md): the coordinator's pure state machine (``state``), the
coordinator (``coordinator``), its marker writer (``markers``) and the partition leaders'
verifier (``verify``)."""
