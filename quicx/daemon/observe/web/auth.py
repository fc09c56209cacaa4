"""
Who may see the dashboard, and who may act on it (no Twisted here).

Every request needs a role, from the first of these it carries:

  - C{Authorization: Bearer TOKEN}: C{[web] admin_token} gives the admin
    role, C{monitor_token} the monitor role;
  - the session cookie that C{/login?token=TOKEN} sets: the role and a random
    nonce, signed with a key the daemon draws at start (so a restart ends
    every session, and the daemon keeps no session state);
  - over a C{tls:} listener with C{[tls] client_ca}, the client
    certificate's identity: admin when it is in C{[tls] admins}, monitor when
    C{[tls] monitors} lets it in (as on the wire).

Tokens are compared in constant time (their SHA-256 digests, so not even
their length shows).  The monitor role reads; only the admin role acts.

A browser sends cookies and client certificates with any request, a
cross-site one too; so an action by one of those (not by a bearer token,
which only a script of the page itself could add) must echo the session's
CSRF token (L{Visitor.csrf}) and come from the dashboard's own origin
(L{same_origin}).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from enum import Enum
from urllib.parse import urlsplit

from attrs import frozen

from quicx.net.certificates import Authorization

COOKIE = "quicx_session_{port}"
"""The session cookie's name: a browser keeps one per dashboard port of a
host (cookies do not tell ports apart)."""


class Role(Enum):
    MONITOR = "monitor"
    ADMIN = "admin"


@frozen
class Visitor:
    """
    A request's role, and how it got it.

    @ivar how: for the log: C{token}, C{session}, or C{certificate NAME}.
    @ivar csrf: the token its actions must echo; C{None} for a bearer token
        (no browser sends one by itself).
    """

    role: Role
    how: str
    csrf: str | None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Gate:
    """
    Gives each request its L{Visitor} (or none: refused).

    @param authorization: the [tls] role lists, when the dashboard listens
        on C{tls:} with C{client_ca}; C{None} otherwise.
    """

    def __init__(
        self,
        admin_token: str,
        monitor_token: str,
        authorization: Authorization | None = None,
        key: bytes | None = None,
    ) -> None:
        self._tokens = [
            (Role.ADMIN, _digest(admin_token) if admin_token else None),
            (Role.MONITOR, _digest(monitor_token) if monitor_token else None),
        ]
        self.authorization = authorization
        self._key = key if key is not None else os.urandom(32)

    def _sign(self, purpose: str, text: str) -> str:
        return hmac.new(self._key, f"{purpose}:{text}".encode(), hashlib.sha256).hexdigest()

    def role_of(self, token: str) -> Role | None:
        """The role C{token} gives (every configured token is compared)."""
        digest = _digest(token)
        found = None
        for role, expected in self._tokens:
            if expected is not None and hmac.compare_digest(digest, expected) and found is None:
                found = role
        return found

    def login(self, token: str) -> str | None:
        """The session cookie's value for C{token}, or C{None} if it gives no role."""
        role = self.role_of(token)
        if role is None:
            return None
        session = f"{role.value}.{os.urandom(16).hex()}"
        return f"{session}.{self._sign('session', session)}"

    def _session(self, cookie: str) -> Visitor | None:
        session, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(self._sign("session", session).encode(), signature.encode()):
            return None
        role = Role(session.partition(".")[0])
        return Visitor(role, "session", self._sign("csrf", session))

    def _certificate(self, identity: str | None) -> Visitor | None:
        authorization = self.authorization
        if authorization is None or identity is None:
            return None
        how = f"certificate {identity}"
        for role in (Role.ADMIN, Role.MONITOR):
            if authorization.allows(identity, role.value):
                return Visitor(role, how, self._sign("csrf", f"tls.{identity}"))
        return None

    def visitor(
        self, authorization: str | None, cookie: str | None, identity: str | None
    ) -> Visitor | None:
        """
        The role of a request with these credentials: its C{Authorization}
        header, its session cookie, its client certificate's identity.  A
        bearer token that gives no role refuses the request, whatever else
        it carries.
        """
        if authorization is not None:
            scheme, _, token = authorization.strip().partition(" ")
            role = self.role_of(token.strip()) if scheme.lower() == "bearer" else None
            return None if role is None else Visitor(role, "token", None)
        found = self._session(cookie) if cookie else None
        return found or self._certificate(identity)

    @staticmethod
    def csrf_ok(visitor: Visitor, echoed: str | None) -> bool:
        """Whether an action by C{visitor} echoed its CSRF token (if it needs one)."""
        if visitor.csrf is None:
            return True
        return echoed is not None and hmac.compare_digest(visitor.csrf.encode(), echoed.encode())


def same_origin(origin: str | None, referer: str | None, scheme: str, host: str) -> bool:
    """
    Whether a request came from the dashboard's own pages: its C{Origin}
    (else its C{Referer}) is C{scheme://host}.  A request with neither
    (not a browser's) passes; one with C{Origin: null} does not.
    """
    expected = f"{scheme}://{host}".lower()
    if origin is not None:
        return origin.strip().lower() == expected
    if referer is not None:
        parts = urlsplit(referer.strip())
        return f"{parts.scheme}://{parts.netloc}".lower() == expected
    return True
