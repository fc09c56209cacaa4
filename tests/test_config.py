"""quicx.conf: the reference format, our additions, and errors that name the line."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from quicx.daemon import pmad
from quicx.daemon import settings as config
from quicx.daemon.settings import ConfigError

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
    assert parsed.port == 16381
    assert parsed.pool_size == 8388608
    assert [(c.size, c.percent) for c in parsed.classes] == [
        (16, 2),
        (32, 2),
        (64, 12),
        (128, 34),
        (1024, 50),
    ]
    assert parsed.endpoints == ("tcp:16381:interface=127.0.0.1",)
    assert parsed.source == "quicx.conf"


def test_built_in_default() -> None:
    default = config.Config()
    assert default.port == 16381
    assert default.pool_size == 8 * 1024 * 1024
    assert list(default.classes) == pmad.default_classes()
    assert default.allowed_types is None
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
    assert parsed.endpoints == ("tcp:7000:interface=127.0.0.1", "unix:/tmp/quicx.sock")
    assert (parsed.heartbeat_interval, parsed.heartbeat_timeout) == (5, 12.5)
    assert parsed.pool_size == 64 << 20
    assert [(c.size, c.percent) for c in parsed.classes] == [(1024, 40), (1 << 20, 60)]
    assert parsed.allowed_types == {b"send_email", b"resize_image"}


def test_fractional_percentages() -> None:
    parsed = config.parse("[allocator]\nclass = 16,12.5\nclass = 32,87.5\n")
    assert [c.percent for c in parsed.classes] == [Decimal("12.5"), Decimal("87.5")]


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
