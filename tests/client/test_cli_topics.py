"""The CLI lines kafka-topics / kafka-configs / rpk users reach for first (issue 15):
``rafka --version``, ``topic alter-config --set/--delete``, ``topic add-partitions --to`` and
``topic describe --all-configs`` (effective configs, defaults marked), on a real one-node cluster
(``conftest.bootstrap``), each as a user runs it, in a subprocess.
"""

from __future__ import annotations

import json
import re

from client.topic_cli import effective_configs, format_configs

from .conftest import rafka


def test_version() -> None:
    r = rafka("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"rafka \d+\.\d+\.\d+\S*\n", r.stdout.decode()), r.stdout


def test_effective_configs_mark_defaults() -> None:
    rows = effective_configs({"retention.ms": 604800000, "cleanup.policy": "delete"}, {"retention.ms": "1000"})
    assert rows == [{"name": "cleanup.policy", "value": "delete", "default": True},
                    {"name": "retention.ms", "value": "1000", "default": False}]
    assert format_configs(rows) == ["    cleanup.policy = delete  (default)", "    retention.ms   = 1000"]


def _configs(bootstrap: str, topic: str) -> dict[str, dict[str, object]]:
    r = rafka("topic", "describe", topic, "--all-configs", "--json", "--bootstrap", bootstrap)
    assert r.returncode == 0, r.stderr
    return {c["name"]: c for c in json.loads(r.stdout)["effective_configs"]}


def test_describe_all_configs(bootstrap: str, topic_name: str) -> None:
    r = rafka("topic", "create", topic_name, "--config", "retention.ms=1234", "--bootstrap", bootstrap)
    assert r.returncode == 0, r.stderr
    configs = _configs(bootstrap, topic_name)
    assert configs["retention.ms"] == {"name": "retention.ms", "value": "1234", "default": False}
    assert len(configs) > 1 and all(c["default"] for n, c in configs.items() if n != "retention.ms")
    lines = rafka("topic", "describe", topic_name, "--all-configs", "--bootstrap", bootstrap).stdout.decode()
    assert "  configs:" in lines and "(default)" in lines
