"""
The send_email worker inside a Twisted program of your own (rather than
`quicx worker`), with an asynchronous handler.

    python examples/twisted_worker.py

QUICX_ADDRESS selects the daemon (default tcp:127.0.0.1:16381).  Ctrl-C or
SIGTERM lets the task in hand finish, then exits.
"""

import json
import os

from twisted.internet import defer, reactor, task

from quicx import Worker

worker = Worker(concurrency=2)


@worker.handler("send_email")
async def send_email(payload: bytes) -> None:
    address = json.loads(payload).get("to", "")
    if "@" not in address:
        raise ValueError(f"cannot send to {address!r}")
    await task.deferLater(reactor, 0.01, lambda: None)  # talking to SMTP
    print(f"sent mail to {address}", flush=True)


if __name__ == "__main__":
    worker.start(reactor, os.environ.get("QUICX_ADDRESS", "tcp:127.0.0.1:16381"))
    reactor.addSystemEventTrigger("before", "shutdown", lambda: defer.ensureDeferred(worker.stop()))
    reactor.run()
