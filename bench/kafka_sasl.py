"""Broker CPU per Kafka SASL login, in-process (no sockets): what ``broker/kafka/sasl.py``
spends on the server's side of one login, per mechanism.

``.venv/bin/python bench/kafka_sasl.py [LOGINS]`` (default 200): for SCRAM-SHA-256,
SCRAM-SHA-512 and PLAIN, runs LOGINS logins of one user against a credential with 4096
iterations; the client's messages are computed outside the timed part (a SCRAM client pays
the PBKDF2, the broker only HMACs and hashes; PLAIN makes the *broker* pay the PBKDF2, once per
login). Prints the median microseconds per login: in all, and the part spent on the event
loop — for PLAIN the PBKDF2 (``PasswordCheck.run``) runs in a worker thread in the broker, so
only ``step`` and ``plain_checked`` are the loop's. Then a storm: STORM concurrent PLAIN logins
on one trio loop beside a task that only yields, PBKDF2 on the loop (A, as before the worker
threads) against ``KafkaSasl.authenticate`` (B, worker threads under the listener's limiter),
in ABBA order, 4 rounds; prints per mode the median of the longest time the yielding task
waited for the loop, and of the storm's wall time, with the load average.
docs/kafka-compat.md quotes its output.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import trio
from rafka.broker.kafka.sasl import PLAIN_CHECK_THREADS, KafkaSasl, PasswordCheck
from rafka.security.scram import ScramClient, derive_credential

MECHS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def main(logins: int = 200) -> None:
    creds = {(m, "alice"): derive_credential(m, "s3cret") for m in MECHS}

    def lookup(mechanism: str, user: str):  # type: ignore[no-untyped-def]
        return creds.get((mechanism, user))

    print(f"{logins} logins each; broker-side microseconds per login (median)")
    print(f"{'mechanism':14} {'in all':>10} {'on the loop':>12}")
    for mech in (*MECHS, "PLAIN"):
        times, on_loop = [], []
        for _ in range(logins):
            s = KafkaSasl((*MECHS, "PLAIN"), lookup, tls=True)
            if mech == "PLAIN":
                t = time.perf_counter()
                s.handshake(mech, 1)
                check = s.step(b"\0alice\0s3cret")
                assert isinstance(check, PasswordCheck)
                loop = time.perf_counter() - t
                t = time.perf_counter()
                ok = check.run()  # in the broker: a worker thread (KafkaSasl.authenticate)
                thread = time.perf_counter() - t
                t = time.perf_counter()
                s.plain_checked(check, ok)
                loop += time.perf_counter() - t
                times.append(loop + thread)
                on_loop.append(loop)
            else:
                c = ScramClient(mech, "alice", "s3cret")
                first = c.first_message()
                t = time.perf_counter()
                s.handshake(mech, 1)
                server_first = s.step(first).fields["auth_bytes"]  # type: ignore[union-attr]
                spent = time.perf_counter() - t
                final = c.final_message(server_first)  # the client's PBKDF2: not the broker's
                t = time.perf_counter()
                s.step(final)
                times.append(spent + time.perf_counter() - t)
                on_loop.append(times[-1])
            assert s.authenticated
        print(f"{mech:14} {statistics.median(times) * 1e6:10.0f} {statistics.median(on_loop) * 1e6:12.0f}")
    storm(lookup)


def storm(lookup, logins: int = 50, rounds: int = 4) -> None:  # type: ignore[no-untyped-def]
    async def one_storm(threads: bool) -> tuple[float, float]:
        limiter = trio.CapacityLimiter(PLAIN_CHECK_THREADS)
        longest = 0.0
        done = trio.Event()

        async def ticker() -> None:
            nonlocal longest
            last = time.perf_counter()
            while not done.is_set():
                await trio.sleep(0)
                now = time.perf_counter()
                longest, last = max(longest, now - last), now

        async def login() -> None:
            s = KafkaSasl((*MECHS, "PLAIN"), lookup, tls=True, limiter=limiter)
            s.handshake("PLAIN", 1)
            if threads:
                answer = await s.authenticate(b"\0alice\0s3cret")
            else:
                await trio.sleep(0)
                check = s.step(b"\0alice\0s3cret")
                assert isinstance(check, PasswordCheck)
                answer = s.plain_checked(check, check.run())
            assert answer.fields["error_code"] == 0

        t = time.perf_counter()
        async with trio.open_nursery() as outer:
            outer.start_soon(ticker)
            async with trio.open_nursery() as nursery:
                for _ in range(logins):
                    nursery.start_soon(login)
            done.set()
        return longest, time.perf_counter() - t

    res: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(rounds // 2):
        for threads in (False, True, True, False):  # ABBA
            res[threads].append(trio.run(one_storm, threads))
    print(f"storm of {logins} concurrent PLAIN logins, {rounds} rounds ABBA, load average "
          f"{os.getloadavg()[0]:.2f}; medians:")
    for threads, label in ((False, "A: PBKDF2 on the loop"), (True, "B: worker threads")):
        stall = statistics.median(r[0] for r in res[threads]) * 1e3
        wall = statistics.median(r[1] for r in res[threads]) * 1e3
        print(f"  {label:24} longest loop stall {stall:8.2f} ms   storm {wall:7.1f} ms")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
