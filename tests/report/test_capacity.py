"""
Capacity out of the box: the built-in configuration stays the reference
product's (an 8 MiB pool, classes up to 1 KiB), and C{quicx init --profile
production} writes a layout for real payloads whose stated memory is what a
real daemon started from it reserves.  Run as the real console script
against real daemons on ephemeral ports, with private paths.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from quicx.daemon import config
from quicx.daemon.control import fetch_status
from quicx.protocol import wire
from tests.cli.test_cli import ROOT, env_for, quicx
from tests.cli.test_cli import background as background  # a fixture
from tests.peer import Peer

HANDLERS = """\
def mirror(payload):
    return payload[::-1]

def grow(payload):
    return b"r" * int(payload)

handlers = {"mirror": mirror, "grow": grow}
"""

STATED = re.compile(r"\(([\d,]+) bytes\)")
"""The pool's size in bytes, as the file and the terminal state it."""


@pytest.fixture
def environment(tmp_path: Path):
    """The environment of C{quicx} commands that can import C{handlers:handlers}."""
    (tmp_path / "handlers.py").write_text(HANDLERS)

    def make(daemon) -> dict[str, str]:
        return {**env_for(daemon), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}

    return make


def production(tmp_path: Path) -> tuple[Path, str]:
    """Write the production profile's file; return it and what the terminal said."""
    made = quicx("init", "--profile", "production")
    assert made.returncode == 0, made.stderr
    path = tmp_path / "production.conf"
    path.write_text(made.stdout)
    return path, made.stderr


def stated_bytes(text: str) -> int:
    match = STATED.search(text)
    assert match, text
    return int(match.group(1).replace(",", ""))


def test_init_without_a_profile_writes_the_built_in_default_and_says_nothing_else() -> None:
    plain = quicx("init")
    assert (plain.returncode, plain.stderr) == (0, "")
    assert plain.stdout == config.render(config.Config())
    assert "profile" not in plain.stdout.lower()


def test_the_production_profile_loads_and_takes_what_the_default_refuses(tmp_path: Path) -> None:
    path, said = production(tmp_path)
    loaded = config.load(path)
    assert loaded.allocator.pool_size == 256 << 20
    assert loaded.allocator.classes[-1].size == loaded.results.max_size == 256 << 10
    assert config.Config().allocator.classes[-1].size == 1024  # the default is the reference's
    # Stated in the file and on the terminal, in the same words.
    assert stated_bytes(path.read_text()) == stated_bytes(said) == loaded.allocator.pool_size
    assert len(said.splitlines()) == 1 and "production" in said and "256 MiB" in said


def test_a_daemon_started_from_the_profile_reserves_what_it_states(
    tmp_path: Path, start_daemon
) -> None:
    path, said = production(tmp_path)
    daemon = start_daemon(f"--config={path}")
    status = fetch_status(str(daemon.control_path))
    stated = stated_bytes(path.read_text())
    assert status["memory"]["total"] == stated == stated_bytes(said)
    with Peer(daemon.address) as monitor:
        stats = monitor.request(wire.encode_stats())
    assert isinstance(stats, wire.StatsResponse) and stats.pmad_bytes_total == stated
    # Each class's blocks as the file lists them, and their sum as the log gives it.
    listed = {
        int(size): int(blocks.replace(",", ""))
        for size, blocks in re.findall(r"^#\s+(\d+) B\s.*?([\d,]+) blocks", path.read_text(), re.M)
    }
    assert listed == {c["size"]: c["blocks_total"] for c in status["classes"]}
    assert f"{sum(listed.values()):,} blocks" in daemon.log()


def test_a_200_kib_payload_and_result_go_end_to_end_with_the_profile(
    tmp_path: Path, start_daemon, background, environment
) -> None:
    path, _ = production(tmp_path)
    daemon = start_daemon(f"--config={path}")
    env = environment(daemon)
    background("worker", "handlers:handlers", env=env)
    payload = bytes(range(ord("a"), ord("z") + 1)) * (200 * 1024 // 26)
    assert len(payload) > 200_000
    done = quicx(
        "submit", "mirror", "-", "--keep-result", "--wait", input=payload.decode(), env=env
    )
    assert done.returncode == 0, done.stderr
    task_id = done.stdout.split()[0]
    assert done.stdout.startswith(f"{task_id}\ntask {task_id} done\n")
    shown = quicx("result", task_id, env=env)
    assert (shown.returncode, shown.stdout) == (0, payload[::-1].decode())
    grown = quicx("submit", "grow", str(200 * 1024), "--keep-result", "--wait", env=env)
    assert grown.returncode == 0, grown.stderr
    assert grown.stdout.endswith("\n" + "r" * 200 * 1024)


def test_under_the_defaults_payloads_and_results_over_1_kib_are_refused_naming_the_setting(
    daemon, background, environment
) -> None:
    env = environment(daemon)
    background("worker", "handlers:handlers", env=env)
    refused = quicx("submit", "mirror", "x" * 1025, env=env)
    assert refused.returncode == 1
    assert "1024" in refused.stderr and "[allocator] class" in refused.stderr
    fits = quicx("submit", "grow", "1024", "--keep-result", "--wait", env=env)
    assert fits.returncode == 0, fits.stderr
    over = quicx("submit", "grow", "1025", "--keep-result", "--wait", env=env)
    assert over.returncode == 1
    assert "1,025 bytes, more than the daemon takes (1,024" in over.stdout
    assert "[allocator] class" in over.stdout


def test_an_unknown_profile_is_one_line_and_exit_2() -> None:
    wrong = quicx("init", "--profile", "huge")
    assert (wrong.returncode, wrong.stdout) == (2, "")
    assert wrong.stderr.startswith("quicx init: ") and len(wrong.stderr.splitlines()) == 1
    assert "'huge'" in wrong.stderr and "production" in wrong.stderr


def test_the_docs_state_what_the_profile_writes(tmp_path: Path) -> None:
    _, said = production(tmp_path)
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert f"#   {said}" in operations  # the terminal line, as shown
    row = next(
        line
        for line in (ROOT / "docs" / "configuration.md").read_text().splitlines()
        if line.startswith("| `production` |")
    )
    blocks = re.search(r"([\d,]+) blocks", said)
    assert blocks and f"({stated_bytes(said):,} bytes), {blocks.group(1)} blocks" in row
