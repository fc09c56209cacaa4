"""
Checkpoints end to end: a real daemon, C{quicx worker} processes running
examples/checkpoints.py, whose handler walks its rows with
C{context.iterate}; the first worker dies in the middle (C{os._exit}),
C{quicx task ID} shows the checkpoint it left, and the second worker resumes
from it instead of starting over.
"""

from __future__ import annotations

import re

from quicx.clients.blocking import QuicxClient
from tests.cli.test_cli import ROOT, env_for, quicx
from tests.cli.test_cli import background as background  # the fixture
from tests.conftest import DaemonProcess


def test_a_redelivery_resumes_from_the_checkpoint_of_a_worker_that_died(
    daemon: DaemonProcess, background
) -> None:
    env = env_for(daemon)
    first = background("worker", "examples.checkpoints:worker", env=env, cwd=ROOT)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        task_id = client.submit("copy_rows", '{"rows": 10, "crash_at": 5}', keep_result=True)
        assert first.process.wait(30) == 1
        shown = quicx("task", str(task_id), env=env)
        assert shown.returncode == 0, shown.stderr
        assert re.search(r"^  checkpoint: 1 bytes, saved .* ago$", shown.stdout, re.M), shown.stdout
        second = background("worker", "examples.checkpoints:worker", env=env, cwd=ROOT)
        assert client.result(task_id, timeout=30) == {"rows": 10, "resumed_at": 5}
    copied = re.compile(r"attempt (\d+): copied row (\d+)")
    assert [m.groups() for m in copied.finditer(first.log())] == [("1", str(r)) for r in range(6)]
    assert [m.groups() for m in copied.finditer(second.log())] == [
        ("2", str(r)) for r in range(5, 10)
    ]
