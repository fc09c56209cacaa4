"""
The matrix's private network (and mount) namespace: everything it starts
listens on 127.0.0.1 inside it, so no port of the machine is touched and a
tmpfs it mounts vanishes with it.

L{isolate} re-executes the running command under C{unshare --net --mount}
(root, or a user allowed to) unless it already runs there; inside, the
loopback interface is brought up (a new namespace's is down).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence

MARK = "QUICX_FAILOVER_ISOLATED"
"""Set in the environment of the re-executed command: it runs in its own namespace."""
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def isolated() -> bool:
    return os.environ.get(MARK) == "1"


def can_isolate() -> bool:
    """Whether C{unshare --net --mount} works here (it needs root or CAP_SYS_ADMIN)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, "--net", "--mount", "true"], capture_output=True, check=False)
    return probe.returncode == 0


def isolate(module: str, argv: Sequence[str]) -> None:
    """
    Inside the namespace: bring C{lo} up and return.  Outside: replace this
    process with C{python -m MODULE ARGV} under C{unshare} (never returns),
    or return if that cannot be done (the caller runs un-isolated, on
    ephemeral ports of the machine's loopback, and says so).
    """
    if isolated():
        loopback_up()
        return
    if not can_isolate():
        return
    unshare = shutil.which("unshare")
    assert unshare is not None
    environment = {**os.environ, MARK: "1"}
    command = [unshare, "--net", "--mount", "--", sys.executable, "-m", module, *argv]
    os.execve(unshare, command, environment)


def loopback_up() -> None:
    """Set C{lo}'s UP flag (the C{ip link set lo up} of a new namespace)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
