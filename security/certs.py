"""A throw-away certificate authority for local secured clusters (``rafka cluster up --tls``).

Theory of operation
-------------------
``CertAuthority.create()`` makes a self-signed CA (an EC P-256 key, valid ``days``);
``ca.issue(common_name, hosts=..., client=...)`` signs a leaf certificate for a node (server
and client auth, with the host names and IP addresses as subjectAltName) or for a client
(client auth only; its CN is the principal mutual TLS maps it to). Everything is PEM bytes;
``write_node_files`` writes a CA + one node certificate + key to a directory (keys 0600) and
returns their paths, which is what a node's ``[security]`` table points at.

This is for test and local clusters: a real deployment brings certificates from its own CA
and points ``ssl.certfile`` / ``ssl.keyfile`` / ``ssl.cafile`` at them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertAuthority", "IssuedCert", "TlsFiles", "write_node_files"]


@dataclass(frozen=True, slots=True)
class IssuedCert:
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cafile: Path
    certfile: Path
    keyfile: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rafka"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(hosts: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for h in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return out


class CertAuthority:
    """A CA key and certificate that can sign leaf certificates."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.key = key
        self.cert = cert

    @classmethod
    def create(cls, common_name: str = "rafka test CA", *, days: int = 30) -> CertAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, hosts: list[str] | None = None, client: bool = False,
              days: int = 30, not_before: datetime.datetime | None = None) -> IssuedCert:
        """A leaf certificate signed by this CA. ``client``: client auth only (a user's
        certificate for mutual TLS); otherwise server + client auth for ``hosts``."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [
            ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                           critical=False)
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return IssuedCert(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _write(path: Path, data: bytes, *, secret: bool = False) -> Path:
    path.write_bytes(data)
    if secret:
        os.chmod(path, 0o600)
    return path


def write_node_files(directory: str | os.PathLike[str], ca: CertAuthority, common_name: str,
                     hosts: list[str]) -> TlsFiles:
    """``ca.pem``, ``<cn>.pem`` and ``<cn>.key`` (0600) in ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    leaf = ca.issue(common_name, hosts=hosts)
    return TlsFiles(cafile=_write(d / "ca.pem", ca.cert_pem),
                    certfile=_write(d / f"{common_name}.pem", leaf.cert_pem),
                    keyfile=_write(d / f"{common_name}.key", leaf.key_pem, secret=True))
