"""Security benchmark (issue 14): the price of TLS + SASL/SCRAM, on one node, in one run.

One node started with ``rafka cluster up --tls --auth`` serves both of its listeners: the
plaintext main listener and the SASL_SSL one (TLS 1.2+/1.3 with the throw-away CA, SCRAM-
SHA-256 as the super user ``admin``, the authorizer on — admin is a super user, so each
request pays the authorizer's super-user check, not an ACL walk). The main listener is behind
the authorizer too, as ``User:ANONYMOUS`` (docs/security.md), granted read and write on the
``plain*`` topics: its requests pay an ACL walk, the secured ones do not. The same sync clients as
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
* ``*_cpu_plaintext`` / ``*_cpu_sasl_ssl``: CPU µs per record of the client process (all its
  threads) and of the node process (``/proc/PID/stat``) during each of those runs — on a
  shared, loaded machine these move far less than the wall-clock rates, and say which side
  pays for TLS;
* ``scram_handshakes``: authentications per second of one client, sequentially — TCP connect,
  TLS handshake (the broker's certificate verified), SASL_HANDSHAKE and the two
  SASL_AUTHENTICATE round trips (the client's PBKDF2 of 4096 iterations included: a client
  logs in with its password), then close; ``HANDSHAKES`` of them per repetition.

``python -m bench.bench_security [runs]`` runs it alone.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio
from rafka.client.aio import AsyncAdmin
from rafka.client.aio.security_admin import create_acls
from rafka.security.client import ClientSecurity, ambient_security
from rafka.wire.connection import connect

from bench.bench_foundation import _consumer_rate, _fig, _producer_rate
from bench.cluster import cluster_dir
from rafka.local_security import SECURE_PORT_OFFSET, read_admin_password

__all__ = ["run"]

N_RECORDS = 100_000
HANDSHAKES = 50
PARTITIONS = 3


def _node_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _rates(bootstrap: str, topic: str, pid: int) -> list[float]:
    """[producer rec/s, consumer rec/s, producer client/node CPU µs per record, consumer …]"""
    c0 = _node_cpu_s(pid)
    prod, prod_cpu = _producer_rate(bootstrap, topic, N_RECORDS)
    c1 = _node_cpu_s(pid)
    cons, cons_cpu = _consumer_rate(bootstrap, topic, PARTITIONS, N_RECORDS)
    c2 = _node_cpu_s(pid)
    per = 1e6 / N_RECORDS
    return [prod, cons, prod_cpu, (c1 - c0) * per, cons_cpu, (c2 - c1) * per]


async def _handshakes_per_s(port: int, options: dict[str, Any], n: int) -> float:
    sec = ClientSecurity.from_options(**options)
    t0 = time.perf_counter()
    for _ in range(n):
        async with connect("127.0.0.1", port, security=sec):
            pass  # connected, TLS done, logged in
    return n / (time.perf_counter() - t0)


async def _setup(bootstrap: str, options: dict[str, Any], runs: int) -> None:
    """The topics, as admin; the main listener runs as User:ANONYMOUS behind the ACLs
    (main.listener.authorizer): the plaintext side may read and write its own topics, as an
    operator would allow it."""
    async with AsyncAdmin(bootstrap, **options) as admin:
        await create_acls(admin, [{"principal": "User:ANONYMOUS", "resource_type": "topic",
                                   "pattern_type": "prefixed", "resource_name": "plain",
                                   "operation": op, "permission": "allow", "host": "*"}
                                  for op in ("read", "write")])
        for r in range(runs):
            for kind in ("plain", "secure"):
                await admin.create_topic(f"{kind}{r}", PARTITIONS, 1)


def run(runs: int = 3) -> dict[str, Any]:
    prod_r: list[float] = []
    cons_r: list[float] = []
    hs: list[float] = []
    cols = ("producer", "consumer", "producer_client_cpu", "producer_node_cpu",
            "consumer_client_cpu", "consumer_node_cpu")
    got: dict[str, list[float]] = {f"{c}_{k}": [] for c in cols for k in ("plaintext", "sasl_ssl")}
    with cluster_dir(1, extra_args=("--tls", "--auth")) as (plain, data, port):
        secure_port = port + SECURE_PORT_OFFSET
        pid = json.loads((data / "cluster.json").read_text())["nodes"][0]["pid"]
        options = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                   "sasl_plain_username": "admin",
                   "sasl_plain_password": read_admin_password(data) or "",
                   "ssl_cafile": str(data / "tls" / "ca.pem")}
        trio.run(_setup, f"127.0.0.1:{secure_port}", options, runs)
        for r in range(runs):
            plain_figs = _rates(plain, f"plain{r}", pid)
            with ambient_security(options):
                secure_figs = _rates(f"127.0.0.1:{secure_port}", f"secure{r}", pid)
            for c, vp, vs in zip(cols, plain_figs, secure_figs, strict=True):
                got[f"{c}_plaintext"].append(vp)
                got[f"{c}_sasl_ssl"].append(vs)
            prod_r.append(secure_figs[0] / plain_figs[0])
            cons_r.append(secure_figs[1] / plain_figs[1])
            hs.append(trio.run(_handshakes_per_s, secure_port, options, HANDSHAKES))
    load = f"1 node, {N_RECORDS} records of 200 B, acks=1, {PARTITIONS} partitions"
    out: dict[str, Any] = {}
    for c in cols:
        unit = "rec/s" if c in ("producer", "consumer") else "us/rec"
        out[f"{c}_plaintext"] = _fig(got[f"{c}_plaintext"], unit, load=load)
        out[f"{c}_sasl_ssl"] = _fig(got[f"{c}_sasl_ssl"], unit, load=load,
                                    ratio_of=f"{c}_plaintext")
    return {
        **out,
        "producer_ratio": _fig(prod_r, "x", target=0.7),
        "consumer_ratio": _fig(cons_r, "x", target=0.7),
        "scram_handshakes": _fig(hs, "auth/s", load=f"{HANDSHAKES} sequential logins, one client, "
                                 "connect + TLS + SCRAM-SHA-256 (4096 iterations)"),
    }


if __name__ == "__main__":
    out = run(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    for name, fig in out.items():
        print(f"{name:22} {statistics.median(fig['runs']):>12,.2f} {fig['unit']:6} "
              f"{[round(v, 2) for v in fig['runs']]}")
