"""Test helpers: a hand-history builder and a correct in-memory log model that writes histories.

``Builder`` writes invoke/completion pairs with readable calls.  ``simulate`` replays a list
of workload actions against a model of a correct replicated log (per partition an append-only
list; the high watermark is the end) and returns the history; ``fault`` injects exactly one
bug at ``fault_at`` so tests can check that the matching checker notices it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Builder", "simulate", "FAULTS", "TOPIC"]

TOPIC = "t"
FAULTS = ("drop", "duplicate", "reorder", "aborted")
HOLE = object()


class Builder:
    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []
        self.t = 0

    def event(self, process: Any, type: str, f: str, value: Any, node: int | None = 1) -> int:
        self.t += 1_000_000
        self.ops.append({"index": len(self.ops), "process": process, "type": type, "f": f,
                         "value": value, "node": node, "time": self.t})
        return len(self.ops) - 1

    def op(self, process: Any, f: str, value: Any, type: str = "ok",
           result: Any = None) -> tuple[int, int]:
        i = self.event(process, "invoke", f, value)
        return i, self.event(process, type, f, value if result is None else result)

    def send(self, p: Any, part: int, value: Any, offset: int | None = None,
             type: str = "ok", topic: str = TOPIC) -> tuple[int, int]:
        inv = {"topic": topic, "partition": part, "key": None, "value": value}
        res = dict(inv, offset=offset) if type == "ok" else inv
        return self.op(p, "send", inv, type, res)

    def poll(self, p: Any, records: list[tuple[int, int, Any]], type: str = "ok",
             topic: str = TOPIC) -> tuple[int, int]:
        recs = [[topic, part, o, v] for part, o, v in records]
        return self.op(p, "poll", {}, type, {"records": recs} if type == "ok" else {})

    def final(self, part: int, records: list[tuple[int, Any]], p: Any = "final",
              topic: str = TOPIC) -> tuple[int, int]:
        recs = [[topic, part, o, v] for o, v in records]
        return self.op(p, "final-read", {"topic": topic, "partition": part}, "ok",
                       {"records": recs})

    def commit(self, p: Any, group: str, offsets: dict[str, int]) -> tuple[int, int]:
        v = {"group": group, "offsets": offsets}
        return self.op(p, "commit", v, "ok", v)

    def assign(self, p: Any, partitions: list[str],
               positions: dict[str, int] | None = None) -> tuple[int, int]:
        v: dict[str, Any] = {"partitions": partitions}
        if positions is not None:
            v["positions"] = positions
        return self.op(p, "assign", v)


def simulate(actions: list[tuple[Any, ...]], partitions: int = 2, fault: str | None = None,
             fault_at: int = 0) -> list[dict[str, Any]]:
    """Run ``actions`` against a correct log model; inject ``fault`` before action ``fault_at``.

    actions: ("send", producer, partition, outcome ok|fail|info, applied_if_info: bool)
             ("poll", consumer, max_records) | ("commit", consumer) | ("assign", consumer, parts)
    """
    b = Builder()
    logs: list[list[Any]] = [[] for _ in range(partitions)]
    counter = [0]
    consumers: dict[int, dict[str, Any]] = {}
    committed: dict[tuple[str, int], int] = {}

    def new_value() -> int:
        counter[0] += 1
        return counter[0]

    def consumer(c: int) -> dict[str, Any]:
        if c not in consumers:
            consumers[c] = {"parts": list(range(partitions)), "pos": dict.fromkeys(
                range(partitions), 0)}
        return consumers[c]

    def inject(kind: str) -> None:
        if kind == "drop":  # acknowledged but never stored
            v = new_value()
            i, j = b.send(0, 0, v, len(logs[0]))
            logs[0].append(HOLE)
        elif kind == "duplicate":  # stored twice (a non-idempotent retry)
            v = new_value()
            b.send(0, 0, v, len(logs[0]))
            logs[0].extend([v, v])
        elif kind == "reorder":  # producer 0's two sends land in the opposite order
            va, vb = new_value(), new_value()
            base = len(logs[0])
            _, ja = b.send(0, 0, va, base)
            _, jb = b.send(0, 0, vb, base + 1)
            logs[0].extend([vb, va])
            b.ops[ja]["value"]["offset"] = base + 1
            b.ops[jb]["value"]["offset"] = base
        elif kind == "aborted":  # the broker said fail, but the record was stored
            v = new_value()
            b.send(0, 0, v, type="fail")
            logs[0].append(v)
        else:
            raise ValueError(kind)

    for n, act in enumerate(actions):
        if fault is not None and n == fault_at:
            inject(fault)
        kind = act[0]
        if kind == "send":
            _, p, part, outcome, applied = act
            v = new_value()
            if outcome == "ok":
                b.send(p, part, v, len(logs[part]))
                logs[part].append(v)
            elif outcome == "fail":
                b.send(p, part, v, type="fail")
            else:
                b.send(p, part, v, type="info")
                if applied:
                    logs[part].append(v)
        elif kind == "poll":
            _, c, max_records = act
            st = consumer(c)
            recs = []
            for part in st["parts"]:
                pos, got = st["pos"][part], 0
                while pos < len(logs[part]) and got < max_records:
                    if logs[part][pos] is not HOLE:
                        recs.append((part, pos, logs[part][pos]))
                        got += 1
                    pos += 1
                st["pos"][part] = pos
            b.poll(100 + c, recs)
        elif kind == "commit":
            _, c = act
            st = consumer(c)
            offsets = {f"{TOPIC}/{part}": st["pos"][part] for part in st["parts"]}
            for part in st["parts"]:
                committed[(f"g{c}", part)] = st["pos"][part]
            b.commit(100 + c, f"g{c}", offsets)
        elif kind == "assign":
            _, c, parts = act
            st = consumer(c)
            st["parts"] = sorted(set(parts))
            st["pos"] = {part: committed.get((f"g{c}", part), 0) for part in range(partitions)}
            b.assign(100 + c, [f"{TOPIC}/{part}" for part in st["parts"]],
                     {f"{TOPIC}/{part}": st["pos"][part] for part in st["parts"]})
        else:
            raise ValueError(kind)
    if fault is not None and fault_at >= len(actions):
        inject(fault)
    for part in range(partitions):
        b.final(part, [(o, v) for o, v in enumerate(logs[part]) if v is not HOLE])
    return b.ops
