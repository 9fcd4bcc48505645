"""The metadata workload: create and delete topics during faults, verify them afterwards.

Theory of operation
-------------------
One process creates topics ``<prefix>-<n>`` (never reusing a name) and deletes a random
earlier one now and then, each op bounded by ``RunContext.op_timeout_s`` and recorded as
``create-topic`` / ``delete-topic`` (``ok`` / ``fail`` / ``info``, see
:func:`~chaos_tests.workloads.common.classify_error`).  After the heal,
:func:`verify_topics` describes every topic the workload touched and reports:

``topic-missing``        a create ended ``ok``, no delete of it was attempted, and the topic is
                         gone (or has the wrong partition count)
``topic-resurrected``    a delete ended ``ok`` and the topic still exists
``topic-created-after-fail``  a create ended ``fail`` (definite) and the topic exists
``partition-leaderless`` an existing workload topic has a partition without a leader after
                         the recovery wait

Topics whose create or delete ended ``info`` may or may not exist; they are not judged.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

import trio

from ..checkers import Anomaly, CheckResult
from .common import RunContext, classify_error, error_name

__all__ = ["MetadataSpec", "metadata_process", "verify_topics"]

log = logging.getLogger("chaos.metadata")


@dataclass(frozen=True)
class MetadataSpec:
    prefix: str = "chaos-meta"
    partitions: int = 2
    replication_factor: int = 3
    interval_s: float = 1.0
    delete_probability: float = 0.4
    max_topics: int = 200


async def metadata_process(ctx: RunContext, spec: MetadataSpec, *, seed: int = 0) -> None:
    from rafka.client import AsyncAdmin

    rng = random.Random(seed)
    created: list[str] = []
    n = 0
    while ctx.running() and n < spec.max_topics:
        process = ctx.next_process()
        try:
            async with AsyncAdmin(bootstrap_servers=ctx.bootstrap,
                                  client_id=f"chaos-admin-{process}",
                                  request_timeout_ms=int(ctx.op_timeout_s * 1000)) as admin:
                while ctx.running() and n < spec.max_topics:
                    if created and rng.random() < spec.delete_probability:
                        name = created.pop(rng.randrange(len(created)))
                        kind = await _op(ctx, process, "delete-topic", {"topic": name},
                                         admin.delete_topic(name))
                    else:
                        name = f"{spec.prefix}-{n}"
                        n += 1
                        kind = await _op(ctx, process, "create-topic",
                                         {"topic": name, "partitions": spec.partitions,
                                          "replication_factor": spec.replication_factor},
                                         admin.create_topic(name, spec.partitions,
                                                            spec.replication_factor))
                        if kind != "fail":
                            created.append(name)
                    await trio.sleep(spec.interval_s * rng.uniform(0.5, 1.5))
                    if kind == "info":
                        break
        except Exception as exc:  # noqa: BLE001
            log.info("admin %d: %r", process, exc)
            await trio.sleep(spec.interval_s)


async def _op(ctx: RunContext, process: int, f: str, value: dict[str, Any], coro: Any) -> str:
    h = ctx.history
    inv = h.invoke(process, f, value)
    with trio.move_on_after(ctx.op_timeout_s):
        try:
            await coro
        except Exception as exc:  # noqa: BLE001
            kind = classify_error(exc)
            h.complete(inv, kind, dict(value, error=error_name(exc)))
            ctx.count(f"{f}-{kind}")
            return kind
        h.ok(inv)
        ctx.count(f"{f}-ok")
        return "ok"
    coro.close()
    h.info(inv, dict(value, error="timeout"))
    ctx.count(f"{f}-info")
    return "info"


def expected_topics(history: Any, prefix: str) -> dict[str, dict[str, Any]]:
    """Per workload topic: outcome of its create and of its delete (if any), from the history."""
    from ..history import INVOKE, completed

    out: dict[str, dict[str, Any]] = {}
    for inv, comp in completed(list(history)):
        if inv.f not in ("create-topic", "delete-topic") or inv.type != INVOKE:
            continue
        name = inv.value["topic"]
        if not name.startswith(prefix):
            continue
        st = out.setdefault(name, {"create": None, "delete": None, "partitions": None})
        outcome = comp.type if comp is not None else "info"
        if inv.f == "create-topic":
            st["create"] = outcome
            st["partitions"] = inv.value.get("partitions")
            st["create_ops"] = [inv.index] + ([comp.index] if comp else [])
        else:
            st["delete"] = outcome
            st["delete_ops"] = [inv.index] + ([comp.index] if comp else [])
    return out


async def verify_topics(bootstrap: str, history: Any, spec: MetadataSpec, *,
                        timeout_s: float = 30.0) -> CheckResult:
    """Describe the workload's topics after the heal and judge them (module docstring)."""
    from rafka.client import AsyncAdmin

    expected = expected_topics(history, spec.prefix)
    anomalies: list[Anomaly] = []
    existing: dict[str, Any] = {}
    error: str | None = None
    with trio.move_on_after(timeout_s):
        while True:
            try:
                async with AsyncAdmin(bootstrap_servers=bootstrap,
                                      request_timeout_ms=int(timeout_s * 500)) as admin:
                    names = [n for n in await admin.list_topics() if n.startswith(spec.prefix)]
                    existing = {d.name: d for d in await admin.describe_topics(names)} \
                        if names else {}
                if all(p.leader >= 0 for d in existing.values() for p in d.partitions):
                    error = None
                    break
                error = "leaderless partitions"
            except Exception as exc:  # noqa: BLE001
                error = error_name(exc)
            await trio.sleep(1.0)
    if error is not None and not existing:
        return CheckResult(False, [Anomaly("metadata-unverifiable", {"error": error}, [])],
                           {"topics": len(expected)})
    for name, st in sorted(expected.items()):
        d = existing.get(name)
        ops = st.get("create_ops", []) + st.get("delete_ops", [])
        if st["create"] == "ok" and st["delete"] is None:
            if d is None:
                anomalies.append(Anomaly("topic-missing", {"topic": name}, ops))
            elif len(d.partitions) != st["partitions"]:
                anomalies.append(Anomaly("topic-missing",
                                         {"topic": name, "partitions": len(d.partitions),
                                          "expected": st["partitions"]}, ops))
        if st["delete"] == "ok" and d is not None:
            anomalies.append(Anomaly("topic-resurrected", {"topic": name}, ops))
        if st["create"] == "fail" and d is not None:
            anomalies.append(Anomaly("topic-created-after-fail", {"topic": name}, ops))
    for name, d in sorted(existing.items()):
        bad = [p.partition for p in d.partitions if p.leader < 0]
        if bad:
            anomalies.append(Anomaly("partition-leaderless", {"topic": name, "partitions": bad},
                                     []))
    return CheckResult(not anomalies, anomalies,
                       {"topics": len(expected), "existing": len(existing)})
