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

from typing import Any

from attrs import field, frozen
from OpenSSL import crypto
from twisted.internet import ssl
from twisted.internet.endpoints import (
    HostnameEndpoint,
    SSL4ServerEndpoint,
    clientFromString,
    wrapClientTLS,
)
from twisted.internet.interfaces import (
    IOpenSSLClientConnectionCreator,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)

from quicx.net.addresses import normalize_address, parse_address
from quicx.net.certificates import (
    Authorization,
    TlsConfigError,
    common_name,
    describe_certificate,
    read_certificates,
    read_private_key,
    trust_roots,
)


@frozen
class TlsSettings:
    """The [tls] section."""

    certificate: str = ""
    private_key: str = ""
    client_ca: str = ""
    authorization: Authorization = field(factory=Authorization)

    def context_factory(self) -> ssl.CertificateOptions:
        """
        The server's TLS options: its certificate and, with C{client_ca}, the
        requirement that clients present one it signed.

        @raise TlsConfigError: a file is missing or not PEM.
        """
        if not self.certificate:
            raise TlsConfigError("a tls: listener needs [tls] certificate")
        chain = read_certificates(self.certificate)
        key = read_private_key(self.private_key or self.certificate)
        options: dict[str, Any] = {}
        if self.client_ca:
            options.update(
                verify=True,
                requireCertificate=True,
                caCerts=read_certificates(self.client_ca),
            )
        return ssl.CertificateOptions(
            privateKey=key,
            certificate=chain[0],
            extraCertChain=chain[1:],
            **options,
        )


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
            ssl.Certificate(read_certificates(certificate)[0]),
            ssl.KeyPair(read_private_key(private_key or certificate)),
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
    return None if certificate is None else common_name(certificate)


def describe_peer(transport: Any) -> str:
    """How a refusal names the peer on C{transport}: see L{describe_certificate}."""
    return describe_certificate(_peer_certificate(transport))


def client_endpoint(reactor: Any, address: str) -> IStreamClientEndpoint:
    """
    A client endpoint for C{address}: an endpoint string (C{tcp:HOST:PORT},
    C{unix:PATH}, C{tls:HOST:PORT}) or a bare C{HOST:PORT}.  The Twisted
    clients connect with it, and the daemon to poll its C{[cluster] peers}.

    A C{tls:} address takes the blocking client's options, read the same way:
    C{trustRoots=} may name a PEM bundle as well as a directory (Twisted's
    own C{tls:} parser takes only a directory, and one certificate a file).

    @raise ValueError: a malformed C{tls:} address, or a
        L{quicx.net.tls.TlsConfigError} for a file it names.
    """
    address = normalize_address(address)
    if not address.startswith("tls:"):
        endpoint: IStreamClientEndpoint = clientFromString(reactor, address)
        return endpoint
    _, sockaddr, options = parse_address(address)
    assert isinstance(sockaddr, tuple) and options is not None
    host, port = sockaddr
    creator = client_tls(host, options.trust_roots, options.certificate, options.private_key)
    return wrapClientTLS(creator, HostnameEndpoint(reactor, host, port))
