"""The environment a Spark driver started from this tree needs (the demo, the Spark benchmark).

Call ``spark_env(root)`` before the first ``SparkSession`` is built: PySpark reads it when it
starts the JVM and its Python workers. It points ``JAVA_HOME`` at Java 17 when unset and
installed, runs the workers with this interpreter, binds Spark to 127.0.0.1 unless
``SPARK_LOCAL_IP`` says otherwise, and puts ``root`` first on ``PYTHONPATH`` so that the
workers import rafka from this tree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["JAVA17_HOME", "spark_env"]

JAVA17_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"


def spark_env(root: Path) -> None:
    if not os.environ.get("JAVA_HOME") and Path(JAVA17_HOME).exists():
        os.environ["JAVA_HOME"] = JAVA17_HOME
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
