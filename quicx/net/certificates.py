"""
Certificates: reading PEM files, naming a peer by its certificate, and who
may take which role.  No Twisted here: the blocking client reads its trust
roots with these, as the daemon and the Twisted client do (L{quicx.net.tls}).
"""

from __future__ import annotations

from pathlib import Path

from attrs import frozen
from cryptography.x509.oid import NameOID
from OpenSSL import crypto


class TlsConfigError(ValueError):
    """The [tls] settings cannot be used."""


@frozen
class Authorization:
    """
    Which certificate identities may take each role (C{None}: any verified).
    """

    producers: frozenset[str] | None = None
    workers: frozenset[str] | None = None
    monitors: frozenset[str] | None = None
    admins: frozenset[str] | None = None

    def allows(self, identity: str | None, role: str) -> bool:
        """
        Whether C{identity} may act as C{role} (producer, worker, monitor,
        admin).  Unlike the other roles, admin is nobody's unless listed.
        """
        allowed: frozenset[str] | None = getattr(self, f"{role}s")
        if allowed is None:
            return role != "admin"
        return identity in allowed


def _read(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TlsConfigError(f"{path}: {e.strerror}") from None


def _pem_blocks(text: bytes) -> list[bytes]:
    return [
        block[block.index(b"-----BEGIN CERTIFICATE-----") :] + b"-----END CERTIFICATE-----\n"
        for block in text.split(b"-----END CERTIFICATE-----")
        if b"-----BEGIN CERTIFICATE-----" in block
    ]


def _load(path: str | Path, blocks: list[bytes]) -> list[crypto.X509]:
    try:
        return [crypto.load_certificate(crypto.FILETYPE_PEM, block) for block in blocks]
    except crypto.Error as e:
        raise TlsConfigError(f"{path}: not a PEM certificate: {e}") from None


def read_certificates(path: str | Path) -> list[crypto.X509]:
    """Every certificate in the PEM file at C{path}, in order (a chain, a bundle)."""
    blocks = _pem_blocks(_read(path))
    if not blocks:
        raise TlsConfigError(f"{path}: no PEM certificate in it")
    return _load(path, blocks)


def read_private_key(path: str) -> crypto.PKey:
    try:
        return crypto.load_privatekey(crypto.FILETYPE_PEM, _read(path))
    except crypto.Error as e:
        raise TlsConfigError(f"{path}: cannot load the private key: {e}") from None


def trust_roots(path: str) -> list[crypto.X509]:
    """
    The CA certificates a client trusts: every one in the PEM file C{path}
    (one certificate or a bundle of them), or in each C{.pem} and C{.crt}
    file of the directory C{path}.  Both clients read C{trustRoots=} so.

    @raise TlsConfigError: C{path} cannot be read, or holds no certificate.
    """
    if not Path(path).is_dir():
        return read_certificates(path)
    found: list[crypto.X509] = []
    for file in sorted(Path(path).iterdir()):
        if file.suffix in {".pem", ".crt"} and file.is_file():
            # A key or anything else next to the certificates is passed over.
            found += _load(file, _pem_blocks(_read(file)))
    if not found:
        raise TlsConfigError(f"{path}: no .pem or .crt file in it holds a certificate")
    return found


def common_name(certificate: crypto.X509) -> str | None:
    names = certificate.to_cryptography().subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


def describe_certificate(certificate: crypto.X509 | None) -> str:
    """
    How a refusal names a peer: by its identity, or by why it has none (no
    certificate at all, or one whose subject has no common name).
    """
    if certificate is None:
        return "a peer without a certificate"
    name = common_name(certificate)
    if name:
        return f"identity {name!r}"
    subject = certificate.to_cryptography().subject.rfc4514_string()
    return (
        f"a certificate without a common name (CN) in its subject ({subject or 'empty'}),"
        " so with no identity,"
    )


def identities(text: str) -> frozenset[str]:
    """C{"billing, mailer"} -> the set of names."""
    return frozenset(name.strip() for name in text.split(",") if name.strip())
