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

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rafka")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
