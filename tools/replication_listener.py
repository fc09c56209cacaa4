"""
A replication primary's listener alone, for the raw-socket interop tests.

C{python -m tools.replication_listener DIRECTORY EPOCH}: a queue journaling
to C{DIRECTORY/journal}, its L{ReplicationPrimary} at C{EPOCH} (mode sync,
standby_lost async, every in-sync set recorded at once) listening on a
loopback port, written to C{DIRECTORY/port} once it listens.  Until the
daemon's C{[replication] listen} is wired, tests/interop/test_v2_replication_contract.py
speaks to this; it runs until killed (SIGKILL).
"""

from __future__ import annotations

import sys
from pathlib import Path

from twisted.internet import reactor
from twisted.internet.defer import succeed

from quicx.daemon.journal.records import FsyncPolicy
from quicx.daemon.journal.recovery import recover
from quicx.daemon.journal.writer import Journal
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.pmad import Pmad, default_classes
from quicx.daemon.replication.primary import ReplicationPrimary


def main(directory: Path, epoch: int) -> None:
    path = str(directory / "journal")
    journal = Journal(path, FsyncPolicy.EVERYSEC, reactor)
    QueueService(Pmad(1 << 20, default_classes()), journal=journal)
    journal.open(recover(path))
    primary = ReplicationPrimary(
        epoch, journal, lambda names: succeed(True), "sync", "async", 2.0, 1 << 20, reactor
    )
    journal.replica = primary
    journal.startService()
    port = reactor.listenTCP(0, primary, interface="127.0.0.1")
    (directory / "port").write_text(str(port.getHost().port))
    reactor.run()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
