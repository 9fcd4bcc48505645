"""How every client command of the ``rafka`` CLI reaches the cluster: ``--bootstrap`` and the
security options, declared once.

Theory of operation
-------------------
``connection_options`` is a click decorator: it adds ``--bootstrap`` (env ``RAFKA_BOOTSTRAP``)
and the security options below to a command, and runs the command inside
``security.client.ambient_security(...)``, so every client the command builds (``Admin``,
``Producer``, ``Consumer``, ``ClientCore``…) connects with them — the command bodies do not
change. Every command of ``client/cli/`` takes it (``_common.command_options``); so does
``rafka console``.

Where a setting comes from, strongest first: the command line, the environment, the
``--command-config FILE`` (a Java-style ``.properties`` file as Kafka's tools take, e.g. the
``admin.properties`` that ``rafka cluster up --auth`` writes), then the defaults.

============================  ==============================================  =====================
option                        env                                             properties key
============================  ==============================================  =====================
``--bootstrap``               ``RAFKA_BOOTSTRAP``                             ``bootstrap.servers``
``--security-protocol``       ``RAFKA_SECURITY_PROTOCOL``                     ``security.protocol``
``--user``                    ``RAFKA_SASL_USERNAME`` (or ``RAFKA_USER``)     ``sasl.username``
``--password-file``           ``RAFKA_SASL_PASSWORD_FILE``                    ``sasl.password``
``--password`` (deprecated)   ``RAFKA_SASL_PASSWORD`` (or ``RAFKA_PASSWORD``)
``--sasl-mechanism``          ``RAFKA_SASL_MECHANISM``                        ``sasl.mechanism``
``--tls-ca``                  ``RAFKA_SSL_CAFILE`` (or ``RAFKA_TLS_CA``)      ``ssl.cafile``
``--tls-cert`` / ``--tls-key``  ``RAFKA_SSL_CERTFILE`` / ``RAFKA_SSL_KEYFILE``  ``ssl.certfile`` / ``ssl.keyfile``
``--command-config``          ``RAFKA_COMMAND_CONFIG``
``--timeout``                 ``RAFKA_TIMEOUT``                               ``socket.connection.setup.timeout.ms``
============================  ==============================================  =====================

``--timeout SECONDS`` (default 10) bounds how long a command tries to reach the cluster: a
connection attempt, and the whole bootstrap (no address answering) of every client the command
builds, after which it fails naming each address tried and why (``wire.connection``'s
ambient setup timeout; Kafka's ``socket.connection.setup.timeout.ms``).

The properties file also takes Kafka's ``sasl.jaas.config`` (``username="…" password="…"``)
and librdkafka's ``ssl.ca.location`` / ``ssl.certificate.location`` / ``ssl.key.location``;
relative paths are relative to the file. Without a protocol anywhere it is inferred: a user
and a CA → ``SASL_SSL``, a user alone → ``SASL_PLAINTEXT``, a CA alone → ``SSL``, else
``PLAINTEXT``. An unreadable file or an unknown key is a usage error naming it.

Passwords stay out of argv (``ps``, shell history; issue 24): ``--password`` still works but
prints a deprecation warning; use ``--password-file`` (a file of mode 0600 — group or other
bits are a usage error), the environment, or ``sasl.password`` in a ``--command-config`` file
(a warning if that file is readable by others). With none of them and a terminal on stdin,
the command prompts for the password without echo.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rafka.security.client import ambient_security
from rafka.wire.connection import CONNECTION_SETUP_TIMEOUT_MS, ambient_setup_timeout

__all__ = ["connection_options", "read_properties", "settings_from_properties",
           "client_settings", "read_password_file", "DEFAULT_BOOTSTRAP"]

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
PROTOCOLS = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]

# properties key -> our setting name (kafka-python's keyword, or "bootstrap")
_PROPERTY_KEYS = {
    "bootstrap.servers": "bootstrap",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.cafile": "ssl_cafile", "ssl.ca.location": "ssl_cafile",
    "ssl.certfile": "ssl_certfile", "ssl.certificate.location": "ssl_certfile",
    "ssl.keyfile": "ssl_keyfile", "ssl.key.location": "ssl_keyfile",
    "ssl.check.hostname": "ssl_check_hostname",
    "ssl.endpoint.identification.algorithm": "ssl_check_hostname",
    "sasl.jaas.config": "jaas",
    "socket.connection.setup.timeout.ms": "setup_timeout_ms",
}
_PATH_SETTINGS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def read_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` text: ``key=value`` or ``key: value`` lines, ``#`` / ``!``
    comments, a trailing backslash continues a line. Values are taken literally otherwise."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if m is None:  # a key alone: an empty value, as Java's Properties
            out[line] = ""
            continue
        out[m.group(1)] = m.group(2)
    return out


def settings_from_properties(props: dict[str, str], base: Path, source: str) -> dict[str, Any]:
    """Our settings from a properties map; ``click.UsageError`` naming an unknown key."""
    out: dict[str, Any] = {}
    for key, value in props.items():
        name = _PROPERTY_KEYS.get(key)
        if name is None:
            raise click.UsageError(f"{source}: unknown setting {key!r} "
                                   f"(known: {', '.join(sorted(_PROPERTY_KEYS))})")
        if name == "jaas":
            fields = dict(_JAAS_FIELD.findall(value))
            if "username" in fields:
                out.setdefault("sasl_plain_username", fields["username"].replace('\\"', '"'))
            if "password" in fields:
                out.setdefault("sasl_plain_password", fields["password"].replace('\\"', '"'))
        elif name == "ssl_check_hostname":
            v = value.strip().lower()
            out[name] = v in ("true", "https", "1", "yes") if key == "ssl.check.hostname" else v == "https"
        elif name in _PATH_SETTINGS and value:
            p = Path(value).expanduser()
            out[name] = str(p if p.is_absolute() else base / p)
        else:
            out[name] = value
    return out


def _load_file(path: str) -> dict[str, Any]:
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {p}: {exc.strerror or exc}",
                                 param_hint="--command-config") from None
    out = settings_from_properties(read_properties(text), p.resolve().parent, str(p))
    if out.get("sasl_plain_password") is not None and _others_can_read(p):
        click.echo(f"warning: {p} holds a password and is readable by other users "
                   f"(chmod 600 {p})", err=True)
    return out


def _others_can_read(p: Path) -> bool:
    try:
        return bool(p.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False


def read_password_file(path: str) -> str:
    """The password in ``path`` (its first line), which must be mode 0600 or stricter."""
    p = Path(path).expanduser()
    if _others_can_read(p):
        raise click.BadParameter(f"{p} is readable by other users: chmod 600 {p}",
                                 param_hint="--password-file")
    try:
        lines = p.read_text().splitlines()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {p}: {exc.strerror or exc}",
                                 param_hint="--password-file") from None
    return lines[0] if lines else ""


def _password_given(password: str | None, password_file: str | None) -> str | None:
    """The password from --password-file, else --password / its env vars (a warning when it
    came on the command line)."""
    if password_file:
        return read_password_file(password_file)
    ctx = click.get_current_context(silent=True)
    if password is not None and ctx is not None and \
            ctx.get_parameter_source("sasl_plain_password") == click.core.ParameterSource.COMMANDLINE:
        click.echo("warning: --password puts the password in the process list and shell history; "
                   "it is deprecated: use --password-file, RAFKA_SASL_PASSWORD or a prompt",
                   err=True)
    return password


def client_settings(given: dict[str, Any], file_settings: dict[str, Any]) -> dict[str, Any]:
    """kafka-python keyword arguments from the given options (None: not given) over the file's
    settings; the protocol inferred when nobody said it (see the module docstring)."""
    merged = {**file_settings, **{k: v for k, v in given.items() if v is not None}}
    merged.pop("bootstrap", None)
    merged.pop("setup_timeout_ms", None)
    proto = merged.get("security_protocol")
    if not proto:
        sasl = bool(merged.get("sasl_plain_username"))
        tls = bool(merged.get("ssl_cafile") or merged.get("ssl_certfile"))
        proto = ("SASL_" if sasl else "") + ("SSL" if tls else "PLAINTEXT")
    proto = str(proto).upper()
    if proto not in PROTOCOLS:
        raise click.BadParameter(f"must be one of {', '.join(PROTOCOLS)}, got {proto!r}",
                                 param_hint="--security-protocol / security.protocol")
    out: dict[str, Any] = {"security_protocol": proto}
    if proto.startswith("SASL"):
        out["sasl_mechanism"] = str(merged.get("sasl_mechanism") or "SCRAM-SHA-256").upper()
        out["sasl_plain_username"] = merged.get("sasl_plain_username")
        out["sasl_plain_password"] = merged.get("sasl_plain_password")
        if out["sasl_plain_username"] and out["sasl_plain_password"] is None and _interactive():
            out["sasl_plain_password"] = click.prompt(f"password for {out['sasl_plain_username']}",
                                                      hide_input=True, err=True)
        if not out["sasl_plain_username"] or out["sasl_plain_password"] is None:
            raise click.UsageError(f"security protocol {proto} needs --user and --password "
                                   "(or RAFKA_SASL_USERNAME / RAFKA_SASL_PASSWORD, or "
                                   "sasl.username / sasl.password in --command-config)")
    if proto.endswith("SSL"):
        for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname"):
            if merged.get(k) is not None:
                out[k] = merged[k]
    return out


def _interactive() -> bool:
    return sys.stdin.isatty() and os.environ.get("RAFKA_NO_PROMPT") is None


_GIVEN = ("security_protocol", "sasl_plain_username", "sasl_plain_password", "sasl_mechanism",
          "ssl_cafile", "ssl_certfile", "ssl_keyfile")


def connection_options(fn: F) -> F:
    """``--bootstrap`` + the security options (module docstring); the command gets ``bootstrap``
    and runs with the security settings ambient for every client it builds."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        command_config = kwargs.pop("command_config")
        timeout_s = kwargs.pop("connect_timeout_s")
        given = {k: kwargs.pop(k) for k in _GIVEN}
        given["sasl_plain_password"] = _password_given(given["sasl_plain_password"],
                                                       kwargs.pop("password_file"))
        file_settings = _load_file(command_config) if command_config else {}
        ctx = click.get_current_context(silent=True)
        from_default = ctx is not None and ctx.get_parameter_source("bootstrap") in (
            click.core.ParameterSource.DEFAULT, None)
        if from_default and file_settings.get("bootstrap"):
            kwargs["bootstrap"] = file_settings["bootstrap"]
        if timeout_s is not None:
            timeout_ms = int(timeout_s * 1000)
        else:
            timeout_ms = int(file_settings.get("setup_timeout_ms") or CONNECTION_SETUP_TIMEOUT_MS)
        with ambient_security(client_settings(given, file_settings)), ambient_setup_timeout(timeout_ms):
            return fn(*args, **kwargs)

    opts = [
        click.option("--bootstrap", envvar="RAFKA_BOOTSTRAP", default=DEFAULT_BOOTSTRAP,
                     show_default=True,
                     help="HOST:PORT[,HOST:PORT] of any brokers (env RAFKA_BOOTSTRAP; or "
                          "bootstrap.servers in --command-config)."),
        click.option("--command-config", envvar="RAFKA_COMMAND_CONFIG", metavar="FILE",
                     help="Client settings as Kafka's .properties (security.protocol, "
                          "sasl.username, sasl.password, ssl.cafile, ...; env RAFKA_COMMAND_CONFIG)."),
        click.option("--timeout", "connect_timeout_s", envvar="RAFKA_TIMEOUT", metavar="SECONDS",
                     type=click.FloatRange(min=0.1), default=None,
                     help=f"Give up reaching the cluster after this long, naming each address "
                          f"tried (default {CONNECTION_SETUP_TIMEOUT_MS // 1000}; env RAFKA_TIMEOUT)."),
        click.option("--security-protocol", "security_protocol", envvar="RAFKA_SECURITY_PROTOCOL",
                     type=click.Choice(PROTOCOLS, case_sensitive=False),
                     help="Default: inferred (--user and --tls-ca: SASL_SSL; env RAFKA_SECURITY_PROTOCOL)."),
        click.option("--user", "sasl_plain_username", envvar=["RAFKA_SASL_USERNAME", "RAFKA_USER"],
                     help="SASL/SCRAM user (env RAFKA_SASL_USERNAME)."),
        click.option("--password-file", "password_file", envvar="RAFKA_SASL_PASSWORD_FILE",
                     metavar="FILE",
                     help="File (mode 0600) whose first line is the SASL/SCRAM password (env "
                          "RAFKA_SASL_PASSWORD_FILE). Without any password: a prompt on a terminal."),
        click.option("--password", "sasl_plain_password",
                     envvar=["RAFKA_SASL_PASSWORD", "RAFKA_PASSWORD"],
                     help="Deprecated (visible in ps and shell history): SASL/SCRAM password; "
                          "prefer env RAFKA_SASL_PASSWORD or --password-file."),
        click.option("--sasl-mechanism", "sasl_mechanism", envvar="RAFKA_SASL_MECHANISM",
                     type=click.Choice(MECHANISMS, case_sensitive=False),
                     help="Default SCRAM-SHA-256 (env RAFKA_SASL_MECHANISM)."),
        click.option("--tls-ca", "ssl_cafile", envvar=["RAFKA_SSL_CAFILE", "RAFKA_TLS_CA"],
                     help="CA file that signed the brokers' certificates (env RAFKA_SSL_CAFILE)."),
        click.option("--tls-cert", "ssl_certfile", envvar="RAFKA_SSL_CERTFILE",
                     help="Client certificate, for mutual TLS (env RAFKA_SSL_CERTFILE)."),
        click.option("--tls-key", "ssl_keyfile", envvar="RAFKA_SSL_KEYFILE",
                     help="Client key, for mutual TLS (env RAFKA_SSL_KEYFILE)."),
    ]
    decorated: Any = wrapper
    for opt in reversed(opts):
        decorated = opt(decorated)
    return decorated  # type: ignore[no-any-return]
