"""The documentation's Markdown tables are whole tables (GitHub's rules)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

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
    from quicx.daemon import settings

    documented = settings_tables(text)
    problems = []
    for section in settings.SECTIONS:
        rows = documented.get(section, [])
        header, body = (rows[0], rows[2:]) if rows else ([], [])
        if header[:4] != ["key", "flag", "default", "range"]:
            problems.append(f"[{section}]: no key | flag | default | range | ... table")
            continue
        expected = [
            [f"`{s.key}`", f"`--{s.flag}`", s.shown_default(), s.kind.bounds()]
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
    from quicx.daemon import settings

    text = CONFIGURATION.read_text()
    lines = text.splitlines()
    rows = next(
        rows
        for first, rows in tables(text)
        if any(line == f"### `[{heading} NAME]`" for line in lines[max(0, first - 8) : first])
    )
    documented = [[c.strip() for c in cells(row)][:3] for row in rows[2:]]
    assert documented == [
        [f"`{k.key}`", k.shown_default, k.kind.bounds()] for k in getattr(settings, keys)
    ]


def ini_blocks(text: str) -> list[str]:
    return re.findall(r"^```ini\n(.*?)^```", text, re.M | re.S)


@pytest.mark.parametrize("block", ini_blocks(CONFIGURATION.read_text()))
def test_every_example_file_parses_and_has_no_comment_after_a_value(block: str) -> None:
    from quicx.daemon import settings

    settings.parse(block, "docs/configuration.md")
    # A '#' after a value is part of the value (the reference format):
    # an example that writes one teaches a mistake.
    assert [line for line in block.splitlines() if re.search(r"\S\s+[#;]", line)] == []


def test_the_queue_section_example_says_what_it_says() -> None:
    from quicx.daemon import settings
    from quicx.daemon.policy import QueuePolicy

    (example,) = [b for b in ini_blocks(CONFIGURATION.read_text()) if "[queue mail]" in b]
    assert settings.parse(example).queue_limits.policy("mail") == QueuePolicy(
        max_depth=100000, priority=5, key_concurrency=2, key_rate=10
    )


def test_the_schedule_section_example_says_what_it_says() -> None:
    from quicx.daemon import settings
    from quicx.daemon.schedules import ScheduleSpec
    from quicx.protocol.lifecycle import Missed

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

    from quicx.daemon.cluster import Member, cluster_view
    from quicx.daemon.eventbus import EventBus
    from quicx.daemon.journal.records import FsyncPolicy
    from quicx.daemon.journal.writer import Journal
    from quicx.daemon.metrics import QuicxCollector
    from quicx.daemon.shared import SharedData
    from tests.fakes import make_queue

    queue = make_queue()
    journal = Journal(str(tmp_path / "journal"), FsyncPolicy.ALWAYS, Clock())
    events = EventBus(queue, Clock())
    # With [cluster] peers: one daemon up, whose document has nothing in it.
    cluster = Member("self", {"uptime": 1.0, "memory": {"used": 0, "total": 0}})
    text = generate_latest(
        QuicxCollector(queue, SharedData(queue), journal, events, lambda: cluster_view([cluster]))
    ).decode()
    # Each family's "# TYPE NAME KIND" line, with the name as exposed (a counter's ends in _total).
    emitted = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    assert metrics_table(OPERATIONS.read_text()) == emitted
