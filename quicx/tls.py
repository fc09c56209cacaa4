"""
TLS: the daemon's C{tls:} listeners, client certificates, and who may do what.

    [tls]
    certificate = /etc/quicx/server.pem      # the daemon's chain, PEM
    private_key = /etc/quicx/server.key
    client_ca   = /etc/quicx/clients-ca.pem  # require client certificates
    producers   = billing, mailer            # identities that may SUBMIT
    workers     = worker                     # ... that may READY
    monitors    = grafana                    # ... that may ask STATS

    [server]
    listen = tls:16382:interface=0.0.0.0

A client's identity is the common name (CN) of its certificate's subject.
Without C{client_ca} the daemon asks for no certificate, and the role lists
cannot be used.  A list left out lets every verified client take that role.
C{ssl:} endpoint strings (Twisted's own) also work, for TLS without client
certificates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attrs import frozen
from cryptography.x509.oid import NameOID
from OpenSSL import crypto
from twisted.internet import ssl
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator, IStreamServerEndpoint


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

    def allows(self, identity: str | None, role: str) -> bool:
        """Whether C{identity} may act as C{role} (producer, worker, monitor)."""
        allowed: frozenset[str] | None = getattr(self, f"{role}s")
        return allowed is None or identity in allowed


@frozen
class TlsSettings:
    """The [tls] section."""

    certificate: str = ""
    private_key: str = ""
    client_ca: str = ""
    authorization: Authorization = Authorization()

    def context_factory(self) -> ssl.CertificateOptions:
        """
        The server's TLS options: its certificate and, with C{client_ca}, the
        requirement that clients present one it signed.

        @raise TlsConfigError: a file is missing or not PEM.
        """
        if not self.certificate:
            raise TlsConfigError("a tls: listener needs [tls] certificate")
        chain = _read_certificates(self.certificate)
        key = _read_private_key(self.private_key or self.certificate)
        options: dict[str, Any] = {}
        if self.client_ca:
            options.update(
                verify=True,
                requireCertificate=True,
                caCerts=_read_certificates(self.client_ca),
            )
        return ssl.CertificateOptions(
            privateKey=key,
            certificate=chain[0],
            extraCertChain=chain[1:],
            **options,
        )


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


def _read_certificates(path: str | Path) -> list[crypto.X509]:
    """Every certificate in the PEM file at C{path}, in order (a chain, a bundle)."""
    blocks = _pem_blocks(_read(path))
    if not blocks:
        raise TlsConfigError(f"{path}: no PEM certificate in it")
    return _load(path, blocks)


def _read_private_key(path: str) -> crypto.PKey:
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
        return _read_certificates(path)
    found: list[crypto.X509] = []
    for file in sorted(Path(path).iterdir()):
        if file.suffix in {".pem", ".crt"} and file.is_file():
            # A key or anything else next to the certificates is passed over.
            found += _load(file, _pem_blocks(_read(file)))
    if not found:
        raise TlsConfigError(f"{path}: no .pem or .crt file in it holds a certificate")
    return found


def client_tls(
    hostname: str, trust_roots_path: str = "", certificate: str = "", private_key: str = ""
) -> IOpenSSLClientConnectionCreator:
    """
    Twisted's client TLS options for a C{tls:} address: trust the CAs at
    C{trust_roots_path} (see L{trust_roots}; the system's when empty),
    present C{certificate} (with C{private_key}, or the key in it), and check
    that the daemon's certificate names C{hostname}.

    @raise TlsConfigError: a file cannot be read or holds no PEM of its kind.
    """
    trust = None
    if trust_roots_path:
        trust = ssl.trustRootFromCertificates(
            [ssl.Certificate(root) for root in trust_roots(trust_roots_path)]
        )
    client = None
    if certificate:
        client = ssl.PrivateCertificate.fromCertificateAndKeyPair(
            ssl.Certificate(_read_certificates(certificate)[0]),
            ssl.KeyPair(_read_private_key(private_key or certificate)),
        )
    return ssl.optionsForClientTLS(hostname, trustRoot=trust, clientCertificate=client)


def tls_endpoint(reactor: Any, description: str, settings: TlsSettings) -> IStreamServerEndpoint:
    """
    The endpoint for C{tls:PORT[:interface=HOST][:backlog=N]}.

    @raise TlsConfigError: the description or the [tls] settings are unusable.
    """
    fields = description.split(":")[1:]
    named = dict(field.split("=", 1) for field in fields if "=" in field)
    plain = [field for field in fields if "=" not in field]
    port = named.pop("port", plain[0] if plain else "")
    if not port.isdigit():
        raise TlsConfigError(f"{description!r} is not tls:PORT[:interface=HOST]")
    interface = named.pop("interface", "")
    backlog = int(named.pop("backlog", "50"))
    if named:
        raise TlsConfigError(f"{description!r}: unknown option {', '.join(named)}")
    return SSL4ServerEndpoint(
        reactor, int(port), settings.context_factory(), backlog=backlog, interface=interface
    )


def _peer_certificate(transport: Any) -> crypto.X509 | None:
    get = getattr(transport, "getPeerCertificate", None)
    return get() if get is not None else None


def peer_identity(transport: Any) -> str | None:
    """The CN of the peer's verified certificate, or C{None} without one."""
    certificate = _peer_certificate(transport)
    return None if certificate is None else _common_name(certificate)


def _common_name(certificate: crypto.X509) -> str | None:
    names = certificate.to_cryptography().subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


def describe_peer(transport: Any) -> str:
    """How a refusal names the peer on C{transport}: see L{describe_certificate}."""
    return describe_certificate(_peer_certificate(transport))


def describe_certificate(certificate: crypto.X509 | None) -> str:
    """
    How a refusal names a peer: by its identity, or by why it has none (no
    certificate at all, or one whose subject has no common name).
    """
    if certificate is None:
        return "a peer without a certificate"
    name = _common_name(certificate)
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
