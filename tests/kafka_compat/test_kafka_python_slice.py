"""The short slice of kafka-python's own integration suite that ``make test`` runs (issue 23).

``make test-kafka-compat`` runs all of ``test/integration`` from kafka-python's sdist against a
rafka cluster's Kafka listener; this runs its producer and consumer modules through the same
runner (a one-node ``rafka cluster up``, the same ``known_failures.txt``), so a change that
breaks what an unmodified Kafka client does fails the default suite, not only the long run.
The runner fetches the sdist from the package registry once (cached under ``.venv``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("kafka") is None,
                                reason="kafka-python is a test dependency: make install")

SLICE = ["test/integration/test_producer_integration.py",
         "test/integration/test_consumer_integration.py"]


def _runner():
    spec = importlib.util.spec_from_file_location(
        "run_kafka_python_suite", Path(__file__).with_name("run_kafka_python_suite.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kafka_python_producer_and_consumer_suites_pass_against_rafka(capsys):
    rc = _runner().main(["--part", "plain", *SLICE])
    out = capsys.readouterr().out
    assert rc == 0, out
    # the runner found and ran the sdist's tests: a selection that collected nothing is a failure
    assert " passed" in out and "NEW " not in out, out
