"""
Certificates made at test time: certificate authorities, a daemon certificate
for a host name, client certificates named by their common name.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class Authority:
    """A CA that writes its certificate and the ones it issues under C{directory}."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.subject = subject
        self.certificate = (
            self._builder(subject, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.path = directory / f"{name}.pem"
        self.path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def _builder(self, subject: x509.Name, public_key: object) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.subject if hasattr(self, "subject") else subject)
            .public_key(public_key)  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def issue(
        self, common_name: str, hosts: tuple[str, ...] = (), organization: str = ""
    ) -> tuple[Path, Path]:
        """
        A certificate for C{common_name} (and C{hosts}, for a server); with
        C{common_name} empty, one whose subject holds only C{organization}.
        """
        key = ec.generate_private_key(ec.SECP256R1())
        names = (
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
        )
        if common_name:
            names.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        subject = x509.Name(names)
        builder = self._builder(subject, key.public_key())
        if hosts:
            alternatives: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    alternatives.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    alternatives.append(x509.DNSName(host))
            alternative = x509.SubjectAlternativeName(alternatives)
            builder = builder.add_extension(alternative, critical=False)
            usage = ExtendedKeyUsageOID.SERVER_AUTH
        else:
            usage = ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        stem = self.directory / f"{self.name}-{common_name or organization or 'nameless'}"
        cert_path, key_path = stem.with_suffix(".crt"), stem.with_suffix(".key")
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_path, key_path
