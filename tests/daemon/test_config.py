"""quicx.conf: the reference format, our additions, and errors that name the line."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest

from quicx import cli
from quicx.cli.common import daemon_config
from quicx.daemon import config, tap
from quicx.daemon.config import Config, ConfigError
from quicx.daemon.config.sections import AllocatorSettings, ReplicationMode, StandbyLost
from quicx.daemon.journal.records import FsyncPolicy
from quicx.daemon.observe.events import Compression
from quicx.daemon.observe.logformat import LogFormat
from quicx.daemon.profiles import PRODUCTION
from quicx.daemon.queue import pmad
from quicx.daemon.queue.dispatch import DispatchSettings, Order
from quicx.daemon.queue.policy import ProgressSettings, QueueLimits, QueuePolicy, SharedLimits
from quicx.daemon.queue.results import Share
from quicx.daemon.queue.schedules import ScheduleSpec
from quicx.protocol.admin import Missed
from quicx.protocol.taskflow import Backoff, BackoffKind

REFERENCE = """\
[server]
port = 16381

[allocator]
pool_size = 8388608
class = 16,2
class = 32,2
class = 64,12
class = 128,34
class = 1024,50
"""


def test_reference_file_works_unchanged() -> None:
    parsed = config.parse(REFERENCE, "quicx.conf")
    assert parsed.server.port == 16381
    assert parsed.allocator.pool_size == 8388608
    assert [(c.size, c.percent) for c in parsed.allocator.classes] == [
        (16, 2),
        (32, 2),
        (64, 12),
        (128, 34),
        (1024, 50),
    ]
    assert parsed.server.endpoints == ("tcp:16381:interface=127.0.0.1",)
    assert parsed.source == "quicx.conf"


def test_built_in_default() -> None:
    default = config.Config()
    assert default.server.port == 16381
    assert default.allocator.pool_size == 8 * 1024 * 1024
    assert list(default.allocator.classes) == pmad.default_classes()
    assert default.tasks.allowed_types is None
    config.validate(default)


def test_empty_file_means_defaults() -> None:
    assert config.parse("# nothing\n\n; here\n") == config.Config(source="<string>")


def test_additions() -> None:
    parsed = config.parse(
        """
        [server]
        listen = tcp:7000:interface=127.0.0.1
        listen = unix:/tmp/quicx.sock
        heartbeat_interval = 5
        heartbeat_timeout = 12.5
        [allocator]
        pool_size = 64MiB
        class = 1K, 40
        class = 1M, 60
        [tasks]
        allow = send_email
        allow = resize_image
        """
    )
    assert parsed.server.endpoints == ("tcp:7000:interface=127.0.0.1", "unix:/tmp/quicx.sock")
    server = parsed.server
    assert (server.heartbeat_interval, server.heartbeat_timeout) == (5, 12.5)
    assert parsed.allocator.pool_size == 64 << 20
    assert [(c.size, c.percent) for c in parsed.allocator.classes] == [(1024, 40), (1 << 20, 60)]
    assert parsed.tasks.allowed_types == {b"send_email", b"resize_image"}


def test_fractional_percentages() -> None:
    parsed = config.parse("[allocator]\nclass = 16,12.5\nclass = 32,87.5\n")
    assert [c.percent for c in parsed.allocator.classes] == [Decimal("12.5"), Decimal("87.5")]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[server]\nport = 99999\n", "f:2: port: '99999' is not a port number"),
        ("[server]\nport = 1\nport = 2\n", "f:3: 'port' is set again (first set on line 2)"),
        ("[server]\nspeed = 3\n", "f:2: unknown key 'speed' in [server]"),
        ("[servr]\n", "f:1: unknown section [servr]"),
        ("[server\n", "f:1: malformed section header"),
        ("port = 1\n", "f:1: 'port' appears before any [section]"),
        ("[server]\nport\n", "f:2: expected 'key = value'"),
        ("[allocator]\npool_size = lots\n", "f:2: pool_size: 'lots' is not a size"),
        ("[allocator]\nclass = 16\n", "f:2: class: '16' is not SIZE,PERCENT"),
        ("[allocator]\nclass = 16,50\nclass = 8,50\n", "f:3: class size 8 is not larger"),
        ("[allocator]\nclass = 16,50\nclass = 32,40\n", "f:2: class percentages sum to 90"),
        ("[allocator]\nclass = 0,100\n", "f:2: class size 0 is out of range"),
        ("[allocator]\nclass = 2M,100\n", "f:2: class size 2097152 is out of range"),
        (
            "[allocator]\npool_size = 4096\nclass = 16,99\nclass = 2048,1\n",
            "f:4: class 2048 B at 1% of a 4096-byte pool gets no block",
        ),
        ("[allocator]\npool_size = 8\n", "f:2: pool of 8 bytes is smaller"),
        ("[tasks]\nallow =\n", "f:2: allow: a task type is 1 to 255 bytes"),
        ("[limits]\nmax_credits = 0\n", "f:2: max_credits: 0 is out of range"),
        ("[limits]\nmax_credits = 65536\n", "f:2: max_credits: 65536 is out of range"),
        ("[limits]\nmonitor_slice = 0\n", "f:2: monitor_slice: 0 seconds is out of range"),
        ("[limits]\nmonitor_slice = 2\n", "f:2: monitor_slice: 2 seconds is out of range"),
        ("[limits]\nread_slice = 4095\n", "f:2: read_slice: 4095 is out of range (4K to 1G)"),
        ("[limits]\nread_slice = 2G\n", "f:2: read_slice: 2G is out of range (4K to 1G)"),
        (
            "[server]\nheartbeat_interval = 10\nheartbeat_timeout = 5\n",
            "f:3: heartbeat_timeout (5 s) must be longer than heartbeat_interval (10 s)",
        ),
        (
            "[server]\nheartbeat_interval = -1\n",
            "f:2: heartbeat_interval: -1 seconds is out of range",
        ),
    ],
)
def test_errors_name_the_line(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config.parse(text, "f")
    assert str(raised.value).startswith(error), str(raised.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration"):
        config.load(tmp_path / "missing.conf")


def test_render_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "quicx.conf"
    path.write_text(config.render(config.Config()))
    assert config.load(path) == config.Config(source=str(path))
    custom = config.parse(REFERENCE + "[tasks]\nallow = a\n")
    assert config.parse(config.render(custom)) == custom


# -- one table: the file, the flags and quicx init agree -----------------------------------

EVERY_FLAG_CHANGED = config.with_settings(
    config.Config(),
    port=7000,
    listen=("tcp:7001:interface=127.0.0.1", "unix:/tmp/quicx.sock"),
    heartbeat_interval=5,
    heartbeat_timeout=12.5,
    control="/tmp/c.sock",
    pid_file="/tmp/q.pid",
    drain_timeout=1.5,
    spare_busy_workers=True,
    busy_poll=0.0002,
    pool_size=1 << 20,
    classes=(pmad.SizeClass(64, Decimal(40)), pmad.SizeClass(1024, Decimal("60.0"))),
    allowed_types=frozenset({b"send_email", b"resize"}),
    task_timeout=3,
    max_attempts=4,
    max_delay=3600,
    max_delayed=1000,
    max_lease=600,
    max_connections=10,
    first_frame_timeout=2,
    monitor_slice=0.01,
    read_slice=8192,
    max_type_length=20,
    max_reason_length=100,
    max_output_buffer=8192,
    max_credits=8,
    max_worker_types=16,
    terminate_grace=2.5,
    tls_certificate="server.pem",
    tls_private_key="server.key",
    tls_client_ca="ca.pem",
    tls_producers=frozenset({"billing", "mailer"}),
    tls_workers=frozenset({"worker"}),
    tls_monitors=frozenset({"grafana"}),
    tls_admins=frozenset({"ops"}),
    protocol_versions=frozenset({1}),
    default_queue="legacy",
    max_queues=50,
    default_max_depth=1000,
    default_priority=3,
    max_key_length=64,
    dedup_window=60,
    max_dedup_keys=500,
    max_fairness_keys=99,
    dispatch=Order.FIFO,
    failing_streak=5,
    failing_window=2.5,
    default_aging=0,
    default_retries=3,
    default_backoff=Backoff(BackoffKind.FIXED, 2000, 2000, 10),
    count_lost=True,
    dead_max_count=50,
    dead_max_age=3600,
    max_schedules=5,
    progress_interval=0.5,
    max_progress_message=1024,
    checkpoint_max_size=2048,
    checkpoint_max_memory=1 << 20,
    shared_max_size=4096,
    shared_max_names=8,
    shared_max_memory=65536,
    result_max_size=512,
    result_ttl=60,
    result_max_ttl=600,
    result_max_count=10,
    result_max_memory=Share(64 << 10),
    max_waiters=20,
    max_waiters_per_connection=2,
    max_wait=30,
    max_groups=3,
    max_parents=7,
    max_waiting=12,
    max_results=2048,
    group_ttl=120,
    group_idle_close=600,
    events_directory="/tmp/events",
    events_max_bytes=1 << 20,
    events_max_age=60,
    events_compress=Compression.GZIP,
    events_max_subscribers=4,
    events_max_held=500,
    metrics_listen="tcp:9464:interface=127.0.0.1",
    metrics_max_types=10,
    metrics_max_series=100,
    metrics_max_scrapes=2,
    metrics_max_connections=5,
    autoscale_target=2.5,
    autoscale_window=30,
    autoscale_interval=2,
    autoscale_max_workers=32,
    autoscale_max_jobs=500,
    autoscale_min_workers=1,
    web_listen="tcp:8080:interface=127.0.0.1",
    web_admin_token="s3cret-admin",
    web_monitor_token="s3cret-monitor",
    web_history=600,
    web_max_streams=4,
    web_max_connections=6,
    web_task_history=500,
    web_task_history_age=60,
    web_task_history_bytes=2 << 20,
    web_search_step=500,
    web_payload_preview=64,
    web_failure_text=1024,
    web_preview_done=True,
    cluster_peers="tcp:h2:16381, tcp:h3:16381",
    cluster_interval=1.5,
    cluster_timeout=0.5,
    cluster_max_status=1 << 20,
    journal="/tmp/quicx.journal",
    fsync=FsyncPolicy.ALWAYS,
    compact_factor=2.5,
    compact_min_size=4096,
    log_summary_interval=0,
    log_format=LogFormat.JSON,
    bulk_batch=50,
    bulk_turn_time=0.01,
    bulk_max_running=2,
    replication_etcd="http://10.0.0.5:2379, http://10.0.0.6:2379",
    replication_shard="orders",
    replication_name="q1",
    replication_listen="tcp:16400",
    replication_advertise="10.0.0.1:16400",
    replication_client_address="10.0.0.1:7000",
    replication_lease_ttl=4.0,
    replication_mode=ReplicationMode.ASYNC,
    replication_standby_lost=StandbyLost.ASYNC,
    replication_standby_timeout=1.5,
    replication_max_backlog=16 << 20,
    replication_max_batch=256 << 10,
    replication_key_prefix="/quicx/prod",
)
"""What flags can set: all but the [queue NAME] and [schedule NAME] sections (file-only)."""

EVERY_SETTING_CHANGED = attrs.evolve(
    EVERY_FLAG_CHANGED,
    queue_sections={
        "mail": {
            "priority": 5,
            "rate": 2.5,
            "key_concurrency": 2,
            "retries": 5,
            "backoff": Backoff(BackoffKind.EXPONENTIAL, 500, 60_000, 20),
        }
    },
    schedule_sections={
        "nightly": ScheduleSpec(
            name="nightly", cron="30 2 * * *", task_type=b"report", source="config"
        )
    },
)


def as_flags(changed: config.Config) -> list[str]:
    return [f"--{s.flag}={text}" for s in config.SETTINGS for text in s.texts(s.read(changed))]


def test_the_example_changes_every_setting() -> None:
    default = config.Config()
    assert [
        s.name for s in config.SETTINGS if s.read(EVERY_SETTING_CHANGED) == s.read(default)
    ] == []
    config.validate(EVERY_SETTING_CHANGED)


def test_every_setting_round_trips_through_the_file() -> None:
    assert config.parse(config.render(EVERY_SETTING_CHANGED), "built-in default") == (
        EVERY_SETTING_CHANGED
    )


def test_init_has_every_setting_with_its_help() -> None:
    text = config.render(config.Config())
    for s in config.SETTINGS:
        assert f"# {s.help}" in text
        assert re.search(rf"^(# )?{s.key} =", text, re.M), s.key
    # The unset ones are commented out: the file is the built-in default.
    assert config.parse(text, "built-in default") == config.Config()


def test_every_setting_is_a_twistd_flag() -> None:
    options = tap.Options()
    options.parseOptions(as_flags(EVERY_SETTING_CHANGED))
    assert options.load_config() == EVERY_FLAG_CHANGED
    usage = str(options)
    assert all(f"--{s.flag}=" in usage for s in config.SETTINGS)


def test_every_setting_is_a_quicx_start_flag() -> None:
    args = cli.build_parser().parse_args(["start", *as_flags(EVERY_SETTING_CHANGED)])
    assert daemon_config(args) == EVERY_FLAG_CHANGED


def test_flags_override_the_file_and_repeated_ones_replace_its_values(tmp_path: Path) -> None:
    path = tmp_path / "quicx.conf"
    path.write_text("[server]\nlisten = unix:/tmp/a\nlisten = unix:/tmp/b\n[tasks]\ntimeout = 5\n")
    options = tap.Options()
    options.parseOptions(
        [f"--config={path}", "--listen=unix:/tmp/c", "--task-timeout=1", "--task-timeout=2"]
    )
    loaded = options.load_config()
    assert (loaded.server.listen, loaded.tasks.timeout, loaded.source) == (
        ("unix:/tmp/c",),
        2,
        str(path),
    )


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--busy-poll=0.5"], "quicx: --busy-poll: 0.5 seconds is out of range (0 to 0.01)"),
        (["--max-credits=0"], "quicx: --max-credits: 0 is out of range (1 to 65535)"),
        (["--class=16"], "quicx: --class: '16' is not SIZE,PERCENT"),
        (["--fsync=sometimes"], "quicx: --fsync: 'sometimes' is not one of always, everysec, no"),
        (
            ["--heartbeat-interval=10", "--heartbeat-timeout=5"],
            "quicx: command line: heartbeat_timeout (5 s) must be longer than"
            " heartbeat_interval (10 s) (--heartbeat-timeout, --heartbeat-interval)",
        ),
        (
            ["--heartbeat-interval=100"],
            "quicx: command line: heartbeat_timeout (90 s) must be longer than"
            " heartbeat_interval (100 s) (--heartbeat-interval)",
        ),
        (
            ["--tls-workers=w"],
            "quicx: command line: workers needs client_ca: identities come from client"
            " certificates (--tls-workers)",
        ),
        (["--pool-size=64"], "quicx: command line: pool of 64 bytes is smaller"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(flags: list[str], error: str) -> None:
    options = tap.Options()
    options.parseOptions(flags)
    with pytest.raises(SystemExit) as raised:
        tap.makeService(options)
    message = str(raised.value.code)
    assert message.startswith(error), message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "error"),
    [
        # The line of the setting to blame that the file sets.
        ("[server]\nheartbeat_interval = 100\n", "f:2: heartbeat_timeout (90 s)"),
        ("[tls]\nmonitors = m\n", "f:2: monitors needs client_ca"),
        ("[server]\nbusy_poll = -1\n", "f:2: busy_poll: -1 seconds is out of range (0 to 0.01)"),
        ("[tasks]\nmax_attempts = many\n", "f:2: max_attempts: 'many' is not a whole number"),
        ("[server]\nspare_busy_workers = maybe\n", "f:2: spare_busy_workers: 'maybe' is not yes"),
    ],
)
def test_more_errors_name_the_line(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config.parse(text, "f")
    assert str(raised.value).startswith(error), str(raised.value)


# -- queues -------------------------------------------------------------------------------


def test_queue_sections_inherit_the_queues_defaults() -> None:
    loaded = config.parse(
        "[queues]\npriority = 3\nmax_depth = 10\n"
        "[queue mail]\nmax_depth = 5\nrate = 2.5\nburst = 4\n"
        "[queue video]\ntimeout = 30\nkey_concurrency = 2\n"
    )
    limits = loaded.queue_limits
    assert limits.policy("mail") == QueuePolicy(max_depth=5, priority=3, rate=2.5, burst=4)
    assert limits.policy("video") == QueuePolicy(
        max_depth=10, priority=3, timeout=30.0, key_concurrency=2
    )
    assert limits.policy("other") == QueuePolicy(max_depth=10, priority=3)
    assert config.parse(config.render(loaded)) == loaded


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[queue a b]\n", "<string>:1: [queue a b]: a queue name is 1 to 64"),
        ("[queue " + "x" * 65 + "]\n", "<string>:1: [queue xxx"),
        ("[queue a]\n\n[queue a]\n", "<string>:3: [queue a] is declared again (first on line 1)"),
        ("[queue a]\nfoo = 1\n", "<string>:2: unknown key 'foo' in [queue a] (known: max_depth"),
        (
            "[queue a]\npriority = 256\n",
            "<string>:2: [queue a] priority: 256 is out of range (0 to 255)",
        ),
        ("[queue a]\nrate = 1\nrate = 2\n", "<string>:3: 'rate' is set again in [queue a]"),
        ("[protocol]\nversions = 3\n", "<string>:2: versions: '3' is not 1, 2 or '1, 2'"),
        ("[protocol]\ndefault_queue = no way\n", "<string>:2: default_queue: a queue name"),
        ("[queues]\nmax_key_length = 256\n", "<string>:2: max_key_length: 256 is out of range"),
        ("[queues]\nmax_queues = 0\n", "<string>:2: max_queues: 0 is out of range"),
        ("[tls]\nadmins = ops\n", "<string>:2: admins needs client_ca"),
        ("[queue]\n", "<string>:1: [queue] needs the queue's name: [queue NAME]"),
        ("[queue a]\ntimeout = -1\n", "<string>:2: [queue a] timeout: -1 seconds is out of range"),
        ("[queue a]\nmax_depth = lots\n", "<string>:2: [queue a] max_depth: 'lots' is not a whole"),
        (
            "[queue a]\nkey_concurrency = -1\n",
            "<string>:2: [queue a] key_concurrency: '-1' is not a",
        ),
        ("[queue a]\nrate = 2e6\n", "<string>:2: [queue a] rate: 2e6 is out of range (0 to 1e+06)"),
        ("[queue a]\nburst = 1.5\n", "<string>:2: [queue a] burst: '1.5' is not a whole number"),
        ("[queue a]\nkey_rate = fast\n", "<string>:2: [queue a] key_rate: 'fast' is not a number"),
        (
            "[queue a]\nkey_burst = -2\n",
            "<string>:2: [queue a] key_burst: '-2' is not a whole number",
        ),
        ("[queue a]\n[server]\nport = 1\n[queue b]\n[queue a]\n", "<string>:5: [queue a] is"),
        ("[protocol]\nversions =\n", "<string>:2: versions: '' is not 1, 2 or '1, 2'"),
        ("[protocol]\nversions = 1, 3\n", "<string>:2: versions: '1, 3' is not 1, 2"),
        ("[queues]\nmax_depth = -1\n", "<string>:2: max_depth: '-1' is not a whole number"),
        ("[queues]\npriority = 256\n", "<string>:2: priority: 256 is out of range (0 to 255)"),
        ("[queues]\nmax_key_length = 0\n", "<string>:2: max_key_length: 0 is out of range"),
        ("[queues]\ndedup_window = -1\n", "<string>:2: dedup_window: -1 seconds is out of"),
        ("[queues]\nmax_dedup_keys = 100000001\n", "<string>:2: max_dedup_keys: 100000001 is"),
        ("[queues]\nmax_fairness_keys = 0\n", "<string>:2: max_fairness_keys: 0 is out of"),
        (
            "[queues]\nmax_queues = 2\n[queue a]\n[queue b]\n",
            "<string>:2: 3 queues exist from the start (the [queue NAME] sections and the"
            " default queue), more than max_queues = 2",
        ),
    ],
)
def test_bad_queue_settings_name_the_line(text: str, error: str) -> None:
    with pytest.raises(config.ConfigError) as raised:
        config.parse(text)
    assert str(raised.value).startswith(error), raised.value


def test_a_queue_section_header_is_read_as_the_others() -> None:
    loaded = config.parse("[ QUEUE   mail.v2 ]\nrate = 3\n", "f")
    assert loaded.queue_sections == {"mail.v2": {"rate": 3.0}}
    with pytest.raises(ConfigError, match=r"^f:2: unknown key 'x' in \[queue mail.v2\]"):
        config.parse("[QUEUE   mail.v2 ]\nx = 1\n", "f")


def test_versions_take_one_or_both() -> None:
    assert config.parse("[protocol]\nversions = 1\n").queue_limits.versions == {1}
    assert config.parse("[protocol]\nversions = 2, 1\n").queue_limits.versions == {1, 2}


@pytest.mark.parametrize(
    ("text", "share", "of_8m"),
    [
        ("25%", Share(percent=Decimal(25)), 2 << 20),
        ("12.5 %", None, 1 << 20),
        ("2M", Share(2 << 20), 2 << 20),
    ],
)
def test_max_memory_is_a_size_or_a_share_of_the_pool(
    text: str, share: Share | None, of_8m: int
) -> None:
    loaded = config.parse(f"[results]\nmax_memory = {text}\n")
    limit = loaded.queue_limits.results.max_memory
    assert share is None or limit == share
    assert limit.of(8 << 20) == of_8m
    assert config.parse(config.render(loaded)) == loaded


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[results]\nmax_memory = 101%\n", "<string>:2: max_memory: 101% is out of range"),
        ("[results]\nmax_memory = lots\n", "<string>:2: max_memory: 'lots' is not a size"),
        ("[results]\nmax_memory = x%\n", "<string>:2: max_memory: 'x%' is not a size or"),
        ("[results]\nttl = 0\n", "<string>:2: ttl: 0 seconds is out of range"),
        ("[queue a]\nkeep_results = maybe\n", "<string>:2: [queue a] keep_results: 'maybe'"),
    ],
)
def test_bad_result_settings_name_the_line(text: str, error: str) -> None:
    with pytest.raises(config.ConfigError) as raised:
        config.parse(text)
    assert str(raised.value).startswith(error), raised.value


def test_the_default_queue_counts_once_against_max_queues() -> None:
    text = "[queues]\nmax_queues = 2\n[queue a]\n[queue default]\n"
    assert set(config.parse(text).queue_limits.declared) == {"a", "default"}
    assert config.parse("[protocol]\ndefault_queue = a\n" + text.replace("default]", "b]"))


def test_max_queues_given_as_a_flag_is_checked_against_the_files_queues(tmp_path: Path) -> None:
    path = tmp_path / "quicx.conf"
    path.write_text("[queue a]\n[queue b]\n")
    options = tap.Options()
    options.parseOptions([f"--config={path}", "--max-queues=2"])
    with pytest.raises(SystemExit) as raised:
        tap.makeService(options)
    assert str(raised.value.code) == (
        "quicx: command line: 3 queues exist from the start (the [queue NAME] sections and the"
        " default queue), more than max_queues = 2 (--max-queues)"
    )


EVERY_QUEUE_KEY_CHANGED: dict[str, Any] = {
    "max_depth": 7,
    "priority": 200,
    "timeout": 2.5,
    "key_concurrency": 3,
    "rate": 0.5,
    "burst": 9,
    "key_rate": 1e6,
    "key_burst": 4,
    "keep_results": True,
    "result_ttl": 90.0,
    "aging": 0.5,
}


def test_the_queue_keys_are_the_policys_fields() -> None:
    assert [k.key for k in config.QUEUE_KEYS] == [f.name for f in attrs.fields(QueuePolicy)]
    assert [k for k, v in EVERY_QUEUE_KEY_CHANGED.items() if getattr(QueuePolicy(), k) == v] == []


def test_every_queue_key_round_trips_through_the_file_into_the_policy() -> None:
    text = "[queue mail]\n" + "".join(f"{k} = {v}\n" for k, v in EVERY_QUEUE_KEY_CHANGED.items())
    loaded = config.parse(text)
    assert loaded.queue_limits.policy("mail") == QueuePolicy(**EVERY_QUEUE_KEY_CHANGED)
    assert config.parse(config.render(loaded)) == loaded


@pytest.mark.parametrize(
    ("header", "keys"),
    [("# [queue NAME]", config.QUEUE_KEYS), ("# [schedule NAME]", config.SCHEDULE_KEYS)],
)
def test_init_shows_a_commented_section_with_every_key(
    header: str, keys: tuple[config.SectionKey, ...]
) -> None:
    text = config.render(config.Config())
    example = text[text.index(header + "\n") :].split("\n\n")[0].splitlines()[1:]
    assert [line.split(" =")[0] for line in example] == [f"# {k.key}" for k in keys]
    assert all(f"({k.help})" in text for k in keys)


def test_the_limits_reach_the_queue_core_as_configured() -> None:
    loaded = config.parse(
        "[protocol]\nversions = 2\ndefault_queue = legacy\n"
        "[queues]\nmax_queues = 9\nmax_key_length = 64\ndedup_window = 60\n"
        "max_dedup_keys = 5\nmax_fairness_keys = 6\nmax_depth = 10\npriority = 4\n"
        "dispatch = FIFO\nfailing_streak = 0\nfailing_window = 0.5\n"
        "[queue mail]\npriority = 8\n"
    )
    defaults = QueuePolicy(max_depth=10, priority=4)
    declared = {"mail": attrs.evolve(defaults, priority=8)}
    assert loaded.queue_limits == QueueLimits(
        frozenset({2}),
        "legacy",
        9,
        64,
        60.0,
        5,
        6,
        declared=declared,
        defaults=defaults,
        dispatch=DispatchSettings(Order.FIFO, 0, 0.5),
    )
    assert config.Config().queue_limits.dispatch == DispatchSettings(Order.LIFO, 3, 10.0)


def test_aging_is_off_where_only_version_1_is_spoken() -> None:
    """The protocol page's daemon deals in strict priority order, [queue NAME] sections too."""
    text = "[queues]\naging = 2\n[queue mail]\naging = 3\n"
    both = config.parse(text).queue_limits
    assert (both.defaults.aging, both.policy("mail").aging) == (2.0, 3.0)
    only_v1 = config.parse("[protocol]\nversions = 1\n" + text).queue_limits
    assert (only_v1.defaults.aging, only_v1.policy("mail").aging) == (0.0, 0.0)
    assert config.Config().queue_limits.defaults.aging == 5.0


def test_the_progress_and_shared_limits_reach_the_daemon_as_configured() -> None:
    loaded = config.parse(
        "[progress]\ninterval = 0.25\nmax_message = 1K\n"
        "[shared]\nmax_size = 64K\nmax_names = 3\nmax_memory = 1M\n"
    )
    assert loaded.progress == ProgressSettings(0.25, 1024)
    assert loaded.shared == SharedLimits(64 << 10, 3, 1 << 20)
    assert config.Config().shared == SharedLimits()
    with pytest.raises(ConfigError, match=r"<string>:2: max_size: .* out of range"):
        # A version must fit one journal record.
        config.parse("[shared]\nmax_size = 2M\n")


# -- schedules ------------------------------------------------------------------------------


def test_schedule_sections_become_schedules() -> None:
    loaded = config.parse(
        "[schedules]\nmax_schedules = 2\n"
        "[schedule nightly]\ncron = 30 2 * * *\ntimezone = Europe/Paris\ntype = report\n"
        'payload = {"to": "été"}\nqueue = reports\npriority = 7\nmissed = ALL\ncatch_up = 3\n'
        "[ SCHEDULE  ping ]\nevery = 1.5\ntype = ping\n"
    )
    assert loaded.schedules.max_schedules == 2
    assert loaded.schedule_sections == {
        "nightly": ScheduleSpec(
            name="nightly",
            cron="30 2 * * *",
            timezone="Europe/Paris",
            task_type=b"report",
            payload='{"to": "été"}'.encode(),
            queue="reports",
            priority=7,
            missed=Missed.ALL,
            catch_up=3,
            source="config",
        ),
        "ping": ScheduleSpec(name="ping", every=1.5, task_type=b"ping", source="config"),
    }
    assert config.parse(config.render(loaded)) == loaded


def test_the_schedule_keys_are_the_specs_fields() -> None:
    assert {k.field for k in config.SCHEDULE_KEYS} == {
        f.name for f in attrs.fields(ScheduleSpec)
    } - {"name", "source"}


EVERY_SCHEDULE_KEY_CHANGED = {
    "cron": "0 9 * * MON-FRI",
    "timezone": "Asia/Tokyo",
    "type": "digest",
    "payload": "weekday digest",
    "queue": "mail",
    "priority": 9,
    "missed": "skip",
    "catch_up": 0,
}


def test_every_schedule_key_round_trips_through_the_file() -> None:
    text = "[schedule a]\n" + "".join(f"{k} = {v}\n" for k, v in EVERY_SCHEDULE_KEY_CHANGED.items())
    loaded = config.parse(text + "[schedule b]\nevery = 60\ntype = t\n")
    a, b = loaded.schedule_sections.values()
    assert [k.key for k in config.SCHEDULE_KEYS if getattr(a, k.field) == k.default] == ["every"]
    assert b.every == 60
    assert config.parse(config.render(loaded)) == loaded


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[schedule]\n", "f:1: [schedule] needs the schedule's name: [schedule NAME]"),
        ("[schedule a b]\n", "f:1: [schedule a b]: a schedule name is 1 to 64 letters"),
        (
            "[schedule a]\nevery = 5\ntype = t\n[schedule a]\n",
            "f:4: [schedule a] is declared again (first on line 1)",
        ),
        ("[schedule a]\nfoo = 1\n", "f:2: unknown key 'foo' in [schedule a] (known: cron, every,"),
        ("[schedule a]\ntype = t\ntype = u\n", "f:3: 'type' is set again in [schedule a] (first"),
        (
            "[schedule nightly]\ncron = 61 2 * * *\n",
            "f:2: [schedule nightly] cron: '61 2 * * *' is not a cron expression: bad minute",
        ),
        ("[schedule a]\ncron = 0 30 2 * * *\n", "f:2: [schedule a] cron: '0 30 2 * * *' is not a"),
        ("[schedule a]\nevery = 0.5\n", "f:2: [schedule a] every: 0.5 seconds is out of range"),
        ("[schedule a]\nevery = 1e9\n", "f:2: [schedule a] every: 1e9 seconds is out of range"),
        ("[schedule a]\nevery = 5m\n", "f:2: [schedule a] every: '5m' is not a number of seconds"),
        ("[schedule a]\ntimezone = CEST\n", "f:2: [schedule a] timezone: unknown time zone 'CEST'"),
        ("[schedule a]\ntype =\n", "f:2: [schedule a] type: a task type is 1 to 255 bytes"),
        ("[schedule a]\nqueue = a b\n", "f:2: [schedule a] queue: a queue name is 1 to 64"),
        ("[schedule a]\npriority = 256\n", "f:2: [schedule a] priority: 256 is out of range"),
        (
            "[schedule a]\nmissed = sometimes\n",
            "f:2: [schedule a] missed: 'sometimes' is not one of skip, once, all",
        ),
        ("[schedule a]\ncatch_up = 65536\n", "f:2: [schedule a] catch_up: 65536 is out of range"),
        (
            "[schedule a]\ncron = * * * * *\ntype = t\nevery = 5\n",
            "f:4: [schedule a] every: a schedule has cron or every, not both",
        ),
        (
            "[schedule a]\nevery = 5\ncron = * * * * *\n",
            "f:3: [schedule a] cron: a schedule has cron or every, not both",
        ),
        ("\n[schedule a]\ntype = t\n", "f:2: [schedule a] needs cron or every"),
        ("[schedule a]\nevery = 5\n", "f:1: [schedule a] needs a type"),
        ("[schedules]\nmax_schedules = -1\n", "f:2: max_schedules: '-1' is not a whole number"),
        ("[schedules]\nmax_schedules = 100001\n", "f:2: max_schedules: 100001 is out of range"),
        ("[schedules]\nevery = 5\n", "f:2: unknown key 'every' in [schedules]"),
        (
            "[schedules]\nmax_schedules = 1\n"
            "[schedule a]\nevery = 5\ntype = t\n[schedule b]\nevery = 5\ntype = t\n",
            "f:2: 2 [schedule NAME] sections, more than max_schedules = 1",
        ),
        (
            "[schedule a]\nevery = 5\ntype = t\n[schedules]\nmax_schedules = 0\n",
            "f:5: 1 [schedule NAME] sections, more than max_schedules = 0",
        ),
    ],
)
def test_bad_schedule_settings_name_the_line(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config.parse(text, "f")
    assert str(raised.value).startswith(error), raised.value


def test_max_schedules_given_as_a_flag_is_checked_against_the_files_schedules(
    tmp_path: Path,
) -> None:
    path = tmp_path / "quicx.conf"
    path.write_text("[schedule a]\nevery = 60\ntype = t\n")
    options = tap.Options()
    options.parseOptions([f"--config={path}", "--max-schedules=0"])
    with pytest.raises(SystemExit) as raised:
        tap.makeService(options)
    assert str(raised.value.code) == (
        "quicx: command line: 1 [schedule NAME] sections, more than max_schedules = 0"
        " (--max-schedules)"
    )


# -- the allocator's layout ---------------------------------------------------------------


def test_the_layout_check_reserves_no_pool() -> None:
    # 16 TiB: more than this machine could reserve; its layout is arithmetic.
    huge = config.parse("[allocator]\npool_size = 16384G\n")
    assert huge.allocator.pool_size == 1 << 44
    assert huge.allocator.layout().blocks[0] > 1 << 30


@pytest.mark.parametrize("allocator", [Config().allocator, PRODUCTION.config().allocator])
def test_the_layout_is_the_pools_own(allocator: AllocatorSettings) -> None:
    layout, pool = allocator.layout(), allocator.pool()
    try:
        assert list(layout.blocks) == pool.blocks_total
        assert layout.metadata_bytes == pool.metadata_bytes
    finally:
        pool.close()
