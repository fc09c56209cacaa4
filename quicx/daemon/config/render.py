"""
Writing a configuration: a C{quicx.conf} with every setting and its help (C{quicx init}).
"""

from __future__ import annotations

from collections.abc import Iterable

from quicx.daemon.config.declarations import (
    NAMED_KEYS,
    QUEUE_KEYS,
    QUEUE_SECTION,
    SCHEDULE_KEYS,
    SECTIONS,
    SETTINGS,
)
from quicx.daemon.config.sections import Config


def render(config: Config, notes: Iterable[str] = ()) -> str:
    """
    The text of a C{quicx.conf} equivalent to C{config}, every setting with
    its help; one that is unset is there commented out (C{quicx init}).
    C{notes}, lines of text, come first as comments (a profile's).
    """
    lines = [
        "# quicx.conf -- every setting, with its help (see docs/configuration.md).",
        "# A commented-out key is unset: the daemon uses the default named there.",
        *(f"# {note}".rstrip() for note in notes),
    ]
    for section in SECTIONS:
        lines += ["", f"[{section}]"]
        for spec in SETTINGS:
            if spec.section != section:
                continue
            lines.append(f"# {spec.flag_help()}")
            texts = spec.texts(spec.read(config))
            if texts:
                lines += [f"{spec.key} = {text}" for text in texts]
            else:
                lines.append(f"# {spec.key} =   (default: {spec.unset.replace('`', '')})")
    queue_keys = NAMED_KEYS[QUEUE_SECTION]
    for name, keys in config.queue_sections.items():
        lines += ["", f"[queue {name}]"]
        lines += [f"{key} = {queue_keys[key].kind.format(value)}" for key, value in keys.items()]
    for name, schedule in config.schedule_sections.items():
        lines += ["", f"[schedule {name}]"]
        lines += [
            f"{k.key} = {k.kind.format(value)}"
            for k in SCHEDULE_KEYS
            if (value := getattr(schedule, k.field)) != k.default
        ]
    lines += [
        "",
        "# One section per declared queue; every key is optional (see docs/configuration.md):",
        "# [queue NAME]",
        *(f"# {k.key} =   ({k.help})" for k in QUEUE_KEYS),
        "",
        "# One section per schedule; it needs cron or every, and type (see docs/configuration.md):",
        "# [schedule NAME]",
        *(f"# {k.key} =   ({k.help})" for k in SCHEDULE_KEYS),
    ]
    return "\n".join(lines) + "\n"
