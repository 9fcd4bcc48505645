"""Security benchmark (issue 14): the price of TLS + SASL/SCRAM, on one node, in one run.

One node started with ``rafka cluster up --tls --auth`` serves both of its listeners: the
plaintext main listener and the SASL_SSL one (TLS 1.2+/1.3 with the throw-away CA, SCRAM-
SHA-256 as the super user ``admin``, the authorizer on — admin is a super user, so each
request pays the authorizer's super-user check, not an ACL walk). The same sync clients as
bench_foundation (``_producer_rate`` / ``_consumer_rate``: 200-byte values, acks=1, linger
5 ms, 3 partitions) run against each listener, interleaved — plaintext then SASL_SSL in every
repetition — so a load change on the shared machine moves both sides of a pair alike; the
secured side gets its options as the CLI's ambient settings (``security.client.
ambient_security``).

Figures (medians of ``runs``):

* ``producer_plaintext`` / ``producer_sasl_ssl`` (records/s; the latter's ``ratio`` is to the
  former) and ``producer_ratio``, the median of the per-repetition ratios (target ≥ 0.7);
* ``consumer_plaintext`` / ``consumer_sasl_ssl`` and ``consumer_ratio``, the same for a read
  of those records from the beginning;
* ``scram_handshakes``: authentications per second of one client, sequentially — TCP connect,
  TLS handshake (the broker's certificate verified), SASL_HANDSHAKE and the two
  SASL_AUTHENTICATE round trips (the client's PBKDF2 of 4096 iterations included: a client
  logs in with its password), then close; ``HANDSHAKES`` of them per repetition.

``python -m bench.bench_security [runs]`` runs it alone.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import trio

from bench.bench_foundation import _consumer_rate, _fig, _producer_rate
from bench.cluster import cluster_dir
from client import Admin
from client.connection import connect
from security.client import ClientSecurity, ambient_security
from security.local_cluster import SECURE_PORT_OFFSET, read_admin_password

__all__ = ["run"]

N_RECORDS = 100_000
HANDSHAKES = 50
PARTITIONS = 3


def _rates(bootstrap: str, topic: str) -> tuple[float, float]:
    prod, _cpu = _producer_rate(bootstrap, topic, N_RECORDS)
    cons, _cpu = _consumer_rate(bootstrap, topic, PARTITIONS, N_RECORDS)
    return prod, cons


async def _handshakes_per_s(port: int, options: dict[str, Any], n: int) -> float:
    sec = ClientSecurity.from_options(**options)
    t0 = time.perf_counter()
    for _ in range(n):
        async with connect("127.0.0.1", port, security=sec):
            pass  # connected, TLS done, logged in
    return n / (time.perf_counter() - t0)


def run(runs: int = 3) -> dict[str, Any]:
    prod_p, prod_s, cons_p, cons_s, prod_r, cons_r, hs = [], [], [], [], [], [], []
    with cluster_dir(1, extra_args=("--tls", "--auth")) as (plain, data, port):
        secure_port = port + SECURE_PORT_OFFSET
        options = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                   "sasl_plain_username": "admin",
                   "sasl_plain_password": read_admin_password(data) or "",
                   "ssl_cafile": str(data / "tls" / "ca.pem")}
        with Admin(bootstrap_servers=plain) as admin:
            for r in range(runs):
                for kind in ("plain", "secure"):
                    admin.create_topic(f"{kind}{r}", partitions=PARTITIONS, replication_factor=1)
        for r in range(runs):
            p, c = _rates(plain, f"plain{r}")
            with ambient_security(options):
                ps, cs = _rates(f"127.0.0.1:{secure_port}", f"secure{r}")
            prod_p.append(p)
            cons_p.append(c)
            prod_s.append(ps)
            cons_s.append(cs)
            prod_r.append(ps / p)
            cons_r.append(cs / c)
            hs.append(trio.run(_handshakes_per_s, secure_port, options, HANDSHAKES))
    load = f"1 node, {N_RECORDS} records of 200 B, acks=1, {PARTITIONS} partitions"
    return {
        "producer_plaintext": _fig(prod_p, "rec/s", load=load),
        "producer_sasl_ssl": _fig(prod_s, "rec/s", ratio_of="producer_plaintext", load=load),
        "producer_ratio": _fig(prod_r, "x", target=0.7),
        "consumer_plaintext": _fig(cons_p, "rec/s", load=load),
        "consumer_sasl_ssl": _fig(cons_s, "rec/s", ratio_of="consumer_plaintext", load=load),
        "consumer_ratio": _fig(cons_r, "x", target=0.7),
        "scram_handshakes": _fig(hs, "auth/s", load=f"{HANDSHAKES} sequential logins, one client, "
                                 "connect + TLS + SCRAM-SHA-256 (4096 iterations)"),
    }


if __name__ == "__main__":
    out = run(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    for name, fig in out.items():
        print(f"{name:22} {statistics.median(fig['runs']):>12,.2f} {fig['unit']:6} "
              f"{[round(v, 2) for v in fig['runs']]}")
