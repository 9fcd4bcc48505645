"""``rafka chaos run --secure``: node configs and certificates for each backend (no nodes run).

The real secured campaign is ``test_campaign.py::test_short_secure_campaign_is_valid``.
"""

from __future__ import annotations

import ipaddress
import ssl
import tomllib

import pytest
import trio
from cryptography import x509
from rafka.broker.config import parse_config
from rafka.chaos_tests.campaign import make_cluster
from rafka.chaos_tests.secure import (
    ADMIN_USER,
    SECURE_PORT,
    WORKLOAD_PREFIX,
    WORKLOAD_USER,
    SecureCluster,
    workload_acls,
)
from rafka.metadata.security import AclEntry
from rafka.security.acl import Authorizer, validate_entry
from rafka.security.client import ClientSecurity


def _sans(pem: bytes) -> set[str]:
    cert = x509.load_pem_x509_certificate(pem)
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ({str(ip) for ip in ext.get_values_for_type(x509.IPAddress)}
            | set(ext.get_values_for_type(x509.DNSName)))


@pytest.mark.parametrize("backend_name", ["local", "netns", "docker"])
def test_secure_configs_and_certificates(tmp_path, backend_name):
    work = tmp_path / "w"
    sec = SecureCluster.create(work)
    backend = make_cluster(backend_name, work, 3, security=sec)
    hosts = []
    for n in (1, 2, 3):
        raw = tomllib.loads((work / f"node-{n}.toml").read_text())
        cfg = parse_config(raw, f"node-{n}.toml", base_dir=work)
        s = cfg.security
        host = backend.node_host(n)
        hosts.append(host)
        # its own IP, next to the main listener; the full SASL_SSL + authorizer setup
        assert s.listener == (host, SECURE_PORT)
        assert cfg.listener == (host, 9092)
        assert s.protocol == "SASL_SSL"
        assert s.authorizer is True and s.super_users == (f"User:{ADMIN_USER}",)
        # the certificate names every address a client dials this node by, and chains to the CA
        pem = sec.files[n].certfile.read_bytes()
        sans = _sans(pem)
        assert host in sans and backend.node_address(n)[0] in sans
        x509.load_pem_x509_certificate(pem).verify_directly_issued_by(
            x509.load_pem_x509_certificate(sec.cafile.read_bytes()))
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(str(sec.files[n].certfile), str(sec.files[n].keyfile))
        assert oct(sec.files[n].keyfile.stat().st_mode & 0o777) == "0o600"
        ipaddress.ip_address(host)  # every backend gives nodes an IP of their own
    assert len(set(hosts)) == 3
    assert sec.bootstrap() == ",".join(f"{h}:{SECURE_PORT}" for h in hosts)
    opts = sec.client_options()
    assert opts["security_protocol"] == "SASL_SSL"
    assert opts["sasl_plain_username"] == WORKLOAD_USER
    assert ClientSecurity.from_kwargs(opts).uses_tls  # the options a client really accepts
    # passwords stay out of the results
    assert sec.passwords[WORKLOAD_USER] not in repr(sec.notes())
    assert oct((sec.directory / "users.json").stat().st_mode & 0o777) == "0o600"


def test_without_secure_nothing_changes(tmp_path):
    make_cluster("local", tmp_path, 3)
    raw = tomllib.loads((tmp_path / "node-1.toml").read_text())
    assert "security" not in raw
    assert not (tmp_path / "tls").exists()


def test_workload_acls_allow_the_workloads_and_nothing_else():
    entries = [AclEntry(**{"host": "*", **a}) for a in workload_acls()]
    assert [validate_entry(e) for e in entries] == [None] * len(entries)
    auth = Authorizer(entries, ())
    me = f"User:{WORKLOAD_USER}"
    for op, rtype, name in [("write", "topic", "chaos-queue"), ("read", "topic", "chaos-txn-in"),
                            ("create", "topic", "chaos-meta-7"), ("delete", "topic", "chaos-meta-7"),
                            ("read", "group", "chaos-group"), ("write", "transactional_id",
                                                                "chaos-txn-0"),
                            ("idempotent_write", "cluster", "rafka-cluster"),
                            ("describe", "cluster", "rafka-cluster")]:
        assert auth.authorize(me, "127.0.0.1", op, rtype, name), (op, rtype, name)
    for op, rtype, name in [("write", "topic", "other"), ("read", "group", "billing"),
                            ("alter", "cluster", "rafka-cluster"),
                            ("cluster_action", "cluster", "rafka-cluster"),
                            # the coordinator lookup needs no right on the internal topics
                            ("describe", "topic", "__consumer_offsets"),
                            ("describe", "topic", "__transaction_state"),
                            ("create", "topic", "__consumer_offsets"),
                            ("write", "topic", "__consumer_offsets"),
                            ("read", "topic", "__transaction_state"),
                            ("delete", "topic", "__consumer_offsets")]:
        assert not auth.authorize(me, "127.0.0.1", op, rtype, name), (op, rtype, name)
    assert not auth.authorize("User:mallory", "127.0.0.1", "write", "topic", "chaos-queue")
    assert WORKLOAD_PREFIX == "chaos-"


async def test_create_principals_gives_up_at_its_deadline(tmp_path):
    """Nothing listens: a bounded retry, not a hang."""
    sec = SecureCluster.create(tmp_path)
    with pytest.raises(trio.TooSlowError):
        await sec.create_principals("127.0.0.1:1", timeout_s=1.0)
