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


def test_submit_after_waits_for_its_parent_and_its_policy_decides(daemon: DaemonProcess) -> None:
    env = env_for(daemon)
    parent = quicx("submit", "t", "p", "--queue", "nobody", env=env)
    assert parent.returncode == 0, parent.stderr
    parent_id = parent.stdout.strip()
    options = ("--queue", "later", "--after", parent_id, "--on-parent-failure", "continue")
    child = quicx("submit", "t", "c", *options, env=env)
    assert child.returncode == 0, child.stderr
    child_id = child.stdout.strip()
    shown = quicx("task", child_id, env=env)
    assert ": waiting in queue later" in shown.stdout, shown.stdout
    assert f"it waits for parent {parent_id}" in shown.stdout, shown.stdout
    cancel = quicx("cancel", parent_id, f"--control={daemon.control_path}", env=env)
    assert cancel.returncode == 0, cancel.stderr
    shown = quicx("task", child_id, env=env)  # continue: it runs, the cancel listed
    assert f"task {child_id} (t): queued in queue later" in shown.stdout, shown.stdout
    unknown = quicx("submit", "t", "x", "--after", "99999", env=env)
    assert unknown.returncode == 1, unknown.stderr
    assert unknown.stderr.count("\n") == 1 and "parent 99999 is unknown" in unknown.stderr
    group = quicx("submit", "t", "x", "--after-group", "777", env=env)
    assert group.returncode == 1 and "no group 777" in group.stderr, group.stderr


def test_a_bad_dependency_option_is_one_line_and_exit_2() -> None:
    for flags in (
        ("--after", "x"),
        ("--after", "0"),
        ("--after", ""),
        ("--after", "3,3"),
        ("--after", ",".join(map(str, range(1, 65)))),
        ("--after-group", "0"),
        ("--after-group", "g"),
        ("--on-parent-failure", "later", "--after", "1"),
        ("--on-parent-failure", "ignore"),  # neither --after nor --after-group
        ("--after", "1", "--connect", "tcp:127.0.0.1:1,tcp:127.0.0.1:2"),
    ):
        result = quicx("submit", "t", "x", *flags)
        assert result.returncode == 2, (flags, result.stderr)
        assert "Traceback" not in result.stderr, flags
        assert result.stderr.count("\n") == 1 or "usage:" in result.stderr, flags
