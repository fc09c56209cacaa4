"""The documentation's Markdown tables are whole tables (GitHub's rules)."""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import attrs
import pytest

from tests.conftest import config_option
from tools.launcher import DaemonProcess, tools_environment

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
DELIMITER = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?")


def cells(row: str) -> list[str]:
    """A table row's cells: split at each pipe not escaped with a backslash."""
    inner = row.strip().removeprefix("|")
    if inner.endswith("|") and not inner.endswith("\\|"):
        inner = inner[:-1]
    return re.split(r"(?<!\\)\|", inner)


def tables(text: str) -> list[tuple[int, list[str]]]:
    """Each run of lines starting with a pipe outside code fences: (first line, rows)."""
    found: list[tuple[int, list[str]]] = []
    in_fence = False
    rows: list[str] = []
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        elif not in_fence and line.lstrip().startswith("|"):
            rows.append(line)
            continue
        if rows:
            found.append((number - len(rows), rows))
            rows = []
    return found


def table_problems(text: str) -> list[str]:
    problems = []
    for line, rows in tables(text):
        if len(rows) < 2 or not DELIMITER.fullmatch(rows[1].strip()):
            problems.append(f"line {line}: rows without a header and a |---| line above them")
            continue
        width = len(cells(rows[0]))
        for offset, row in enumerate(rows):
            if len(cells(row)) != width:
                problems.append(
                    f"line {line + offset}: {len(cells(row))} cells, the header has {width}"
                )
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_table_row_has_the_headers_cells(page: Path) -> None:
    assert table_problems(page.read_text()) == []


def test_the_check_finds_broken_tables() -> None:
    whole = "| a | b |\n|---|---|\n| `x\\|y` | 2 |\n"
    assert table_problems(whole) == []
    assert table_problems("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n") == [
        "line 3: 3 cells, the header has 2"
    ]
    # A blank line splits a table: the rows after it are no table at all.
    assert table_problems(whole + "\n| 4 | 5 |\n") == [
        "line 5: rows without a header and a |---| line above them"
    ]
    assert table_problems("```\n| not | a table |\n```\n") == []


# -- the settings tables of docs/configuration.md against the code's table -----------------

CONFIGURATION = ROOT / "docs" / "configuration.md"
SECTION_HEADING = re.compile(r"### `\[(\w+)\]`")


def settings_tables(text: str) -> dict[str, list[list[str]]]:
    """Each C{### `[section]`}'s first table: its rows' cells, header and |---| left out."""
    found: dict[str, list[list[str]]] = {}
    lines = text.splitlines()
    for first, rows in tables(text):
        heading = next(
            (m for line in reversed(lines[: first - 1]) if (m := SECTION_HEADING.match(line))),
            None,
        )
        if heading and heading.group(1) not in found:
            found[heading.group(1)] = [[c.strip() for c in cells(row)] for row in rows]
    return found


def settings_problems(text: str) -> list[str]:
    """Where the docs' settings tables and L{settings.SETTINGS} disagree."""
    from quicx.daemon import config as settings

    documented = settings_tables(text)
    problems = []
    for section in settings.SECTIONS:
        rows = documented.get(section, [])
        header, body = (rows[0], rows[2:]) if rows else ([], [])
        if header[:4] != ["key", "flag", "default", "range"]:
            problems.append(f"[{section}]: no key | flag | default | range | ... table")
            continue
        expected = [
            [f"`{s.key}`", f"`--{s.flag}`", s.shown_default(), s.kind.bounds]
            for s in settings.SETTINGS
            if s.section == section
        ]
        problems += [
            f"[{section}]: the docs say {' | '.join(got[:4])}, the code {' | '.join(want)}"
            for got, want in zip(body, expected, strict=False)
            if got[:4] != want
        ]
        if len(body) != len(expected):
            problems.append(f"[{section}]: {len(body)} rows in the docs, {len(expected)} settings")
    problems += [
        f"[{s}]: a table of no such section" for s in documented.keys() - {*settings.SECTIONS}
    ]
    return problems


def test_the_settings_tables_are_the_codes() -> None:
    assert settings_problems(CONFIGURATION.read_text()) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("| `16381` | 0 to 65535 |", "| `16380` | 0 to 65535 |", "the docs say `port`"),
        ("| `1024` | 1 to 65535 |", "| `1024` | 1 to 1024 |", "the docs say `max_credits`"),
        ("| `--busy-poll` |", "| `--busy` |", "the docs say `busy_poll`"),
        ("| `max_age` | `--events", "| `max_ages` | `--events", "the docs say `max_ages`"),
        ("### `[log]`", "### `[logging]`", "[log]: no key | flag"),
    ],
)
def test_the_settings_check_finds_a_disagreement(old: str, new: str, problem: str) -> None:
    text = CONFIGURATION.read_text()
    assert text.count(old) == 1
    problems = settings_problems(text.replace(old, new))
    assert any(problem in p for p in problems), problems


def test_the_settings_check_finds_a_missing_row() -> None:
    text = CONFIGURATION.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `max_lease` |"))
    assert settings_problems(text.replace(row + "\n", "")) == [
        "[tasks]: 5 rows in the docs, 6 settings"
    ]


@pytest.mark.parametrize(
    ("heading", "keys"), [("queue", "QUEUE_KEYS"), ("schedule", "SCHEDULE_KEYS")]
)
def test_the_named_section_tables_are_the_codes(heading: str, keys: str) -> None:
    from quicx.daemon import config as settings

    text = CONFIGURATION.read_text()
    lines = text.splitlines()
    rows = next(
        rows
        for first, rows in tables(text)
        if any(line == f"### `[{heading} NAME]`" for line in lines[max(0, first - 8) : first])
    )
    documented = [[c.strip() for c in cells(row)][:3] for row in rows[2:]]
    assert documented == [
        [f"`{k.key}`", k.shown_default, k.kind.bounds] for k in getattr(settings, keys)
    ]


def ini_blocks(text: str) -> list[str]:
    return re.findall(r"^```ini\n(.*?)^```", text, re.M | re.S)


@pytest.mark.parametrize("block", ini_blocks(CONFIGURATION.read_text()))
def test_every_example_file_parses_and_has_no_comment_after_a_value(block: str) -> None:
    from quicx.daemon import config as settings

    settings.parse(block, "docs/configuration.md")
    # A '#' after a value is part of the value (the reference format):
    # an example that writes one teaches a mistake.
    assert [line for line in block.splitlines() if re.search(r"\S\s+[#;]", line)] == []


def test_the_queue_section_example_says_what_it_says() -> None:
    from quicx.daemon import config as settings
    from quicx.daemon.queue.policy import QueuePolicy

    (example,) = [b for b in ini_blocks(CONFIGURATION.read_text()) if "[queue mail]" in b]
    assert settings.parse(example).queue_limits.policy("mail") == QueuePolicy(
        max_depth=100000, priority=5, key_concurrency=2, key_rate=10
    )


def test_the_schedule_section_example_says_what_it_says() -> None:
    from quicx.daemon import config as settings
    from quicx.daemon.queue.schedules import ScheduleSpec
    from quicx.protocol.admin import Missed

    (example,) = [b for b in ini_blocks(CONFIGURATION.read_text()) if "[schedule " in b]
    assert settings.parse(example).schedule_sections == {
        "nightly-report": ScheduleSpec(
            name="nightly-report",
            cron="30 2 * * *",
            timezone="Europe/Paris",
            task_type=b"build_report",
            payload=b'{"period": "day"}',
            queue="reports",
            missed=Missed.ALL,
            catch_up=7,
            source="config",
        ),
        "ping": ScheduleSpec(
            name="ping", every=60, task_type=b"ping", missed=Missed.SKIP, source="config"
        ),
    }


# -- the log messages table of docs/operations.md against the code -------------------------

OPERATIONS = ROOT / "docs" / "operations.md"
DAEMON = "quicx/daemon/"
LEVELS = ("debug", "info", "warn", "error", "critical")
LOGGED_BY = {
    "failure": "critical",
    "note": "info",
    "limit": "warn",
    "Refused": "warn",
    "ListenerService": "info",
}
"""The level of a message whose C{log_id} is given to a call other than a
Logger's own methods: C{Logger.failure}, L{LogSummary.note} and
L{LogSummary.limit}, a L{Refused} logged by C{QueueService.limit_hit}, a
listener's announcement."""


def log_table(text: str) -> dict[str, list[str]]:
    """The "Log messages" table: each id's other cells (level, when, fields)."""
    for _, rows in tables(text):
        if [c.strip() for c in cells(rows[0])] == ["id", "level", "when", "fields"]:
            found = {}
            for row in rows[2:]:
                first, *rest = (c.strip() for c in cells(row))
                found[first.strip("`")] = rest
            return found
    return {}


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_logger_call(call: ast.Call) -> bool:
    """C{log.info(...)}, C{self.log.warn(...)}, C{QuicxDaemon.log.failure(...)}..."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in (*LEVELS, "failure"):
        return False
    owner = func.value
    return (isinstance(owner, ast.Name) and owner.id == "log") or (
        isinstance(owner, ast.Attribute) and owner.attr == "log"
    )


def logged_ids(sources: dict[str, str]) -> tuple[dict[str, set[str]], list[str]]:
    """
    The ids given as C{log_id="..."} in C{sources} (by path), each with its
    levels; and the problems: a Logger call of the daemon without a
    C{log_id}, an id given to a call of no known level.
    """
    found: dict[str, set[str]] = {}
    problems = []
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            keyword = next((k for k in node.keywords if k.arg == "log_id"), None)
            if keyword is None:
                if name.startswith(DAEMON) and _is_logger_call(node):
                    problems.append(f"{name}:{node.lineno}: a log message without a log_id")
                continue
            log_id = keyword.value
            if not (isinstance(log_id, ast.Constant) and isinstance(log_id.value, str)):
                continue  # passed on, from a caller's constant
            called = _called(node)
            level = called if called in LEVELS else LOGGED_BY.get(called)
            if level is None:
                problems.append(f"{name}:{node.lineno}: log_id given to {called}(): what level?")
                continue
            found.setdefault(log_id.value, set()).add(level)
    return found, problems


def log_problems(text: str, sources: dict[str, str]) -> list[str]:
    """Where the docs' log messages table and the code's log ids disagree."""
    documented = log_table(text)
    used, problems = logged_ids(sources)
    ids, table = used.keys(), documented.keys()
    problems += [f"{i}: logged by the code, not in the table" for i in sorted(ids - table)]
    problems += [f"{i}: in the table, logged nowhere" for i in sorted(table - ids)]
    for log_id in sorted(ids & table):
        levels = {level.strip() for level in documented[log_id][0].split(",")}
        if levels != used[log_id]:
            problems.append(
                f"{log_id}: the table says {', '.join(sorted(levels))},"
                f" the code logs at {', '.join(sorted(used[log_id]))}"
            )
    return problems


def package_sources() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text()
        for path in sorted((ROOT / "quicx").rglob("*.py"))
    }


def test_the_log_messages_table_is_the_codes() -> None:
    text = OPERATIONS.read_text()
    assert len(log_table(text)) > 40
    assert log_problems(text, package_sources()) == []


@pytest.mark.parametrize(
    ("old", "new", "problems"),
    [
        (
            "| `limit.pool` | warn |",
            "| `limit.poll` | warn |",
            [
                "limit.pool: logged by the code, not in the table",
                "limit.poll: in the table, logged nowhere",
            ],
        ),
        (
            "| `journal.broken` | critical |",
            "| `journal.broken` | error |",
            ["journal.broken: the table says error, the code logs at critical"],
        ),
        (
            "| `daemon.stopped` | info, warn |",
            "| `daemon.stopped` | info |",
            ["daemon.stopped: the table says info, the code logs at info, warn"],
        ),
    ],
)
def test_the_log_check_finds_a_disagreement(old: str, new: str, problems: list[str]) -> None:
    text = OPERATIONS.read_text()
    assert text.count(old) == 1
    assert log_problems(text.replace(old, new), package_sources()) == problems


def test_the_log_check_finds_a_message_without_an_id_or_a_level() -> None:
    source = (
        "log.info('a {x}', x=1)\n"
        "self.log.warn('b', log_id='daemon.start')\n"
        "self.log.error(format, **fields)\n"
        "shout('c', log_id='daemon.ready')\n"
        "Refused(code, 'd', log_id='limit.pool')\n"
    )
    used, problems = logged_ids({"quicx/daemon/m.py": source, "quicx/clients/m.py": source})
    assert used == {"daemon.start": {"warn"}, "limit.pool": {"warn"}}
    assert problems == [
        "quicx/daemon/m.py:1: a log message without a log_id",
        "quicx/daemon/m.py:3: a log message without a log_id",
        "quicx/daemon/m.py:4: log_id given to shout(): what level?",
        "quicx/clients/m.py:4: log_id given to shout(): what level?",
    ]


# -- the metrics table of docs/operations.md against the collector ----------------------

OPERATIONS = ROOT / "docs" / "operations.md"


def metrics_table(text: str) -> dict[str, str]:
    """The first table under C{## Prometheus metrics}: each metric's type, by name."""
    start = text.splitlines().index("## Prometheus metrics")
    _, rows = next((first, rows) for first, rows in tables(text) if first > start)
    assert [c.strip() for c in cells(rows[0])] == ["metric", "type", "labels", "meaning"]
    return {
        name.strip().strip("`"): kind.strip() for name, kind, *_ in (cells(row) for row in rows[2:])
    }


def test_every_metric_the_collector_emits_is_in_the_table(tmp_path: Path) -> None:
    from prometheus_client import generate_latest
    from twisted.internet.task import Clock

    from quicx.daemon.config.sections import AutoscaleSettings
    from quicx.daemon.journal.records import FsyncPolicy
    from quicx.daemon.journal.writer import Journal
    from quicx.daemon.observe.autoscale import Autoscaler
    from quicx.daemon.observe.eventbus import EventBus
    from quicx.daemon.observe.metrics import QuicxCollector
    from quicx.daemon.queue.shared import SharedData
    from quicx.documents.cluster import Member, cluster_view
    from quicx.documents.status import Replication
    from tests.fakes import make_queue

    queue = make_queue()
    journal = Journal(str(tmp_path / "journal"), FsyncPolicy.ALWAYS, Clock())
    events = EventBus(queue, Clock())
    # With [cluster] peers: one daemon up, whose document has nothing in it.
    cluster = Member("self", {"uptime": 1.0, "memory": {"used": 0, "total": 0}})
    # With [autoscale] target.
    autoscale = Autoscaler(AutoscaleSettings(target=1), 10, lambda name: 0, Clock())
    # With [replication].
    replication = Replication("standby", 3, "10.0.0.2:16381", "a", "default")
    text = generate_latest(
        QuicxCollector(
            queue,
            SharedData(queue),
            journal,
            events,
            lambda: cluster_view([cluster]),
            autoscale,
            lambda: replication,
        )
    ).decode()
    # Each family's "# TYPE NAME KIND" line, with the name as exposed (a counter's ends in _total).
    emitted = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    assert metrics_table(OPERATIONS.read_text()) == emitted


# -- the README's command blocks, run as written against a real daemon --------------------

README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SHOWN = "#   "
"""In a shell block, a line of the output of the command above it, as a user sees it."""
ANY = "..."
"""In shown output: any text within a line; alone on a line, any lines (none included)."""
QUICX_COMMAND = ".venv/bin/quicx"
INSTEAD = {
    ("make", "run"): "the test's daemon, started before the first step: the built-in default"
    " but on an ephemeral port with its own control socket",
    ("make", "test"): "not run: it is the suite this test is part of",
}
"""The only lines not run as written, and what stands for each."""
STEP_TIMEOUT = 120.0
"""Seconds one step may take, however loaded the machine (a --wait waits 30 at most)."""


@attrs.frozen
class Step:
    """A command line of a shell block, with the output shown under it; or a Python block."""

    line: int
    code: str
    python: bool = False
    shown: tuple[str, ...] = ()

    def where(self) -> str:
        return f"README.md line {self.line}: {self.code.splitlines()[0]}"


def readme_steps(text: str) -> list[Step]:
    """The steps of every fenced block of C{text}, in order."""
    steps: list[Step] = []
    for block in FENCE.finditer(text):
        language, body = block.groups()
        first = text.count("\n", 0, block.start()) + 2
        if language == "python":
            steps.append(Step(first, body, python=True))
            continue
        if language not in ("", "sh"):
            raise ValueError(f"line {first - 1}: a ```{language} block: a shell or a python one?")
        commands = len(steps)
        for number, line in enumerate(body.splitlines(), start=first):
            if not line.startswith("#"):
                if line.strip():
                    steps.append(Step(number, line))
            elif len(steps) == commands or not (line == "#" or line.startswith(SHOWN)):
                raise ValueError(
                    f"line {number}: output is shown as {SHOWN!r}TEXT, under a command"
                )
            else:
                steps[-1] = attrs.evolve(steps[-1], shown=(*steps[-1].shown, line[len(SHOWN) :]))
    return steps


def shown_pattern(shown: tuple[str, ...]) -> re.Pattern[str]:
    """What the output must match, whole: each line as shown, L{ANY} where it stands."""
    parts = [
        r"(?:[^\n]*\n)*?" if line == ANY else ".*?".join(map(re.escape, line.split(ANY))) + "\n"
        for line in shown
    ]
    return re.compile("".join(parts))


def words(step: Step) -> list[str]:
    """The command line's words, as the shell splits them (its comment left out)."""
    return shlex.split(step.code, comments=True)


class StepFailed(AssertionError):
    """A step did not do what the README says: where, and what it did instead."""

    def __init__(self, step: Step, what: str) -> None:
        super().__init__(f"{step.where()}\n{what}")


def wait_for_output(step: Step, process: subprocess.Popen[bytes], log: Path, text: str) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while text not in log.read_text():
        if process.poll() is not None:
            raise StepFailed(step, f"exited {process.returncode}:\n{log.read_text()}")
        if time.monotonic() > deadline:
            raise StepFailed(step, f"no {text!r} within {STEP_TIMEOUT:g} s:\n{log.read_text()}")
        time.sleep(0.05)


def interrupt(step: Step, process: subprocess.Popen[bytes], log: Path) -> None:
    """Ctrl-C, as in a terminal: SIGINT to its process group; it must end, with status 0."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        status = process.wait(STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise StepFailed(step, f"still running {STEP_TIMEOUT:g} s after Ctrl-C") from None
    if status != 0:
        raise StepFailed(step, f"exited {status} on Ctrl-C:\n{log.read_text()}")


def run_step(step: Step, cwd: Path, env: dict[str, str]) -> None:
    """Run a step to its end: it must exit 0, and print what the README shows, if it shows any."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", step.code] if step.python else ["bash", "-c", step.code],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=STEP_TIMEOUT,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise StepFailed(step, f"still running after {STEP_TIMEOUT:g} s") from None
    output = "".join(line.rstrip() + "\n" for line in done.stdout.splitlines())
    if done.returncode != 0:
        raise StepFailed(step, f"exited {done.returncode}:\n{output}")
    if step.shown and not shown_pattern(step.shown).fullmatch(output):
        shown = "".join(f"{line}\n" for line in step.shown)
        raise StepFailed(step, f"printed:\n{output}the README shows:\n{shown}")


def walk(steps: list[Step], cwd: Path, env: dict[str, str], daemon: DaemonProcess) -> None:
    """
    Run C{steps} in order in C{cwd}, as a user types them: each shell line with
    bash, each Python block with this interpreter (L{run_step}).  L{INSTEAD}
    lists the lines not run.  C{quicx worker} runs in the background, as in a
    terminal of its own, from its "connected" line to the end, then gets
    Ctrl-C; C{quicx status --watch} runs until it has shown a refresh, then
    gets Ctrl-C.  Either must then exit 0.
    """
    running: list[tuple[Step, subprocess.Popen[bytes], Path]] = []

    def start(step: Step) -> tuple[subprocess.Popen[bytes], Path]:
        log = cwd.parent / f"line{step.line}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", step.code], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        running.append((step, process, log))
        return process, log

    try:
        for step in steps:
            command = [] if step.python else words(step)
            if tuple(command) in INSTEAD:
                if not daemon.alive():
                    raise StepFailed(step, f"the test's daemon is gone:\n{daemon.log()}")
            elif command[:1] == ["make"]:
                raise StepFailed(step, "a make line this test does not know: say in INSTEAD")
            elif command[:2] == [QUICX_COMMAND, "worker"]:
                if step.shown:
                    raise StepFailed(step, "runs in the background: no output can be shown")
                wait_for_output(step, *start(step), "connected to")
            elif command[:2] == [QUICX_COMMAND, "status"] and "--watch" in command:
                process, log = start(step)
                wait_for_output(step, process, log, "tasks per second")
                interrupt(*running.pop())
            else:
                run_step(step, cwd, env)
        while running:
            interrupt(*running.pop())
    finally:
        for _, process, _ in running:
            with suppress(ProcessLookupError):  # the group's processes have all gone
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def walkthrough(tmp_path: Path, start_daemon) -> Callable[[str], None]:
    """
    Walk a text's steps in a directory of their own, where C{.venv} is this
    interpreter's and C{examples} the repository's, against a daemon of the
    test's: C{$QUICX_ADDRESS} and C{$QUICX_CONFIG} (its control socket) name
    it; C{$XDG_RUNTIME_DIR} is the test's, so no default path is taken.
    """
    control = tmp_path / "control.sock"
    daemon = start_daemon(config_option(tmp_path, f"control = {control}\n"), f"--control={control}")
    env = {
        **tools_environment(),
        "QUICX_ADDRESS": daemon.client_address,
        "QUICX_CONFIG": str(tmp_path / "quicx.conf"),
        "XDG_RUNTIME_DIR": str(tmp_path),
    }
    cwd = tmp_path / "walk"
    cwd.mkdir()
    (cwd / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (cwd / "examples").symlink_to(ROOT / "examples")
    return lambda text: walk(readme_steps(text), cwd, env, daemon)


def test_every_command_of_the_readme_runs_as_written(walkthrough) -> None:
    walkthrough(README.read_text())


def test_the_readme_steps_and_their_output() -> None:
    text = (
        "text\n```\nmake run   # a comment\n```\n\n```python\nprint(1)\n```\n"
        '```\na --wait; echo "exit $?"\n#   1\n#\n#   task ... done\n#   ...\nb\n```\n'
    )
    assert readme_steps(text) == [
        Step(3, "make run   # a comment"),
        Step(7, "print(1)\n", python=True),
        Step(10, 'a --wait; echo "exit $?"', shown=("1", "", "task ... done", ANY)),
        Step(15, "b"),
    ]
    assert words(readme_steps(text)[0]) == ["make", "run"]
    pattern = shown_pattern(("1", "", "task ... done", ANY))
    assert pattern.fullmatch("1\n\ntask 2 done\n")
    assert pattern.fullmatch("1\n\ntask 2 done\nTraceback:\n  ...\n")
    assert not pattern.fullmatch("1\ntask 2 done\n")
    assert not pattern.fullmatch("1\n\ntask 2 failed\n")
    assert shown_pattern(("",)).fullmatch("\n")
    assert not shown_pattern(("",)).fullmatch("\n\n")
    for bad in ("```\n#   1\n```\n", "```\na\n#1\n```\n", "```bash\na\n```\n"):
        with pytest.raises(ValueError):
            readme_steps(bad)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("```\n.venv/bin/quicx result 99\n```\n", "line 2: .venv/bin/quicx result 99\nexited 1"),
        (
            "```\n.venv/bin/quicx submit t x\n#   2\n```\n",
            "line 2: .venv/bin/quicx submit t x\nprinted:\n1\nthe README shows:\n2\n",
        ),
        ("```python\nraise SystemExit(3)\n```\n", "line 2: raise SystemExit(3)\nexited 3"),
        ("```\nmake run ARGS=-v\n```\n", "line 2: make run ARGS=-v\na make line"),
        (
            "```\n.venv/bin/quicx worker examples.no_such:worker\n```\n",
            "line 2: .venv/bin/quicx worker examples.no_such:worker\nexited 2",
        ),
    ],
)
def test_the_walkthrough_finds_a_step_that_breaks(walkthrough, text: str, problem: str) -> None:
    with pytest.raises(StepFailed, match=re.escape(problem)):
        walkthrough(text)
