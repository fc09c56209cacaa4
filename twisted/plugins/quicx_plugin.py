"""
The C{twistd quicx} plugin: C{twistd -n quicx --help} lists the options.
"""

from twisted.application.service import ServiceMaker

quicx = ServiceMaker(
    "Quicx",
    "quicx.daemon.tap",
    "The Quicx task-queue daemon.",
    "quicx",
)
