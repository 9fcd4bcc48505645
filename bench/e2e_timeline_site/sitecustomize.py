"""Injected into bench node processes by ``bench/e2e_timeline.py`` (``PYTHONPATH``), never by rafka.

Theory of operation: when ``RAFKA_TIMELINE_DIR`` is set, the node's main thread gets two signal
handlers. ``SIGUSR1`` wraps a few methods of the node's classes (once) so that each call
appends ``(event, value, time.perf_counter())`` to an in-memory list, and clears the list;
``SIGUSR2`` writes the list to ``$RAFKA_TIMELINE_DIR/<pid>.json`` (through a rename, so the file
appears whole). Only the partitions of
topic ``$RAFKA_TIMELINE_TOPIC`` are recorded. ``perf_counter`` is CLOCK_MONOTONIC, one clock
for every process on the machine, so the driver can set the nodes' events beside the
producer's send times and the consumer's receive times. The events (``value``: an offset
unless said otherwise):

* ``append`` — a leader appended, the partition's log end offset after it; ``appended`` the
  same on a follower (both ``Partition.after_append``);
* ``flushed`` — the leader's durable end after a group-commit round (``Partition.on_flushed``);
* ``hw`` — the high watermark moved on the leader (``Partition._update_hw``);
* ``pos<N>`` — the leader took follower N's fetch offset (``LeaderState.on_follower_fetch``);
* ``served<N>`` / ``served-consumer`` — the leader read the batches a fetch answers with, the
  offset after the last (``_FetchState.read_all``, when it read any);
* ``fetch`` — a follower sends a fetch from its log end offset (``_fetch_once``); ``sync`` —
  a follower starts its sync before that fetch (``_sync``, value 0);
* ``fsync`` — a ``PartitionLog.flush`` of the topic's log took ``value`` µs (it started at the
  time given), on whichever thread ran it;
* ``round`` / ``round-end`` — a leader group-commit round (``ReplicaManager.flush_dirty``)
  started / ended, ``value`` the records it covers.

A method that is missing makes the install fail: ``<pid>.error`` names it and the driver stops,
so a renamed method fails the tool instead of silently dropping its events. The wrappers cost a few µs per call;
the timeline is for where the time goes, not for CPU figures.
"""

from __future__ import annotations

import os
import threading

if os.environ.get("RAFKA_TIMELINE_DIR") and threading.current_thread() is threading.main_thread():
    import functools
    import json
    import signal
    import time
    from types import FrameType
    from typing import Any

    _events: list[tuple[str, int, float]] = []
    _topic = os.environ.get("RAFKA_TIMELINE_TOPIC", "")
    _installed: list[bool] = []

    def _note(kind: str, value: int) -> None:
        _events.append((kind, value, time.perf_counter()))

    def _wrap(cls: Any, name: str, make: Any) -> None:
        orig = cls.__dict__[name]  # KeyError: the method moved, the tool must be updated
        setattr(cls, name, functools.wraps(orig)(make(orig)))

    def _install() -> None:
        from rafka.broker.handlers.data import _FetchState
        from rafka.broker.partition import Partition
        from rafka.broker.replica_manager import ReplicaManager
        from rafka.broker.replication.fetcher import ReplicaFetcherManager
        from rafka.broker.replication.state import LeaderState
        from rafka.log.partition_log import PartitionLog

        def after_append(orig: Any) -> Any:
            def w(self: Any) -> None:
                orig(self)
                if self.topic == _topic:
                    _note("append" if self.leader_state is not None else "appended",
                          self.log.log_end_offset)
            return w

        def on_flushed(orig: Any) -> Any:
            def w(self: Any, end_offset: int) -> None:
                orig(self, end_offset)
                if self.topic == _topic:
                    _note("flushed", self.durable_end)
            return w

        def update_hw(orig: Any) -> Any:
            def w(self: Any) -> None:
                before = self.high_watermark
                orig(self)
                if self.topic == _topic and self.high_watermark > before and self.leader_state is not None:
                    _note("hw", self.high_watermark)
            return w

        def on_follower_fetch(orig: Any) -> Any:
            def w(self: Any, replica_id: int, fetch_offset: int, *a: Any, **k: Any) -> Any:
                if self.topic == _topic:
                    _note(f"pos{replica_id}", fetch_offset)
                return orig(self, replica_id, fetch_offset, *a, **k)
            return w

        def read_all(orig: Any) -> Any:
            def w(self: Any) -> Any:
                res = orig(self)
                slices = res[1]
                if slices and all(t["name"] == _topic for t in self.topics):
                    _note("served-consumer" if self.replica_id < 0 else f"served{self.replica_id}",
                          slices[-1].last_offset + 1)
                return res
            return w

        def fetch_once(orig: Any) -> Any:
            async def w(self: Any, leader_id: int, link: Any, addr: Any, parts: Any) -> Any:
                for p in parts:
                    if p.tp[0] == _topic:
                        _note("fetch", p.log.log_end_offset)
                return await orig(self, leader_id, link, addr, parts)
            return w

        def sync(orig: Any) -> Any:
            async def w(self: Any, parts: Any) -> Any:
                if any(p.unsynced and p.tp[0] == _topic for p in parts):
                    _note("sync", 0)
                return await orig(self, parts)
            return w

        def flush(orig: Any) -> Any:
            def w(self: Any) -> Any:
                start = time.perf_counter()
                out = orig(self)
                if os.path.basename(str(self.directory)).startswith(_topic + "-"):
                    _events.append(("fsync", int((time.perf_counter() - start) * 1e6), start))
                return out
            return w

        def flush_dirty(orig: Any) -> Any:
            async def w(self: Any) -> None:
                records = self._unflushed_messages
                runs = any(p.pending_flush for p in self.partitions.values())  # else it returns at once
                if runs:
                    _note("round", records)
                await orig(self)
                if runs:
                    _note("round-end", records)
            return w

        _wrap(Partition, "after_append", after_append)
        _wrap(Partition, "on_flushed", on_flushed)
        _wrap(Partition, "_update_hw", update_hw)
        _wrap(LeaderState, "on_follower_fetch", on_follower_fetch)
        _wrap(_FetchState, "read_all", read_all)
        _wrap(ReplicaFetcherManager, "_fetch_once", fetch_once)
        _wrap(ReplicaFetcherManager, "_sync", sync)
        _wrap(PartitionLog, "flush", flush)
        _wrap(ReplicaManager, "flush_dirty", flush_dirty)

    def _start(_sig: int, _frame: FrameType | None) -> None:
        if not _installed:
            try:
                _install()
            except Exception as exc:  # noqa: BLE001 - reported to the driver, the node runs on
                with open(os.path.join(os.environ["RAFKA_TIMELINE_DIR"], f"{os.getpid()}.error"), "w") as f:
                    f.write(repr(exc))
                return
            _installed.append(True)
        _events.clear()

    def _dump(_sig: int, _frame: FrameType | None) -> None:
        path = os.path.join(os.environ["RAFKA_TIMELINE_DIR"], f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(list(_events), f)
        os.replace(path + ".tmp", path)  # the driver waits for the file: it appears whole

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _dump)
