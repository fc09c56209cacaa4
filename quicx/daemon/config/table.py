"""
The settings table's shape: a L{Setting}, and how a section's settings are declared.

A setting's value lives in the record of its section (see
L{quicx.daemon.config.sections}), at C{field}: an attribute of it, or of a
record within it (C{authorization.producers} in C{[tls]}).  Its default is
that record's.  L{replace} puts values into a configuration by setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
from attrs import frozen

from quicx.daemon.config.kinds import Kind

C = TypeVar("C")
Item = TypeVar("Item")


@frozen(eq=False)
class Setting:
    """
    One setting: a key of the file, a flag, a field of its section's record.

    @ivar name: the setting's name (C{--help}'s destination, the checks'
        blame), unique across sections.
    @ivar field: where its value lives in the section's record (dotted).
    @ivar kind: the syntax of its value (of each value, for a repeatable one).
    @ivar help: one line, for C{--help} and C{quicx init}.
    @ivar flag: C{--FLAG} on the command line.
    @ivar unset: what the default means, in the docs, when it is no value.
    @ivar collect: for a repeatable key, turns the list of its values into
        the field's value; C{None} for a key that may appear once.
    """

    section: str
    key: str
    kind: Kind[Any]
    help: str
    name: str = ""
    field: str = ""
    flag: str = ""
    metavar: str = ""
    unset: str = ""
    collect: Callable[[list[Any]], object] | None = None
    default: object = None

    @property
    def repeatable(self) -> bool:
        return self.collect is not None

    def read(self, config: object) -> object:
        """Its value in C{config} (a L{quicx.daemon.config.sections.Config})."""
        return _get(getattr(config, self.section), self.field)

    def texts(self, value: object) -> list[str]:
        """C{value} as the file writes it: one text per line, none when unset."""
        if self.collect is not None:
            items = sorted(value) if isinstance(value, frozenset) else value or ()
            assert isinstance(items, (list, tuple))
            return [self.kind.format(item) for item in items]
        if value is None or value == "":
            return []
        return [self.kind.format(value)]

    def combine(self, values: list[object]) -> object:
        """
        The field's value given the values of its lines or flags (the last
        one wins for a key that may appear once).
        """
        return self.collect(values) if self.collect is not None else values[-1]

    def shown_default(self) -> str:
        """The default as the docs' table shows it."""
        return self.unset or ", ".join(f"`{text}`" for text in self.texts(self.default))

    def flag_help(self) -> str:
        """The help with the range and whether it repeats: for C{--help} and C{quicx init}."""
        bounds = f" Range: {self.kind.bounds}." if self.kind.bounds else ""
        return f"{self.help}{bounds}{' Repeatable.' if self.repeatable else ''}"


def key(
    key: str,
    kind: Kind[Any],
    help: str,
    *,
    name: str = "",
    field: str = "",
    flag: str = "",
    unset: str = "",
    collect: Callable[[list[Any]], object] | None = None,
) -> Setting:
    """One key of a L{section}; C{field} is C{key} unless given (see L{section} for the rest)."""
    return Setting("", key, kind, help, name, field or key, flag, unset=unset, collect=collect)


def section(name: str, record: type, prefix: str, *keys: Setting) -> tuple[Setting, ...]:
    """
    The settings of C{[name]}, whose values live in a C{record} (its
    defaults are theirs); each one's name is C{prefix} and its key unless it
    names itself, and its flag is its name with dashes unless it names one.
    """
    blank = record()
    found = []
    for declared in keys:
        spec = attrs.evolve(declared, section=name, name=declared.name or prefix + declared.key)
        found.append(
            attrs.evolve(
                spec,
                default=_get(blank, spec.field),
                flag=spec.flag or spec.name.replace("_", "-"),
                metavar=spec.kind.metavar,
            )
        )
    return tuple(found)


def repeated_tuple(values: list[Item]) -> tuple[Item, ...]:
    return tuple(values)


def repeated_set(values: list[Item]) -> frozenset[Item]:
    return frozenset(values)


def _get(record: object, path: str) -> object:
    for part in path.split("."):
        record = getattr(record, part)
    return record


def _put(record: Any, path: str, value: object) -> Any:
    head, _, rest = path.partition(".")
    inner = _put(getattr(record, head), rest, value) if rest else value
    return attrs.evolve(record, **{head: inner})


def replace(config: C, values: Mapping[Setting, object]) -> C:
    """C{config} with each setting's value in its section's record."""
    for spec, value in values.items():
        config = _put(config, f"{spec.section}.{spec.field}", value)
    return config


@frozen
class SectionKey:
    """
    A key of a C{[queue NAME]} or C{[schedule NAME]} section: a field of
    C{record} (L{quicx.daemon.queue.policy.QueuePolicy},
    L{quicx.daemon.queue.schedules.ScheduleSpec}).

    @ivar attribute: the field's name, when it is not C{key}.
    @ivar unset: what the default is, in the docs, when it is no value.
    """

    record: type
    key: str
    kind: Kind[Any]
    help: str
    unset: str = ""
    attribute: str = ""

    @property
    def field(self) -> str:
        return self.attribute or self.key

    @property
    def default(self) -> object:
        """The field's default (L{attrs.NOTHING} when it has none)."""
        return attrs.fields_dict(self.record)[self.field].default

    @property
    def shown_default(self) -> str:
        return self.unset or f"`{self.kind.format(self.default)}`"
