"""
C{quicx step-down} and C{quicx promote}: a planned switchover of a shard's primary.
"""

from __future__ import annotations

import argparse
from typing import Any

from quicx.cli.arguments import Commands
from quicx.cli.common import ask, print_json


def add_roles(commands: Commands) -> None:
    """C{quicx step-down} and C{quicx promote}: their parsers."""
    for name, help, description in (
        (
            "step-down",
            "make this primary give its role to an in-sync standby",
            "The primary gives the lease store's key up, so that an in-sync standby takes"
            " it; it then stops serving and exits, for its supervisor to start it again as"
            " a standby.",
        ),
        (
            "promote",
            "make this standby campaign for the primary's role now",
            "The daemon campaigns for the lease store's key at once; only the primary's"
            " in-sync standbys may take it.  `quicx status` shows when it is the primary.",
        ),
    ):
        action = commands.acting(name, help, description)
        action.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
        action.set_defaults(run=cmd_role)


def cmd_role(args: argparse.Namespace) -> int:
    answer = ask(args, lambda client: client.role(args.command), admin=True)
    if args.json:
        print_json(answer)
    else:
        print(describe(answer))
    return 0


def describe(answer: dict[str, Any]) -> str:
    """One line: the daemon's role, epoch and primary, as ROLE answers them."""
    role, epoch, primary = answer["role"], answer["epoch"], answer["primary"]
    if role == "primary":
        return f"primary at epoch {epoch} ({primary})"
    where = f"the primary is {primary}" if primary else "no primary is known"
    return f"{role} at epoch {epoch}: {where}"
