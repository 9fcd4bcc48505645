"""Broker CPU per Kafka SASL login, in-process (no sockets): what ``broker/kafka/sasl.py``
spends on the server's side of one login, per mechanism.

``.venv/bin/python bench/kafka_sasl.py [LOGINS]`` (default 200): for SCRAM-SHA-256,
SCRAM-SHA-512 and PLAIN, runs LOGINS logins of one user against a credential with 4096
iterations; the client's messages are computed outside the timed part (a SCRAM client pays
the PBKDF2, the broker only HMACs and hashes; PLAIN makes the *broker* pay the PBKDF2, once per
login). Prints the median microseconds per login. docs/kafka-compat.md quotes its output.
"""

from __future__ import annotations

import statistics
import sys
import time

from rafka.broker.kafka.sasl import KafkaSasl
from rafka.security.scram import ScramClient, derive_credential

MECHS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def main(logins: int = 200) -> None:
    creds = {(m, "alice"): derive_credential(m, "s3cret") for m in MECHS}

    def lookup(mechanism: str, user: str):  # type: ignore[no-untyped-def]
        return creds.get((mechanism, user))

    print(f"{logins} logins each; broker-side microseconds per login (median)")
    for mech in (*MECHS, "PLAIN"):
        times = []
        for _ in range(logins):
            s = KafkaSasl((*MECHS, "PLAIN"), lookup, tls=True)
            if mech == "PLAIN":
                t = time.perf_counter()
                s.handshake(mech, 1)
                s.authenticate(b"\0alice\0s3cret")
                times.append(time.perf_counter() - t)
            else:
                c = ScramClient(mech, "alice", "s3cret")
                first = c.first_message()
                t = time.perf_counter()
                s.handshake(mech, 1)
                server_first = s.authenticate(first).fields["auth_bytes"]
                spent = time.perf_counter() - t
                final = c.final_message(server_first)  # the client's PBKDF2: not the broker's
                t = time.perf_counter()
                s.authenticate(final)
                times.append(spent + time.perf_counter() - t)
            assert s.authenticated
        print(f"{mech:14} {statistics.median(times) * 1e6:10.0f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
