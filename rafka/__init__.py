"""rafka: a Kafka-style distributed commit log with a Raft (KRaft-style) controller quorum.

Everything installs under this one namespace, so a user's own ``log.py`` or ``client.py`` never
shadows a part of rafka (nor the other way round)::

    from rafka.client import Producer, Consumer, Admin, TopicPartition
    from rafka.spark_source import RafkaDataSource

The repository keeps the design card's folders at its top level (``kraft/``, ``metadata/``,
``log/``, ``broker/``, ``client/``, ``spark_source/``, ``chaos_tests/``) plus ``security/``;
``setup.py`` maps each one to ``rafka.<folder>`` (``package_dir``), so the folder you read is
the module you import.  Inside the code every import is absolute and starts with ``rafka.``.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """``rafka.__version__``, looked up on first use: ``importlib.metadata`` costs a node
    process ~30-90 ms of start-up that it does not need (issue 27, a restart's time)."""
    if name != "__version__":
        raise AttributeError(f"module 'rafka' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("rafka")
    except PackageNotFoundError:  # a source tree that was never installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value
