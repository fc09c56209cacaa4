"""
C{quicx tasks cancel|retry|replay|purge|move} against a real daemon, as the
real console script: the dry run's count, each action's one line, --json.
"""

from __future__ import annotations

import json
import subprocess

from quicx import Options
from quicx.clients.blocking import QuicxClient
from tests.cli.test_cli import quicx


def tasks(control: str, *args: str) -> subprocess.CompletedProcess[str]:
    return quicx("tasks", *args, f"--control={control}")


def test_the_dry_run_then_a_cancel_then_a_move(start_daemon) -> None:
    daemon = start_daemon()
    control = str(daemon.control_path)
    with QuicxClient(f"tcp:127.0.0.1:{daemon.port}") as client:
        emails = [client.submit("email", "x", queue="mail") for _ in range(3)]
        client.submit("sms", "x", queue="mail", key="order-1")
        client.submit("sms", "x", queue="mail", key="order-2")
        dry = tasks(control, "cancel", "--queue=mail", "--type=email", "--dry-run")
        assert (dry.returncode, dry.stderr) == (0, "")
        assert dry.stdout == (
            f"dry run: 3 tasks would be cancelled (e.g. {', '.join(map(str, emails))})\n"
        )
        assert {q["name"]: q["depth"] for q in client.queues()}["mail"] == 5
        done = tasks(control, "cancel", "--queue=mail", "--type=email")
        assert (done.returncode, done.stdout) == (0, "3 tasks cancelled, of 3 matched\n")
        moved = tasks(control, "move", "--queue=mail", "--key-prefix=order-", "--to=later")
        assert (moved.returncode, moved.stdout) == (
            0,
            "2 tasks moved to queue later, of 2 matched\n",
        )
        depths = {q["name"]: q["depth"] for q in client.queues()}
        assert depths.get("mail", 0) == 0 and depths["later"] == 2
        answer = json.loads(tasks(control, "purge", "--older-than=1ms", "--json").stdout)
        assert (answer["action"], answer["acted"]) == ("purge", 2)
        none = tasks(control, "replay", "--reason-contains=timeout")
        assert (none.returncode, none.stdout) == (0, "0 tasks replayed, of 0 matched\n")


def test_a_move_that_leaves_tasks_says_so(start_daemon) -> None:
    daemon = start_daemon()
    control = str(daemon.control_path)
    with QuicxClient(f"tcp:127.0.0.1:{daemon.port}") as client:
        client.submit_many(
            [("t", "x", Options(queue="a", key="same")), ("t", "x", Options(queue="b", key="same"))]
        )
        moved = tasks(control, "move", "--queue=a", "--to=b")
        assert moved.returncode == 0, moved.stderr
        assert moved.stdout == (
            "0 tasks moved to queue b, of 1 matched; 1 left (target full, or its key taken there)\n"
        )


def test_a_move_is_told_as_a_moved_event_to_a_watcher(start_daemon) -> None:
    daemon = start_daemon()
    address = f"tcp:127.0.0.1:{daemon.port}"
    with (
        QuicxClient(address) as client,
        QuicxClient(address) as watcher,
        watcher.events(kinds=["moved"], timeout=60) as events,
    ):
        ids = [client.submit("t", "x", queue="a") for _ in range(2)]
        moved = tasks(str(daemon.control_path), "move", "--queue=a", "--to=b")
        assert moved.returncode == 0, moved.stderr
        seen = [next(events), next(events)]
    assert [(e["event"], e["task"], e["queue"], e["from"]) for e in seen] == [
        ("moved", task_id, "b", "a") for task_id in ids
    ]
