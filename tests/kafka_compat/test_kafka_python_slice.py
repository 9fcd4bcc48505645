"""The part of kafka-python's own integration suite that ``make test`` runs (issue 23).

``make test-kafka-compat`` runs all of ``test/integration`` from kafka-python's sdist against
rafka's Kafka listeners: the plain part on a one-node cluster, the SASL/SSL part on a secured
node (~90 s, most of it kafka-python retrying the PLAIN-over-plaintext logins rafka refuses by
design). This runs the plain part — producer, consumer and admin tests, ~20 s — through the same
runner and the same ``known_failures.txt``, so a change that breaks what an unmodified Kafka
client does fails the default suite, not only the long run. The runner fetches the sdist from
the package registry once (cached under ``.venv``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("kafka") is None,
                                reason="kafka-python is a test dependency: make install")

def _runner():
    spec = importlib.util.spec_from_file_location(
        "run_kafka_python_suite", Path(__file__).with_name("run_kafka_python_suite.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kafka_python_integration_suite_passes_against_rafka(capsys):
    rc = _runner().main(["--part", "plain"])
    out = capsys.readouterr().out
    assert rc == 0, out
    # the runner found and ran the sdist's tests: a selection that collected nothing is a failure
    assert " passed" in out and "NEW " not in out, out
