"""Test-time certificates, secret files and a stranger's ZooKeeper client.

Certificates are made fresh per test with ``cryptography``: no private key is committed.
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


def write_secret(path: Path, text: str) -> Path:
    """A file only its owner may read, as secrets should be."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA nobody trusts
    stranger_cert: Path  # a client certificate signed by other_ca
    stranger_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    cn: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca: x509.Certificate,
    names: tuple[str, ...] = ("localhost", "127.0.0.1"),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([_general_name(n) for n in names]),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write(
    folder: Path, stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> tuple[Path, Path]:
    cert_path = folder / f"{stem}.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key_path = write_secret(folder / f"{stem}.key", key_pem.decode())
    return cert_path, key_path


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca = _ca("nimbus test CA")
    other_key, other = _ca("untrusted CA")
    server_cert, server_key = _write(folder, "server", *_leaf("replica", ca_key, ca))
    client_cert, client_key = _write(folder, "client", *_leaf("operator", ca_key, ca))
    stranger_cert, stranger_key = _write(folder, "stranger", *_leaf("stranger", other_key, other))
    ca_path = folder / "ca.crt"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    other_path = folder / "other-ca.crt"
    other_path.write_bytes(other.public_bytes(serialization.Encoding.PEM))
    return Pki(
        ca_path, server_cert, server_key, client_cert, client_key, other_path,
        stranger_cert, stranger_key,
    )  # fmt: skip


def make_server_pki(folder: Path, *names: str) -> tuple[Path, Path, Path]:
    """A fresh CA (``ca.crt``) and a server certificate naming only ``names``
    (``tls.crt``, ``tls.key``, mode 600): the files of ``deploy/containers/up --secrets``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca = _ca("nimbus test CA")
    key, cert = _leaf("replica", ca_key, ca, names)
    cert_path, key_path = _write(folder, "tls", key, cert)
    ca_path = folder / "ca.crt"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return ca_path, cert_path, key_path
