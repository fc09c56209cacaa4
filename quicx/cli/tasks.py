"""
One task at a time: C{quicx submit} (and wait), C{result}, C{task} (its state,
and why it is not running) and C{cancel}.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from quicx.cli.arguments import (
    Commands,
    bounded_int,
    configuration_argument,
    connect_option,
    delay_seconds,
    duration,
    expiry_seconds,
    option_key,
    parent_ids,
    queue_name,
    task_argument,
    task_type,
    waiting_options,
)
from quicx.cli.common import (
    CommandError,
    age,
    ask,
    client_addresses,
    local_task,
    one_line,
    print_json,
    print_value,
    read_payload,
    reason_text,
    task_daemon,
    utc_time,
)
from quicx.clients import timing
from quicx.clients.blocking_cluster import open_client
from quicx.clients.outcomes import RetryNotice
from quicx.protocol import codec, durations
from quicx.protocol.errors import NotFinished, TaskCancelled, TaskExpired, TaskFailed
from quicx.protocol.parents import POLICY_NAMES
from quicx.protocol.taskflow import MAX_RETRIES
from quicx.status.text import printable, thousands


def add_submit(commands: Commands) -> None:
    """C{quicx submit}: its parser and options."""
    submit = commands.add(
        "submit",
        "submit a task and print its id",
        "Submit one task and print its id. PAYLOAD '-' reads the payload from"
        " stdin. With --wait, also wait for the outcome: exit 0 on DONE, 1 on FAILED.",
    )
    submit.add_argument("type", type=task_type, help="the task type, e.g. send_email")
    submit.add_argument("payload", help="the payload, or - for stdin")
    submit.add_argument("--wait", action="store_true", help="wait for the outcome")
    submit.add_argument("--timeout", type=duration, default=30.0, help="seconds to wait (30)")
    submit.add_argument("--queue", type=queue_name, help="the queue (default: the daemon's)")
    submit.add_argument(
        "--priority", type=bounded_int(0, 255), help="0 to 255, higher first (default: the queue's)"
    )
    submit.add_argument(
        "--key", type=option_key, help="an idempotency key: submitted once within the window"
    )
    submit.add_argument(
        "--fairness-key", type=option_key, help="the tenant or customer the task is for"
    )
    when = submit.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        type=configuration_argument(delay_seconds),
        metavar="DURATION",
        help="run it no sooner than this from now: 90 (seconds), 30s, 10m, 1.5h",
    )
    when.add_argument(
        "--at",
        dest="run_at",
        type=configuration_argument(timing.parse_time),
        metavar="TIME",
        help="run it no sooner than TIME: ISO 8601 with its zone (2026-12-01T09:00:00Z)"
        " or Unix seconds",
    )
    submit.add_argument(
        "--retries",
        type=bounded_int(0, MAX_RETRIES),
        help="how many times a failure is retried (default: the queue's)",
    )
    submit.add_argument(
        "--backoff",
        type=configuration_argument(durations.parse_backoff),
        metavar="SPEC",
        help="the wait before each retry: fixed:10s or exponential:1s:5m, either"
        " optionally ending in :20%% of jitter (default: the queue's)",
    )
    submit.add_argument(
        "--keep-result",
        action="store_true",
        help="keep the outcome and result once it finishes, for quicx result ID"
        " (default: as the queue says)",
    )
    submit.add_argument(
        "--result-ttl",
        type=configuration_argument(timing.ttl_seconds),
        metavar="DURATION",
        help="keep them this long, in whole seconds (rounded up): 90, 30m, 1h (implies"
        " --keep-result; default: the daemon's [results] ttl; at most its max_ttl)",
    )
    add_debounce_and_expiry(submit)
    add_dependencies(submit)
    connect_option(submit, several=True)
    submit.set_defaults(run=cmd_submit)


def add_debounce_and_expiry(submit: argparse.ArgumentParser) -> None:
    """C{quicx submit}'s --debounce, --expires-in and --expires-at."""
    submit.add_argument(
        "--debounce",
        type=configuration_argument(durations.parse_debounce),
        metavar="MODE:WINDOW",
        help="with --key: wait WINDOW, and fold a later submit of the key into this task"
        " while it waits: drop:5s (keep this payload), replace:2s (take the newest),"
        " extend:2s (take the newest, and wait WINDOW again)",
    )
    deadline = submit.add_mutually_exclusive_group()
    deadline.add_argument(
        "--expires-in",
        type=configuration_argument(expiry_seconds),
        metavar="DURATION",
        help="not started within DURATION (30s, 10m), it ends expired (default: the queue's)",
    )
    deadline.add_argument(
        "--expires-at",
        type=configuration_argument(timing.parse_time),
        metavar="TIME",
        help="not started by TIME (ISO 8601 with its zone, or Unix seconds), it ends expired",
    )


def add_dependencies(submit: argparse.ArgumentParser) -> None:
    """C{quicx submit}'s --after, --after-group and --on-parent-failure."""
    submit.add_argument(
        "--after",
        type=parent_ids,
        metavar="ID[,ID]",
        help="wait until these tasks (of the same daemon) have finished, then run",
    )
    submit.add_argument(
        "--after-group",
        type=bounded_int(1, codec.MAX_TASK_ID),
        metavar="GROUP",
        help="wait until this group has finished, then run with its counts and results",
    )
    submit.add_argument(
        "--on-parent-failure",
        choices=sorted(POLICY_NAMES),
        help="when a parent does not finish done: fail this task (the default), ignore that"
        " parent, or continue with the failure listed",
    )


def check_dependencies(args: argparse.Namespace) -> None:
    """@raise CommandError: (status 2) dependencies' options that cannot go together."""
    waits = args.after is not None or args.after_group is not None
    if args.on_parent_failure is not None and not waits:
        raise CommandError("--on-parent-failure needs --after or --after-group", 2)
    if waits and len(client_addresses(args)) > 1:
        raise CommandError(
            "--after and --after-group name tasks and groups of one daemon: --connect one", 2
        )


def cmd_submit(args: argparse.Namespace) -> int:
    check_dependencies(args)
    if args.debounce is not None and args.key is None:
        raise CommandError(
            "--debounce needs --key: the key names what a later submit folds into", 2
        )
    if args.debounce is not None and (args.delay is not None or args.run_at is not None):
        raise CommandError("--debounce is a delay of its own: not with --delay or --at", 2)
    # fsencode: the bytes as given, even those that are not UTF-8.
    payload = read_payload(args.payload)
    # The same calls on one daemon (task ids) or several (ID@ADDRESS task refs).
    client: Any = open_client(client_addresses(args), timeout=args.timeout)
    with client:
        try:
            task_id = client.submit(
                os.fsencode(args.type),
                payload,
                queue=args.queue,
                priority=args.priority,
                key=args.key,
                fairness_key=args.fairness_key,
                delay=args.delay,
                run_at=args.run_at,
                retries=args.retries,
                backoff=args.backoff,
                keep_result=args.keep_result,
                result_ttl=args.result_ttl,
                debounce=args.debounce,
                expires_in=args.expires_in,
                expires_at=args.expires_at,
                after=args.after,
                after_group=args.after_group,
                on_parent_failure=args.on_parent_failure,
            )
        except TimeoutError:
            raise CommandError(f"no answer from the daemon within {args.timeout:g} s") from None
        print(task_id, flush=True)
        if not args.wait:
            return 0
        try:
            value = client.wait(task_id, timeout=args.timeout, on_retry=print_retry)
        except TaskFailed as e:
            print(f"task {task_id} failed: {reason_text(e.reason, 0)}")
            return 1
        except TaskCancelled:
            print(f"task {task_id} cancelled")
            return 1
        except TaskExpired as e:
            print(e)  # task N expired: not started before its deadline
            return 1
        except TimeoutError:
            raise CommandError(
                f"task {task_id} has not finished within {args.timeout:g} s; it still runs"
                f" (`quicx result {task_id} --wait` waits for it)"
            ) from None
    print(f"task {task_id} done", flush=True)
    if value is not None:
        print_value(value)
    return 0


def print_retry(notice: RetryNotice) -> None:
    """What C{submit --wait} says of a failed attempt the daemon retries."""
    reason = one_line(notice.reason, 200).removesuffix(" ...")  # without its traceback
    wait = max(0.0, notice.due - time.time())  # a backoff of 1s is not "in 0s"
    print(
        f"task {notice.task_id}: attempt {notice.attempt} failed: {reason};"
        f" retrying in {f'{wait:.1f}s' if wait < 60 else age(wait)}",
        flush=True,
    )


def add_result(commands: Commands) -> None:
    """C{quicx result}: its parser and options."""
    result = commands.add(
        "result",
        "print a task's result, from any connection",
        "Print the outcome of task ID, submitted by anyone: its result (bytes and text as"
        " they are, anything else as JSON), or 'task ID done' when it gave none; exit 1"
        " when it failed, is dead, was cancelled or expired, its kept outcome is forgotten, it is"
        " unknown (or its outcome was not kept: see submit --keep-result), or it has not"
        " finished. With --wait, wait for it to finish.",
    )
    result.add_argument("id", type=task_argument)
    waiting_options(result)
    result.set_defaults(run=cmd_result)


def cmd_result(args: argparse.Namespace) -> int:
    wait = args.timeout if args.wait else 0.0
    try:
        task_id, address = task_daemon(args)
        value = ask(args, lambda client: client.result(task_id, timeout=wait), address=address)
    except (TaskFailed, TaskCancelled, TaskExpired) as e:
        # task N failed: REASON, task N is dead: REASON, task N was cancelled, ... expired
        print(reason_text(str(e), 0))
        return 1
    except NotFinished:
        if args.wait:
            raise CommandError(f"task {args.id} has not finished within {wait:g} s") from None
        raise CommandError(f"task {args.id} has not finished yet (--wait waits for it)") from None
    if value is None:
        print(f"task {args.id} done")
    else:
        print_value(value)
    return 0


def add_task(commands: Commands) -> None:
    """C{quicx task}: its parser and options."""
    task = commands.looking(
        "task",
        "show a task, and why it is not running",
        "Show one task's state; for a waiting one, why it is not running yet"
        " (queue paused, tasks ahead, no worker, a key or rate limit) and an estimated start.",
    )
    task.add_argument("id", type=task_argument)
    task.set_defaults(run=cmd_task)


def cmd_task(args: argparse.Namespace) -> int:
    task_id, address = task_daemon(args)
    task = ask(args, lambda client: client.task(task_id), address=address)
    if args.json:
        print_json(task)
        return 0
    print(
        f"task {task['id']} ({printable(task['type'])}): {task['state']} in queue {task['queue']},"
        f" priority {task['priority']}, {thousands(task['size'])} bytes,"
        f" submitted {age(task['age'])} ago, {_deliveries(task['attempt'])}"
    )
    saved = task.get("checkpoint")
    if saved is not None:  # what its next delivery resumes from
        saved_ago = age(max(0.0, time.time() - saved["at"]))
        print(f"  checkpoint: {thousands(saved['size'])} bytes, saved {saved_ago} ago")
    if task["state"] == "running":
        print(f"  running on {task['worker']} for {age(task['running_for'])}")
        return 0
    if task["state"] == "dead":
        print(f"  dead after {_failures(task['failures'])}: {reason_text(task['reason'], 4)}")
        print(
            f"  quicx dlq show {task['id']} shows its payload,"
            f" quicx dlq replay {task['id']} runs it again"
        )
        return 0
    for reason in task["why"]:
        print(f"  waiting: {reason['text']}")
    if task.get("deadline"):
        left = age(max(0.0, task["deadline"] - time.time()))
        print(f"  expires {utc_time(task['deadline'])} unless started, in {left}")
    if task["state"] == "waiting":
        return 0
    if task["state"] == "delayed":
        if task.get("failures"):
            print(f"  {_failures(task['failures'])} so far, {task['retries']} retries allowed")
        print(f"  due {utc_time(task['due'])}, in {age(max(0.0, task['due'] - time.time()))}")
        return 0
    if not task["why"]:
        print("  next in line: a worker takes it as soon as one is free")
    start = task["estimated_start"]
    if any(reason["reason"] == "paused" for reason in task["why"]):
        print(f"  estimated start: none while queue {printable(task['queue'])} is paused")
    elif start is not None:
        print(
            f"  estimated start: in {age(max(0.0, start - time.time()))}"
            f" (the queue drains {task['drain_rate']:g} tasks/s)"
        )
    else:
        print("  estimated start: unknown (nothing has finished in this queue lately)")
    return 0


def _failures(count: int) -> str:
    return "1 failure" if count == 1 else f"{thousands(count)} failures"


def _deliveries(attempt: int) -> str:
    """What a task's C{attempt} (deliveries so far) means."""
    if attempt == 0:
        return "not yet delivered to a worker"
    return "delivered once" if attempt == 1 else f"delivered {attempt} times"


def add_cancel(commands: Commands) -> None:
    """C{quicx cancel}: its parser and options."""
    cancel = commands.acting(
        "cancel",
        "cancel a queued task",
        "Cancel a queued task: its producer hears CANCELLED. A running task is not"
        " interrupted (exit 1).",
    )
    cancel.add_argument("id", type=task_argument)
    cancel.set_defaults(run=cmd_cancel)


def cmd_cancel(args: argparse.Namespace) -> int:
    task_id = local_task(args)
    answer = ask(args, lambda client: client.cancel(task_id), admin=True)
    print(f"task {answer['id']} cancelled (queue {answer['queue']})")
    return 0
