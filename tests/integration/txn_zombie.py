"""A transactional producer that becomes a zombie, for ``test_zombie_producer_is_fenced``.

    python tests/integration/txn_zombie.py BOOTSTRAP TOPIC TRANSACTIONAL_ID

Opens a transaction, sends ``zombie-before-pause`` (flushed), prints ``{"ev": "sent"}`` and
waits; the test SIGSTOPs it, lets a new instance take the transactional id, and SIGCONTs it.
Then it carries on as a paused process would — more records (to the same partition and to every
other one), then a commit — and prints ``{"ev": "outcome", "error": <exception class or
null>}``. Exit code 0 whatever the outcome; the test judges it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rafka.client.errors import RafkaError  # noqa: E402
from rafka.client.sync import Producer  # noqa: E402


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main() -> None:
    bootstrap, topic, txn_id = sys.argv[1:4]
    p = Producer(bootstrap_servers=bootstrap, transactional_id=txn_id, delivery_timeout_ms=20000)
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, value=b"zombie-before-pause", partition=0)
    p.flush()
    emit(ev="sent")
    time.sleep(2.0)  # paused (SIGSTOP) somewhere in here, resumed after the new instance commits
    error = None
    try:
        for part in range(3):
            p.send(topic, value=b"zombie-after-resume", partition=part)
        p.commit_transaction()
    except RafkaError as exc:
        error = type(exc).__name__
    emit(ev="outcome", error=error)
    try:
        p.close()
    except RafkaError:
        pass


if __name__ == "__main__":
    main()
