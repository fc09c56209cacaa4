"""
Addresses: how a client names the daemon it talks to.

An address is a Twisted endpoint string (C{tcp:HOST:PORT}, C{unix:PATH},
C{tls:HOST:PORT[:trustRoots=PEM][:certificate=PEM][:privateKey=PEM]}) or a
bare C{HOST:PORT}.  Both clients and the C{quicx} command read them here;
nothing in this module imports Twisted.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl

from attrs import frozen
from cryptography import x509
from OpenSSL import crypto
from service_identity.cryptography import (
    verify_certificate_hostname,
    verify_certificate_ip_address,
)

# Re-exported: the clients' names for them since before they moved down.
from quicx.net.addresses import ENDPOINT_KINDS as ENDPOINT_KINDS
from quicx.net.addresses import normalize_address as normalize_address
from quicx.net.addresses import split_addresses as split_addresses
from quicx.net.certificates import TlsConfigError, trust_roots
from quicx.protocol import monitor, v2, wire

ADDRESS_VARIABLE = "QUICX_ADDRESS"
"""The environment variable naming the daemon's address (see L{default_address})."""

DEFAULT_ADDRESS = "tcp:127.0.0.1:16381"

CLIENT_MAX_LENGTH = wire.MAX_PAYLOAD + v2.SUBMIT_OVERHEAD + 1024
"""The largest frame a client accepts: a version-2 TASK of the largest possible
class, with its queue and context."""
CLIENT_TYPE_LIMITS: dict[int, int] = {v2.MessageType.EVENTS: monitor.MAX_EVENTS_FRAME}
"""Larger limits for some version-2 frames: EVENTS with one long line."""


def as_bytes(value: str | bytes) -> bytes:
    """Task types and payloads may be given as text (encoded UTF-8) or bytes."""
    return value.encode("utf-8") if isinstance(value, str) else value


def default_address() -> str:
    """
    C{$QUICX_ADDRESS} if set, else L{DEFAULT_ADDRESS}: one address, or a
    list of them (see L{split_addresses}).
    """
    return os.environ.get(ADDRESS_VARIABLE) or DEFAULT_ADDRESS


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
            der = wrapped.getpeercert(binary_form=True)
            if der is None:  # only where verification is off, which context() never does
                raise ssl.SSLError("the daemon presented no certificate")
            certificate = x509.load_der_x509_certificate(der)
            try:
                ipaddress.ip_address(self.hostname)
            except ValueError:
                verify_certificate_hostname(certificate, self.hostname)
            else:
                verify_certificate_ip_address(certificate, self.hostname)
        except Exception:
            wrapped.close()
            raise
        return wrapped


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
