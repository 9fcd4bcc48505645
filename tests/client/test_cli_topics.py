"""The CLI lines kafka-topics / kafka-configs / rpk users reach for first (issue 15):
``rafka --version``, ``topic alter-config --set/--delete``, ``topic add-partitions --to`` and
``topic describe --all-configs`` (effective configs, defaults marked), on a real one-node cluster
(``conftest.bootstrap``), each as a user runs it, in a subprocess.
"""

from __future__ import annotations

import json
import re

from rafka.client.cli.topic import effective_configs, format_configs

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


def test_alter_config_set_and_delete(bootstrap: str, topic_name: str) -> None:
    assert rafka("topic", "create", topic_name, "--bootstrap", bootstrap).returncode == 0
    before = _configs(bootstrap, topic_name)
    assert before["retention.ms"]["default"] is True and before

    r = rafka("topic", "alter-config", topic_name, "--set", "retention.ms=1234",
              "--set", "segment.bytes=2097152", "--bootstrap", bootstrap)
    assert r.returncode == 0, r.stderr
    after = _configs(bootstrap, topic_name)
    assert after["retention.ms"] == {"name": "retention.ms", "value": "1234", "default": False}
    assert str(after["segment.bytes"]["value"]) == "2097152" and after["segment.bytes"]["default"] is False
    r = rafka("topic", "describe", topic_name, "--all-configs", "--bootstrap", bootstrap)
    lines = r.stdout.decode().splitlines()
    assert any(re.fullmatch(r"\s+retention\.ms\s+= 1234", x) for x in lines), lines
    assert any(x.endswith("(default)") for x in lines), lines

    r = rafka("topic", "alter-config", topic_name, "--delete", "retention.ms", "--bootstrap", bootstrap)
    assert r.returncode == 0, r.stderr
    again = _configs(bootstrap, topic_name)
    assert again["retention.ms"] == before["retention.ms"]
    assert again["segment.bytes"]["default"] is False

    r = rafka("topic", "alter-config", topic_name, "--set", "no.such.setting=1", "--bootstrap", bootstrap)
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and "INVALID_CONFIG" in err[0], err
    r = rafka("topic", "alter-config", topic_name, "--bootstrap", bootstrap)
    assert r.returncode == 2 and b"nothing to change" in r.stderr


def test_add_partitions(bootstrap: str, topic_name: str) -> None:
    assert rafka("topic", "create", topic_name, "-p", "2", "--bootstrap", bootstrap).returncode == 0
    r = rafka("topic", "add-partitions", topic_name, "--to", "5", "--bootstrap", bootstrap)
    assert r.returncode == 0, r.stderr
    assert "2 → 5 partitions" in r.stdout.decode()
    r = rafka("topic", "describe", topic_name, "--json", "--bootstrap", bootstrap)
    assert [p["partition"] for p in json.loads(r.stdout)["partitions"]] == [0, 1, 2, 3, 4]
    r = rafka("topic", "add-partitions", topic_name, "--to", "3", "--bootstrap", bootstrap)
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and "INVALID_PARTITIONS" in err[0], err
