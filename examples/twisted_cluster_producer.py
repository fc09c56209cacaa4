"""
Submit send_email tasks from a Twisted service and wait for each outcome.

    python examples/twisted_cluster_producer.py user@gmail.com nobody

QUICX_ADDRESS selects the daemon (default tcp:127.0.0.1:16381), or several,
comma-separated: the same code then spreads the tasks over them, and the
ids it prints are task refs, ID@ADDRESS.
"""

import json
import sys

from twisted.internet import defer, task

from quicx import TaskFailed, open_producer


async def send(producer, address: str) -> bool:
    try:
        # One key per address: a daemon going away sends it to the next one.
        ref = await producer.submit_and_wait(
            "send_email", json.dumps({"to": address}), key=f"mail-{address}"
        )
    except TaskFailed as e:
        print(f"mail to {address}: {e.reason}")
        return False
    print(f"task {ref}: mail to {address} sent")
    return True


async def main(reactor, *addresses: str) -> None:
    producer = open_producer(reactor)  # $QUICX_ADDRESS: one daemon or several
    producer.startService()
    sent = await defer.gatherResults(
        [defer.ensureDeferred(send(producer, address)) for address in addresses]
    )
    await producer.stopService()
    if not all(sent):
        raise SystemExit(1)


if __name__ == "__main__":
    task.react(lambda reactor, *args: defer.ensureDeferred(main(reactor, *args)), sys.argv[1:])
