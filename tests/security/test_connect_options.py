"""The CLI's shared connection options (client/connect_options.py), without a broker: the
properties file, precedence, inference, and that every client command takes them and hands
them to the clients it builds (security.client.ambient_security)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rafka.client.connect_options import (
    client_settings,
    connection_options,
    read_properties,
    settings_from_properties,
)
from rafka.security.client import ClientSecurity, ambient_security

from rafka.cli import main


def test_read_properties_as_java_does():
    text = "# comment\n! also\nsecurity.protocol=SASL_SSL\nsasl.username : admin\n" \
           "sasl.password = a=b:c\nssl.cafile=tls/\\\n  ca.pem\n\nbare\n"
    assert read_properties(text) == {"security.protocol": "SASL_SSL", "sasl.username": "admin",
                                     "sasl.password": "a=b:c", "ssl.cafile": "tls/ca.pem",
                                     "bare": ""}


def test_properties_settings_jaas_and_relative_paths(tmp_path):
    props = {"sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                 'required username="admin" password="p\\"w";',
             "ssl.ca.location": "tls/ca.pem", "ssl.endpoint.identification.algorithm": "",
             "bootstrap.servers": "h:1"}
    s = settings_from_properties(props, tmp_path, "f")
    assert s == {"sasl_plain_username": "admin", "sasl_plain_password": 'p"w',
                 "ssl_cafile": str(tmp_path / "tls/ca.pem"), "ssl_check_hostname": False,
                 "bootstrap": "h:1"}
    with pytest.raises(click.UsageError, match="unknown setting 'sasl.usr'"):
        settings_from_properties({"sasl.usr": "x"}, tmp_path, "f")


def test_protocol_inferred_and_options_beat_the_file():
    assert client_settings({}, {}) == {"security_protocol": "PLAINTEXT"}
    assert client_settings({"ssl_cafile": "ca"}, {})["security_protocol"] == "SSL"
    s = client_settings({"sasl_plain_username": "bob", "sasl_plain_password": "x"}, {})
    assert s["security_protocol"] == "SASL_PLAINTEXT" and s["sasl_mechanism"] == "SCRAM-SHA-256"
    s = client_settings({"sasl_plain_username": "alice", "sasl_plain_password": None},
                        {"security_protocol": "sasl_ssl", "sasl_plain_username": "admin",
                         "sasl_plain_password": "pw", "ssl_cafile": "/ca.pem", "bootstrap": "x"})
    assert s == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                 "sasl_plain_username": "alice", "sasl_plain_password": "pw",
                 "ssl_cafile": "/ca.pem"}
    with pytest.raises(click.UsageError, match="needs --user and --password"):
        client_settings({"security_protocol": "SASL_SSL"}, {})


def test_ambient_security_reaches_a_client_built_without_options():
    assert ClientSecurity.from_kwargs({}) is None
    with ambient_security({"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "u",
                           "sasl_plain_password": "p"}):
        sec = ClientSecurity.from_kwargs({})
        assert sec is not None and sec.username == "u" and sec.uses_sasl
        assert ClientSecurity.from_kwargs({"security_protocol": "PLAINTEXT"}) is None  # explicit wins
    assert ClientSecurity.from_kwargs({}) is None


@click.command()
@connection_options
def _probe(bootstrap: str) -> None:
    sec = ClientSecurity.from_kwargs({})
    click.echo(f"{bootstrap} {sec.protocol if sec else 'PLAINTEXT'} {sec.username if sec else '-'}")


def test_file_env_and_options_reach_the_command(tmp_path: Path):
    cfg = tmp_path / "admin.properties"
    cfg.write_text("bootstrap.servers=10.0.0.1:39092\nsecurity.protocol=SASL_PLAINTEXT\n"
                   "sasl.username=admin\nsasl.password=pw\n")
    cfg.chmod(0o600)  # it holds a password: readable by others would add a warning
    r = CliRunner()
    assert r.invoke(_probe, ["--command-config", str(cfg)]).output == "10.0.0.1:39092 SASL_PLAINTEXT admin\n"
    out = r.invoke(_probe, ["--command-config", str(cfg), "--bootstrap", "h:2", "--user", "alice"])
    assert out.output == "h:2 SASL_PLAINTEXT alice\n"
    out = r.invoke(_probe, [], env={"RAFKA_SASL_USERNAME": "carol", "RAFKA_SASL_PASSWORD": "x",
                                    "RAFKA_COMMAND_CONFIG": str(cfg)})
    assert out.output == "10.0.0.1:39092 SASL_PLAINTEXT carol\n"
    out = r.invoke(_probe, ["--command-config", str(tmp_path / "missing")])
    assert out.exit_code == 2 and "cannot read" in out.output


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out |= _commands(cmd, f"{prefix}{name} ")
        else:
            out[f"{prefix}{name}"] = cmd
    return out


def test_every_client_command_takes_the_security_options():
    cmds = _commands(main)
    wanted = [n for n in cmds if n.split()[0] in
              ("produce", "consume", "topic", "group", "transactions", "quorum", "user", "acl")]
    assert {"produce", "consume", "topic create", "group list", "transactions list",
            "quorum describe", "user create", "acl add"} <= set(wanted)
    for name in wanted:
        opts = {o for p in cmds[name].params for o in p.opts}
        assert {"--bootstrap", "--command-config", "--security-protocol", "--user", "--password",
                "--tls-ca"} <= opts, name


def test_passwords_stay_out_of_argv(tmp_path: Path):
    """Issue 24: --password-file must be 0600; --password warns; a terminal gets a prompt."""
    r = CliRunner()
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    pw.chmod(0o644)
    out = r.invoke(_probe, ["--user", "alice", "--password-file", str(pw)])
    assert out.exit_code == 2 and "chmod 600" in out.output
    pw.chmod(0o600)
    out = r.invoke(_probe, ["--user", "alice", "--password-file", str(pw)])
    assert out.exit_code == 0 and "SASL_PLAINTEXT alice" in out.output
    out = r.invoke(_probe, ["--user", "alice", "--password", "x"])
    assert out.exit_code == 0 and "deprecated" in out.stderr
    out = r.invoke(_probe, ["--user", "alice"], env={"RAFKA_SASL_PASSWORD": "x"})
    assert out.exit_code == 0 and "deprecated" not in out.stderr


def test_a_missing_password_is_prompted_for_on_a_terminal(monkeypatch):
    import rafka.client.connect_options as co

    monkeypatch.setattr(co, "_interactive", lambda: True)
    monkeypatch.setattr(click, "prompt", lambda text, **kw: "typed" if kw.get("hide_input") else None)
    s = client_settings({"sasl_plain_username": "alice", "sasl_plain_password": None}, {})
    assert s["sasl_plain_password"] == "typed"
