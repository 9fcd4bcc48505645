"""rafka as a PySpark data source: ``spark.read/readStream/write/writeStream.format("rafka")``.

Theory of operation
-------------------
``RafkaDataSource`` (``source.py``) validates options (``options.py``) and hands out readers
(``reader.py``) and writers (``sink.py``). Offsets are JSON maps kept only in Spark's checkpoint
(``offsets.py``: building, admission control, range splitting — pure). Executors read offset
ranges straight from partition leaders over a small blocking client (``wire.py``) and turn
record batches into Arrow (``fetch.py``). ``demo.py`` is a runnable example; ``env.py`` sets the
environment it and the Spark benchmark start Spark in.

``RafkaDataSource`` is imported lazily, so the pure modules work without PySpark installed::

    from rafka.spark_source import RafkaDataSource
    spark.dataSource.register(RafkaDataSource)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["RafkaDataSource"]

if TYPE_CHECKING:
    from .source import RafkaDataSource


def __getattr__(name: str) -> Any:
    if name == "RafkaDataSource":
        from .source import RafkaDataSource

        return RafkaDataSource
    raise AttributeError(f"module 'spark_source' has no attribute {name!r}")
