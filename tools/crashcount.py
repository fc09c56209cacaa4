"""
What a crash-matrix round cost: the workers' runs against the producers'
SUBMITs, counted per round (L{count}) and summed per fsync policy
(L{summarize}, L{table}).  Used by L{tools.crashmatrix}.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass
class Submission:
    """What one payload's SUBMIT got."""

    status: str = "unknown"  # "ok", "refused" or "unknown" (no answer)
    task_id: int = 0
    sent: float = 0.0
    answered: float = 0.0
    epoch: int = 0  # 0 before the daemon was killed, 1 after the restart
    reason: str = ""


@dataclass
class Run:
    time: float
    worker: str
    task_id: int
    connected: float  # when the worker's connection was made


@dataclass
class RoundResult:
    mode: str
    number: int
    seconds: float
    kill_at: float = 0.0
    kill_by: str = ""
    youngest_ok_age_ms: float | None = None
    youngest_kept_age_ms: float | None = None
    worker_kills: list[dict[str, Any]] = field(default_factory=list)
    file_size_limit: int = 0
    journal_broken: bool = False
    recovered_tasks: int = -1
    submitted: int = 0
    acked: int = 0
    acked_before_kill: int = 0
    refused: int = 0
    refused_reasons: dict[str, int] = field(default_factory=dict)
    unknown: int = 0
    ran: int = 0
    runs: int = 0
    lost: int = 0
    lost_examples: list[str] = field(default_factory=list)
    lost_age_ms: list[float] = field(default_factory=list)
    run_twice: int = 0
    extra_runs_worker_kill: int = 0
    extra_runs_daemon_kill: int = 0
    extra_runs_unexplained: int = 0
    unexplained_examples: list[str] = field(default_factory=list)
    refused_ran: int = 0
    refused_ran_examples: list[str] = field(default_factory=list)
    unknown_ran: int = 0
    unknown_not_run: int = 0
    ids_reused: int = 0
    ids_reused_examples: list[str] = field(default_factory=list)
    drained: bool = False
    errors: list[str] = field(default_factory=list)


class Counted(Protocol):
    """What a round's counts read of it (L{tools.crashmatrix.Round})."""

    submissions: dict[bytes, Submission]
    kill_time: float  # 0: the daemon was not killed
    restart_time: float


# -- one round ------------------------------------------------------------------------------


def count(state: Counted, directory: Path, result: RoundResult, credits: int) -> None:
    """What the round did: the workers' runs against the producers' SUBMITs."""
    runs, by_worker, ids = read_runs(directory)
    for payload, submission in state.submissions.items():
        if submission.status == "ok":
            ids[submission.task_id].add(payload)
    result.submitted = len(state.submissions)
    result.runs = sum(len(r) for r in runs.values())
    result.ran = len(runs)
    count_submissions(state, runs, result)
    count_ages(state, runs, result)
    count_extra_runs(state, runs, by_worker, result, credits)
    for task_id, payloads in ids.items():
        if len(payloads) > 1:
            result.ids_reused += 1
            if len(result.ids_reused_examples) < 5:
                names = ", ".join(sorted(p.decode() for p in payloads))
                result.ids_reused_examples.append(f"id {task_id}: {names}")


def count_extra_runs(
    state: Counted,
    runs: dict[bytes, list[Run]],
    by_worker: dict[str, list[float]],
    result: RoundResult,
    credits: int,
) -> None:
    """Each payload run more than once, each extra run explained by a kill or not."""
    kills = {k["worker"]: k["time"] for k in result.worker_kills}
    for payload, these in runs.items():
        if len(these) < 2:
            continue
        result.run_twice += 1
        these.sort(key=lambda r: r.time)
        for before, after in itertools.pairwise(these):
            if worker_kill_explains(before, kills, by_worker, credits):
                result.extra_runs_worker_kill += 1
            elif state.restart_time and before.connected < state.restart_time <= after.connected:
                # Sent by the daemon that was killed, again by the new one.
                result.extra_runs_daemon_kill += 1
            else:
                result.extra_runs_unexplained += 1
                if len(result.unexplained_examples) < 5:
                    result.unexplained_examples.append(
                        f"{payload.decode()}: id {before.task_id} by {before.worker}"
                        f" at {before.time:.3f}, id {after.task_id} by {after.worker}"
                        f" at {after.time:.3f}"
                    )


def worker_kill_explains(
    run: Run, kills: dict[str, float], by_worker: dict[str, list[float]], credits: int
) -> bool:
    """
    Whether C{run} was among the last tasks its worker held when it was
    killed: a killed worker's file ends at its death.
    """
    if run.worker not in kills:
        return False
    later = sum(1 for t in by_worker[run.worker] if t > run.time)
    return later < credits


def read_runs(
    directory: Path,
) -> tuple[dict[bytes, list[Run]], dict[str, list[float]], dict[int, set[bytes]]]:
    """
    The workers' files of runs: the runs of each payload, the times of each
    worker's runs, and the payloads of each task id.
    """
    runs: dict[bytes, list[Run]] = defaultdict(list)
    by_worker: dict[str, list[float]] = defaultdict(list)
    ids: dict[int, set[bytes]] = defaultdict(set)
    for path in sorted(directory.glob("*.runs")):
        for line in path.read_bytes().splitlines():
            parts = line.split(b" ", 4)
            if len(parts) != 5:
                continue  # cannot happen: one write per line
            run = Run(float(parts[0]), parts[1].decode(), int(parts[2]), float(parts[3]))
            runs[parts[4]].append(run)
            by_worker[run.worker].append(run.time)
            ids[run.task_id].add(parts[4])
    return runs, by_worker, ids


def count_submissions(state: Counted, runs: dict[bytes, list[Run]], result: RoundResult) -> None:
    """Each SUBMIT by its answer (OK, refused, none), against whether its payload ran."""
    reasons: Counter[str] = Counter()
    for payload, submission in state.submissions.items():
        ran = payload in runs
        if submission.status == "ok":
            result.acked += 1
            if submission.epoch == 0 and submission.answered <= state.kill_time:
                result.acked_before_kill += 1
            if not ran:
                result.lost += 1
                if len(result.lost_examples) < 5:
                    result.lost_examples.append(f"{payload.decode()} id {submission.task_id}")
                if submission.epoch == 0 and state.kill_time:
                    age = (state.kill_time - submission.answered) * 1000
                    result.lost_age_ms.append(round(age, 2))
        elif submission.status == "refused":
            result.refused += 1
            reasons[re.sub(r"\d+", "N", submission.reason)[:60]] += 1
            if ran:
                result.refused_ran += 1
                if len(result.refused_ran_examples) < 5:
                    result.refused_ran_examples.append(f"{payload.decode()} ({submission.reason})")
        else:
            result.unknown += 1
            if ran:
                result.unknown_ran += 1
            else:
                result.unknown_not_run += 1
    result.refused_reasons = dict(reasons)


def count_ages(state: Counted, runs: dict[bytes, list[Run]], result: RoundResult) -> None:
    """How young the youngest OK before the kill was, and the youngest that was kept."""
    submissions = state.submissions
    before_kill = [s.answered for s in submissions.values() if s.status == "ok" and s.epoch == 0]
    if before_kill and state.kill_time:
        # Negative: the OK was still in the socket when the daemon died.
        result.youngest_ok_age_ms = round((state.kill_time - max(before_kill)) * 1000, 2)
    kept = [
        state.kill_time - s.answered
        for p, s in submissions.items()
        if s.status == "ok" and s.epoch == 0 and s.answered <= state.kill_time and p in runs
    ]
    if kept:
        result.youngest_kept_age_ms = round(min(kept) * 1000, 2)


# -- the report ---------------------------------------------------------------------------


def summarize(mode: str, results: list[RoundResult]) -> dict[str, Any]:
    total: dict[str, Any] = {"mode": mode, "rounds": len(results)}
    for key in (
        "submitted",
        "acked",
        "acked_before_kill",
        "refused",
        "unknown",
        "lost",
        "run_twice",
        "extra_runs_worker_kill",
        "extra_runs_daemon_kill",
        "extra_runs_unexplained",
        "refused_ran",
        "unknown_ran",
        "unknown_not_run",
        "ids_reused",
    ):
        total[key] = sum(getattr(r, key) for r in results)
    ages = sorted(a for r in results for a in r.lost_age_ms)
    total["lost_age_ms_min"] = ages[0] if ages else None
    total["lost_age_ms_max"] = ages[-1] if ages else None
    # The youngest OK read before a kill whose task still ran.
    kept = sorted(r.youngest_kept_age_ms for r in results if r.youngest_kept_age_ms is not None)
    total["youngest_kept_age_ms"] = kept[0] if kept else None
    # Kills that came within 1 ms of an OK, and how many of those lost tasks.
    close = [r for r in results if r.youngest_ok_age_ms is not None and r.youngest_ok_age_ms < 1]
    total["kills_within_1ms_of_an_ok"] = len(close)
    total["kills_within_1ms_that_lost"] = sum(1 for r in close if r.lost)
    total["rounds_with_loss"] = sum(1 for r in results if r.lost)
    total["rounds_with_worker_kill"] = sum(1 for r in results if r.worker_kills)
    total["rounds_with_disk_fault"] = sum(1 for r in results if r.file_size_limit)
    total["rounds_not_drained"] = sum(1 for r in results if not r.drained)
    total["rounds_with_errors"] = sum(1 for r in results if r.errors)
    return total


def window(total: dict[str, Any]) -> str:
    if total["mode"] == "always":
        return "n/a (OK after fdatasync)"
    kept = total["youngest_kept_age_ms"]
    close = (
        f"; {total['kills_within_1ms_that_lost']} of {total['kills_within_1ms_of_an_ok']}"
        " kills within 1 ms of an OK lost tasks"
    )
    kept_text = "" if kept is None else f"; youngest OK kept: {kept:.2f} ms"
    if not total["lost"]:
        return "no OK lost" + close + kept_text
    low, high = total["lost_age_ms_min"], total["lost_age_ms_max"]
    return (
        f"lost OKs {low:.2f} to {high:.2f} ms old at the kill"
        f" ({total['rounds_with_loss']} of {total['rounds']} rounds){close}{kept_text}"
    )


def table(totals: list[dict[str, Any]]) -> str:
    lines = [
        "| mode | rounds | acked | lost | run twice (worker kill / daemon kill /"
        " unexplained runs) | refused (ran) | no answer (ran / not run) | ids reused"
        " | everysec window |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in totals:
        lines.append(
            f"| {t['mode']} | {t['rounds']} | {t['acked']} | {t['lost']}"
            f" | {t['run_twice']} ({t['extra_runs_worker_kill']} / {t['extra_runs_daemon_kill']}"
            f" / {t['extra_runs_unexplained']}) | {t['refused']} ({t['refused_ran']})"
            f" | {t['unknown']} ({t['unknown_ran']} / {t['unknown_not_run']})"
            f" | {t['ids_reused']} | {window(t)} |"
        )
    return "\n".join(lines)
