"""
The worker for the protocol page's send_email example.

Run it with the `quicx` command:

    quicx worker examples.send_email:worker --concurrency 4

A real handler would talk to an SMTP server; this one checks the payload and
"sends" by printing, and fails the task -- the producer sees the reason --
when the address is unusable.
"""

import json

from quicx import Worker

worker = Worker()


@worker.handler("send_email")
def send_email(payload: bytes) -> None:
    message = json.loads(payload)
    address = message.get("to", "")
    if "@" not in address:
        raise ValueError(f"cannot send to {address!r}")
    print(f"sent mail to {address}", flush=True)
