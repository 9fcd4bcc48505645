"""Node config: defaults, Kafka names, and wrong configs as one clear line (never a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rafka.broker.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "node_id": 1, "roles": ["broker", "controller"], "data_dir": "/tmp/x",
    "listener": "127.0.0.1:9092", "raft_listener": "127.0.0.1:19092",
    "voters": [{"id": 1, "raft": "127.0.0.1:19092", "rpc": "127.0.0.1:9092"}],
}


def test_defaults_and_overrides():
    cfg = parse_config({**BASE, "broker": {"log.flush.policy": "none", "num.partitions": "3"}})
    assert cfg.broker["log.flush.policy"] == "none" and cfg.broker["num.partitions"] == 3
    assert cfg.broker["max.inflight.requests.per.connection"] == 64
    assert cfg.topic_defaults()["segment.bytes"] == 1 << 30
    assert cfg.is_broker and cfg.is_controller and cfg.listener == ("127.0.0.1", 9092)


@pytest.mark.parametrize("change, key", [
    ({"broker": {"log.flush.policy": "sometimes"}}, "broker.log.flush.policy"),
    ({"broker": {"no.such.setting": 1}}, "broker.no.such.setting"),
    ({"listener": "nonsense"}, "listener"),
    ({"node_id": "one"}, "node_id"),
    ({"roles": ["cook"]}, "roles"),
    ({"voters": []}, "voters"),
    ({"bogus": 1}, "bogus"),
])
def test_errors_name_the_key(change, key):
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, **change}, "n.toml")
    assert e.value.key == key and "n.toml" in str(e.value)


def test_multi_voter_quorum_needs_a_secret(tmp_path):
    voters = [{"id": i, "raft": f"127.0.0.1:{19000 + i}", "rpc": f"127.0.0.1:{9000 + i}"} for i in (1, 2, 3)]
    with pytest.raises(ConfigError, match="cluster_secret"):
        parse_config({**BASE, "voters": voters})
    secret = tmp_path / "s"
    secret.write_text("abc\n")
    cfg = parse_config({**BASE, "voters": voters, "cluster_secret_file": str(secret)})
    assert cfg.cluster_secret == "abc"


def test_bad_config_file_exits_nonzero_without_traceback(tmp_path):
    bad = tmp_path / "node.toml"
    bad.write_text('node_id = 1\ndata_dir = "d"\nlistener = "127.0.0.1:1"\n[broker]\n"log.flush.policy" = 7\n'
                   '[[voters]]\nid = 1\nraft = "127.0.0.1:2"\nrpc = "127.0.0.1:1"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "rafka.node", "--config", str(bad)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2
    assert "raft_listener" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(ConfigError, match="not valid TOML"):
        bad.write_text("node_id = = 1")
        load_config(bad)


def test_secured_kafka_listeners(tmp_path):
    """kafka.sasl_plaintext_listener / ssl_listener / sasl_ssl_listener (docs/kafka-compat.md
    "Security"): they take [security]'s settings, so they need the table (and TLS its files)."""
    sec = {"listener": "127.0.0.1:9193", "protocol": "SASL_PLAINTEXT"}
    cfg = parse_config({**BASE, "security": sec, "kafka": {
        "listener": "127.0.0.1:9292", "sasl_plaintext_listener": "127.0.0.1:9293",
        "sasl_mechanisms": ["SCRAM-SHA-512"]}}, "n.toml", base_dir=tmp_path)
    assert cfg.kafka_listener == ("127.0.0.1", 9292)
    assert cfg.kafka_secured_listeners == (("SASL_PLAINTEXT", ("127.0.0.1", 9293)),)
    assert cfg.kafka_sasl_mechanisms == ("SCRAM-SHA-512",)
    assert parse_config(BASE).kafka_sasl_mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
    for raw, key in [
        ({"kafka": {"sasl_plaintext_listener": "127.0.0.1:1"}}, "kafka.sasl_plaintext_listener"),
        ({"kafka": {"ssl_listener": "127.0.0.1:1"}, "security": sec}, "kafka.ssl_listener"),
        ({"kafka": {"sasl_ssl_listener": "nonsense"}}, "kafka.sasl_ssl_listener"),
        ({"kafka": {"sasl_mechanisms": ["GSSAPI"]}}, "kafka.sasl_mechanisms"),
        ({"kafka": {"tls_listener": "127.0.0.1:1"}}, "kafka"),
    ]:
        with pytest.raises(ConfigError) as e:
            parse_config({**BASE, **raw}, "n.toml", base_dir=tmp_path)
        assert e.value.key == key, (raw, e.value)
