"""Throwaway TLS material for the local stack and tests: a CA, server and client certs.

Never for production: keys are unencrypted files, certificates live a week.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["DevCerts", "make_dev_certs"]


@dataclass(frozen=True)
class DevCerts:
    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_name: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    server: bool,
    hosts: list[str],
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if hosts:
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(ca_key, hashes.SHA256())


def make_dev_certs(
    directory: Path, *, hosts: list[str] | None = None, client_name: str = "memq-dev-client"
) -> DevCerts:
    """Write ``ca.pem``, ``server.pem``/``server.key`` (for ``hosts``, default
    127.0.0.1 and localhost) and ``client.pem``/``client.key`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    hosts = hosts or ["127.0.0.1", "localhost"]
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("memq dev CA (throwaway)"))
        .issuer_name(_name("memq dev CA (throwaway)"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    out = DevCerts(
        ca_file=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        client_name=client_name,
    )
    out.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for cert_path, key_path, cn, server in (
        (out.server_cert, out.server_key, "memq-broker", True),
        (out.client_cert, out.client_key, client_name, False),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(cn, key, ca, ca_key, server=server, hosts=hosts if server else [])
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
    return out
