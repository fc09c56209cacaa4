"""
The worker for the protocol page's send_email example.

Run it with the `quicx` command:

    quicx worker examples.send_email:worker --concurrency 4

or, serving the queue mail before the default one (protocol version 2):

    quicx worker examples.send_email:worker --queues mail,default

A real handler would talk to an SMTP server; this one checks the payload and
"sends" by printing, and fails the task -- the producer sees the reason --
when the address is unusable.  That failure is Unrecoverable: a task
submitted with retries is not retried for it (no retry would mend the
address), while a timed-out SMTP server, a plain exception, would be.  Its
second argument, the task's context, says which queue the task came from and
which delivery this is.
"""

import json

from quicx import TaskContext, Unrecoverable, Worker

worker = Worker()


@worker.handler("send_email")
def send_email(payload: bytes, context: TaskContext) -> None:
    message = json.loads(payload)
    address = message.get("to", "")
    if "@" not in address:
        raise Unrecoverable(f"cannot send to {address!r}")
    print(f"sent mail to {address} (queue {context.queue}, attempt {context.attempt})", flush=True)
