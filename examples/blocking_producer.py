"""
Submit send_email tasks from ordinary blocking code and wait for each outcome.

    python examples/blocking_producer.py user@gmail.com nobody

QUICX_ADDRESS selects the daemon (default tcp:127.0.0.1:16381), or several,
comma-separated: the same code then spreads the tasks over them.
"""

import json
import sys

from quicx import TaskFailed, open_client


def main(addresses: list[str]) -> int:
    failures = 0
    with open_client() as client:
        ids = client.submit_many(
            ("send_email", json.dumps({"to": address})) for address in addresses
        )
        for address, task_id in zip(addresses, ids, strict=True):
            try:
                client.wait(task_id, timeout=30)
                print(f"task {task_id}: mail to {address} sent")
            except TaskFailed as e:
                print(f"task {task_id}: {e.reason}")
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
