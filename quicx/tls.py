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
from OpenSSL import crypto
from twisted.internet import ssl
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.interfaces import IStreamServerEndpoint


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
        key_path = self.private_key or self.certificate
        try:
            key = crypto.load_privatekey(crypto.FILETYPE_PEM, Path(key_path).read_bytes())
        except (OSError, crypto.Error) as e:
            raise TlsConfigError(f"{key_path}: cannot load the private key: {e}") from None
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


def _read_certificates(path: str) -> list[crypto.X509]:
    try:
        text = Path(path).read_bytes()
    except OSError as e:
        raise TlsConfigError(f"{path}: {e.strerror}") from None
    blocks = [
        block + b"-----END CERTIFICATE-----\n"
        for block in text.split(b"-----END CERTIFICATE-----")
        if b"-----BEGIN CERTIFICATE-----" in block
    ]
    if not blocks:
        raise TlsConfigError(f"{path}: no PEM certificate in it")
    try:
        return [crypto.load_certificate(crypto.FILETYPE_PEM, block) for block in blocks]
    except crypto.Error as e:
        raise TlsConfigError(f"{path}: not a PEM certificate: {e}") from None


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


def peer_identity(transport: Any) -> str | None:
    """The CN of the peer's verified certificate, or C{None} without one."""
    get = getattr(transport, "getPeerCertificate", None)
    certificate = get() if get is not None else None
    if certificate is None:
        return None
    name: str | None = certificate.get_subject().commonName
    return name


def identities(text: str) -> frozenset[str]:
    """C{"billing, mailer"} -> the set of names."""
    return frozenset(name.strip() for name in text.split(",") if name.strip())
