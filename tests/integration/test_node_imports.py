"""A node process does not import Hypothesis (rafka/node.py, ``_keep_test_tools_out``).

kio, the Kafka listener's codec, imports ``hypothesis.strategies`` whenever Hypothesis is
installed (it is, in every venv with the test extras), and importing Hypothesis switches trio's
scheduler into its deterministic test mode for the whole process. The test starts a real node
with its Kafka listener under ``PYTHONPROFILEIMPORTTIME=1`` and reads the node's own import
trace from its stdout log: kio must be there (the listener's codec was loaded, so the trace
shows what it imported), the Hypothesis package must not.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import pytest

from tests.integration.conftest import wait_until


def _imported(trace: str) -> set[str]:
    # "import time:  self [us] | cumulative | <indent>module" — one line per module imported
    return {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)\s*$",
                                            trace, re.MULTILINE)}


def test_a_node_with_a_kafka_listener_does_not_import_hypothesis(
        cluster_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert importlib.util.find_spec("hypothesis") is not None, \
        "Hypothesis is a test dependency: without it this test would prove nothing"
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # inherited by cluster up's nodes
    c = cluster_factory(1)
    node = c.info()["nodes"][0]
    assert node.get("kafka"), "the node has no Kafka listener, so kio was never imported"
    log = c.data_dir / "node-1" / "stdout.log"

    def traced_kio() -> set[str] | None:
        modules = _imported(log.read_text(errors="replace"))
        return modules if "kio.static.primitive" in modules else None

    modules = wait_until(traced_kio, "the node's import trace names kio", 30)
    assert "kio.schema.request_header.v1.header" in modules
    # kio still *tries* ``import hypothesis.strategies`` (the trace lists the attempt, which
    # fails at once); what must not happen is the package itself being imported, since its
    # ``__init__`` is what runs the entry-point plugins, trio's among them
    assert "hypothesis" not in modules, \
        "the node imported Hypothesis, which puts trio's scheduler in its test mode"
    assert not {m for m in modules if m.startswith("hypothesis._internal")}
