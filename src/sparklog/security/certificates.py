"""A certificate authority and the certificates it signs, as PEM files: what ``sparklog up --secure``
writes under its data directory, and what tests use. Built with the ``cryptography`` package."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 825  # the most browsers accept for a leaf certificate; plenty for a local cluster
CA_VALID_DAYS = 3650


@dataclasses.dataclass(frozen=True)
class CertificateFiles:
    """Where a certificate and its private key were written (PEM)."""

    certificate: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sparklog"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CertificateAuthority:
    """A CA key and self-signed certificate, which signs server and client certificates."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, certificate: x509.Certificate) -> None:
        self.key = key
        self.certificate = certificate

    @classmethod
    def create(cls, common_name: str = "sparklog CA") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_VALID_DAYS))
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
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @classmethod
    def load(cls, files: CertificateFiles) -> CertificateAuthority:
        key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{files.key} does not hold an EC private key")
        return cls(key, x509.load_pem_x509_certificate(files.certificate.read_bytes()))

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, name: str = "ca") -> CertificateFiles:
        files = CertificateFiles(directory / f"{name}.pem", directory / f"{name}-key.pem")
        _write(files.certificate, self.pem)
        _write(files.key, _key_pem(self.key), private=True)
        return files

    def issue(
        self, common_name: str, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), client: bool = True
    ) -> tuple[bytes, bytes]:
        """A certificate for ``common_name`` valid for ``hosts`` (DNS names or IP addresses), usable
        by a server and, with ``client``, by a client (mutual TLS): (certificate PEM, key PEM)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        return certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def issue_files(
        self, directory: Path, name: str, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), client: bool = True
    ) -> CertificateFiles:
        certificate, key = self.issue(name, hosts, client)
        files = CertificateFiles(directory / f"{name}.pem", directory / f"{name}-key.pem")
        _write(files.certificate, certificate)
        _write(files.key, key, private=True)
        return files


def certificate_name(pem: bytes) -> str:
    """The name gRPC gives a peer presenting this certificate over mutual TLS (what Flight's
    ``peer_identity`` holds): its first DNS subject alternative name, else its first IP one, else
    its common name."""
    certificate = x509.load_pem_x509_certificate(pem)
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        names = None
    if names is not None:
        for kind in (x509.DNSName, x509.IPAddress):
            found = names.get_values_for_type(kind)
            if found:
                return str(found[0])
    common = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common[0].value) if common else ""
