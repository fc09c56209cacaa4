"""
Endpoint strings that name daemons: one address, or a cluster's list of
them.  Here, below the clients and the daemon, because both read them: the
clients to connect, the daemon to poll its C{[cluster] peers}.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Iterable

from attrs import frozen
from cryptography import x509
from OpenSSL import crypto
from service_identity.cryptography import (
    verify_certificate_hostname,
    verify_certificate_ip_address,
)

from quicx.net.certificates import TlsConfigError, trust_roots

ENDPOINT_KINDS = frozenset({"tcp", "unix", "tls", "ssl"})


def normalize_address(address: str) -> str:
    """An endpoint string as given, or C{tcp:HOST:PORT} for a bare C{HOST:PORT}."""
    return address if address.partition(":")[0] in ENDPOINT_KINDS else f"tcp:{address}"


def split_addresses(addresses: str | Iterable[str]) -> tuple[str, ...]:
    """
    One daemon's address or several: C{"tcp:h1:16381,tcp:h2:16381"} (commas
    separate; spaces around them are ignored) or an iterable of addresses ->
    each address normalized (L{normalize_address}), in the order given.

    The order matters: it is each daemon's place in a cluster, the same for
    every client given the same list.

    @raise ValueError: no address, an empty item, or one daemon named twice.
    """
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    found = tuple(normalize_address(item.strip()) for item in items)
    if not found:
        raise ValueError("no daemon address given")
    if any(item == "tcp:" for item in found):
        raise ValueError(f"{addresses!r}: an empty address in the list")
    repeated = sorted({item for item in found if found.count(item) > 1})
    if repeated:
        raise ValueError(f"{', '.join(repeated)} named twice in the address list")
    return found


@frozen
class TlsOptions:
    """
    How to reach a C{tls:} address, with Twisted's option names.

    @ivar trust_roots: a PEM file or a directory of them holding the CAs to
        trust; empty for the system's.
    @ivar certificate: this client's certificate (PEM), for mutual TLS.
    @ivar private_key: its key (PEM); empty when it is in C{certificate}.
    """

    hostname: str
    trust_roots: str = ""
    certificate: str = ""
    private_key: str = ""

    def context(self) -> ssl.SSLContext:
        """
        The TLS context: the CAs of C{trust_roots} (read as
        L{quicx.net.tls.trust_roots} reads them, as the Twisted client does),
        and this client's certificate.

        @raise TlsConfigError: a file cannot be read or holds no PEM of its kind.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        # Hostname checking is service_identity's job, in wrap.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        if self.trust_roots:
            roots = trust_roots(self.trust_roots)
            context.load_verify_locations(
                cadata="".join(
                    crypto.dump_certificate(crypto.FILETYPE_PEM, root).decode("ascii")
                    for root in roots
                )
            )
        else:
            context.load_default_certs()
        if self.certificate:
            try:
                context.load_cert_chain(self.certificate, self.private_key or None)
            except (OSError, ssl.SSLError) as e:
                raise TlsConfigError(
                    f"{self.certificate}: cannot load the certificate and its key:"
                    f" {e.strerror or e}"
                ) from None
        return context

    def wrap(self, sock: socket.socket, context: ssl.SSLContext | None = None) -> ssl.SSLSocket:
        """
        Handshake over C{sock} and check that the daemon's certificate names
        C{hostname}, with C{service_identity} (as Twisted's clients do).

        @param context: from L{context}; made anew if not given.
        @raise ssl.SSLError: the handshake failed (an untrusted certificate).
        @raise service_identity.VerificationError: it names another host.
        """
        context = context or self.context()
        wrapped = context.wrap_socket(sock, server_hostname=self.hostname)
        try:
            self.verify(wrapped)
        except Exception:
            wrapped.close()
            raise
        return wrapped

    def verify(self, connection: ssl.SSLSocket | ssl.SSLObject) -> None:
        """
        Check that the daemon's certificate, on a C{connection} whose
        handshake is over, names C{hostname} (an asyncio client's, after
        its C{create_connection}: its C{ssl_object}).

        @raise ssl.SSLError: it presented no certificate.
        @raise service_identity.VerificationError: it names another host.
        """
        der = connection.getpeercert(binary_form=True)
        if der is None:  # only where verification is off, which context() never does
            raise ssl.SSLError("the daemon presented no certificate")
        certificate = x509.load_der_x509_certificate(der)
        try:
            ipaddress.ip_address(self.hostname)
        except ValueError:
            verify_certificate_hostname(certificate, self.hostname)
        else:
            verify_certificate_ip_address(certificate, self.hostname)


def parse_address(address: str) -> tuple[int, tuple[str, int] | str, TlsOptions | None]:
    """
    C{tcp:HOST:PORT}, C{tcp:host=HOST:port=PORT}, C{unix:PATH},
    C{unix:path=PATH}, C{tls:HOST:PORT[:trustRoots=PEM][:certificate=PEM]
    [:privateKey=PEM]} or C{HOST:PORT} -> (address family, socket address,
    TLS options or C{None}).

    @raise ValueError: the address is not one of those forms.
    """
    kind, _, rest = normalize_address(address).partition(":")
    if kind not in {"tcp", "unix", "tls"}:
        raise ValueError(f"{address!r}: this client speaks tcp:, tls: and unix: addresses")
    fields = rest.split(":")
    named = dict(f.split("=", 1) for f in fields if "=" in f)
    plain = [f for f in fields if "=" not in f]
    if kind == "unix":
        path = named.get("path") or (plain[0] if plain else "")
        if not path:
            raise ValueError(f"{address!r} names no socket path")
        return socket.AF_UNIX, path, None
    host = named.pop("host", "") or (plain[0] if plain else "")
    port = named.pop("port", "") or (plain[1] if len(plain) > 1 else "")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not {kind}:HOST:PORT")
    if not 0 < int(port) < 65536:
        raise ValueError(f"{address!r}: port {port} is out of range (1 to 65535)")
    if kind == "tcp":
        return socket.AF_UNSPEC, (host, int(port)), None
    options = TlsOptions(
        host,
        named.pop("trustRoots", ""),
        named.pop("certificate", ""),
        named.pop("privateKey", ""),
    )
    if named:
        raise ValueError(f"{address!r}: unknown tls: option {', '.join(sorted(named))}")
    return socket.AF_UNSPEC, (host, int(port)), options
