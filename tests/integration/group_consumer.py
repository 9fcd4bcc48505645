"""A tiny group consumer for integration tests and the docs walkthrough: prints JSON lines.

    python tests/integration/group_consumer.py BOOTSTRAP GROUP TOPIC [--session-ms N]
        [--commit-every N] [--max-idle-s S]

Uses the blocking ``client.sync.Consumer`` (iteration + ``commit(offsets)``), the at-least-once
pattern: each record is printed (processed) *before* the commit that covers it; the offsets
committed are exactly those printed (offset of the last printed record + 1). Lines (one JSON object
each, flushed at once)::

    {"ev": "assigned", "tps": [[topic, p], ...], "member": id, "epoch": e}   # on_partitions_assigned
    {"ev": "revoked", "tps": [...]} / {"ev": "lost", "tps": [...]}
    {"ev": "rec", "t": topic, "p": p, "o": offset, "v": value}
    {"ev": "commit", "offsets": [[topic, p, offset], ...]}                   # after commit() returned
    {"ev": "commit_failed", "error": "CODE: message"}

Runs until killed (or ``--max-idle-s`` without records).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rafka.client.errors import RafkaError  # noqa: E402
from rafka.client.sync import Consumer  # noqa: E402
from rafka.client.types import TopicPartition  # noqa: E402

_out = threading.Lock()


def emit(**fields: object) -> None:
    line = json.dumps(fields) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


def main() -> None:
    # Ctrl-C (the test's interrupt()) must leave the group even when this process was started
    # with SIGINT ignored: a suite run from a background job of a non-interactive shell
    # (`script &`, nohup) passes SIG_IGN down, and Python then installs no KeyboardInterrupt
    # handler — the consumer went on consuming and interrupt() timed out after 30 s (the
    # fresh-clone failure that got issue 27 reverted).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("group")
    ap.add_argument("topic")
    ap.add_argument("--session-ms", type=int, default=3000)
    ap.add_argument("--commit-every", type=int, default=20)
    ap.add_argument("--max-idle-s", type=float, default=None)
    args = ap.parse_args()

    consumer: Consumer | None = None

    def member() -> tuple[str, int]:
        m = consumer._async._coordinator if consumer is not None else None  # type: ignore[union-attr]
        return (getattr(m, "member_id", ""), getattr(m, "member_epoch", -1))

    def assigned(tps: set) -> None:
        with lock:
            owned.update(tps)
        mid, epoch = member()
        emit(ev="assigned", tps=sorted([tp.topic, tp.partition] for tp in tps), member=mid, epoch=epoch)

    processed: dict = {}  # TopicPartition -> offset after the last printed record
    owned: set = set()  # as the rebalance callbacks said
    lock = threading.Lock()

    def revoked(tps: set) -> None:
        with lock:
            for tp in tps:
                processed.pop(tp, None)
                owned.discard(tp)
        emit(ev="revoked", tps=sorted([tp.topic, tp.partition] for tp in tps))

    def lost(tps: set) -> None:
        with lock:
            for tp in tps:
                processed.pop(tp, None)
                owned.discard(tp)
        emit(ev="lost", tps=sorted([tp.topic, tp.partition] for tp in tps))

    consumer = Consumer(args.topic, bootstrap_servers=args.bootstrap, group_id=args.group,
                        auto_offset_reset="earliest", enable_auto_commit=False,
                        consumer_timeout_ms=300, session_timeout_ms=args.session_ms,
                        on_partitions_assigned=assigned, on_partitions_revoked=revoked,
                        on_partitions_lost=lost)

    committed: dict = {}

    def commit() -> None:
        with lock:
            todo = {tp: off for tp, off in processed.items() if committed.get(tp) != off}
        if not todo:
            return
        try:
            consumer.commit(todo)
        except RafkaError as exc:
            emit(ev="commit_failed", error=f"{exc.code.name}: {exc.message}")
            return
        committed.update(todo)
        emit(ev="commit", offsets=sorted([tp.topic, tp.partition, off] for tp, off in todo.items()))

    idle_since = time.monotonic()
    with consumer:
        n = 0
        while True:
            for rec in consumer:  # ends after consumer_timeout_ms without records
                emit(ev="rec", t=rec.topic, p=rec.partition, o=rec.offset,
                     v=rec.value.decode() if rec.value is not None else None)
                tp = TopicPartition(rec.topic, rec.partition)
                with lock:
                    if tp in owned:  # a record of a just-revoked partition is not ours to commit
                        processed[tp] = rec.offset + 1
                n += 1
                if n % args.commit_every == 0:
                    commit()
                idle_since = time.monotonic()
            commit()
            if args.max_idle_s is not None and time.monotonic() - idle_since > args.max_idle_s:
                break


if __name__ == "__main__":
    main()
