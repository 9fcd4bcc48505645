"""When a partition's appends are fsynced: the node's ``log.flush.policy``, or its topic's own
``flush.messages`` / ``flush.ms`` (Kafka's topic configs of those names).

Theory of operation
-------------------
A partition follows one ``FlushRule``, computed from the metadata image whenever the partition
is opened or its topic's configs change (``ReplicaManager``), identically on the leader and on
every follower, since they all read the same image:

* **A topic that sets neither key** follows the node: ``batch`` (the default) fsyncs before an
  acknowledgement and before a follower reports its records (``fsync_acks``); ``messages``
  fsyncs a partition once ``log.flush.interval.messages`` of its records are unflushed;
  ``interval`` fsyncs every ``log.flush.interval.ms``; ``none`` leaves it to the OS. Under the
  last three, acknowledgements do not wait for an fsync.
* **A topic that sets either key** overrides the node, as it does in Kafka:
  ``flush.messages=1`` (or ``flush.ms=0``) means every record is on disk before it counts, which
  is rafka's ``batch`` (with group commit: one fsync covers every append waiting for it, which is
  the same promise as Kafka's fsync per append). Any other value flushes the partition after that many
  records or that many milliseconds, whichever comes first, and acknowledgements do not wait.
  ``9223372036854775807`` (Kafka's default, "never") in both, or in the one set, leaves it to
  the OS. So a latency-sensitive topic can opt out of the fsync wait on a ``batch`` node
  (``flush.messages=9223372036854775807``), and a critical topic can opt in on a ``none`` node
  (``flush.messages=1``). docs/durability.md, "Per topic", says what each gives up.

Why the key's presence decides and not its value: the node's ``log.flush.interval.messages`` /
``.ms`` are the topic defaults of the two keys (broker/config.py), so the effective values
alone cannot tell "the topic asked for this" from "the node's default". ``flush_rule`` is
therefore given the topic's own config map.

A change takes effect on each broker when it applies the metadata record carrying it, so for
the moment the leader and a follower disagree the weaker rule applies to the records appended
then (as for any dynamic topic config in Kafka).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FlushRule", "NEVER", "flush_rule"]

NEVER = 2**63 - 1  # Kafka's "never" for flush.messages / flush.ms


@dataclass(frozen=True, slots=True)
class FlushRule:
    """``fsync_acks``: a record counts (acknowledgement, high watermark, a follower's reported
    position) only once it is fsynced. Otherwise the partition is fsynced once ``every_messages``
    records are unflushed and/or every ``every_ms``; None: never (the OS writes back)."""

    fsync_acks: bool
    every_messages: int | None = None
    every_ms: int | None = None

    def describe(self) -> str:
        if self.fsync_acks:
            return "fsync before acknowledging"
        parts = []
        if self.every_messages is not None:
            parts.append(f"every {self.every_messages} records")
        if self.every_ms is not None:
            parts.append(f"every {self.every_ms} ms")
        return "fsync " + " or ".join(parts) if parts else "no fsync (the OS writes back)"


def _node_rule(settings: Mapping[str, Any]) -> FlushRule:
    policy = settings.get("log.flush.policy", "batch")
    if policy == "batch":
        return FlushRule(True)
    if policy == "messages":
        return FlushRule(False, every_messages=int(settings.get("log.flush.interval.messages", 10_000)))
    if policy == "interval":
        return FlushRule(False, every_ms=int(settings.get("log.flush.interval.ms", 1000)))
    return FlushRule(False)


def flush_rule(topic_configs: Mapping[str, Any] | None, settings: Mapping[str, Any]) -> FlushRule:
    """The rule of a partition whose topic has ``topic_configs`` (its own overrides, as in the
    image; values already validated by ``LogConfig``) on a node with ``settings``."""
    configs = topic_configs or {}
    messages = configs.get("flush.messages")
    ms = configs.get("flush.ms")
    if messages is None and ms is None:
        return _node_rule(settings)
    messages = None if messages is None else int(messages)
    ms = None if ms is None else int(ms)
    if messages == 1 or ms == 0:
        return FlushRule(True)
    return FlushRule(False,
                     every_messages=messages if messages is not None and messages < NEVER else None,
                     every_ms=ms if ms is not None and ms < NEVER else None)
