"""
Quicx: a small, fast task-queue daemon and its clients, built on Twisted.
"""

__version__ = "0.1.0"


def version_line() -> str:
    """C{quicx VERSION protocol N}: what C{--version} and C{quicx version} print."""
    from quicx.protocol.wire import PROTOCOL_VERSION

    return f"quicx {__version__} protocol {PROTOCOL_VERSION}"
