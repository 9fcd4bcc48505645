"""CPU of one step of a Raft message's serialisation, cold — as a heartbeat meets it (issue 26).

Theory of operation: an idle voter's tick thread sleeps ~100 ms between heartbeats, so every
message finds the caches cold, and a ``timeit`` loop (hot) understates what a step costs there
by up to 20x. This puts one step in the way the tick thread meets it: a thread blocked in
``poll`` on a socketpair is woken every 10 ms by a 360-byte message (a pysyncobj heartbeat as
sent: pickled, zlib-compressed, Fernet-encrypted), does the step, and echoes the message. The
figure is that thread's CPU per message from ``/proc/self/task/TID/schedstat`` (exact run time,
not clock ticks), the median of ``RUNS``; ``echo`` (no step) is the floor to subtract.
A step timed alone pays the whole cold penalty; in a voter the steps of one wake-up share it,
so the saving of a cheaper step there is smaller than the difference here (Fernet → AES-GCM:
~170 µs a message here, ~80 µs measured in a cluster; docs/performance.md, "Raft frames sealed
with AES-GCM").

    .venv/bin/python -m bench.cold_crypto [STEP,...]      (default: every step)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import pickle
import select
import socket
import statistics
import sys
import threading
import time
import zlib
from collections.abc import Callable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pysyncobj.encryptor import getEncryptor

MESSAGES = 200
GAP_S = 0.01
RUNS = 3

_FERNET = getEncryptor("cold-crypto-bench")
_KEY = os.urandom(32)
_GCM = AESGCM(os.urandom(16))
_HEARTBEAT = {"type": "append_entries", "term": 5, "commit_index": 1234, "entries": [],
              "prevLogIdx": 1234, "prevLogTerm": 5}


def _fernet_open(token: bytes) -> None:  # what pysyncobj's TcpConnection does per message
    _FERNET.extract_timestamp(token)
    _FERNET.decrypt(token)


def _whole(token: bytes) -> None:  # receive and answer, as a follower does
    msg = pickle.loads(zlib.decompress(_FERNET.decrypt(token)))
    _FERNET.extract_timestamp(token)
    _FERNET.encrypt_at_time(zlib.compress(pickle.dumps(msg), 3), 5)


STEPS: dict[str, Callable[[bytes], object]] = {
    "echo": lambda _t: None,
    "fernet-encrypt": lambda t: _FERNET.encrypt_at_time(t, 5),
    "fernet-open": _fernet_open,
    "hmac-sha256": lambda t: hmac.digest(_KEY, t, "sha256"),
    "aes-gcm": lambda t: _GCM.encrypt(os.urandom(12), t, None),
    "blake2b-mac": lambda t: hashlib.blake2b(t, key=_KEY, digest_size=32).digest(),
    "zlib-compress": lambda _t: zlib.compress(pickle.dumps(_HEARTBEAT), 3),
    "b64decode": base64.urlsafe_b64decode,
    "whole": _whole,
}


def one(step: str) -> float:
    """CPU µs per message of the woken thread doing ``step``."""
    fn = STEPS[step]
    a, b = socket.socketpair()
    token = _FERNET.encrypt_at_time(zlib.compress(pickle.dumps(_HEARTBEAT), 3), 5)
    times: dict[str, int] = {}

    def run_ns() -> int:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[0])

    def server() -> None:
        p = select.poll()
        p.register(b.fileno(), select.POLLIN)
        times["t0"] = run_ns()
        for _ in range(MESSAGES):
            p.poll(1000)
            data = b.recv(65536)
            fn(data)
            b.send(data)
        times["t1"] = run_ns()

    t = threading.Thread(target=server)
    t.start()
    time.sleep(0.05)
    for _ in range(MESSAGES):
        a.send(token)
        a.recv(65536)
        time.sleep(GAP_S)
    t.join()
    a.close()
    b.close()
    return (times["t1"] - times["t0"]) / MESSAGES / 1e3


def main(steps: list[str]) -> None:
    for step in steps:
        runs = [one(step) for _ in range(RUNS)]
        print(f"{step:16s} {statistics.median(runs):6.0f} µs per message, cold  "
              f"(runs {', '.join(f'{r:.0f}' for r in runs)}; load {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else list(STEPS))
