"""
Checkpoints end to end: a real daemon, C{quicx worker} processes, and a
handler that walks a sequence with C{context.iterate}; the first worker
dies in the middle (C{os._exit}), C{quicx task ID} shows the checkpoint it
left, and the second worker resumes from it instead of starting over.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from quicx.clients.blocking import QuicxClient
from tests.cli.test_cli import background as background  # the fixture
from tests.cli.test_cli import env_for, quicx
from tests.conftest import DaemonProcess

HANDLERS = """\
import os

from quicx import Worker

worker = Worker()


@worker.handler("copy", thread=True)
def copy(payload, context):
    resumed_from = context.checkpoint_state
    for row in context.iterate(range(int(payload)), every=1):
        with open(os.environ["ROWS_LOG"], "a") as log:
            log.write(f"{context.attempt} {row}\\n")
        if row == 5 and context.attempt == 1:
            os._exit(3)  # dies mid-way: rows 0 to 4 are checkpointed
    return {"resumed_from": resumed_from}
"""


def test_a_redelivery_resumes_from_the_checkpoint_of_a_worker_that_died(
    daemon: DaemonProcess, background, tmp_path: Path
) -> None:
    (tmp_path / "rows.py").write_text(HANDLERS)
    rows = tmp_path / "rows.log"
    env = env_for(daemon)  # this tree's quicx, then the handlers
    env |= {
        "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(tmp_path)]),
        "ROWS_LOG": str(rows),
    }
    first = background("worker", "rows:worker", env=env)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        task_id = client.submit("copy", "10", keep_result=True)
        assert first.process.wait(30) == 3
        shown = quicx("task", str(task_id), env=env)
        assert shown.returncode == 0, shown.stderr
        assert re.search(r"^  checkpoint: 1 bytes, saved .* ago$", shown.stdout, re.M), shown.stdout
        background("worker", "rows:worker", env=env)
        assert client.result(task_id, timeout=30) == {"resumed_from": 5}
    assert rows.read_text().split("\n") == [
        *(f"1 {row}" for row in range(6)),
        *(f"2 {row}" for row in range(5, 10)),
        "",
    ]
