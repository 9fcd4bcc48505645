"""An exactly-once consume → transform → produce loop, for the transaction integration tests.

    python tests/integration/txn_pipeline.py BOOTSTRAP GROUP IN_TOPIC OUT_TOPIC TRANSACTIONAL_ID
        [--session-ms N] [--max-records N] [--max-idle-s S]
        [--crash-txn K --crash-phase {sent,offsets,committed}]

Reads IN_TOPIC in group GROUP with ``isolation_level="read_committed"`` and auto-commit off; for
every poll it opens a transaction, sends ``b"t:" + value`` (same key) to OUT_TOPIC for each input
record, adds the consumed positions with ``send_offsets_to_transaction`` and commits. A crash at
any point leaves either the whole transaction (outputs *and* input offsets) or none of it, so a
restarted instance (same transactional id: ``init_transactions`` fences the old one and aborts
what it left open) re-reads exactly the uncommitted input.

``--crash-txn K --crash-phase P`` makes the process SIGKILL itself in its K-th transaction
(1-based): ``sent`` after the records were sent (flushed) but before the offsets, ``offsets``
after ``send_offsets_to_transaction`` but before the commit, ``committed`` right after
``commit_transaction`` returned. Lines on stdout (JSON, flushed): ``{"ev": "ready"}`` after
``init_transactions``, ``{"ev": "commit", "n": records}`` after each commit, ``{"ev": "idle"}``
when it stops for lack of input.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rafka.client.sync import Consumer, Producer  # noqa: E402


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def crash_here() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("group")
    ap.add_argument("in_topic")
    ap.add_argument("out_topic")
    ap.add_argument("transactional_id")
    ap.add_argument("--session-ms", type=int, default=2000)
    ap.add_argument("--max-records", type=int, default=50)
    ap.add_argument("--max-idle-s", type=float, default=None)
    ap.add_argument("--crash-txn", type=int, default=0)
    ap.add_argument("--crash-phase", choices=["sent", "offsets", "committed"], default="sent")
    args = ap.parse_args()

    # init first: it completes (or aborts) whatever the previous incarnation left, so the
    # offsets the consumer then fetches already include a commit that was decided before a crash
    producer = Producer(bootstrap_servers=args.bootstrap, transactional_id=args.transactional_id)
    producer.init_transactions()
    consumer = Consumer(args.in_topic, bootstrap_servers=args.bootstrap, group_id=args.group,
                        enable_auto_commit=False, auto_offset_reset="earliest",
                        isolation_level="read_committed", session_timeout_ms=args.session_ms)
    emit(ev="ready")
    txns = 0
    idle_since = time.monotonic()
    while True:
        batch = consumer.poll(timeout_ms=300, max_records=args.max_records)
        if not any(batch.values()):
            if args.max_idle_s is not None and time.monotonic() - idle_since > args.max_idle_s:
                emit(ev="idle")
                break
            continue
        idle_since = time.monotonic()
        txns += 1
        crash = args.crash_txn == txns
        producer.begin_transaction()
        n = 0
        for records in batch.values():
            for r in records:
                producer.send(args.out_topic, value=b"t:" + (r.value or b""), key=r.key)
                n += 1
        if crash and args.crash_phase == "sent":
            producer.flush()
            crash_here()
        positions = {tp: records[-1].offset + 1 for tp, records in batch.items() if records}
        producer.send_offsets_to_transaction(positions, consumer.group_metadata())
        if crash and args.crash_phase == "offsets":
            crash_here()
        producer.commit_transaction()
        emit(ev="commit", n=n)
        if crash and args.crash_phase == "committed":
            crash_here()
    producer.close()
    consumer.close()


if __name__ == "__main__":
    main()
