"""
Reading a configuration: a C{quicx.conf}, then flags, into a checked L{Config}; errors name where.

The file format is the reference product's: C{[section]} headers and
C{key = value} lines, C{#} or C{;} comments, and the C{class} key repeated
once per size class.  It is parsed here rather than with L{configparser}
because keys repeat and every error must name the file and line.

Files written for the reference product (C{[server] port}, C{[allocator]
pool_size} and C{class}) work unchanged; the other keys are additions
documented in C{docs/configuration.md}.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from attrs import Factory, define

from quicx.daemon.config.checks import Conflict, validate
from quicx.daemon.config.declarations import (
    BY_KEY,
    BY_NAME,
    NAMED_KEYS,
    QUEUE_SECTION,
    SCHEDULE_SECTION,
    SECTIONS,
)
from quicx.daemon.config.sections import Config
from quicx.daemon.config.table import Setting, replace
from quicx.daemon.queue import schedules
from quicx.daemon.queue.schedules import ScheduleSpec
from quicx.protocol.codec import check_queue


class ConfigError(Exception):
    """
    The configuration cannot be used; the message names where and why.
    """


_SECTION_NAMES: dict[str, Callable[[str], object]] = {
    QUEUE_SECTION: check_queue,
    SCHEDULE_SECTION: schedules.check_name,
}

_Lines = dict[Setting, list[tuple[int, object]]]


def with_settings(config: Config, **values: object) -> Config:
    """C{config} with the settings of these names (L{Setting.name}) set to these values."""
    return replace(config, {BY_NAME[name]: value for name, value in values.items()})


def parse(text: str, source: str = "<string>") -> Config:
    """
    Parse the text of a C{quicx.conf}.

    @raise ConfigError: with C{source:line:} and the reason.
    """
    lines: _Lines = {}
    named: dict[str, dict[str, _Named]] = {kind: {} for kind in NAMED_KEYS}
    section: str | None = None
    current: _Named | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section, current = _header(line, number, where, named)
            continue
        key, equals, value = line.partition("=")
        key = key.strip().lower()
        if not equals:
            raise ConfigError(f"{where}: expected 'key = value', got {line!r}")
        if section is None:
            raise ConfigError(f"{where}: '{key}' appears before any [section]")
        if current is not None:
            current.read(key, value.strip(), number, where)
        else:
            _read(lines, section, key, value.strip(), number, where)
    config = _evolve(
        Config(
            queue_sections={name: q.values for name, q in named[QUEUE_SECTION].items()},
            schedule_sections={
                name: _schedule(s, source) for name, s in named[SCHEDULE_SECTION].items()
            },
            source=source,
        ),
        {spec: [value for _, value in found] for spec, found in lines.items()},
    )
    try:
        validate(config)
    except Conflict as e:
        raise ConfigError(f"{_blame(e, lines, source)}: {e}") from None
    return config


def _header(
    line: str, number: int, where: str, named: Mapping[str, dict[str, _Named]]
) -> tuple[str, _Named | None]:
    """A C{[section]} line: the section, and the named one it starts if it is one."""
    if not line.endswith("]"):
        raise ConfigError(f"{where}: malformed section header {line!r}")
    section = line[1:-1].strip()
    head, _, name = section.partition(" ")
    if head.lower() in named:
        current = _named_section(head.lower(), name.strip(), number, where, named)
        return current.title, current
    section = section.lower()
    if section not in SECTIONS:
        raise ConfigError(f"{where}: unknown section [{section}]")
    return section, None


def _read(lines: _Lines, section: str, key: str, value: str, number: int, where: str) -> None:
    """One C{key = value} line of a section of settings."""
    spec = BY_KEY.get((section, key))
    if spec is None:
        raise ConfigError(f"{where}: unknown key '{key}' in [{section}]")
    previous = lines.setdefault(spec, [])
    if previous and not spec.repeatable:
        raise ConfigError(f"{where}: '{key}' is set again (first set on line {previous[0][0]})")
    try:
        previous.append((number, spec.kind.parse(value)))
    except ValueError as e:
        raise ConfigError(f"{where}: {key}: {e}") from None


@define
class _Named:
    """
    A C{[queue NAME]} or C{[schedule NAME]} section as read.

    @ivar kind: C{queue} or C{schedule}.
    @ivar line: its header's line.
    @ivar values: each key's value, by key.
    @ivar lines: each key's line, by key.
    """

    kind: str
    name: str
    line: int
    values: dict[str, Any] = Factory(dict)
    lines: dict[str, int] = Factory(dict)

    @property
    def title(self) -> str:
        return f"{self.kind} {self.name}"

    def read(self, key: str, value: str, number: int, where: str) -> None:
        """One C{key = value} line. @raise ConfigError: an unknown or repeated key, a bad value."""
        keys = NAMED_KEYS[self.kind]
        spec = keys.get(key)
        if spec is None:
            known = ", ".join(keys)
            raise ConfigError(f"{where}: unknown key '{key}' in [{self.title}] (known: {known})")
        if key in self.values:
            raise ConfigError(
                f"{where}: '{key}' is set again in [{self.title}] (first on line {self.lines[key]})"
            )
        try:
            self.values[key] = spec.kind.parse(value)
        except ValueError as e:
            raise ConfigError(f"{where}: [{self.title}] {key}: {e}") from None
        self.lines[key] = number


def _named_section(
    kind: str, name: str, number: int, where: str, named: Mapping[str, dict[str, _Named]]
) -> _Named:
    """Start a C{[KIND NAME]} section. @raise ConfigError: a bad or repeated name."""
    if not name:
        raise ConfigError(f"{where}: [{kind}] needs the {kind}'s name: [{kind} NAME]")
    try:
        _SECTION_NAMES[kind](name)
    except ValueError as e:
        raise ConfigError(f"{where}: [{kind} {name}]: {e}") from None
    declared = named[kind]
    if name in declared:
        raise ConfigError(
            f"{where}: [{kind} {name}] is declared again (first on line {declared[name].line})"
        )
    declared[name] = _Named(kind, name, number)
    return declared[name]


def _schedule(section: _Named, source: str) -> ScheduleSpec:
    """The schedule a C{[schedule NAME]} section declares. @raise ConfigError: it is incomplete."""
    found = section.lines
    if "cron" in found and "every" in found:
        later = max(("cron", "every"), key=found.__getitem__)
        raise ConfigError(
            f"{source}:{found[later]}: [{section.title}] {later}: a schedule has cron or every,"
            " not both"
        )
    if "cron" not in found and "every" not in found:
        raise ConfigError(f"{source}:{section.line}: [{section.title}] needs cron or every")
    if "type" not in found:
        raise ConfigError(f"{source}:{section.line}: [{section.title}] needs a type")
    keys = NAMED_KEYS[SCHEDULE_SECTION]
    return ScheduleSpec(
        name=section.name,
        source="config",
        **{keys[key].field: value for key, value in section.values.items()},
    )


def _evolve(config: Config, values: Mapping[Setting, list[object]]) -> Config:
    """C{config} with each setting's values in it."""
    return replace(config, {spec: spec.combine(found) for spec, found in values.items()})


def _blame(conflict: Conflict, lines: _Lines, source: str) -> str:
    """C{source:LINE} of the first blamed setting the file sets; C{source} if none."""
    for name in conflict.names:
        found = lines.get(BY_NAME[name])
        if found:
            index = min(conflict.index or 0, len(found) - 1) if BY_NAME[name].repeatable else 0
            return f"{source}:{found[index][0]}"
    return source


def load(path: str | Path) -> Config:
    """
    Read and parse C{path}.

    @raise ConfigError: the file cannot be read or is invalid.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read configuration: {e}") from None
    return parse(text, str(path))


def with_flags(config: Config, given: Iterable[tuple[Setting, str]]) -> Config:
    """
    C{config} with the settings given as C{--FLAG TEXT} on a command line:
    a repeatable flag's values replace the file's, and for any other the
    last one given wins.

    @raise ConfigError: C{--FLAG: why} for a value that is not one, and
        C{command line: why (--FLAG)} for settings that conflict.
    """
    values: dict[Setting, list[object]] = {}
    for spec, text in given:
        try:
            values.setdefault(spec, []).append(spec.kind.parse(text))
        except ValueError as e:
            raise ConfigError(f"--{spec.flag}: {e}") from None
    if not values:
        return config
    result = _evolve(config, values)
    try:
        validate(result)
    except Conflict as e:
        flags = [f"--{BY_NAME[name].flag}" for name in e.names if BY_NAME[name] in values]
        blamed = f" ({', '.join(flags)})" if flags else ""
        raise ConfigError(f"command line: {e}{blamed}") from None
    return result
