"""Stream and batch readers of the ``rafka`` data source.

Theory of operation
-------------------
Offsets live only in Spark's checkpoint (``rafka.spark_source.offsets`` explains their JSON form).
On the driver a long-lived ``RafkaStreamReader`` answers three questions per micro-batch:

* ``initialOffset`` — where a new query starts (``startingOffsets`` / ``startingTimestamp``),
  computed once and cached because Spark asks twice;
* ``latestOffset(start, limit)`` — where the next batch ends: the high watermarks — the last
  stable offsets with ``isolation.level`` read_committed, the default — (never beyond, so a
  batch never waits for records that are not committed), cut by admission control
  (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` + ``maxTriggerDelay``) and, under
  ``Trigger.AvailableNow``, by the target fixed in ``prepareForTriggerAvailableNow``. Partitions
  discovered since ``start`` start at their earliest offset. ``start`` itself is returned when
  there is nothing to do, so Spark plans no batch;
* ``partitions(start, end)`` — one ``RangePartition`` per partition range, split further for
  ``minPartitions``. Spark may call it on restart for a batch planned before the crash, with no
  ``latestOffset`` call: it depends only on its arguments (and, for a new partition, on its
  earliest offset).

``read(partition)`` runs on executors in a separate process: it opens its own connections from
the plain options kept on the reader, reads exactly ``[start, end)`` and yields Arrow batches.
A replayed batch reads the same ranges again, so a deterministic sink sees each record once.

Data loss (``failOnDataLoss``): a partition that disappeared, or whose next offset has been
deleted by retention, fails the query with a message naming topic, partition and the missing
range — at planning time on the driver when it can be seen there, otherwise in ``read()``.
With ``failOnDataLoss=false`` the loss is logged and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from .fetch import DataLossError, loss_handler, read_range
from .offsets import (
    OffsetMap,
    OffsetRange,
    TopicPartition,
    admit,
    backlog,
    from_json_offset,
    min_rows_ready,
    ranges_between,
    split_ranges,
    to_json_offset,
)
from .options import EARLIEST, LATEST, OptionError, Position, SourceOptions
from .wire import Cluster

__all__ = ["RangePartition", "RafkaStreamReader", "RafkaBatchReader", "discover_partitions",
           "resolve_position"]

log = logging.getLogger("spark_source")


class RangePartition(InputPartition):
    """One Spark task: records ``[start, end)`` of one rafka partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def discover_partitions(cluster: Cluster, opts: SourceOptions) -> list[TopicPartition]:
    """Every existing partition the subscription covers, sorted."""
    if opts.strategy == "subscribe":
        found = cluster.refresh(opts.topics)
    elif opts.strategy == "subscribePattern":
        found = {t: ps for t, ps in cluster.refresh(None).items() if opts.matches(t)}
    else:
        found = cluster.refresh(sorted({t for t, _ in opts.assignment}))
        wanted = set(opts.assignment)
        found = {t: [p for p in ps if (t, p) in wanted] for t, ps in found.items()}
    return sorted((t, p) for t, ps in found.items() for p in ps)


def resolve_position(cluster: Cluster, pos: Position, tps: Sequence[TopicPartition], *,
                     name: str, strategy: str = "error", no_match: int = LATEST) -> OffsetMap:
    """Offsets of ``pos`` for every partition in ``tps`` (missing partitions are skipped)."""
    if not tps:
        return {}
    if pos.kind in ("earliest", "latest"):
        return cluster.list_offsets({tp: EARLIEST if pos.kind == "earliest" else LATEST
                                     for tp in tps})
    if pos.kind == "timestamp":
        query = {tp: pos.timestamp for tp in tps}
    else:
        missing = [f"{t}-{p}" for t, p in tps if p not in pos.offsets.get(t, {})]
        if missing:
            raise OptionError(f"option {name}: no entry for partition(s) {', '.join(missing)}; "
                              f"give every partition of the subscription")
        query = {tp: pos.offsets[tp[0]][tp[1]] for tp in tps}
    if pos.kind == "offsets":
        out = {tp: v for tp, v in query.items() if v >= 0}
        symbolic = {tp: v for tp, v in query.items() if v < 0}
        out.update(cluster.list_offsets(symbolic))
        return out
    found = cluster.list_offsets(query)  # timestamps
    out = {}
    latest: OffsetMap | None = None
    for tp, off in found.items():
        if off >= 0:
            out[tp] = off
            continue
        if strategy == "error" and no_match == LATEST and name.startswith("starting"):
            raise OptionError(f"option {name}: no record at or after timestamp {query[tp]} in "
                              f"{tp[0]}-{tp[1]} (set startingOffsetsByTimestampStrategy=latest "
                              f"to start at the latest offset instead)")
        if latest is None:
            latest = cluster.list_offsets(dict.fromkeys(found, LATEST))
        out[tp] = latest.get(tp, 0)
    return out


class _Base:
    """What both readers share: options, a lazily opened driver-side cluster, and ``read``."""

    opts: SourceOptions

    def _cluster_(self) -> Cluster:
        c = getattr(self, "_cluster", None)
        if c is None:
            c = self._cluster = Cluster(self.opts.bootstrap_servers,
                                        timeout_ms=self.opts.request_timeout_ms,
                                        isolation_level=self.opts.isolation_level,
                                        security=self.opts.security)
        return c

    def __getstate__(self) -> dict[str, Any]:
        # picklable: plain options only; connections are reopened where they are used
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    def _ranges(self, start: OffsetMap, end: OffsetMap) -> list[RangePartition]:
        ranges = ranges_between(start, end)
        return [RangePartition(r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition), partition
        opts = self.opts
        with Cluster(opts.bootstrap_servers, timeout_ms=opts.request_timeout_ms,
                     isolation_level=opts.isolation_level, security=opts.security) as cluster:
            yield from read_range(cluster, partition.range, include_headers=opts.include_headers,
                                  on_loss=loss_handler(opts.fail_on_data_loss),
                                  fetch_max_bytes=opts.fetch_max_bytes)

    def _loss(self, what: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(what + ". Set the source option failOnDataLoss to false to "
                                "skip lost records with a warning instead of failing the query.")
        log.warning("%s; skipping (failOnDataLoss=false)", what)


class RafkaStreamReader(_Base, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._cluster: Cluster | None = None
        self._initial: dict[str, dict[str, int]] | None = None
        self._target: OffsetMap | None = None         # Trigger.AvailableNow
        self._last_trigger_ms = time.time() * 1000

    def initialOffset(self) -> dict:
        if self._initial is None:
            cluster = self._cluster_()
            tps = discover_partitions(cluster, self.opts)
            offsets = resolve_position(cluster, self.opts.starting, tps, name="startingOffsets",
                                       strategy=self.opts.timestamp_strategy)
            self._initial = to_json_offset(offsets)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        cluster = self._cluster_()
        self._target = cluster.list_offsets(
            dict.fromkeys(discover_partitions(cluster, self.opts), LATEST))
        log.info("Trigger.AvailableNow: reading up to %s", to_json_offset(self._target))

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        if isinstance(limit, ReadAllAvailable):
            return None, None
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        min_rows = (limit.min_rows if isinstance(limit, ReadMinRows)
                    else self.opts.min_offsets_per_trigger)
        if self._target is not None:
            min_rows = None  # AvailableNow must reach its target, never wait for more
        return max_rows, min_rows

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        cluster = self._cluster_()
        begin = from_json_offset(start)
        tps = discover_partitions(cluster, self.opts)
        latest = cluster.list_offsets(dict.fromkeys(tps, LATEST))
        earliest = cluster.list_offsets(dict.fromkeys(tps, EARLIEST))
        for tp in sorted(set(begin) - set(latest)):
            self._loss(f"data loss in topic {tp[0]!r} partition {tp[1]}: the partition no longer "
                       f"exists (deleted?); offsets from {begin[tp]} on were not read")
        full = dict(begin)
        for tp in sorted(latest):
            if tp not in full:          # discovered since start: read from its earliest
                full[tp] = earliest.get(tp, 0)
                log.info("new partition %s-%d starts at offset %d", tp[0], tp[1], full[tp])
            elif tp in earliest and full[tp] < earliest[tp]:
                self._loss(f"data loss in topic {tp[0]!r} partition {tp[1]}: offsets "
                           f"[{full[tp]}, {earliest[tp]}) were deleted by retention before "
                           f"they were read")
        top = {tp: max(latest[tp], full[tp]) for tp in latest}   # a high watermark may lag
        if self._target is not None:                             # after a leader change
            top = {tp: min(o, max(self._target.get(tp, full[tp]), full[tp]))
                   for tp, o in top.items()}
        begin_full = {tp: full[tp] for tp in top}
        max_rows, min_rows = self._limits(limit)
        now_ms = time.time() * 1000
        if not min_rows_ready(backlog(begin_full, top), min_rows, self._last_trigger_ms, now_ms,
                              self.opts.max_trigger_delay_ms):
            return start
        end = admit(begin_full, top, max_rows)
        if backlog(begin_full, end) == 0:   # (new but empty partitions alone make no batch)
            return start
        self._last_trigger_ms = now_ms
        return to_json_offset(end)

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = from_json_offset(start), from_json_offset(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self._cluster_().list_offsets(dict.fromkeys(new, EARLIEST)))
        for tp in sorted(stop):
            if tp in begin and stop[tp] < begin[tp]:
                self._loss(f"data loss in topic {tp[0]!r} partition {tp[1]}: the offset went "
                           f"back from {begin[tp]} to {stop[tp]}")
        return self._ranges(begin, stop)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in rafka."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


class RafkaBatchReader(_Base, DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._cluster: Cluster | None = None

    def partitions(self) -> Sequence[InputPartition]:
        cluster = self._cluster_()
        try:
            tps = discover_partitions(cluster, self.opts)
            starting = self.opts.starting if self.opts.starting.kind != "latest" \
                else Position("earliest")
            start = resolve_position(cluster, starting, tps, name="startingOffsets",
                                     strategy=self.opts.timestamp_strategy)
            end = resolve_position(cluster, self.opts.ending, tps, name="endingOffsets",
                                   strategy="latest")
        finally:
            cluster.close()
            self._cluster = None
        for tp in sorted(end):
            if tp in start and end[tp] < start[tp]:
                raise OptionError(f"startingOffsets ({start[tp]}) is after endingOffsets "
                                  f"({end[tp]}) for {tp[0]}-{tp[1]}")
        parts = self._ranges(start, end)
        return parts or [RangePartition(OffsetRange("", 0, 0, 0))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, RangePartition) and partition.range.size == 0:
            return iter(())
        return super().read(partition)
