"""
A real daemon of a shard (C{[replication] etcd} set) whose lease store does
not answer: it stays a candidate, restores nothing, serves nothing, and
says so in C{quicx status}, its metrics and its log; C{quicx step-down} and
C{quicx promote} are one line and a non-zero exit where they cannot act.
"""

from __future__ import annotations

from pathlib import Path

from quicx.clients.blocking import QuicxClient
from tests.cli.test_cli import quicx
from tests.daemon.observe.test_metrics import METRICS, scrape, series

SHARD = (
    "--replication-etcd=http://127.0.0.1:1",
    "--replication-listen=tcp:0:interface=127.0.0.1",
    "--replication-name=one",
    "--replication-shard=orders",
    "--replication-client-address=127.0.0.1:1",  # its own port is 0: picked at start
    "--replication-advertise=127.0.0.1:2",
)


def test_a_candidate_restores_nothing_and_says_what_it_is(tmp_path: Path, start_daemon) -> None:
    journal = tmp_path / "quicx.journal"
    single = start_daemon(f"--journal={journal}", "--fsync=always")
    with QuicxClient(f"tcp:127.0.0.1:{single.port}") as client:
        client.submit("t", "kept")
    single.stop()
    daemon = start_daemon(f"--journal={journal}", "--fsync=always", METRICS, *SHARD)
    assert "one of shard orders: not serving until it is the primary" in daemon.log()
    assert "tasks recovered" not in daemon.log()
    shown = quicx("status", f"--control={daemon.control_path}")
    assert shown.returncode == 0, shown.stderr
    assert (
        "  replication one: candidate in shard orders, epoch 0 (sync, standby_lost wait);"
        " lag 0 batches, 0 s\n"
    ) in shown.stdout
    samples = scrape(daemon.announced_port("metrics"))
    assert series(samples, "quicx_replication_role", "role") == {
        ("candidate",): 1.0,
        ("standby",): 0.0,
        ("primary",): 0.0,
        ("fenced",): 0.0,
    }
    for name in ("epoch", "lag_batches", "lag_seconds", "in_sync_standbys"):
        assert series(samples, f"quicx_replication_{name}") == {(): 0.0}
    refused = quicx("step-down", f"--control={daemon.control_path}")
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        1,
        "",
        "quicx: this daemon is candidate, not the primary (none known): step down on the primary\n",
    )
    daemon.stop()
    # Its journal was never opened: the task the single daemon kept is still there.
    again = start_daemon(f"--journal={journal}")
    assert "1 tasks recovered" in again.log()


def test_role_commands_on_a_daemon_without_replication_exit_non_zero(start_daemon) -> None:
    daemon = start_daemon(METRICS)
    for command in ("step-down", "promote"):
        done = quicx(command, f"--control={daemon.control_path}")
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            "",
            "quicx: this daemon is not one of a shard ([replication] etcd is not set)\n",
        )
    assert "replication" not in quicx("status", f"--control={daemon.control_path}").stdout
    assert not any(
        name.startswith("quicx_replication") for name in scrape(daemon.announced_port("metrics"))
    )
