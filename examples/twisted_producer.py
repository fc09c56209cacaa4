"""
Submit send_email tasks from Twisted code and wait for each outcome.

    python examples/twisted_producer.py user@gmail.com nobody

QUICX_ADDRESS selects the daemon (default tcp:127.0.0.1:16381).
"""

import json
import os
import sys

from twisted.internet import defer, task

from quicx import TaskFailed, connect


async def send(client, address: str) -> bool:
    task_id = await client.submit("send_email", json.dumps({"to": address}))
    try:
        await client.outcome(task_id)
    except TaskFailed as e:
        print(f"task {task_id}: {e.reason}")
        return False
    print(f"task {task_id}: mail to {address} sent")
    return True


async def main(reactor, *addresses: str) -> None:
    client = await connect(reactor, os.environ.get("QUICX_ADDRESS", "tcp:127.0.0.1:16381"))
    # All submits go out at once, pipelined on the one connection.
    sent = await defer.gatherResults(
        [defer.ensureDeferred(send(client, address)) for address in addresses]
    )
    client.close()
    if not all(sent):
        raise SystemExit(1)


if __name__ == "__main__":
    task.react(lambda reactor, *args: defer.ensureDeferred(main(reactor, *args)), sys.argv[1:])
