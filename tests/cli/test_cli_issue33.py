"""
C{quicx submit}'s --debounce, --expires-in and --expires-at against a real
daemon: an expired task's words and exit status, a fold's id, and a bad
value's one line with exit 2.
"""

from __future__ import annotations

from tests.cli.test_cli import env_for, quicx
from tests.conftest import DaemonProcess


def test_submit_wait_says_a_task_expired(daemon: DaemonProcess) -> None:
    env = env_for(daemon)
    expired = quicx(
        "submit", "t", "x", "--queue", "nobody", "--expires-in", "200ms", "--wait", env=env
    )
    assert expired.returncode == 1, expired.stderr
    task_id = int(expired.stdout.splitlines()[0])
    assert expired.stdout.splitlines()[1] == (
        f"task {task_id} expired: not started before its deadline"
    )
    at = quicx("submit", "t", "x", "--queue", "nobody", "--expires-at", "1", env=env)
    assert at.returncode == 1 and "deadline to start has passed" in at.stderr


def test_submit_debounce_folds_into_the_waiting_task(daemon: DaemonProcess) -> None:
    env = env_for(daemon)
    options = ("--queue", "d", "--key", "k", "--debounce", "replace:1h")
    first = quicx("submit", "t", "one", *options, env=env)
    again = quicx("submit", "t", "two", *options, env=env)
    assert first.returncode == again.returncode == 0, (first.stderr, again.stderr)
    assert first.stdout == again.stdout


def test_a_bad_debounce_or_expiry_is_one_line_and_exit_2() -> None:
    for flags in (
        ("--debounce", "later:2s"),
        ("--expires-in", "soon"),
        ("--expires-at", "tomorrow"),
        ("--expires-in", "1s", "--expires-at", "1"),
        ("--expires-in", "0"),
        ("--debounce", "replace:1s"),  # no --key
        ("--key", "k", "--debounce", "drop:1s", "--delay", "1s"),
    ):
        result = quicx("submit", "t", "x", *flags)
        assert result.returncode == 2, (flags, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.strip(), flags
