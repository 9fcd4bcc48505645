"""rafka partition log storage: batch codec, segments, indexes, recovery, retention, compaction.

Theory of operation: see ``log/partition_log.py`` (the storage engine), ``log/batch.py`` (the
record batch format of docs/internals.md section 1). The package is synchronous; the flush policy
and group commit (fsync in a worker thread via ``PartitionLog.flush``, which is thread-safe) live
in the broker's ``ReplicaManager``, next to the partitions' durable ends they advance.
"""

from .batch import BatchHeader, Record, build_batch, decode_records
from .compaction import CompactionResult, compact
from .config import LogConfig
from .errors import *  # noqa: F403 - the error classes are part of the package surface
from .errors import __all__ as _errors_all
from .partition_log import AppendInfo, FetchSlice, PartitionLog

__all__ = ["PartitionLog", "AppendInfo", "FetchSlice", "LogConfig", "compact",
           "CompactionResult", "BatchHeader", "Record", "build_batch", "decode_records",
           *_errors_all]
