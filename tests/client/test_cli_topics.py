"""The CLI lines kafka-topics / kafka-configs / rpk users reach for first (issue 15):
``rafka --version``, ``topic alter-config --set/--delete``, ``topic add-partitions --to`` and
``topic describe --all-configs`` (effective configs, defaults marked), on a real one-node cluster
(``conftest.bootstrap``), each as a user runs it, in a subprocess.
"""

from __future__ import annotations

import re

from .conftest import rafka


def test_version() -> None:
    r = rafka("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"rafka \d+\.\d+\.\d+\S*\n", r.stdout.decode()), r.stdout


